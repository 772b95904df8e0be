#include "backends/gpu/runtime/cudnn_api.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/vendor_library.hpp"

namespace kiln::backends::gpu {
namespace {

CudnnApi open_cudnn() {
  CudnnApi api;
  VendorLibrary lib("libcudnn.so.9", "cuDNN 9");
  lib.get(api.get_version, "cudnnGetVersion");
  lib.get(api.error_string, "cudnnGetErrorString");
  lib.get(api.create, "cudnnCreate");
  lib.get(api.set_stream, "cudnnSetStream");
  lib.get(api.tensor_create, "cudnnCreateTensorDescriptor");
  lib.get(api.tensor_destroy, "cudnnDestroyTensorDescriptor");
  lib.get(api.tensor_set_4d, "cudnnSetTensor4dDescriptor");
  lib.get(api.filter_create, "cudnnCreateFilterDescriptor");
  lib.get(api.filter_destroy, "cudnnDestroyFilterDescriptor");
  lib.get(api.filter_set_4d, "cudnnSetFilter4dDescriptor");
  lib.get(api.conv_create, "cudnnCreateConvolutionDescriptor");
  lib.get(api.conv_destroy, "cudnnDestroyConvolutionDescriptor");
  lib.get(api.conv_set_2d, "cudnnSetConvolution2dDescriptor");
  lib.get(api.conv_set_groups, "cudnnSetConvolutionGroupCount");
  lib.get(api.conv_set_math, "cudnnSetConvolutionMathType");
  lib.get(api.act_create, "cudnnCreateActivationDescriptor");
  lib.get(api.act_destroy, "cudnnDestroyActivationDescriptor");
  lib.get(api.act_set, "cudnnSetActivationDescriptor");
  lib.get(api.act_set_swish_beta, "cudnnSetActivationDescriptorSwishBeta");
  lib.get(api.act_forward, "cudnnActivationForward");
  lib.get(api.find_forward, "cudnnFindConvolutionForwardAlgorithmEx");
  lib.get(api.forward_workspace, "cudnnGetConvolutionForwardWorkspaceSize");
  lib.get(api.forward, "cudnnConvolutionForward");
  lib.get(api.forward_bias_act, "cudnnConvolutionBiasActivationForward");
  lib.get(api.add_tensor, "cudnnAddTensor");
  lib.get(api.transform, "cudnnTransformTensor");
  lib.get(api.pool_create, "cudnnCreatePoolingDescriptor");
  lib.get(api.pool_destroy, "cudnnDestroyPoolingDescriptor");
  lib.get(api.pool_set_2d, "cudnnSetPooling2dDescriptor");
  lib.get(api.pool_forward, "cudnnPoolingForward");
  if (!lib.ok()) {
    api.error = lib.error();
    return api;
  }
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
