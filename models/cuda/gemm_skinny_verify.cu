// gemm_skinny_verify.cu: BIH_GEMM_SKINNY_VERIFY=1, a diagnostic for the matrix failure of
// reports/gpu/decode-chain-2026-12-06 (the stream instance made invariant TP=4 cells
// batch_variant, by amounts that change from run to run).
//
// Each stream-instance launch becomes: the register instance into `before`, the stream instance
// into y, the register instance again into `after`, and a compare of the three. Both instances
// compute the same chains (gemm_skinny.hpp), so y != before means the stream instance gave other
// bits than its twin on the same operands at that moment; before != after means the operands
// themselves changed while the GEMM ran (a missing dependency in the engine, not the kernel).
// Counts and the first difference go to host-mapped memory; the host prints a line whenever a
// count grew (seen at a later launch) and a summary when the process exits.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_skinny.hpp"

namespace bih::cuda {
namespace {

struct VerifyCounters {
  unsigned long long stream_differs;     // elements where y != before
  unsigned long long reference_differs;  // elements where before != after
  int recorded;                          // 1 once `first` is written
  int n, k, m;
  unsigned long long index;
  unsigned short got, want, after;
};

__global__ void compare_kernel(const uint16_t* __restrict__ y, const uint16_t* __restrict__ before,
                               const uint16_t* __restrict__ after, size_t count,
                               VerifyCounters* counters, int M, int N, int K) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const bool stream_differs = y[i] != before[i];
    const bool reference_differs = before[i] != after[i];
    if (stream_differs) atomicAdd(&counters->stream_differs, 1ull);
    if (reference_differs) atomicAdd(&counters->reference_differs, 1ull);
    if ((stream_differs || reference_differs) && atomicCAS(&counters->recorded, 0, 1) == 0) {
      counters->m = M;
      counters->n = N;
      counters->k = K;
      counters->index = i;
      counters->got = y[i];
      counters->want = before[i];
      counters->after = after[i];
      __threadfence_system();
    }
  }
}

struct Verifier {
  std::mutex mutex;
  VerifyCounters* host = nullptr;
  VerifyCounters* device = nullptr;
  unsigned long long launches = 0;
  unsigned long long printed_stream = 0;
  unsigned long long printed_reference = 0;

  Verifier() {
    cudaCheck(cudaHostAlloc(reinterpret_cast<void**>(&host), sizeof(VerifyCounters),
                            cudaHostAllocMapped | cudaHostAllocPortable));
    *host = VerifyCounters{};
    cudaCheck(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0));
  }

  // Under the lock: prints what grew since the last line.
  void report(const char* when) {
    const volatile VerifyCounters* c = host;
    const unsigned long long s = c->stream_differs;
    const unsigned long long r = c->reference_differs;
    if (s == printed_stream && r == printed_reference && std::string(when) != "exit") return;
    printed_stream = s;
    printed_reference = r;
    std::fprintf(stderr,
                 "bih skinny verify (%s): %llu launches; %llu elements where the stream instance "
                 "differed from its twin, %llu where the operands changed during the GEMM",
                 when, launches, s, r);
    if (c->recorded) {
      std::fprintf(stderr,
                   "; first at M=%d N=%d K=%d element %llu: stream 0x%04x, before 0x%04x, "
                   "after 0x%04x",
                   c->m, c->n, c->k, c->index, c->got, c->want, c->after);
    }
    std::fprintf(stderr, "\n");
  }
};

Verifier& verifier() {
  static Verifier* v = [] {
    auto* made = new Verifier();  // never freed: the exit summary reads it
    std::atexit([] {
      Verifier& at_exit = verifier();
      const std::lock_guard lock(at_exit.mutex);
      at_exit.report("exit");
    });
    return made;
  }();
  return *v;
}

}  // namespace

bool skinny_verify_on() {
  static const bool on = [] {
    const char* v = std::getenv("BIH_GEMM_SKINNY_VERIFY");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

void launch_skinny_stream_verified(const void* x, const void* w, void* y, int M, int N, int K,
                                   cudaStream_t stream) {
  Verifier& v = verifier();
  const size_t count = static_cast<size_t>(M) * N;
  void* before = nullptr;
  void* after = nullptr;
  cudaCheck(cudaMallocAsync(&before, count * 2, stream));
  cudaCheck(cudaMallocAsync(&after, count * 2, stream));
  launch_skinny_registers(x, w, before, M, N, K, stream);
  launch_skinny_stream(x, w, y, M, N, K, stream);
  launch_skinny_registers(x, w, after, M, N, K, stream);
  compare_kernel<<<256, 256, 0, stream>>>(
      static_cast<const uint16_t*>(y), static_cast<const uint16_t*>(before),
      static_cast<const uint16_t*>(after), count, v.device, M, N, K);
  cudaCheck(cudaGetLastError());
  cudaCheck(cudaFreeAsync(before, stream));
  cudaCheck(cudaFreeAsync(after, stream));
  const std::lock_guard lock(v.mutex);
  ++v.launches;
  v.report("so far");
}

}  // namespace bih::cuda
