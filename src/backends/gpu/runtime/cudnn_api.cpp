#include "backends/gpu/runtime/cudnn_api.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <dlfcn.h>
#include <fmt/format.h>

#include "core/error.hpp"

namespace kiln::backends::gpu {
namespace {

CudnnApi open_cudnn() {
  CudnnApi api;
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    api.error = fmt::format("cuDNN 9 is not available ({})", dlerror());
    return api;
  }
  bool missing = false;
  auto get = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (!fn && !missing) {
      api.error = fmt::format("libcudnn.so.9 lacks {}", symbol);
      missing = true;
    }
  };
  get(api.get_version, "cudnnGetVersion");
  get(api.error_string, "cudnnGetErrorString");
  get(api.create, "cudnnCreate");
  get(api.set_stream, "cudnnSetStream");
  get(api.tensor_create, "cudnnCreateTensorDescriptor");
  get(api.tensor_destroy, "cudnnDestroyTensorDescriptor");
  get(api.tensor_set_4d, "cudnnSetTensor4dDescriptor");
  get(api.filter_create, "cudnnCreateFilterDescriptor");
  get(api.filter_destroy, "cudnnDestroyFilterDescriptor");
  get(api.filter_set_4d, "cudnnSetFilter4dDescriptor");
  get(api.conv_create, "cudnnCreateConvolutionDescriptor");
  get(api.conv_destroy, "cudnnDestroyConvolutionDescriptor");
  get(api.conv_set_2d, "cudnnSetConvolution2dDescriptor");
  get(api.conv_set_groups, "cudnnSetConvolutionGroupCount");
  get(api.conv_set_math, "cudnnSetConvolutionMathType");
  get(api.act_create, "cudnnCreateActivationDescriptor");
  get(api.act_destroy, "cudnnDestroyActivationDescriptor");
  get(api.act_set, "cudnnSetActivationDescriptor");
  get(api.act_set_swish_beta, "cudnnSetActivationDescriptorSwishBeta");
  get(api.act_forward, "cudnnActivationForward");
  get(api.find_forward, "cudnnFindConvolutionForwardAlgorithmEx");
  get(api.forward_workspace, "cudnnGetConvolutionForwardWorkspaceSize");
  get(api.forward, "cudnnConvolutionForward");
  get(api.forward_bias_act, "cudnnConvolutionBiasActivationForward");
  get(api.add_tensor, "cudnnAddTensor");
  get(api.transform, "cudnnTransformTensor");
  get(api.pool_create, "cudnnCreatePoolingDescriptor");
  get(api.pool_destroy, "cudnnDestroyPoolingDescriptor");
  get(api.pool_set_2d, "cudnnSetPooling2dDescriptor");
  get(api.pool_forward, "cudnnPoolingForward");
  if (missing) return api;
  api.version = api.get_version();
  // The sub-libraries (cnn, ops, engines) load on first use inside cuDNN; cudnnCreate is the
  // first call that needs the GPU and says so when it fails.
  cudnnStatus_t s = api.create(&api.handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    api.error = fmt::format("cudnnCreate failed ({})", api.error_string(s));
  }
  return api;
}

}  // namespace

std::mutex& cudnn_mutex() {
  static std::mutex m;
  return m;
}

const CudnnApi& cudnn() {
  static const CudnnApi api = open_cudnn();
  return api;
}

void cudnn_check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) {
    fail(ErrorCode::Internal, "{} failed ({})", what, cudnn().error_string(status));
  }
}

}  // namespace kiln::backends::gpu
#endif
