#pragma once
// cuDNN 9, opened with dlopen the first time a convolution or pooling kernel is asked for, so
// that the GPU library loads (and its other kernels run) where cuDNN is missing; those nodes then
// fall back to the CPU and the reason says why. NVIDIA only: MIOpen would take this place on AMD
// (ROCm 5.2, this build's, has none in Debian).
//
// The legacy convolution API (cudnnConvolutionForward, cudnnConvolutionBiasActivationForward,
// cudnnFindConvolutionForwardAlgorithmEx) is deprecated in cuDNN 9 but present and supported; it
// covers every convolution ONNX models need with one call each.
#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <cudnn.h>

#include <mutex>
#include <string>

namespace kiln::backends::gpu {

struct CudnnApi {
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnCreateTensorDescriptor) tensor_create = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) tensor_destroy = nullptr;
  decltype(&cudnnSetTensor4dDescriptor) tensor_set_4d = nullptr;
  decltype(&cudnnCreateFilterDescriptor) filter_create = nullptr;
  decltype(&cudnnDestroyFilterDescriptor) filter_destroy = nullptr;
  decltype(&cudnnSetFilter4dDescriptor) filter_set_4d = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) conv_create = nullptr;
  decltype(&cudnnDestroyConvolutionDescriptor) conv_destroy = nullptr;
  decltype(&cudnnSetConvolution2dDescriptor) conv_set_2d = nullptr;
  decltype(&cudnnSetConvolutionGroupCount) conv_set_groups = nullptr;
  decltype(&cudnnSetConvolutionMathType) conv_set_math = nullptr;
  decltype(&cudnnCreateActivationDescriptor) act_create = nullptr;
  decltype(&cudnnDestroyActivationDescriptor) act_destroy = nullptr;
  decltype(&cudnnSetActivationDescriptor) act_set = nullptr;
  decltype(&cudnnSetActivationDescriptorSwishBeta) act_set_swish_beta = nullptr;
  decltype(&cudnnActivationForward) act_forward = nullptr;
  decltype(&cudnnFindConvolutionForwardAlgorithmEx) find_forward = nullptr;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) forward_workspace = nullptr;
  decltype(&cudnnConvolutionForward) forward = nullptr;
  decltype(&cudnnConvolutionBiasActivationForward) forward_bias_act = nullptr;
  decltype(&cudnnAddTensor) add_tensor = nullptr;
  decltype(&cudnnTransformTensor) transform = nullptr;
  decltype(&cudnnCreatePoolingDescriptor) pool_create = nullptr;
  decltype(&cudnnDestroyPoolingDescriptor) pool_destroy = nullptr;
  decltype(&cudnnSetPooling2dDescriptor) pool_set_2d = nullptr;
  decltype(&cudnnPoolingForward) pool_forward = nullptr;
  // One handle per process, guarded by the kernels' callers: the executor runs one plan's steps
  // in order on one thread; each call sets the handle's stream first.
  cudnnHandle_t handle = nullptr;
  size_t version = 0;  // cudnnGetVersion(): 91400 for 9.14.0
  std::string error;   // set when cuDNN could not be opened
  bool ok() const { return error.empty(); }
};

// The process's cuDNN (opened once; never throws: see `error`).
const CudnnApi& cudnn();

// Held around every use of the process's cuDNN handle (setting its stream, then the calls): a
// handle must not be used from two threads at once, and sessions (a server's instances) run on
// several.
std::mutex& cudnn_mutex();

// Throws Internal naming `what` and cuDNN's message when `status` is not success.
void cudnn_check(cudnnStatus_t status, const char* what);

}  // namespace kiln::backends::gpu
#endif
