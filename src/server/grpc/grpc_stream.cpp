#include "server/grpc/grpc_stream.hpp"

#include <deque>
#include <mutex>

namespace kiln::server::grpc {
namespace {

using inference::ModelInferRequest;
using inference::ModelStreamInferResponse;

// One stream. Its operations (accept, read, write, finish, the done notice) complete on its
// queue while responses arrive from scheduler threads; `mutex_` orders them. At most one read
// and one write are outstanding, as gRPC requires. Reading pauses while the stream has
// `max_stream_inflight` requests running or answers unwritten, so a client that sends faster
// than it is served (or never reads its answers) is held back by gRPC's flow control instead of
// filling the server's memory. The object deletes itself once no operation is outstanding and
// no request is running.
class StreamCall {
 public:
  static void listen(const std::shared_ptr<Frontend>& frontend, ::grpc::ServerCompletionQueue* cq) {
    frontend->if_accepting([&] {
      auto* call = new StreamCall(frontend, cq);
      call->pending_ops_ = 1;
      call->context_.AsyncNotifyWhenDone(&call->done_tag_);
      frontend->service.RequestModelStreamInfer(&call->context_, &call->stream_, cq, cq,
                                                &call->accept_tag_);
    });
  }

 private:
  using Handler = void (StreamCall::*)(bool ok);
  struct OpTag final : Tag {
    OpTag(StreamCall* c, Handler h) : call(c), handler(h) {}
    void proceed(bool ok) override { (call->*handler)(ok); }
    StreamCall* call;
    Handler handler;
  };

  StreamCall(std::shared_ptr<Frontend> frontend, ::grpc::ServerCompletionQueue* cq)
      : frontend_(std::move(frontend)), cq_(cq), stream_(&context_) {}

  void on_accept(bool ok) {
    std::unique_lock lock(mutex_);
    if (!ok) {
      dead_ = true;
      return release(lock);
    }
    ++pending_ops_;  // the done notice, which comes once the started stream is over
    lock.unlock();
    listen(frontend_, cq_);
    const ::grpc::Status status = frontend_->check_access(context_, "inference");
    lock.lock();
    if (status.ok()) {
      start_read_locked();
    } else {
      reads_done_ = true;
      finish_locked(status);
    }
    release(lock);
  }

  void on_read(bool ok) {
    std::unique_lock lock(mutex_);
    if (!ok) {
      // The client closed its side (or left): answer what is running, then finish.
      reads_done_ = true;
      maybe_finish_locked();
      return release(lock);
    }
    lock.unlock();
    // `incoming_` belongs to the read path until the next read starts; the pending read still
    // counts in pending_ops_, so nothing deletes the call meanwhile.
    const Clock::time_point received = Clock::now();
    std::unique_ptr<InferRequest> request;
    std::string error;
    auto lease = std::make_shared<MemoryLease>(frontend_->core.request_memory());
    try {
      KILN_CHECK(lease->grow(incoming_.ByteSizeLong()), ErrorCode::Unavailable,
                 "the server's request memory budget ({} bytes) is spent; retry later",
                 frontend_->core.request_memory().limit());
      request = decode_infer_request(incoming_, frontend_->options.codec);
      request->received = received;
      request->cancelled = cancelled_;
      // A stream's requests are traced from their arrival to their response's queueing (the
      // stream's writes carry no per-request stamps).
      request->trace = frontend_->core.tracer().start(request->model_name);
      stamp(request->trace, TraceActivity::GrpcWaitReadEnd, received);
    } catch (const std::exception& e) {
      const auto* kiln_error = dynamic_cast<const Error*>(&e);
      error = kiln_error ? kiln_error->message() : e.what();
    }
    lock.lock();
    if (!request) {
      auto response = std::make_unique<ModelStreamInferResponse>();
      response->set_error_message(error);
      push_locked(std::move(response));
    } else {
      const bool final_flag =
          parameter_bool(request->parameters, "triton_enable_empty_final_response").value_or(false);
      ++inflight_;
      lock.unlock();
      frontend_->core.infer_async(
          std::move(request),
          [this, final_flag, lease](Status s, std::unique_ptr<InferResponse> r) {
            on_response(s, std::move(r), final_flag, *lease);
          });
      lock.lock();
    }
    if (!finishing_ && !dead_) {
      read_next_locked();
    } else {
      reads_done_ = true;
    }
    release(lock);
  }

  // Reads the next request unless the stream is at its cap (then the next answer resumes).
  void read_next_locked() {
    if (inflight_ + outbox_.size() + (writing_ ? 1 : 0) >= frontend_->options.max_stream_inflight) {
      read_paused_ = true;
      return;
    }
    read_paused_ = false;
    start_read_locked();
  }

  void resume_read_locked() {
    if (read_paused_ && !reads_done_ && !finishing_ && !dead_) read_next_locked();
  }

