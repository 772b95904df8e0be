// runtime::RunControl: saturating deadline arithmetic, and runs of the interpreter and the
// executor that stop at a deadline or on cancellation between Loop iterations.
#include "runtime/run_control.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <thread>

#include "runtime/session.hpp"

namespace kiln {
namespace {

using runtime::deadline_after;
using runtime::RunClock;

TEST(RunControl, DeadlineArithmeticSaturatesInsteadOfWrapping) {
  const RunClock::time_point now = RunClock::now();
  EXPECT_EQ(deadline_after(now, 0), now);
  EXPECT_EQ(deadline_after(now, 1), now + std::chrono::microseconds(1));
  EXPECT_EQ(deadline_after(now, 3'600'000'000ull), now + std::chrono::hours(1));
  // 2^63 - 1 us (Triton's largest `timeout`) is ~292000 years: in nanoseconds it wraps.
  EXPECT_EQ(deadline_after(now, std::numeric_limits<int64_t>::max()), RunClock::time_point::max());
  EXPECT_EQ(deadline_after(now, std::numeric_limits<uint64_t>::max()), RunClock::time_point::max());
  // The largest timeout that still fits lands exactly on the clock's maximum (minus rounding).
  const uint64_t room_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(RunClock::time_point::max() - now)
          .count());
  EXPECT_LE(deadline_after(now, room_us), RunClock::time_point::max());
  EXPECT_GT(deadline_after(now, room_us), now);
  EXPECT_EQ(deadline_after(now, room_us + 1), RunClock::time_point::max());
  // A start already at the maximum stays there.
  EXPECT_EQ(deadline_after(RunClock::time_point::max(), 1), RunClock::time_point::max());
}

TEST(RunControl, ShorterTimeoutTreatsZeroAsNone) {
  EXPECT_EQ(runtime::shorter_timeout(0, 0), 0u);
  EXPECT_EQ(runtime::shorter_timeout(0, 5), 5u);
  EXPECT_EQ(runtime::shorter_timeout(7, 0), 7u);
  EXPECT_EQ(runtime::shorter_timeout(7, 5), 5u);
  EXPECT_EQ(runtime::shorter_timeout(std::numeric_limits<uint64_t>::max(), 5), 5u);
}

TEST(RunControl, ChecksCancellationThenDeadline) {
  runtime::RunControl c;
  EXPECT_FALSE(c.stopped());
  EXPECT_NO_THROW(c.check());
  std::atomic<bool> cancel{false};
  c.cancel = &cancel;
  c.cancel_message = "cancelled here";
  c.deadline_message = "too late";
  EXPECT_NO_THROW(c.check());
  c.deadline = RunClock::now() - std::chrono::seconds(1);
  try {
    c.check();
    ADD_FAILURE() << "no throw";
  } catch (const runtime::RunStopped& e) {
    EXPECT_FALSE(e.cancelled());
    EXPECT_EQ(e.message(), "too late");
    EXPECT_EQ(e.code(), ErrorCode::Unavailable);
  }
  cancel = true;
  try {
    c.check();
    ADD_FAILURE() << "no throw";
  } catch (const runtime::RunStopped& e) {
    EXPECT_TRUE(e.cancelled());
    EXPECT_EQ(e.message(), "cancelled here");
  }
}

// y = Loop(M, x): adds 1 to x on every one of M iterations (M from the feed).
ir::Model counting_loop() {
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  const TypeInfo scalar_i64 = TypeInfo::tensor(DataType::Int64, Shape(std::vector<Dim>{}));
  const TypeInfo one_float = TypeInfo::tensor(DataType::Float32, Shape({Dim(1)}));
  ir::Value* m = g->add_input("M", scalar_i64);
  ir::Value* x = g->add_input("x", one_float);
  auto body = std::make_shared<ir::Graph>("body", g.get());
  body->opsets()[""] = 17;
  body->add_input("iter", scalar_i64);
  ir::Value* cond =
      body->add_input("cond", TypeInfo::tensor(DataType::Bool, Shape(std::vector<Dim>{})));
  ir::Value* v = body->add_input("v", one_float);
  ir::Value* one = body->add_initializer("one", Tensor::from_vector<float>({1}, {1.0f}));
  ir::Value* cond_out = body->add_value("cond_out", cond->type());
  body->add_node("Identity", "", "id", {cond}, {cond_out})->set_opset(17);
  ir::Value* v_out = body->add_value("v_out", one_float);
  body->add_node("Add", "", "add", {v, one}, {v_out})->set_opset(17);
  body->add_output(cond_out);
  body->add_output(v_out);
  ir::Value* y = g->add_value("y", one_float);
  ir::Node* loop = g->add_node("Loop", "", "loop", {m, nullptr, x}, {y});
  loop->set_opset(17);
  loop->set_attribute("body", ir::Attribute(ir::GraphPtr(body)));
  g->add_output(y);
  ir::Model model;
  model.graph = g;
  model.ir_version = 8;
  return model;
}

std::map<std::string, RtValue> loop_feeds(int64_t trips) {
  return {{"M", Tensor::scalar<int64_t>(trips)}, {"x", Tensor::from_vector<float>({1}, {0.0f})}};
}

class LoopDeadline : public ::testing::TestWithParam<const char*> {};

TEST_P(LoopDeadline, LongLoopStopsAtItsDeadlineAndTheSessionRunsAgain) {
  SessionOptions o;
  o.config["executor"] = GetParam();
  o.threads = 1;
  Session s(counting_loop(), o);
  runtime::RunControl c;
  c.deadline_message = "Request timeout expired";
  c.deadline = runtime::deadline_after(RunClock::now(), 200'000);  // 200 ms
  const RunClock::time_point start = RunClock::now();
  try {
    s.run({"y"}, loop_feeds(int64_t{1} << 62), &c);
    ADD_FAILURE() << "2^62 iterations finished";
  } catch (const runtime::RunStopped& e) {
    EXPECT_EQ(e.message(), "Request timeout expired");
  }
  EXPECT_LT(RunClock::now() - start, std::chrono::seconds(20));
  // The session is whole: the next run (with a control that never fires) completes.
  runtime::RunControl forever;
  auto out = s.run({"y"}, loop_feeds(5), &forever);
  EXPECT_EQ(out[0].tensor().values<float>()[0], 5.0f);
}

TEST_P(LoopDeadline, CancellationFromAnotherThreadStopsARunningLoop) {
  SessionOptions o;
  o.config["executor"] = GetParam();
  o.threads = 1;
  Session s(counting_loop(), o);
  std::atomic<bool> cancel{false};
  runtime::RunControl c;
  c.cancel = &cancel;
  c.cancel_message = "Server is shutting down";
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
  });
  try {
    s.run({"y"}, loop_feeds(int64_t{1} << 62), &c);
    ADD_FAILURE() << "2^62 iterations finished";
  } catch (const runtime::RunStopped& e) {
    EXPECT_TRUE(e.cancelled());
    EXPECT_EQ(e.message(), "Server is shutting down");
  }
  stopper.join();
}

INSTANTIATE_TEST_SUITE_P(Paths, LoopDeadline, ::testing::Values("kernels", "interpreter"));

}  // namespace
}  // namespace kiln
