// ptx.cuh: the inline PTX the own tensor-core GEMM kernels share (sm_80 mma.sync, ldmatrix,
// cp.async; sm_90 mbarriers, the tensor copy engine and programmatic dependent launch), each
// wrapped once so a kernel reads as what it does.
//
// Shared-memory operands are 32-bit shared-window addresses (shared_address); offsets that are
// template parameters become PTX immediates, so an unrolled loop does no address arithmetic.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace bih::cuda::ptx {

// f(std::integral_constant<int, i>{}) for i = 0 .. kCount-1, unrolled at compile time.
template <int kCount, class F, int... kIndex>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, kIndex...>) {
  (f(std::integral_constant<int, kIndex>{}), ...);
}
template <int kCount, class F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl<kCount>(f, std::make_integer_sequence<int, kCount>{});
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// acc[16x8] += a[16x16] . b[16x8]: bf16 in, fp32 accumulate (PTX m16n8k16 fragment layout).
__device__ __forceinline__ void mma_bf16_16816(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices from shared memory at base + kOffset bytes; lane l gives the address of
// row l % 8 of matrix l / 8 and receives, of each matrix, row l / 4, columns 2 (l % 4) and +1.
template <int kOffset>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t base) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4+%5];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(base), "n"(kOffset));
}

// 16 bytes global -> shared (base + kOffset) without registers, in the thread's current group.
template <int kOffset>
__device__ __forceinline__ void cp_async_16(uint32_t base, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0+%1], [%2], 16;\n" ::"r"(base), "n"(kOffset),
               "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// 8 bytes from shared memory.
__device__ __forceinline__ uint2 load_shared_8(uint32_t address) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(address));
  return v;
}

// sm_90 mbarriers (a 64-bit word in shared memory) and the tensor copy engine.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}
// Makes the inits visible to the tensor copy engine (the async proxy) before its first use.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One arrival that also announces `bytes` of tensor copies completing on this barrier.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The box of a 2-D tensor map at (c0 innermost, c1) into shared memory at dst, counted on bar.
// `map` is the address of a __grid_constant__ CUtensorMap kernel parameter.
__device__ __forceinline__ void tensor_copy_2d(uint32_t dst, const void* map, int c0, int c1,
                                               uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// Barrier `id` (1..15; 0 is __syncthreads') among `threads` threads of the CTA, whole warps.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Orders this thread's earlier generic-proxy accesses to shared memory with later async-proxy
// (tensor copy engine) accesses, and the other way round.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Programmatic dependent launch (sm_90). A kernel launched with programmatic stream
// serialization may start while the kernel before it on the stream still runs, once every CTA of
// that one called allow_dependent_launch (or exited); it must call wait_for_prerequisites before
// it touches anything the earlier kernels write (or read). Both are no-ops without the attribute.
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void wait_for_prerequisites() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

}  // namespace bih::cuda::ptx
