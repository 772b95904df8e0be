// Every oneDNN 2.6 implementation of one float32 convolution (with a Relu post-op), on
// channel-blocked (nChw16c) or channels-last (nhwc) activations: the kernel and the median
// microseconds of 60 runs each. The evidence behind onednn.conv's channels-last rule
// (backends/cpu/conv_kernels.cpp channels_last_fits): oneDNN 2.6 has its brgemm convolution
// only for channels-last tensors.
//
//   g++ -O2 -std=c++17 bench/onednn_conv_impls_probe.cpp -ldnnl -o /tmp/conv_impls
//   OMP_NUM_THREADS=1 /tmp/conv_impls IC OC H W KERNEL STRIDE PAD blocked|nhwc
//
// Reference, AVX2 and SSE4.1 kernels are left out (seconds a run).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <string>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
int main(int argc, char** argv) {
  if (argc < 9) {
    std::fprintf(stderr, "usage: %s IC OC H W KERNEL STRIDE PAD blocked|nhwc\n", argv[0]);
    return 2;
  }
  const int ic = std::atoi(argv[1]), oc = std::atoi(argv[2]), h = std::atoi(argv[3]),
            w = std::atoi(argv[4]), k = std::atoi(argv[5]), s = std::atoi(argv[6]),
            p = std::atoi(argv[7]);
  const tag layout = std::string(argv[8]) == "nhwc" ? tag::nhwc : tag::nChw16c;
  const int oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  memory::desc src({1, ic, h, w}, dt::f32, layout), wei({oc, ic, k, k}, dt::f32, tag::any),
      bia({oc}, dt::f32, tag::x), dst({1, oc, oh, ow}, dt::f32, layout);
  post_ops ops;
  ops.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(ops);
  convolution_forward::primitive_desc pd(
      convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, src,
                                wei, bia, dst, {s, s}, {p, p}, {p, p}),
      attr, eng);
  const double flops = 2.0 * oh * ow * oc * ic * k * k;
  do {
    const std::string impl = pd.impl_info_str();
    if (impl.rfind("ref", 0) == 0 || impl.find("avx2") != std::string::npos ||
        impl.find("sse41") != std::string::npos) {
      continue;
    }
    memory sm(pd.src_desc(), eng), wm(pd.weights_desc(), eng), bm(pd.bias_desc(), eng),
        dm(pd.dst_desc(), eng);
    for (memory* m : {&sm, &wm, &bm}) {
      float* f = static_cast<float*>(m->get_data_handle());
      std::fill(f, f + m->get_desc().get_size() / sizeof(float), 0.01f);
    }
    convolution_forward conv(pd);
    std::vector<double> times;
    for (int r = 0; r < 60; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      conv.execute(
          st,
          {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm}});
      st.wait();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    std::printf("%-28s %9.1f us %7.1f GFLOP/s\n", impl.c_str(), times[30] * 1e6,
                flops / times[30] / 1e9);
  } while (pd.next_impl());
}
