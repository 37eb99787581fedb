// chain_probe.cu: a standalone probe for issue 18's decode GEMV (one call, nvcc -arch=sm_90).
//
// 1. The latency of a dependent mma.sync m16n8k16 bf16 chain (1, 2, 4 chains per warp), in
//    cycles per step: the bound of a k16-chain GEMV whose loads keep up.
// 2. A register-pipelined chain GEMV at M=1 (no shared memory: every lane loads its own fragment
//    pieces kDepth k16 steps ahead), in two load mappings, against cublasGemmEx's default on the
//    qwen3-1.7b decode shapes, weights rotated through copies larger than L2 (cold, as in a step).
// 3. Bits: each variant against cuBLAS on operands whose fp32 sum depends on the order.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <random>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

template <int kChains>
__global__ void mma_latency(float* out, long long* cycles, int iters) {
  const uint32_t v = 0x3f803f80u + (threadIdx.x & 7);
  float acc[kChains][4] = {};
  __syncwarp();
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) mma(acc[c], v, v, v ^ c, v);
  }
  __syncwarp();
  const long long t1 = clock64();
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[threadIdx.x] = s;
  if (threadIdx.x == 0) *cycles = t1 - t0;
}

__device__ __forceinline__ uint32_t ld32(const char* p) {
  uint32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld64(const char* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.b32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// x: [M, K], w: [N, K], y: [M, N] bf16, M <= 8. grid N / (8 * kWarps), block 32 * kWarps: a warp
// owns weight rows n0..n0+7 and runs one mma chain over K in k16 steps. Lane (g, t) holds, per
// step, w[n0 + g] and x[g] at mma k {2t, 2t+1, 2t+8, 2t+9}: kPerm = false loads them where they
// are (two 4-byte loads); kPerm = true loads memory k 4t..4t+3 (one 8-byte load) into them, a
// permutation inside the k16 step, the same for x and w.
template <int kDepth, bool kPerm, int kWarps>
__global__ void __launch_bounds__(32 * kWarps)
    chain_gemv(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
               __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  const int lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * 8;
  if (n0 >= N) return;
  const int g = lane >> 2, t = lane & 3;
  const int steps = K / 16;
  const bool xreal = g < M;
  const char* wrow = reinterpret_cast<const char*>(w + static_cast<size_t>(n0 + g) * K);
  const char* xrow = reinterpret_cast<const char*>(x + static_cast<size_t>(xreal ? g : 0) * K);
  auto load = [&](const char* row, int s) {
    if constexpr (kPerm) {
      return ld64(row + s * 32 + t * 8);
    } else {
      return make_uint2(ld32(row + s * 32 + t * 4), ld32(row + s * 32 + 16 + t * 4));
    }
  };
  uint2 wb[kDepth], xa[kDepth];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (d < steps) {
      wb[d] = load(wrow, d);
      xa[d] = xreal ? load(xrow, d) : make_uint2(0, 0);
    }
  }
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s0 = 0; s0 < steps; s0 += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int s = s0 + d;
      if (s < steps) {
        mma(acc, xa[d].x, xa[d].y, wb[d].x, wb[d].y);
        if (s + kDepth < steps) {
          wb[d] = load(wrow, s + kDepth);
          if (xreal) xa[d] = load(xrow, s + kDepth);
        }
      }
    }
  }
  if (g < M) {
    *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(g) * N + n0 + 2 * t) =
        __floats2bfloat162_rn(acc[0], acc[1]);
  }
}


