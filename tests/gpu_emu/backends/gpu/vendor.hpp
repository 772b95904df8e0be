#pragma once
// A host emulation of backends/gpu/vendor.hpp, so the GPU kernels' own sources (kernels/*.hip)
// run on a CPU in tests that need no GPU: it shadows the real header on this test's include
// path. Blocks run one after another; every thread of a block is a std::thread, __syncthreads
// is a barrier of the block and a shuffle a barrier-guarded exchange within its wavefront, so a
// barrier or shuffle that not every thread (or lane) reaches deadlocks instead of passing.
// KILN_WARP_SIZE comes from the build (32 and 64 are both tested). Only what the kernels use.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/half.hpp"

#ifndef KILN_WARP_SIZE
#error "the emulated build names its wavefront size (-DKILN_WARP_SIZE=32 or 64)"
#endif
#define KILN_GPU_VENDOR "emu"
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
// One block runs at a time, so a function's statics are its block's shared memory.
#define __shared__ static
#define KILN_DYNAMIC_SHARED(T, name) T* name = ::kiln_emu::dynamic_shared<T>()

using hipError_t = int;
using hipStream_t = void*;
#define hipSuccess 0
#define hipErrorInvalidValue 1
inline hipError_t hipGetLastError() {
  return hipSuccess;
}
inline hipError_t hipGetDevice(int* device) {
  *device = 0;
  return hipSuccess;
}
// Every emulated block may take any amount of dynamic shared memory.
enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize };
inline hipError_t hipFuncSetAttribute(const void*, hipFuncAttribute, int) {
  return hipSuccess;
}

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace kiln_emu {

struct Wavefront {
  std::barrier<> barrier{KILN_WARP_SIZE};
  uint64_t lanes[KILN_WARP_SIZE] = {};
  std::vector<unsigned char> gathered;  // wave_gather's
};

struct Block {
  std::barrier<>* barrier = nullptr;
  std::vector<std::unique_ptr<Wavefront>> wavefronts;
  std::vector<unsigned char> dynamic_shared;
};
inline Block block;

template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(block.dynamic_shared.data());
}

// Lane `src`'s value of v, for every lane of the calling thread's wavefront.
template <typename T>
T exchange(T v, int src) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  Wavefront& w = *block.wavefronts[threadIdx.x / KILN_WARP_SIZE];
  std::memcpy(&w.lanes[threadIdx.x % KILN_WARP_SIZE], &v, sizeof v);
  w.barrier.arrive_and_wait();
  T r;
  std::memcpy(&r, &w.lanes[src], sizeof r);
  w.barrier.arrive_and_wait();  // nobody overwrites a lane before every lane has read
  return r;
}

// Every lane's `v`, in lane order (an emulated matrix instruction reads the whole wavefront's
// registers at once).
template <typename T>
void wave_gather(const T& v, T (&all)[KILN_WARP_SIZE]) {
  Wavefront& w = *block.wavefronts[threadIdx.x / KILN_WARP_SIZE];
  const unsigned lane = threadIdx.x % KILN_WARP_SIZE;
  if (lane == 0) w.gathered.resize(sizeof(T) * KILN_WARP_SIZE);
  w.barrier.arrive_and_wait();
  std::memcpy(w.gathered.data() + lane * sizeof(T), &v, sizeof(T));
  w.barrier.arrive_and_wait();
  std::memcpy(all, w.gathered.data(), sizeof(T) * KILN_WARP_SIZE);
  w.barrier.arrive_and_wait();  // nobody writes again before every lane has read
}

template <typename K, typename... A>
void launch(K kernel, dim3 grid, dim3 threads, size_t shared_bytes, A... args) {
  gridDim = grid;
  blockDim = threads;
  for (unsigned b = 0; b < grid.x * grid.y * grid.z; ++b) {
    std::barrier<> barrier(threads.x);
    block.barrier = &barrier;
    block.wavefronts.clear();
    for (unsigned w = 0; w < threads.x / KILN_WARP_SIZE; ++w)
      block.wavefronts.push_back(std::make_unique<Wavefront>());
    // NaN bytes: a kernel reading shared memory it did not write shows up in its results.
    block.dynamic_shared.assign(shared_bytes, 0xff);
    std::vector<std::thread> team;
    for (unsigned t = 0; t < threads.x; ++t) {
      team.emplace_back([=] {
        threadIdx = dim3(t);
        blockIdx = dim3(b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y));
        kernel(args...);
      });
    }
    for (std::thread& t : team) t.join();
  }
}

}  // namespace kiln_emu

inline void __syncthreads() {
  kiln_emu::block.barrier->arrive_and_wait();
}
template <typename T>
T __shfl_xor(T v, int lane_mask) {
  return kiln_emu::exchange(v, static_cast<int>(threadIdx.x % KILN_WARP_SIZE) ^ lane_mask);
}
template <typename T>
T __shfl(T v, int lane) {
  return kiln_emu::exchange(v, lane);
}

struct __half {
  uint16_t bits;
};
inline float __half2float(__half h) {
  return kiln::half_bits_to_float(h.bits);
}
inline __half __float2half(float f) {
  return __half{kiln::float_to_half_bits(f)};
}
inline uint16_t __half_as_ushort(__half h) {
  return h.bits;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

#define hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, ...) \
  ::kiln_emu::launch(kernel, grid, block, shared_bytes, __VA_ARGS__)
