// oneDNN 2.6's float32 3x3 convolution, direct against Winograd, on one shape: the kernel each
// picks, the median microseconds of 5 x 20 runs, and the two results' relative L2 difference.
// The evidence behind onednn.conv's Winograd rule (backends/cpu/conv_kernels.cpp).
//
//   g++ -O2 -std=c++17 bench/onednn_winograd_probe.cpp -ldnnl -o /tmp/wino
//   OMP_NUM_THREADS=1 /tmp/wino CHANNELS SIZE [BATCH] [OUT_CHANNELS]
//
// Both with a sum and a Relu post-op, as a ResNet block's fused residual convolution.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <dnnl.hpp>
#include <random>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
int main(int argc, char** argv) {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  int64_t c = atoi(argv[1]), h = atoi(argv[2]);
  int64_t n = argc > 3 ? atoi(argv[3]) : 1;
  int64_t co = argc > 4 ? atoi(argv[4]) : c;
  memory::desc src({n, c, h, h}, dt::f32, tag::any), dst({n, co, h, h}, dt::f32, tag::any),
      w({co, c, 3, 3}, dt::f32, tag::any), b({co}, dt::f32, tag::a);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> xs(n * c * h * h), ws(co * c * 9), bs(co, 0.f);
  for (auto& v : xs) v = std::max(0.f, nd(rng));
  for (auto& v : ws) v = nd(rng) * 0.05f;
  std::vector<float> outs[2];
  for (int alg = 0; alg < 2; ++alg) {
    auto a = alg ? algorithm::convolution_winograd : algorithm::convolution_direct;
    try {
      post_ops ops;
      ops.append_sum(1.f);
      ops.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      primitive_attr attr;
      attr.set_post_ops(ops);
      auto pd = convolution_forward::primitive_desc(
          convolution_forward::desc(prop_kind::forward_inference, a, src, w, b, dst, {1, 1}, {1, 1},
                                    {1, 1}),
          attr, eng);
      auto prim = convolution_forward(pd);
      memory px({{n, c, h, h}, dt::f32, tag::nchw}, eng, xs.data()),
          pw({{co, c, 3, 3}, dt::f32, tag::oihw}, eng, ws.data());
      memory ms(pd.src_desc(), eng), mw(pd.weights_desc(), eng), mb(b, eng, bs.data()),
          md(pd.dst_desc(), eng);
      reorder(px, ms).execute(s, px, ms);
      reorder(pw, mw).execute(s, pw, mw);
      auto run = [&] {
        prim.execute(
            s,
            {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}});
        s.wait();
      };
      for (int i = 0; i < 5; i++) run();
      std::vector<double> ts;
      for (int r = 0; r < 5; r++) {
        auto t = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; i++) run();
        ts.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t)
                         .count() /
                     20);
      }
      std::sort(ts.begin(), ts.end());
      outs[alg].resize(n * co * h * h);
      memory po({{n, co, h, h}, dt::f32, tag::nchw}, eng, outs[alg].data());
      reorder(md, po).execute(s, md, po);
      s.wait();
      printf("n%ld c%ld co%ld h%ld %s: %s %.1f us\n", n, c, co, h, alg ? "wino" : "direct",
             pd.impl_info_str(), ts[2]);
    } catch (dnnl::error& e) {
      printf("%s: %s\n", alg ? "wino" : "direct", e.what());
    }
  }
  if (!outs[1].empty()) {
    double num = 0, den = 0;
    for (size_t i = 0; i < outs[0].size(); ++i) {
      double d = outs[1][i] - outs[0][i];
      num += d * d;
      den += outs[0][i] * outs[0][i];
    }
    printf("rel L2 %.2e\n", std::sqrt(num / den));
  }
}