// (b) as chain_gemv with kPerm, but plain loads the compiler may schedule (no asm volatile).
template <int kDepth, int kWarps>
__global__ void __launch_bounds__(32 * kWarps)
    chain_gemv_plain(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  const int lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * 8;
  if (n0 >= N) return;
  const int g = lane >> 2, t = lane & 3;
  const int steps = K / 16;
  const bool xreal = g < M;
  const uint2* wrow = reinterpret_cast<const uint2*>(w + static_cast<size_t>(n0 + g) * K) + t;
  const uint2* xrow = reinterpret_cast<const uint2*>(x + static_cast<size_t>(xreal ? g : 0) * K) + t;
  uint2 wb[kDepth], xa[kDepth];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    wb[d] = __ldg(wrow + 4 * d);
    xa[d] = xreal ? __ldg(xrow + 4 * d) : make_uint2(0, 0);
  }
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s0 = 0; s0 < steps; s0 += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      mma(acc, xa[d].x, xa[d].y, wb[d].x, wb[d].y);
      const int next = s0 + d + kDepth;
      if (next < steps) {
        wb[d] = __ldg(wrow + 4 * next);
        xa[d] = xreal ? __ldg(xrow + 4 * next) : make_uint2(0, 0);
      }
    }
  }
  if (g < M) {
    *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(g) * N + n0 + 2 * t) =
        __floats2bfloat162_rn(acc[0], acc[1]);
  }
}

__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kN>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kN));
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}

// (c) each lane copies its own 8-byte fragment pieces kRing - 1 steps ahead into a lane-private
// ring in shared memory (cp.async, waited per thread: no barrier), reads them back, one mma each.
// x is staged once per block into shared memory (M rows, K bf16).
template <int kRing, int kWarps>
__global__ void __launch_bounds__(32 * kWarps)
    chain_gemv_ring(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                    __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // x: [M][K] bf16 at the start, then per warp a ring [kRing][32 lanes] of 8 bytes.
  const size_t xbytes = static_cast<size_t>(M) * K * 2;
  for (size_t i = threadIdx.x; i < xbytes / 16; i += blockDim.x) {
    reinterpret_cast<uint4*>(smem)[i] = __ldg(reinterpret_cast<const uint4*>(x) + i);
  }
  __syncthreads();
  const int n0 = (blockIdx.x * kWarps + warp) * 8;
  if (n0 >= N) return;
  const int g = lane >> 2, t = lane & 3;
  const int steps = K / 16;
  const bool xreal = g < M;
  const uint32_t xs = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) +
                      (xreal ? g : 0) * K * 2 + t * 8;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) +
                        ((xbytes + 15) / 16) * 16 + (warp * kRing * 32 + lane) * 8;
  const char* wrow = reinterpret_cast<const char*>(w + static_cast<size_t>(n0 + g) * K) + t * 8;
