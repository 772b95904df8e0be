// Placement and the execution plan on a device whose memory the host must not touch (the fake
// device, host memory behind the device interface): constants uploaded once at open, one planned
// copy per cross-device value and reading device per run however many readers, results back in
// host memory, in place only for kernels that declare it, device steps timed with events.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "backends/backend_registry.hpp"
#include "engine/engine_file.hpp"
#include "expect_error.hpp"
#include "fake_device.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/session.hpp"

namespace kiln {
namespace {

using testing::FakeDevice;

// Sessions find it by device name, as they find a GPU.
FakeDevice& registered_fake() {
  static FakeDevice device;
  return device;
}
const backends::BackendRegistrar kFakeRegistrar("fake-device", [] { return &registered_fake(); },
                                                {"fake"});

TypeInfo f32(std::vector<int64_t> dims) {
  return TypeInfo::tensor(DataType::Float32, Shape::from_values(dims));
}

Tensor random_tensor(std::vector<int64_t> dims, unsigned seed) {
  Tensor t(DataType::Float32, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : t.values<float>()) v = dist(rng);
  return t;
}

ir::Value* node(ir::Graph& g, const char* op, std::vector<ir::Value*> in, const char* out) {
  ir::Node* n = g.add_node(op, "", out, std::move(in), {g.add_value(out)});
  n->set_opset(17);
  return n->output(0);
}

void expect_close(const RtValue& a, const RtValue& b) {
  ASSERT_TRUE(a.is_tensor() && b.is_tensor());
  ASSERT_EQ(a.tensor().dims(), b.tensor().dims());
  for (int64_t i = 0; i < a.tensor().numel(); ++i) {
    EXPECT_NEAR(a.tensor().data<float>()[i], b.tensor().data<float>()[i], 1e-5) << i;
  }
}

size_t count_copies(const runtime::Executor& ex) {
  size_t n = 0;
  for (const runtime::PlanStep& s : ex.plan().steps()) n += s.kind == runtime::StepKind::Copy;
  return n;
}

// x -> Mul(x, k) -> m -> Relu -> r; r read by Sigmoid, Tanh and Exp (CPU only) and by
// Mul(r, k) on the device; y = Add(Sigmoid + Tanh on the device ..., see below).
struct Model {
  std::shared_ptr<ir::Graph> g = std::make_shared<ir::Graph>();
  ir::Value *x, *k, *m, *r, *s, *t, *e, *q, *a, *y;
  Model() {
    g->opsets()[""] = 17;
    x = g->add_input("x", f32({4, 8}));
    k = g->add_initializer("k", random_tensor({4, 8}, 3));
    m = node(*g, "Mul", {x, k}, "m");   // device, reads the constant k
    r = node(*g, "Relu", {m}, "r");     // device, in place over m
    s = node(*g, "Sigmoid", {r}, "s");  // CPU: one copy of r to the host ...
    t = node(*g, "Tanh", {r}, "t");     // ... shared by Tanh
    e = node(*g, "Exp", {r}, "e");      // ... and Exp
    q = node(*g, "Mul", {r, k}, "q");   // device again: k is not uploaded twice
    a = node(*g, "Add", {s, t}, "a");   // device: copies of s and t
    y = node(*g, "Add", {a, q}, "y");   // device; output copied to the host
    g->add_output(y);
    g->add_output(e);
    passes::InferShapes{}.apply(*g);
  }
};

TEST(FakeDevice, ConstantsUploadOnceAndCrossDeviceValuesCopyOncePerRun) {
  Model md;
  FakeDevice dev;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  runtime::Executor ex(md.g, options);
  // At open: k uploaded once although two device kernels read it; nothing else moved.
  EXPECT_EQ(ex.plan().uploads(), 1u);
  EXPECT_EQ(dev.to_device, 1);
  EXPECT_EQ(dev.to_host, 0);
  // Per run: x, s and t to the device; r (three host readers) and y to the host.
  EXPECT_EQ(count_copies(ex), 5u);
  runtime::Interpreter ref(md.g);
  const int runs = 4;
  for (int i = 0; i < runs; ++i) {
    Tensor xv = random_tensor({4, 8}, 10 + i);
    std::vector<RtValue> out = ex.run({xv});
    std::vector<RtValue> want = ref.run(std::vector<RtValue>{xv});
    ASSERT_EQ(out.size(), 2u);
    for (size_t o = 0; o < 2; ++o) {
      EXPECT_FALSE(dev.owns(out[o].tensor().raw_data())) << "results come back in host memory";
      expect_close(out[o], want[o]);
    }
  }
  EXPECT_EQ(dev.to_device, 1 + 3 * runs) << "one upload at open, three copies per run";
  EXPECT_EQ(dev.to_host, 2 * runs) << "r once however many host readers, and y";
}

TEST(FakeDevice, InPlaceOnlyForKernelsThatDeclareIt) {
  Model md;
  FakeDevice dev;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  runtime::Executor ex(md.g, options);
  const runtime::ExecutionPlan& plan = ex.plan();
  auto range = [&](const ir::Value* v) { return plan.ranges()[plan.value_index(v)]; };
  // Relu declares in place: r takes m's space (m dies at Relu).
  ASSERT_GE(range(md.m).arena, 0);
  EXPECT_EQ(range(md.r).offset, range(md.m).offset);
  EXPECT_EQ(range(md.r).arena, range(md.m).arena);
  // fake.add declares nothing: a = Add(s', t') never takes the space of its inputs' copies,
  // though both die there with the output's type and shape.
  int s_copy = -1, t_copy = -1;
  for (const runtime::PlanStep& st : plan.steps()) {
    if (st.kind != runtime::StepKind::Copy) continue;
    const runtime::PlanValue& to = plan.values()[st.outputs[0]];
    if (to.value == md.s) s_copy = st.outputs[0];
    if (to.value == md.t) t_copy = st.outputs[0];
  }
  ASSERT_GE(s_copy, 0);
  ASSERT_GE(t_copy, 0);
  const runtime::ArenaRange ra = range(md.a);
  ASSERT_GE(ra.arena, 0);
  for (int c : {s_copy, t_copy}) {
    const runtime::ArenaRange rc = plan.ranges()[c];
    ASSERT_EQ(rc.arena, ra.arena);
    const bool overlap = rc.offset < ra.offset + ra.size && ra.offset < rc.offset + rc.size;
    EXPECT_FALSE(overlap) << "fake.add got an input's space without declaring in place";
  }
}

TEST(FakeDevice, KernelChecksAskTheBackendTheyRunOn) {
  Model md;
  FakeDevice dev;
  dev.has_multiplier = false;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  runtime::Executor ex(md.g, options);
  const std::vector<runtime::KernelChoice>& c = ex.kernel_choices();
  EXPECT_EQ(c[0].backend, "cpu") << "Mul: this device has no multiplier";
  EXPECT_EQ(c[1].backend, FakeDevice::kName) << "Relu still runs there";
  EXPECT_EQ(ex.plan().uploads(), 0u) << "k is read on the host only now";
  Tensor xv = random_tensor({4, 8}, 5);
  expect_close(ex.run({xv})[0], runtime::Interpreter(md.g).run(std::vector<RtValue>{xv})[0]);
}

TEST(FakeDevice, ProfilesDeviceStepsWithItsEvents) {
  Model md;
  FakeDevice dev;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  runtime::Executor ex(md.g, options);
  ex.set_profiling(true);
  ex.run({random_tensor({4, 8}, 1)});
  EXPECT_EQ(ex.last_profile().size(), md.g->nodes().size()) << "one entry per node, no copies";
  EXPECT_EQ(dev.events, 2 * 5) << "two events for each of the five device steps";
  for (const runtime::NodeTiming& t : ex.last_profile()) EXPECT_GE(t.microseconds, 0.0);
}

// An initializer that is also a graph input (a default a run may replace) is uploaded once and
// copied only on runs that feed it; a run after a fed one reads the default again, also from a
// recorded segment (the upload and the fed copy are different memory, so the recording made
// for one is not replayed for the other).
TEST(FakeDevice, OverridableInitializerUploadsOnceAndCopiesOnlyWhenFed) {
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input("x", f32({4, 8}));
  ir::Value* k = g->add_input("k", f32({4, 8}));
  k->set_constant(random_tensor({4, 8}, 3));
  ir::Value* m = node(*g, "Mul", {x, k}, "m");
  ir::Value* r = node(*g, "Relu", {m}, "r");
  ir::Value* q = node(*g, "Mul", {r, k}, "q");
  g->add_output(node(*g, "Relu", {q}, "y"));
  passes::InferShapes{}.apply(*g);
  FakeDevice dev;
  dev.can_capture = true;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  runtime::Executor ex(g, options);
  EXPECT_EQ(ex.plan().uploads(), 1u);
  ASSERT_EQ(ex.replay_segment_count(), 1u);
  runtime::Interpreter ref(g);
  const Tensor fed = random_tensor({4, 8}, 4);
  int expected_to_device = 1;  // the upload
  for (int i = 0; i < 8; ++i) {
    const bool feed = i == 4 || i == 5;
    Tensor xv = random_tensor({4, 8}, 30 + i);
    std::vector<RtValue> in = {xv, feed ? RtValue(fed) : RtValue()};
    expect_close(ex.run(in)[0], ref.run(in)[0]);
    expected_to_device += feed ? 2 : 1;
    EXPECT_EQ(dev.to_device, expected_to_device) << "run " << i << (feed ? " (fed)" : "");
  }
  EXPECT_GE(dev.replays, 3) << "runs 2, 3 and 7 replay";
}

// Mul -> Relu and Add -> Add run back to back on the device: two segments, each recorded on
// the second run and replayed from then on without calling its kernels; Mul(r, k) stands alone
// between copies and runs every time. Results match the reference on every run, with new
// input values each time (the copy into x's planned space refreshes what the replay reads).
TEST(FakeDevice, RecordsDeviceSegmentsOnceAndReplaysThem) {
  Model md;
  FakeDevice dev;
  dev.can_capture = true;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  runtime::Executor ex(md.g, options);
  ASSERT_EQ(ex.replay_segment_count(), 2u);
  runtime::Interpreter ref(md.g);
  const int runs = 5;
  for (int i = 0; i < runs; ++i) {
    Tensor xv = random_tensor({4, 8}, 20 + i);
    std::vector<RtValue> out = ex.run({xv});
    std::vector<RtValue> want = ref.run(std::vector<RtValue>{xv});
    for (size_t o = 0; o < 2; ++o) expect_close(out[o], want[o]);
    EXPECT_EQ(ex.last_replayed_segments(), i == 0 ? 0u : 2u) << "run " << i;
  }
  EXPECT_EQ(dev.captures, 2) << "each segment recorded once";
  EXPECT_EQ(dev.replays, 2 * (runs - 1));
  // Five device kernels on the first two runs (the second records), then only Mul(r, k).
  EXPECT_EQ(dev.kernel_runs, 5 + 5 + (runs - 2));
}

TEST(FakeDevice, NoReplayWhenTurnedOffOrWhenTheDeviceCannotRecord) {
  for (bool can_capture : {true, false}) {
    Model md;
    FakeDevice dev;
    dev.can_capture = can_capture;
    runtime::ExecutorOptions options;
    options.backends = {&dev};
    options.replay_device_work = !can_capture;  // off, or on but impossible
    runtime::Executor ex(md.g, options);
    for (int i = 0; i < 3; ++i) {
      Tensor xv = random_tensor({4, 8}, 30 + i);
      expect_close(ex.run({xv})[0], runtime::Interpreter(md.g).run(std::vector<RtValue>{xv})[0]);
    }
    EXPECT_EQ(dev.captures, 0);
    EXPECT_EQ(dev.kernel_runs, 3 * 5);
  }
}

TEST(FakeDevice, StoredPlanRoundTripKeepsTheDeviceArena) {
  Model md;
  FakeDevice dev;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  engine::ExecutionPlan stored = runtime::Executor(md.g, options).execution_plan();
  bool device_arena = false;
  for (const auto& a : stored.arenas) device_arena |= a.device == FakeDevice::kName;
  ASSERT_TRUE(device_arena);
  runtime::Executor ex(md.g, options, &stored);
  EXPECT_TRUE(ex.arena_summaries().at(0).from_engine);
  Tensor xv = random_tensor({4, 8}, 7);
  expect_close(ex.run({xv})[0], runtime::Interpreter(md.g).run(std::vector<RtValue>{xv})[0]);
}

// Tactics: what device kernels timed in a run is stored in the plan (and the engine file), given
// back to the kernels of an executor made from it, so they do not time again; an engine timed
// with other library versions times again.
TEST(FakeDevice, StoredTacticsReachTheKernelsOnlyWithTheSameLibraries) {
  Model md;
  FakeDevice dev;
  runtime::ExecutorOptions options;
  options.backends = {&dev};
  engine::ExecutionPlan stored;
  {
    runtime::Executor tuned(md.g, options);
    EXPECT_TRUE(tuned.tactics().empty());  // nothing timed before a run
    tuned.run({random_tensor({4, 8}, 7)});
    stored = tuned.execution_plan();
    stored.tactics = tuned.tactics();
  }
  // Mul, Relu, Mul, Add, Add on the device: each timed its one shape.
  ASSERT_EQ(stored.tactics.size(), 5u);
  EXPECT_EQ(dev.timings, 5);
  for (const engine::StoredTactics& t : stored.tactics) {
    EXPECT_EQ(t.backend, FakeDevice::kName);
    EXPECT_EQ(t.libraries, std::vector<std::string>{"fakelib 1.0"});
    EXPECT_NE(t.text.find("@[4,8]"), std::string::npos) << t.text;
  }
  // Through an engine file and back.
  const std::string path =
      (std::filesystem::temp_directory_path() / "kiln_device_tactics_test.kiln").string();
  ir::Model m;
  m.graph = md.g;
  m.ir_version = 8;
  engine::write_engine(m, engine::EngineInfo{}, path, &stored);
  engine::LoadedEngine back = engine::read_engine(path, engine::ReadOptions{});
  std::filesystem::remove(path);
  ASSERT_TRUE(back.plan.has_value());
  ASSERT_EQ(back.plan->tactics.size(), stored.tactics.size());
  for (size_t i = 0; i < stored.tactics.size(); ++i) {
    EXPECT_EQ(back.plan->tactics[i].node, stored.tactics[i].node);
    EXPECT_EQ(back.plan->tactics[i].libraries, stored.tactics[i].libraries);
    EXPECT_EQ(back.plan->tactics[i].text, stored.tactics[i].text);
  }
  {
    runtime::Executor opened(md.g, options, &*back.plan);
    EXPECT_EQ(dev.tactics_given.size(), 5u);
    Tensor xv = random_tensor({4, 8}, 9);
    expect_close(opened.run({xv})[0], runtime::Interpreter(md.g).run(std::vector<RtValue>{xv})[0]);
    EXPECT_EQ(dev.timings, 5);  // no kernel timed again
  }
  dev.libraries = {"fakelib 2.0"};
  dev.tactics_given.clear();
  {
    runtime::Executor other_libraries(md.g, options, &*back.plan);
    EXPECT_TRUE(dev.tactics_given.empty());
    other_libraries.run({random_tensor({4, 8}, 9)});
    EXPECT_EQ(dev.timings, 10);  // every kernel timed afresh
  }
}

TEST(FakeDevice, SessionsLookTheirDeviceUpInTheRegistry) {
  Model md;
  ir::Model m;
  m.graph = md.g;
  m.ir_version = 8;
  SessionOptions o;
  o.device = "fake";  // an alias
  const int before = registered_fake().to_device;
  Session s(std::move(m), o);
  ASSERT_TRUE(s.executor());
  EXPECT_EQ(s.executor()->kernel_choices()[0].backend, FakeDevice::kName);
  EXPECT_EQ(registered_fake().to_device, before + 1) << "k uploaded at open";
  Tensor xv = random_tensor({4, 8}, 11);
  std::map<std::string, RtValue> out = s.run({{"x", RtValue(xv)}});
  expect_close(out.at("y"), runtime::Interpreter(md.g).run(std::vector<RtValue>{xv})[0]);

  EXPECT_EQ(s.parallel_run_limit(), 1u) << "a device session's runs take turns by default";
  ir::Model again;
  again.graph = md.g;
  again.ir_version = 8;
  o.parallel_runs = 2;
  expect_error([&] { Session(std::move(again), o); }, ErrorCode::Unsupported,
               "overlapping runs (parallel_runs 2) run on the cpu only so far");

  std::vector<backends::Backend*> list = backends::backends_for("fake-device,cpu");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0], &registered_fake());
  EXPECT_EQ(backends::backends_for("cpu").size(), 1u);
  expect_error([] { backends::backends_for("rocm:0"); }, ErrorCode::Unsupported,
               "unknown device 'rocm:0': this build knows cpu");
  expect_error([] { backends::backends_for("cpu,,fake"); }, ErrorCode::InvalidArgument,
               "empty name");
}