  void on_done(bool) {
    std::unique_lock lock(mutex_);
    if (context_.IsCancelled()) {
      cancelled_->store(true, std::memory_order_relaxed);  // queued requests leave their queue
      dead_ = true;
      outbox_.clear();
    }
    release(lock);
  }

  // From a scheduler thread.
  void on_response(const Status& status, std::unique_ptr<InferResponse> result, bool final_flag,
                   MemoryLease& lease) {
    auto response = std::make_unique<ModelStreamInferResponse>();
    if (status.is_ok()) {
      try {
        inference::ModelInferResponse& out = *response->mutable_infer_response();
        encode_infer_response(*result, out);
        // A non-decoupled model's only response is also its last.
        if (final_flag) (*out.mutable_parameters())["triton_final_response"].set_bool_param(true);
      } catch (const std::exception& e) {
        response->Clear();
        response->set_error_message(e.what());
      }
    } else {
      response->set_error_message(status.message());
    }
    result.reset();
    lease.reset();
    std::unique_lock lock(mutex_);
    --inflight_;
    ++pending_ops_;  // keeps the call while this handler runs, like an operation would
    push_locked(std::move(response));
    resume_read_locked();
    maybe_finish_locked();
    release(lock);
  }

  void on_write(bool ok) {
    std::unique_lock lock(mutex_);
    writing_ = false;
    current_.reset();
    if (!ok) {
      dead_ = true;  // the client is gone: drop what is left
      outbox_.clear();
    } else if (!outbox_.empty()) {
      write_next_locked();
    } else {
      maybe_finish_locked();
    }
    resume_read_locked();
    release(lock);
  }

  void on_finish(bool) {
    std::unique_lock lock(mutex_);
    dead_ = true;
    release(lock);
  }

  // Starts an operation on the queue unless the frontend closed it.
  template <typename Fn>
  bool start_locked(Fn&& op) {
    if (!frontend_->if_open(op)) {
      dead_ = true;
      return false;
    }
    ++pending_ops_;
    return true;
  }

  void start_read_locked() {
    incoming_.Clear();
    if (!start_locked([&] { stream_.Read(&incoming_, &read_tag_); })) reads_done_ = true;
  }

  void push_locked(std::unique_ptr<ModelStreamInferResponse> response) {
    if (dead_ || finishing_) return;
    outbox_.push_back(std::move(response));
    if (!writing_) write_next_locked();
  }

  void write_next_locked() {
    current_ = std::move(outbox_.front());
    outbox_.pop_front();
    writing_ = true;
    if (!start_locked([&] { stream_.Write(*current_, &write_tag_); })) {
      writing_ = false;
      outbox_.clear();
    }
  }

  void maybe_finish_locked() {
    if (reads_done_ && inflight_ == 0 && !writing_ && outbox_.empty() && !finishing_ && !dead_) {
      finish_locked(::grpc::Status::OK);
    }
  }

  void finish_locked(const ::grpc::Status& status) {
    finishing_ = true;
    start_locked([&] { stream_.Finish(status, &finish_tag_); });
  }

  // Ends the handler of one completed operation; deletes the call when it was the last thing
  // holding it.
  void release(std::unique_lock<std::mutex>& lock) {
    --pending_ops_;
    const bool done = pending_ops_ == 0 && inflight_ == 0;
    lock.unlock();
    if (done) delete this;
  }

  std::shared_ptr<Frontend> frontend_;
  ::grpc::ServerCompletionQueue* cq_;
  ::grpc::ServerContext context_;
  ::grpc::ServerAsyncReaderWriter<ModelStreamInferResponse, ModelInferRequest> stream_;
  OpTag accept_tag_{this, &StreamCall::on_accept};
  OpTag read_tag_{this, &StreamCall::on_read};
  OpTag write_tag_{this, &StreamCall::on_write};
  OpTag finish_tag_{this, &StreamCall::on_finish};
  OpTag done_tag_{this, &StreamCall::on_done};
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);

  std::mutex mutex_;
  ModelInferRequest incoming_;
  std::deque<std::unique_ptr<ModelStreamInferResponse>> outbox_;
  std::unique_ptr<ModelStreamInferResponse> current_;  // being written
  int pending_ops_ = 0;  // outstanding queue operations and running handlers
  size_t inflight_ = 0;  // requests in the scheduler
  bool reads_done_ = false;
  bool read_paused_ = false;  // at the in-flight cap: the next answer starts the next read
  bool writing_ = false;
  bool finishing_ = false;
  bool dead_ = false;  // finished, failed or closed: start nothing more
};

}  // namespace

void listen_stream(const std::shared_ptr<Frontend>& frontend, ::grpc::ServerCompletionQueue* cq) {
  StreamCall::listen(frontend, cq);
}

}  // namespace kiln::server::grpc
