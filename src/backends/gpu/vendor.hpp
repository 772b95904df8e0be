#pragma once
// HIP names for every GPU source of Kiln. On AMD (hipcc) they are HIP itself; on NVIDIA (nvcc)
// this header maps them onto CUDA, because HIP's own NVIDIA headers do not build with CUDA 13.
// The switch tests __HIP__: hipcc 5.2 defines it but not __HIP_PLATFORM_AMD__. Only names Kiln
// uses are mapped; add one here before using it in a source.
#if defined(__HIP__)

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define KILN_GPU_VENDOR "hip"
// The wavefront of the target being compiled (64 on CDNA, 32 on RDNA). The host pass sees no
// target: host code takes the size from the device (GpuDeviceInfo::wavefront_size).
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define KILN_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define KILN_WARP_SIZE 64
#endif

#elif defined(__CUDACC__) || defined(KILN_GPU_CUDA)

// KILN_GPU_CUDA without __CUDACC__: host-only runtime code that g++ compiles against CUDA's
// runtime API (nvcc's front end cannot parse fmt 9, which kiln::Error uses).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define KILN_GPU_VENDOR "cuda"
// CUDA 13's warpSize is a variable, not a constant expression; kernels size arrays with this.
#define KILN_WARP_SIZE 32

// Runtime types and constants.
using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipGraph_t = cudaGraph_t;
using hipGraphExec_t = cudaGraphExec_t;
using hipGraphNode_t = cudaGraphNode_t;
using hipDeviceProp_t = cudaDeviceProp;
using hipMemcpyKind = cudaMemcpyKind;
using hipStreamCaptureMode = cudaStreamCaptureMode;
using hipDeviceAttribute_t = cudaDeviceAttr;
using hipIpcMemHandle_t = cudaIpcMemHandle_t;
#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorInsufficientDriver cudaErrorInsufficientDriver
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorNotReady cudaErrorNotReady
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipMemcpyDefault cudaMemcpyDefault
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipEventDefault cudaEventDefault
#define hipEventDisableTiming cudaEventDisableTiming
#define hipHostMallocPortable cudaHostAllocPortable
#define hipStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define hipDeviceAttributeClockRate cudaDevAttrClockRate
#define hipIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess

// Runtime functions (same arguments in both).
#define hipGetErrorName cudaGetErrorName
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceGetPCIBusId cudaDeviceGetPCIBusId
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipRuntimeGetVersion cudaRuntimeGetVersion
#define hipDriverGetVersion cudaDriverGetVersion
#define hipMemGetInfo cudaMemGetInfo
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipHostMalloc cudaHostAlloc
#define hipHostFree cudaFreeHost
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipStreamQuery cudaStreamQuery
#define hipLaunchHostFunc cudaLaunchHostFunc
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventQuery cudaEventQuery
#define hipEventElapsedTime cudaEventElapsedTime
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphDestroy cudaGraphDestroy
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipIpcOpenMemHandle cudaIpcOpenMemHandle
#define hipIpcCloseMemHandle cudaIpcCloseMemHandle

// HIP keeps CUDA 11's five-argument form; CUDA 12+ takes flags instead of the error node and log.
inline hipError_t hipGraphInstantiate(hipGraphExec_t* exec, hipGraph_t graph,
                                      hipGraphNode_t* error_node, char* log, size_t log_size) {
  (void)error_node;
  if (log && log_size) log[0] = '\0';
  return cudaGraphInstantiate(exec, graph, 0);
}

#if defined(__CUDACC__)
#define hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)

// HIP's shuffles take no mask (a wavefront runs in lockstep); CUDA has only the _sync forms,
// which here name the whole warp, as HIP's do.
#define KILN_FULL_WARP_MASK 0xffffffffu
template <typename T>
__device__ inline T __shfl(T v, int lane, int width = KILN_WARP_SIZE) {
  return __shfl_sync(KILN_FULL_WARP_MASK, v, lane, width);
}
template <typename T>
__device__ inline T __shfl_xor(T v, int lane_mask, int width = KILN_WARP_SIZE) {
  return __shfl_xor_sync(KILN_FULL_WARP_MASK, v, lane_mask, width);
}
template <typename T>
__device__ inline T __shfl_down(T v, unsigned delta, int width = KILN_WARP_SIZE) {
  return __shfl_down_sync(KILN_FULL_WARP_MASK, v, delta, width);
}
template <typename T>
__device__ inline T __shfl_up(T v, unsigned delta, int width = KILN_WARP_SIZE) {
  return __shfl_up_sync(KILN_FULL_WARP_MASK, v, delta, width);
}
#endif  // __CUDACC__

#else
#error "backends/gpu/vendor.hpp is for sources compiled by hipcc (AMD) or nvcc (NVIDIA)"
#endif

// The block's dynamic shared memory (the launch's shared-bytes argument) as `T name[]`. A macro,
// so that the host emulation of the kernel tests (tests/gpu_emu) can give it another form.
#define KILN_DYNAMIC_SHARED(T, name) extern __shared__ T name[]

// __half (hip_fp16.h / cuda_fp16.h) is the 16-bit float of GPU code on both vendors: _Float16,
// HIP's native type, does not exist in nvcc's device code, so it stays in AMD-only blocks.