// An engine's stamp names the devices its plan was made for: it opens there or on the CPU, and
// a session on another device refuses it, naming both.
TEST(FakeDevice, EnginesStampTheirDeviceAndRefuseAnother) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "kiln_device_stamp_test.kiln").string();
  for (const char* stamped : {"fake-device", "cuda:sm_80"}) {
    SCOPED_TRACE(stamped);
    Model md;
    ir::Model m;
    m.graph = md.g;
    m.ir_version = 8;
    engine::EngineInfo info;
    info.device_targets = {{stamped, {}}};
    engine::write_engine(m, info, path);
    engine::ReadOptions ro;
    engine::LoadedEngine back = engine::read_engine(path, ro);
    ASSERT_EQ(back.info.device_targets.size(), 1u);
    EXPECT_EQ(back.info.device_targets[0].device, stamped);
    SessionOptions on_fake;
    on_fake.device = "fake";
    if (std::string_view(stamped) == FakeDevice::kName) {
      Session s(path, on_fake);
      EXPECT_EQ(s.executor()->kernel_choices()[0].backend, FakeDevice::kName);
    } else {
      expect_error([&] { Session s(path, on_fake); }, ErrorCode::Unsupported,
                   "the engine was compiled for cuda:sm_80; this session's device is fake-device");
    }
    Session on_cpu(path, SessionOptions{});  // the CPU opens any engine
    EXPECT_EQ(on_cpu.executor()->kernel_choices()[0].backend, "cpu");
  }
  std::filesystem::remove(path);
}

