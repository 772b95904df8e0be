#include "backends/gpu/gemm_bench.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "core/error.hpp"
#include "core/half.hpp"
#include "ir/graph.hpp"

namespace kiln::backends {
namespace {

// Hands every run the same preallocated output.
class FixedOutputs final : public KernelOutputs {
 public:
  explicit FixedOutputs(void* data) : data_(data) {}
  DeviceTensor allocate(size_t, DataType dtype, std::vector<int64_t> dims) override {
    return {dtype, std::move(dims), data_, Layout::row_major()};
  }

 private:
  void* data_;
};

std::vector<uint16_t> random_halves(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t& h : v) h = float_to_half_bits(d(rng));
  return v;
}

}  // namespace

std::vector<GemmBenchShape> model_gemm_shapes() {
  std::vector<GemmBenchShape> out;
  struct Conv {
    int hw, cin, cout;
  };
  // ResNet-50's 1x1 convolutions, one of each kind per stage.
  const Conv convs[] = {{56, 64, 256},   {56, 256, 64},   {28, 512, 128}, {28, 128, 512},
                        {14, 256, 1024}, {14, 1024, 256}, {7, 512, 2048}, {7, 2048, 512}};
  for (int batch : {1, 64}) {
    for (const Conv& c : convs) {
      out.push_back({fmt::format("resnet50 b{} 1x1 {}x{} {}->{}", batch, c.hw, c.hw, c.cin, c.cout),
                     int64_t{batch} * c.hw * c.hw, c.cout, c.cin, true});
    }
  }
  struct Linear {
    const char* what;
    int k, n;
  };
  const Linear linears[] = {
      {"qkv/out proj", 768, 768}, {"ffn up", 768, 3072}, {"ffn down", 3072, 768}};
  for (int batch : {1, 32}) {
    for (const Linear& l : linears) {
      out.push_back({fmt::format("bert-base b{} s128 {} {}->{}", batch, l.what, l.k, l.n),
                     int64_t{128} * batch, l.n, l.k, false});
    }
  }
  return out;
}

std::vector<GemmBenchRow> measure_gemms(GpuBackend& gpu, const std::vector<GemmBenchShape>& shapes,
                                        int rounds, int runs) {
  KILN_CHECK_ARG(rounds > 0 && runs > 0, "GEMM benchmark: rounds and runs must be positive");
  // gpu.gemm must stay cuBLASLt here: its tactic (KILN_GPU_GEMM_TACTICS=1) would otherwise run
  // the own GEMM wherever that was faster, and the comparison would be the own GEMM against the
  // better of the two.
  setenv("KILN_GPU_GEMM_TACTICS", "0", 1);
  Stream& stream = gpu.compute_stream();
  std::unique_ptr<Event> start = gpu.create_event();
  std::unique_ptr<Event> stop = gpu.create_event();
  std::mt19937 rng(11);
  std::vector<GemmBenchRow> rows;
  for (const GemmBenchShape& s : shapes) {
    GemmBenchRow row;
    row.shape = s;
    row.own.kernel = "gpu.own.gemm";
    row.library.kernel = "gpu.gemm";
    const std::vector<int64_t> a_dims = {s.m, s.k};
    const std::vector<int64_t> b_dims =
        s.trans_b ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n};
    ir::Graph g;
    ir::Value* a =
        g.add_input("a", TypeInfo::tensor(DataType::Float16, Shape::from_values(a_dims)));
    ir::Value* b =
        g.add_input("b", TypeInfo::tensor(DataType::Float16, Shape::from_values(b_dims)));
    ir::Value* y = g.add_value("y");
    ir::Node* node = g.add_node(s.trans_b ? "Gemm" : "MatMul", "", "gemm", {a, b}, {y});
    node->set_opset(13);
    if (s.trans_b) node->set_attribute("transB", ir::Attribute(int64_t{1}));

    const size_t a_bytes = static_cast<size_t>(s.m * s.k) * 2,
                 b_bytes = static_cast<size_t>(s.k * s.n) * 2;
    const size_t y_bytes = static_cast<size_t>(s.m * s.n) * 2;
    DeviceBuffer da = gpu.allocate(a_bytes), db = gpu.allocate(b_bytes);
    std::vector<uint16_t> ha = random_halves(s.m * s.k, rng), hb = random_halves(s.k * s.n, rng);
    gpu.copy_to_device(da.data(), ha.data(), a_bytes, stream);
    gpu.copy_to_device(db.data(), hb.data(), b_bytes, stream);
    const DeviceTensor inputs[2] = {{DataType::Float16, a_dims, da.data(), Layout::row_major()},
                                    {DataType::Float16, b_dims, db.data(), Layout::row_major()}};

    struct Timed {
      GemmBenchKernel* result;
      std::unique_ptr<Kernel> kernel;
      DeviceBuffer y;
      std::vector<double> times;
    };
    std::vector<Timed> timed;
    for (GemmBenchKernel* k : {&row.own, &row.library}) {
      try {
        std::unique_ptr<Kernel> kernel = gpu.create_kernel(*node, k->kernel);
        timed.push_back({k, std::move(kernel), gpu.allocate(y_bytes), {}});
      } catch (const Error& e) {
        k->error = e.message();
      }
    }
    auto run_once = [&](Timed& t) {
      FixedOutputs out(t.y.data());
      t.kernel->run(inputs, out, stream);
    };
    for (Timed& t : timed) {
      for (int i = 0; i < 3; ++i) run_once(t);
    }
    stream.synchronize();
    for (int r = 0; r < rounds; ++r) {
      for (Timed& t : timed) {
        start->record(stream);
        for (int i = 0; i < runs; ++i) run_once(t);
        stop->record(stream);
        stop->synchronize();
        t.times.push_back(stop->elapsed_ms(*start) / runs);
      }
    }
    const double flops =
        2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    for (Timed& t : timed) {
      std::sort(t.times.begin(), t.times.end());
      t.result->median_ms = t.times[t.times.size() / 2];
      t.result->tflops = flops / (t.result->median_ms * 1e-3) / 1e12;
    }
    if (timed.size() == 2) {
      std::vector<uint16_t> own(static_cast<size_t>(s.m * s.n)), lib(own.size());
      gpu.copy_to_host(own.data(), timed[0].y.data(), y_bytes, stream);
      gpu.copy_to_host(lib.data(), timed[1].y.data(), y_bytes, stream);
      stream.synchronize();
      double worst = 0, top = 0;
      for (size_t i = 0; i < own.size(); ++i) {
        const double l = half_bits_to_float(lib[i]);
        const double d = std::abs(static_cast<double>(half_bits_to_float(own[i])) - l);
        if (!(d <= worst)) worst = d;  // a NaN shows
        top = std::max(top, std::abs(l));
      }
      row.max_rel_diff = top > 0 ? worst / top : worst;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kiln::backends