#pragma unroll
  for (int d = 0; d < kRing - 1; ++d) {
    if (d < steps) cp_async_8(ring + d * 256, wrow + d * 32);
    cp_commit();
  }
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s0 = 0; s0 < steps; s0 += kRing) {
#pragma unroll
    for (int d = 0; d < kRing; ++d) {
      const int s = s0 + d;
      if (s < steps) {
        const int ahead = s + kRing - 1;
        if (ahead < steps) cp_async_8(ring + ((d + kRing - 1) % kRing) * 256, wrow + ahead * 32);
        cp_commit();
        cp_wait<kRing - 1>();
        const uint2 b = lds64(ring + d * 256);
        const uint2 a = xreal ? lds64(xs + s * 32) : make_uint2(0, 0);
        mma(acc, a.x, a.y, b.x, b.y);
      }
    }
  }
  cp_wait<0>();
  if (g < M) {
    *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(g) * N + n0 + 2 * t) =
        __floats2bfloat162_rn(acc[0], acc[1]);
  }
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// (d) kWarps consumer warps of 8 kChains weight rows each and one producer warp: the producer's
// lane 0 copies each 64-k stage of the CTA's rows (box [8 kChains kWarps][64], 128-byte swizzle)
// and of x (box [8][64]; token rows past M come back zero) with the tensor copy engine into a
// kStages ring, completion counted on the stage's mbarrier. Consumers read their fragment pieces
// with 8-byte shared loads (the permutation inside a k16 step of kPerm) one stage ahead, between
// the dependent mmas of the current stage (issue is in order: what sits between two mmas of a
// chain runs in the first one's latency), and release the slot as soon as they hold it.
template <int kWarps, int kStages, int kChains>
__global__ void __launch_bounds__(32 * (kWarps + 1))
    chain_gemv_tma(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                   __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  constexpr uint32_t kWBytes = kWarps * kChains * 8 * 128;
  constexpr uint32_t kStageBytes = kWBytes + 1024;
  const uint32_t bars = base + kStages * kStageBytes;
  auto full = [&](int i) { return bars + 8u * i; };
  auto empty = [&](int i) { return bars + 8u * (kStages + i); };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = blockIdx.x * kWarps * kChains * 8;
  const int stages = K / 64;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(full(i), 1);
      mbar_init(empty(i), kWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == kWarps) {
    if (lane == 0) {
      for (int s = 0; s < stages; ++s) {
        const int slot = s % kStages;
        const int use = s / kStages;
        if (use > 0) mbar_wait(empty(slot), (use - 1) & 1);
        mbar_expect_tx(full(slot), kStageBytes);
        tma_load_2d(base + slot * kStageBytes, &wmap, s * 64, row0, full(slot));
        tma_load_2d(base + slot * kStageBytes + kWBytes, &xmap, s * 64, 0, full(slot));
      }
    }
    return;
  }
  const int g = lane >> 2, t = lane & 3;
  float acc[kChains][4] = {};
  uint2 b[kChains][4], a[4];
  // Fragment pieces of k16 step j of stage s, for every chain.
  auto fetch = [&](int s, int j, uint2 (&bb)[kChains][4], uint2 (&aa)[4]) {
    const uint32_t stage = base + (s % kStages) * kStageBytes;
    const uint32_t chunk = static_cast<uint32_t>((2 * j + (t >> 1)) ^ g) * 16 + (t & 1) * 8;
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      bb[c][j] = lds64(stage + ((warp * kChains + c) * 8 + g) * 128 + chunk);
    }
    aa[j] = lds64(stage + kWBytes + g * 128 + chunk);
  };
  mbar_wait(full(0), 0);
#pragma unroll
  for (int j = 0; j < 4; ++j) fetch(0, j, b, a);
  __syncwarp();
  if (lane == 0) mbar_arrive(empty(0));
  for (int s = 0; s < stages; ++s) {
    const bool more = s + 1 < stages;
    uint2 nb[kChains][4], na[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int c = 0; c < kChains; ++c) mma(acc[c], a[j].x, a[j].y, b[c][j].x, b[c][j].y);
      if (more) {
        if (j == 0) mbar_wait(full((s + 1) % kStages), ((s + 1) / kStages) & 1);
        fetch(s + 1, j, nb, na);
        if (j == 3) {
          __syncwarp();
          if (lane == 0) mbar_arrive(empty((s + 1) % kStages));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      a[j] = na[j];
#pragma unroll
      for (int c = 0; c < kChains; ++c) b[c][j] = nb[c][j];
    }
  }
  if (g < M) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      const int n0 = row0 + (warp * kChains + c) * 8;
      *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(g) * N + n0 + 2 * t) =
          __floats2bfloat162_rn(acc[c][0], acc[c][1]);
    }
  }
}
__device__ unsigned long long probe_times[3 * 8192];