TEST(BackendRegistry, ADeviceThatCannotOpenSaysWhyEachTimeAndIsTriedOnce) {
  static int tries = 0;
  backends::BackendRegistry::instance().add("absent-device", []() -> backends::Backend* {
    ++tries;
    fail(ErrorCode::Unavailable, "no driver for the absent device");
  });
  for (int i = 0; i < 2; ++i) {
    expect_error([] { backends::BackendRegistry::instance().get("absent-device"); },
                 ErrorCode::Unavailable,
                 "device 'absent-device' is not available: no driver for the absent device");
  }
  EXPECT_EQ(tries, 1);
  SessionOptions o;
  o.device = "absent-device";
  expect_error([&] { Session s(ir::Model{}, o); }, ErrorCode::Unavailable, "no driver");
}

// kiln-serve names a KIND_GPU instance's device "gpu:N" (Triton numbers GPUs from 0): unit 0 is
// the device itself, a further unit opens through the device's own opener, once, and a device
// without units says so.
TEST(BackendRegistry, UnitNumbersNameUnitsOfOneDevice) {
  static testing::FakeDevice unit0, unit2;
  static std::vector<int> opened;
  backends::BackendRegistry::instance().add(
      "units-device", [] { return static_cast<backends::Backend*>(&unit0); }, {"units-alias"},
      [](int index) -> backends::Backend* {
        opened.push_back(index);
        if (index == 2) return &unit2;
        fail(ErrorCode::Unavailable, "no unit {}", index);
      });
  auto& registry = backends::BackendRegistry::instance();
  EXPECT_EQ(&registry.get("units-device:0"), &registry.get("units-device"));
  EXPECT_EQ(&registry.get("units-alias:0"), &unit0);
  EXPECT_EQ(&registry.get("units-device:2"), &unit2);
  EXPECT_EQ(&registry.get("units-alias:2"), &unit2);
  expect_error([&] { registry.get("units-device:5"); }, ErrorCode::Unavailable,
               "device 'units-device:5' is not available: no unit 5");
  expect_error([&] { registry.get("units-device:5"); }, ErrorCode::Unavailable, "no unit 5");
  EXPECT_EQ(opened, (std::vector<int>{2, 5}));  // unit 0 never through the indexed opener
  EXPECT_EQ(&registry.get("cpu:0"), &registry.get("cpu"));
  expect_error([&] { registry.get("cpu:1"); }, ErrorCode::Unsupported,
               "'cpu' has one unit only ('cpu:0')");
  for (const char* bad :
       {"units-device:", "units-device:x", "units-device:-1", "units-device:1x"}) {
    expect_error([&] { registry.get(bad); }, ErrorCode::InvalidArgument, "must be a unit number");
  }
  expect_error([&] { registry.get("tpu:0"); }, ErrorCode::Unsupported, "unknown device 'tpu:0'");
  EXPECT_EQ(backends::backends_for("units-device:2,cpu").front(), &unit2);
}

}  // namespace
}  // namespace kiln
