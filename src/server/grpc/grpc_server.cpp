#include "server/grpc/grpc_server.hpp"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <climits>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/log.hpp"
#include "server/grpc/grpc_acceptor.hpp"
#include "server/grpc/grpc_calls.hpp"

namespace kiln::server::grpc {
namespace {

std::string read_pem(const std::string& path, const char* flag) {
  KILN_CHECK_ARG(!path.empty(), "--grpc-use-ssl needs {}", flag);
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK_ARG(in.good(), "{}: cannot read '{}'", flag, path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::shared_ptr<::grpc::ServerCredentials> credentials(const GrpcSslOptions& ssl) {
  if (!ssl.use_ssl) return ::grpc::InsecureServerCredentials();
  ::grpc::SslServerCredentialsOptions options(
      ssl.mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                 : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (ssl.mutual || !ssl.root_cert.empty()) {
    options.pem_root_certs = read_pem(ssl.root_cert, "--grpc-root-cert");
  }
  options.pem_key_cert_pairs.push_back({read_pem(ssl.server_key, "--grpc-server-key"),
                                        read_pem(ssl.server_cert, "--grpc-server-cert")});
  return ::grpc::SslServerCredentials(options);
}

// "host:port" as gRPC parses it (IPv6 literals in brackets).
std::string host_port(const std::string& address, uint16_t port) {
  if (address.find(':') != std::string::npos && !address.starts_with('[')) {
    return fmt::format("[{}]:{}", address, port);
  }
  return fmt::format("{}:{}", address, port);
}

}  // namespace

struct GrpcServer::Impl {
  InferenceServer& core;
  GrpcOptions options;
  Service service;
  std::shared_ptr<Frontend> frontend;
  std::unique_ptr<::grpc::Server> server;
  std::unique_ptr<CappedAcceptor> acceptor;  // with --grpc-max-connections only
  std::vector<std::unique_ptr<::grpc::ServerCompletionQueue>> queues;
  std::vector<std::thread> threads;

  Impl(InferenceServer& c, GrpcOptions o) : core(c), options(std::move(o)) {}
};

GrpcServer::GrpcServer(InferenceServer& core, GrpcOptions options)
    : impl_(std::make_unique<Impl>(core, std::move(options))) {
  const GrpcOptions& o = impl_->options;
  KILN_CHECK_ARG(o.threads >= 1 && o.threads <= 1024, "gRPC thread count {} must be in 1..1024",
                 o.threads);
  KILN_CHECK_ARG(o.max_receive_bytes >= 1, "the gRPC receive limit must be positive");
  // Fails early on a bad compression level.
  impl_->frontend = std::make_shared<Frontend>(core, impl_->options, impl_->service);
}

GrpcServer::~GrpcServer() {
  stop();
}

void GrpcServer::start() {
  Impl& impl = *impl_;
  KILN_CHECK(!impl.server, ErrorCode::Internal, "gRPC server started twice");
  ::grpc::ServerBuilder builder;
  int selected_port = 0;
  const std::string where = host_port(impl.options.address, impl.options.port);
  if (impl.options.max_connections > 0) {
    KILN_CHECK(!impl.options.ssl.use_ssl, ErrorCode::Unsupported,
               "--grpc-max-connections cannot be combined with --grpc-use-ssl: grpc++ 1.51 takes "
               "connections from the application only in plaintext");
    impl.acceptor = std::make_unique<CappedAcceptor>(impl.options.address, impl.options.port,
                                                     impl.options.max_connections);
    selected_port = impl.acceptor->port();
  } else {
    builder.AddListeningPort(where, credentials(impl.options.ssl), &selected_port);
  }
  builder.RegisterService(&impl.service);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<size_t>(impl.options.max_receive_bytes, INT_MAX)));
  // Without this a second server silently shares the port instead of failing to bind.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const auto& [name, value] : impl.options.channel_args) {
    builder.AddChannelArgument(name, value);
  }
  for (int i = 0; i < impl.options.threads; ++i) {
    impl.queues.push_back(builder.AddCompletionQueue());
  }
  impl.server = builder.BuildAndStart();
  if (!impl.server || selected_port == 0) {
    impl.server.reset();
    impl.queues.clear();
    impl.acceptor.reset();
    fail(ErrorCode::Unavailable, "cannot listen for gRPC on {}", where);
  }
  if (impl.acceptor) impl.acceptor->start(impl.server.get());
  bound_port_ = static_cast<uint16_t>(selected_port);
  for (auto& queue : impl.queues) {
    ::grpc::ServerCompletionQueue* cq = queue.get();
    listen_all(impl.frontend, cq);
    impl.threads.emplace_back([cq] {
      void* tag = nullptr;
      bool ok = false;
      // A handler that throws loses only its own call; the queue goes on serving the others.
      while (cq->Next(&tag, &ok)) {
        try {
          static_cast<Tag*>(tag)->proceed(ok);
        } catch (const std::exception& e) {
          log_warning("gRPC queue thread: a call's handler failed ({})", e.what());
        } catch (...) {
          log_warning("gRPC queue thread: a call's handler failed");
        }
      }
    });
  }
}

void GrpcServer::stop(std::chrono::milliseconds grace) {
  if (!impl_ || !impl_->server) return;
  Impl& impl = *impl_;
  if (impl.acceptor) impl.acceptor->stop();
  impl.frontend->stop_accepting();
  impl.server->Shutdown(std::chrono::system_clock::now() + grace);
  impl.frontend->close();
  for (auto& queue : impl.queues) queue->Shutdown();
  for (std::thread& t : impl.threads) t.join();
  impl.threads.clear();
  impl.server.reset();
  impl.queues.clear();
}

}  // namespace kiln::server::grpc