// (c2) call 3's version: fragments read after the stage's wait, then 4 mmas. kWarps consumer warps of 8 weight rows each and one producer warp: the producer's lane 0
// copies each 64-k stage of the CTA's rows (box [8 kWarps][64], 128-byte swizzle) and of x (box
// [8][64]; token rows past M come back zero) with the tensor copy engine into a kStages ring,
// completion counted on the stage's mbarrier; consumers read their fragment pieces with 8-byte
// shared loads (the permutation inside a k16 step of kPerm) and release the slot.
template <int kWarps, int kStages, bool kProbe, int kBoxes>
__global__ void __launch_bounds__(32 * (kWarps + 1))
    chain_gemv_tma_simple(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                   __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  constexpr uint32_t kBoxW = kWarps * 8 * 128;  // one [8 kWarps][64] box
  constexpr uint32_t kWBytes = kBoxW * kBoxes;
  constexpr uint32_t kStageBytes = kWBytes + 1024 * kBoxes;
  const uint32_t bars = base + kStages * kStageBytes;
  auto full = [&](int i) { return bars + 8u * i; };
  auto empty = [&](int i) { return bars + 8u * (kStages + i); };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = blockIdx.x * kWarps * 8;
  const int stages = K / (64 * kBoxes);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(full(i), 1);
      mbar_init(empty(i), kWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == kWarps) {
    if (lane == 0) {
      for (int s = 0; s < stages; ++s) {
        const int slot = s % kStages;
        const int use = s / kStages;
        if (use > 0) mbar_wait(empty(slot), (use - 1) & 1);
        mbar_expect_tx(full(slot), kStageBytes);
        for (int box = 0; box < kBoxes; ++box) {
          const int k0 = (s * kBoxes + box) * 64;
          tma_load_2d(base + slot * kStageBytes + box * kBoxW, &wmap, k0, row0, full(slot));
          tma_load_2d(base + slot * kStageBytes + kWBytes + box * 1024, &xmap, k0, 0, full(slot));
        }
      }
    }
    return;
  }
  const int g = lane >> 2, t = lane & 3;
  const uint32_t wrow = warp * 8 + g;
  unsigned long long t0 = 0, t1 = 0;
  if (kProbe && lane == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < stages; ++s) {
    const int slot = s % kStages;
    mbar_wait(full(slot), (s / kStages) & 1);
    if (kProbe && lane == 0 && s == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    const uint32_t wt = base + slot * kStageBytes + wrow * 128 + (t & 1) * 8;
    const uint32_t xt = base + slot * kStageBytes + kWBytes + g * 128 + (t & 1) * 8;
    uint2 b[4 * kBoxes], a[4 * kBoxes];
#pragma unroll
    for (int j = 0; j < 4 * kBoxes; ++j) {
      const uint32_t chunk = static_cast<uint32_t>((2 * (j % 4) + (t >> 1)) ^ g) * 16;
      b[j] = lds64(wt + (j / 4) * kBoxW + chunk);
      a[j] = lds64(xt + (j / 4) * 1024 + chunk);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(slot));
#pragma unroll
    for (int j = 0; j < 4 * kBoxes; ++j) mma(acc, a[j].x, a[j].y, b[j].x, b[j].y);
  }
  if (kProbe && lane == 0) {
    unsigned long long t2;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t2));
    const int id = blockIdx.x * kWarps + warp;
    probe_times[3 * id] = t0;
    probe_times[3 * id + 1] = t1;
    probe_times[3 * id + 2] = t2;
  }
  if (g < M) {
    const int n0 = row0 + warp * 8;
    *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(g) * N + n0 + 2 * t) =
        __floats2bfloat162_rn(acc[0], acc[1]);
  }
}

struct Shape {
  const char* name;
  int N, K;
};

template <int kDepth, bool kPerm, int kWarps>
void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int M, int N,
            int K) {
  chain_gemv<kDepth, kPerm, kWarps><<<N / (8 * kWarps), 32 * kWarps>>>(x, w, y, M, N, K);
}

template <int kDepth, int kWarps>
void launch_plain(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int M, int N,
                  int K) {
  chain_gemv_plain<kDepth, kWarps><<<N / (8 * kWarps), 32 * kWarps>>>(x, w, y, M, N, K);
}
template <int kRing, int kWarps>
void launch_ring(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int M, int N,
                 int K) {
  const size_t bytes = ((size_t(M) * K * 2 + 15) / 16) * 16 + size_t(kWarps) * kRing * 32 * 8;
  static bool set = false;
  if (!set) {
    CK(cudaFuncSetAttribute(chain_gemv_ring<kRing, kWarps>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    set = true;
  }
  chain_gemv_ring<kRing, kWarps><<<N / (8 * kWarps), 32 * kWarps, bytes>>>(x, w, y, M, N, K);
}

CUtensorMap make_map(const void* p, int rows, int cols, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = cuTensorMapEncodeTiled(
      &m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides, box, elem,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d (rows %d cols %d box %d)\n", int(r), rows,
                 cols, box_rows);
    std::exit(1);
  }
  return m;
}

template <int kWarps, int kStages, int kChains = 1>
void launch_tma(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int M, int N,
                int K) {
  static std::map<std::pair<const void*, int>, CUtensorMap> maps;
  auto wkey = std::make_pair(static_cast<const void*>(w), N * 1000 + K);
  auto it = maps.find(wkey);
  if (it == maps.end()) it = maps.emplace(wkey, make_map(w, N, K, kWarps * kChains * 8)).first;
  auto xkey = std::make_pair(static_cast<const void*>(x), -(M * 100000 + K));
  auto xt = maps.find(xkey);
  if (xt == maps.end()) xt = maps.emplace(xkey, make_map(x, M, K, 8)).first;
  constexpr size_t bytes = 1024 + size_t(kStages) * (kWarps * kChains * 1024 + 1024) + 16 * kStages;
  static bool set = false;
  if (!set) {
    CK(cudaFuncSetAttribute(chain_gemv_tma<kWarps, kStages, kChains>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    set = true;
  }
  chain_gemv_tma<kWarps, kStages, kChains><<<N / (8 * kWarps * kChains), 32 * (kWarps + 1), bytes>>>(it->second, xt->second, y, M, N, K);
}

template <int kWarps, int kStages, int kBoxes = 1, bool kProbe = false>
void launch_simple(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int M, int N,
                   int K) {
  static std::map<std::pair<const void*, int>, CUtensorMap> maps;
  auto wkey = std::make_pair(static_cast<const void*>(w), N * 1000 + K);
  auto it = maps.find(wkey);
  if (it == maps.end()) it = maps.emplace(wkey, make_map(w, N, K, kWarps * 8)).first;
  auto xkey = std::make_pair(static_cast<const void*>(x), -(M * 100000 + K));
  auto xt = maps.find(xkey);
  if (xt == maps.end()) xt = maps.emplace(xkey, make_map(x, M, K, 8)).first;
  constexpr size_t bytes = 1024 + size_t(kStages) * kBoxes * (kWarps * 1024 + 1024) + 16 * kStages;
  static bool set = false;
  if (!set) {
    CK(cudaFuncSetAttribute(chain_gemv_tma_simple<kWarps, kStages, kProbe, kBoxes>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    set = true;
  }
  chain_gemv_tma_simple<kWarps, kStages, kProbe, kBoxes><<<N / (8 * kWarps), 32 * (kWarps + 1), bytes>>>(it->second, xt->second, y, M, N, K);
}

int main() {
  int dev = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  {  // 1. mma chain latency
    float* out;
    long long* cyc;
    CK(cudaMalloc(&out, 128 * 4));
    CK(cudaMalloc(&cyc, 8));
    auto run = [&](auto kernel, int chains) {
      const int iters = 4096;
      kernel<<<1, 32>>>(out, cyc, iters);
      kernel<<<1, 32>>>(out, cyc, iters);
      long long c = 0;
      CK(cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost));
      std::printf("mma.sync m16n8k16 bf16, %d chain(s) per warp: %.1f cycles per step of a chain\n",
                  chains, static_cast<double>(c) / iters);
    };
    run(mma_latency<1>, 1);
    run(mma_latency<2>, 2);
    run(mma_latency<4>, 4);
  }
  // Copy bandwidth.
  double copy_tbps = 0;
  {
    const size_t bytes = size_t(1) << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    copy_tbps = 2.0 * bytes * 10 / (ms * 1e-3) / 1e12;
    std::printf("copy bandwidth: %.2f TB/s (read + write, 1 GiB D2D x10)\n", copy_tbps);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  const Shape shapes[] = {{"qkv", 4096, 2048},
                          {"o_proj", 2048, 2048},
                          {"gate_up", 12288, 2048},
                          {"down", 2048, 6144},
                          {"lm_head", 151936, 2048}};
  double total[8] = {};
  for (const Shape& s : shapes) {
    const int N = s.N, K = s.K;
    const size_t wbytes = size_t(N) * K * 2;
    const int copies = std::max<int>(3, static_cast<int>((size_t(240) << 20) / wbytes) + 1);
    std::vector<__nv_bfloat16*> ws(copies);
    // Order-sensitive operands: +-(1 + m/128) 2^e, e in [-8, 8].
    std::mt19937_64 rng(42 + N + K);
    auto value = [&](int emax) {
      const int e = static_cast<int>(rng() % (2 * emax + 1)) - emax;
      const float m = 1.0f + static_cast<float>(rng() % 128) / 128.0f;
      const float v = std::ldexp(m, e) * ((rng() & 1) ? -1.f : 1.f);
      return __float2bfloat16(v);
    };
    std::vector<__nv_bfloat16> hw(size_t(N) * K), hx(size_t(8) * K);
    for (auto& v : hw) v = value(8);
    for (auto& v : hx) v = value(8);
    for (auto& p : ws) {
      CK(cudaMalloc(&p, wbytes));
      CK(cudaMemcpy(p, hw.data(), wbytes, cudaMemcpyHostToDevice));
    }
    __nv_bfloat16 *x, *y_ref, *y;
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&y_ref, size_t(8) * N * 2));
    CK(cudaMalloc(&y, size_t(8) * N * 2));
    const float alpha = 1.f, beta = 0.f;
    auto cublas = [&](const __nv_bfloat16* w, __nv_bfloat16* out, int M) {
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, CUDA_R_16BF, K, x,
                   CUDA_R_16BF, K, &beta, out, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
    };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int rotate = copies;
    auto time_us = [&](auto body) {
      for (int i = 0; i < 6; ++i) body(ws[i % rotate]);
      CK(cudaDeviceSynchronize());
      const int reps = 120;
      CK(cudaEventRecord(e0));
      for (int i = 0; i < reps; ++i) body(ws[i % rotate]);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      return ms * 1e3 / reps;
    };
    auto diffs = [&](int M) {
      std::vector<uint16_t> a(size_t(M) * N), b(size_t(M) * N);
      CK(cudaMemcpy(a.data(), y_ref, a.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data(), y, b.size() * 2, cudaMemcpyDeviceToHost));
      size_t d = 0;
      for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
      return d;
    };
    const double floor_us = wbytes / (copy_tbps * 1e12) * 1e6;
    std::printf("%-8s N=%-6d K=%-5d weights %.1f MB, floor at the copy rate %.2f us\n", s.name,
                N, K, wbytes / 1e6, floor_us);
    struct Variant {
      const char* name;
      void (*fn)(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, int, int, int);
    };
    const Variant variants[] = {{"w2-s16-b1", launch_simple<2, 16>},
                                {"w2-s8-b2", launch_simple<2, 8, 2>},
                                {"w2-s4-b4", launch_simple<2, 4, 4>},
                                {"w4-s4-b4", launch_simple<4, 4, 4>},
                                {"w4-s8-b2", launch_simple<4, 8, 2>},
                                {"w1-s6-b4", launch_simple<1, 6, 4>}};
    for (int M : {1, 8}) {
      cublas(ws[0], y_ref, M);
      CK(cudaDeviceSynchronize());
      const double cub = time_us([&](const __nv_bfloat16* w) { cublas(w, y_ref, M); });
      cublas(ws[0], y_ref, M);
      CK(cudaDeviceSynchronize());
      rotate = 1;
      const double cub_hot = time_us([&](const __nv_bfloat16* w) { cublas(w, y_ref, M); });
      rotate = copies;
      std::printf("  M=%d cublas default %8.2f us  %.2f TB/s  (L2-warm: %.2f us)\n", M, cub, wbytes / cub / 1e6, cub_hot);
      if (M == 1) total[0] += cub;
      int vi = 0;
      for (const Variant& v : variants) {
        ++vi;
        if (N % (8 * 4) != 0) continue;
        CK(cudaMemset(y, 0xff, size_t(8) * N * 2));
        v.fn(x, ws[0], y, M, N, K);
        CK(cudaDeviceSynchronize());
        const size_t d = diffs(M);
        const double us = time_us([&](const __nv_bfloat16* w) { v.fn(x, w, y, M, N, K); });
        rotate = 1;
        const double hot = time_us([&](const __nv_bfloat16* w) { v.fn(x, w, y, M, N, K); });
        rotate = copies;
        CK(cudaGetLastError());
        if (M == 1) total[vi] += us;
        std::printf("  M=%d %-13s %8.2f us  %.2f TB/s  %.2fx cublas  (L2-warm: %.2f us)  bits: %zu of %zu differ from cublas\n",
                    M, v.name, us, wbytes / us / 1e6, cub / us, hot, d, size_t(M) * N);
      }
    }
    if (N == 2048) {  // where does one cold launch's time go (simple-w2-s16, M=1)?
      for (int rep = 0; rep < 3; ++rep) {
        CK(cudaDeviceSynchronize());
        launch_simple<2, 4, 4, true>(x, ws[(rep + 1) % copies], y, 1, N, K);
        CK(cudaDeviceSynchronize());
        std::vector<unsigned long long> tt(3 * (N / 8));
        CK(cudaMemcpyFromSymbol(tt.data(), probe_times, tt.size() * 8));
        unsigned long long lo = ~0ull, hi = 0;
        for (int i = 0; i < N / 8; ++i) lo = std::min(lo, tt[3 * i]), hi = std::max(hi, tt[3 * i + 2]);
        std::vector<double> first, chain, start;
        for (int i = 0; i < N / 8; ++i) {
          start.push_back((tt[3 * i] - lo) / 1e3);
          first.push_back((tt[3 * i + 1] - tt[3 * i]) / 1e3);
          chain.push_back((tt[3 * i + 2] - tt[3 * i + 1]) / 1e3);
        }
        auto stat = [](std::vector<double> v) {
          std::sort(v.begin(), v.end());
          static char buf[96];
          std::snprintf(buf, sizeof buf, "min %.2f med %.2f max %.2f", v.front(), v[v.size() / 2], v.back());
          return std::string(buf);
        };
        std::printf("  probe w2-s4-b4 M=1 cold: span of the warps %.2f us; warp start after the first %s; first stage wait %s; stages after it %s us (%d k16 steps)\n",
                    (hi - lo) / 1e3, stat(start).c_str(), stat(first).c_str(), stat(chain).c_str(), K / 16);
      }
    }
    for (auto& p : ws) CK(cudaFree(p));
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(y_ref));
  }
  std::printf("M=1 totals (one layer's four GEMMs + lm_head): cublas %.1f us", total[0]);
  const char* names[] = {"", "w2-s16-b1", "w2-s8-b2", "w2-s4-b4", "w4-s4-b4", "w4-s8-b2", "w1-s6-b4"};
  for (int i = 1; i <= 6; ++i) std::printf(", %s %.1f", names[i], total[i]);
  std::printf("\n");
  return 0;
}
