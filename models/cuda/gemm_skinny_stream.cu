// gemm_skinny_stream.cu: the skinny GEMM's decode instance (M <= 8), its weights streamed by the
// tensor copy engine.
//
// The chains are gemm_skinny.cu's: one mma.sync m16n8k16 chain per output, bf16 in, fp32
// accumulate, the k16 steps of K in order. What differs is the feed. A CTA is kConsumers warps of
// 8 weight rows each plus one producer warp, whose lane 0 copies every stage (kBoxes boxes of
// [8 kConsumers rows][64 k] of w, and the same k of x as [8 rows][64 k], token rows past M filled
// with zeros by the copy engine) into a kStages ring with the 128-byte swizzle, counted on the
// stage's "full" mbarrier. No thread spends registers or instructions on bytes in flight. A
// consumer reads a whole stage's fragment pieces with 8-byte shared loads, releases the slot on
// its "empty" mbarrier, then runs the stage's dependent mmas: one wait and one release per 8 or
// 16 chain steps (a step costs the mma's 25 cycles; a wait and the shared loads after it cost
// about as much again, so stages of one box made the chain twice as slow).
//
// The kernel is launched with programmatic stream serialization: the weights depend on nothing
// before it, so the producer asks for the ring's first kStages stages of them at once and only
// then waits (griddepcontrol.wait) for the kernel before it, which writes x. The norms, SiLU-mul,
// the row gather and attention let their dependents launch as they start, so a GEMM's first
// 40-48 KiB a CTA stream in while the small kernel before it runs.
//
// Fragment pieces: lane (g, t) gives mma k {2t, 2t+1, 2t+8, 2t+9} of a k16 step of weight row
// n0 + g (B) and token row g (A, rows g + 8 zero). It loads memory k 4t..4t+3 of the step into
// them, one 8-byte load, the same permutation inside the step for both operands, so the step
// multiplies the same 16 pairs. That the tensor core sums a step's 16 products without regard to
// their order inside the step is what makes this the chain of gemm_skinny.cu bit for bit: it was
// measured on H100 (0 of 1.5 million outputs differ from cuBLAS, reports/gpu/decode-chain-
// 2026-12-06), and CudaGemm proves it per shape (gemm_equivalence.hpp) before the kernel serves.
//
// A consumer fences the async proxy after its shared loads and before it releases the slot: the
// mbarrier orders generic-proxy accesses only, and without the fence the copy engine's next write
// into the slot now and then overtook a warp's loads under many concurrent grids; the GPU matrix
// caught it as batch-variant bits (reports/gpu/decode-chain-2026-12-06, calls 10-11; found and
// fixed in reports/gpu/skinny-race-2026-12-06).
//
// The gate_up projection can take SiLU-mul into its epilogue (launch_skinny_stream_silu_mul): each
// CTA then streams kRows / 2 gate rows and the kRows / 2 up rows of the same MLP channels (two
// copies of half a box each into one box), the up warps hand their bf16 results to the gate warps
// through shared memory, and the gate warps write silu(gate) * up (device_math.cuh's
// silu_mul_bits, the silu_mul kernel's own arithmetic) from the same bf16 values the GEMM would
// have stored. The chains are untouched, so the bits are those of the GEMM then silu_mul; one
// kernel a layer fewer (28 a qwen3-1.7b step).
//
// Measured against plain register loads (no better than cuBLAS), a per-lane cp.async ring and one
// box per stage (reports/gpu/decode-chain-2026-12-06): a chain step costs the mma's 25 cycles
// plus the stage's wait and shared loads, so fewer, larger stages were the gain.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/cuda/check.hpp"
#include "models/cuda/device_info.hpp"
#include "models/cuda/device_math.cuh"
#include "models/cuda/gemm_skinny.hpp"
#include "models/cuda/programmatic_launch.cuh"
#include "models/cuda/ptx.cuh"

namespace bih::cuda {
namespace {

constexpr int kBoxK = 64;  // bf16 per box row: 128 bytes, the 128-byte swizzle's span

// One instance's ring: kConsumers warps of 8 weight rows per CTA, kStages slots of kBoxes boxes.
template <int kConsumersT, int kStagesT, int kBoxesT>
struct Ring {
  static constexpr int kConsumers = kConsumersT;
  static constexpr int kStages = kStagesT;
  static constexpr int kBoxes = kBoxesT;
  static constexpr int kRows = 8 * kConsumers;
  static constexpr int kStageK = kBoxK * kBoxes;
  static constexpr uint32_t kWeightBoxBytes = kRows * kBoxK * 2;
  static constexpr uint32_t kTokenBoxBytes = 8 * kBoxK * 2;
  static constexpr uint32_t kStageBytes = kBoxes * (kWeightBoxBytes + kTokenBoxBytes);
  // The swizzle repeats every 1024 bytes, and each box must start on such a boundary.
  static constexpr size_t kSharedBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;
  // With SiLU-mul fused: the up warps' results for the gate warps, [8 tokens][kRows / 2] bf16.
  static constexpr size_t kExchangeBytes = 8 * (kRows / 2) * 2;
  static constexpr size_t kFusedSharedBytes = kSharedBytes + kExchangeBytes;
  static_assert(kWeightBoxBytes % 1024 == 0 && kTokenBoxBytes % 1024 == 0);
  // A fused box's half (the gate or the up rows) starts on a swizzle boundary too.
  static_assert((kRows / 2) * kBoxK * 2 % 1024 == 0 && kConsumers % 2 == 0);
};
// The rings, each named for BIH_GEMM_SKINNY_RING and the tests. "decode": 16 rows, 4 stages of
// 256 k (49 KiB), 4 CTAs an SM, one wait per 16 chain steps. "wide", for weights of more than 4
// CTAs an SM of "decode" (gate_up, lm_head): 32 rows, 4 stages of 128 k (41 KiB), 5 CTAs an SM;
// with "decode" alone, gate_up's 768 CTAs took 1.45 waves and 7% longer than cuBLAS
// (reports/gpu/decode-chain-2026-12-06, calls 5 and 6). Deeper rings where a grid leaves shared
// memory unused (16 stages for o_proj's and down's one CTA an SM, 8 for qkv's two, 7 wide stages
// for gate_up's three) made one step's GEMMs 13% slower on an H100 (down 14.1 -> 17.8 us): a chain
// waits for its first stage, which a deep ring's whole burst delays
// (reports/gpu/deep-rings-2026-12-07).
using DecodeRing = Ring<2, 4, 4>;
using WideRing = Ring<4, 4, 2>;

using ptx::load_shared_8;
using ptx::mbarrier_arrive;
using ptx::mbarrier_arrive_expect_bytes;
using ptx::mbarrier_init;
using ptx::mbarrier_init_fence;
using ptx::mbarrier_wait;
using ptx::tensor_copy_2d;

// One k16 step of a chain for token rows 0..7 (the m16 tile's rows 8..15 are zero).
__device__ __forceinline__ void mma_chain_step(float (&acc)[4], uint2 a, uint2 b) {
  const uint32_t a_fragment[4] = {a.x, 0u, a.y, 0u};
  ptx::mma_bf16_16816(acc, a_fragment, b.x, b.y);
}

// w_map: w [N, K] in boxes [kRows][64]; x_map: x [M, K] in boxes [8][64]; y: [M, N] bf16.
// grid [N / kRows], block [32 (kConsumers + 1)], kSharedBytes of dynamic shared memory.
// kSiluMul: w = [gate; up] [2N, K] in boxes [kRows / 2][64]; y = silu(gate) * up [M, N];
// grid [2N / kRows], kFusedSharedBytes.
template <class R, bool kSiluMul>
__global__ void __launch_bounds__(32 * (R::kConsumers + 1))
    skinny_stream_kernel(const __grid_constant__ CUtensorMap w_map,
                         const __grid_constant__ CUtensorMap x_map, __nv_bfloat16* __restrict__ y,
                         int M, int N, int K, int proxy_fence, int release) {
  constexpr int kConsumers = R::kConsumers;
  constexpr int kStages = R::kStages;
  constexpr int kBoxes = R::kBoxes;
  constexpr int kRows = R::kRows;
  constexpr int kStageK = R::kStageK;
  constexpr uint32_t kWeightBoxBytes = R::kWeightBoxBytes;
  constexpr uint32_t kTokenBoxBytes = R::kTokenBoxBytes;
  constexpr uint32_t kStageBytes = R::kStageBytes;
  extern __shared__ unsigned char shared_raw[];
  const uint32_t base = (ptx::shared_address(shared_raw) + 1023u) & ~1023u;
  const uint32_t bars = base + kStages * kStageBytes;
  auto full = [&](int slot) { return bars + 8u * slot; };
  auto empty = [&](int slot) { return bars + 8u * (kStages + slot); };
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  // Fused: this CTA's gate rows are row0.. and its up rows N + row0.., kRows / 2 of each.
  const int row0 = blockIdx.x * (kSiluMul ? kRows / 2 : kRows);
  const int stages = K / kStageK;
  // When the kernel after this one may start (programmatic_launch.cuh's GemmRelease): by default
  // once every block's producer has asked for its last stage, below.
  if (release == kReleaseAtStart) ptx::allow_dependent_launch();
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < kStages; ++slot) {
      mbarrier_init(full(slot), 1);
      mbarrier_init(empty(slot), kConsumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warp == kConsumers) {  // the producer
    if (lane == 0) {
      auto copy = [&](int s, bool weights, bool tokens) {
        const uint32_t stage = base + (s % kStages) * kStageBytes;
        for (int box = 0; box < kBoxes; ++box) {
          const int k0 = s * kStageK + box * kBoxK;
          if (weights) {
            const uint32_t dst = stage + box * kWeightBoxBytes;
            tensor_copy_2d(dst, &w_map, k0, row0, full(s % kStages));
            if (kSiluMul)
              tensor_copy_2d(dst + kWeightBoxBytes / 2, &w_map, k0, N + row0, full(s % kStages));
          }
          if (tokens) {
            tensor_copy_2d(stage + kBoxes * kWeightBoxBytes + box * kTokenBoxBytes, &x_map, k0, 0,
                           full(s % kStages));
          }
        }
      };
      // The weights do not depend on the kernels before this one: the first kStages stages of
      // them are asked for before the wait for those kernels (launched with programmatic stream
      // serialization, this runs while the previous kernel finishes), x only after it.
      const int ahead = stages < kStages ? stages : kStages;
      for (int s = 0; s < ahead; ++s) {
        mbarrier_arrive_expect_bytes(full(s), kStageBytes);
        copy(s, true, false);
      }
      ptx::wait_for_prerequisites();
      for (int s = 0; s < ahead; ++s) copy(s, false, true);
      for (int s = ahead; s < stages; ++s) {
        const int slot = s % kStages;
        mbarrier_wait(empty(slot), ((s / kStages) - 1) & 1);
        mbarrier_arrive_expect_bytes(full(slot), kStageBytes);
        copy(s, true, true);
      }
      if (release == kReleaseAfterLastLoad) ptx::allow_dependent_launch();
    }
    return;
  }

  const int g = lane >> 2;
  const int t = lane & 3;
  const uint32_t weight_row = (warp * 8 + g) * (kBoxK * 2);
  const uint32_t token_row = g * (kBoxK * 2);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < stages; ++s) {
    const int slot = s % kStages;
    mbarrier_wait(full(slot), (s / kStages) & 1);
    const uint32_t stage = base + slot * kStageBytes;
    uint2 b[4 * kBoxes], a[4 * kBoxes];
#pragma unroll
    for (int j = 0; j < 4 * kBoxes; ++j) {
      // Step j % 4 of box j / 4: bytes 32 (j % 4) + 8t of the row, whose 16-byte chunk the
      // swizzle moved to chunk ^ (row % 8); every row here has row % 8 == g.
      const uint32_t piece = (((2 * (j % 4) + (t >> 1)) ^ g) << 4) + (t & 1) * 8;
      b[j] = load_shared_8(stage + (j / 4) * kWeightBoxBytes + weight_row + piece);
      a[j] = load_shared_8(stage + kBoxes * kWeightBoxBytes + (j / 4) * kTokenBoxBytes + token_row +
                           piece);
    }
    // The shared loads above are generic-proxy reads; the producer's next copy into this slot is
    // an async-proxy write, which the mbarrier's release and acquire do not order after them.
    // Without this fence, under many concurrent grids the copy engine now and then overwrote a
    // slot before a warp's loads had read it: 156 output elements over 666,088 launches of one
    // GPU matrix cell differed (reports/gpu/skinny-race-2026-12-06). BIH_GEMM_SKINNY_FENCE=0
    // drops it, to reproduce that. Handing the slot back only after the stage's mmas instead,
    // without the fence, measured no faster (reports/gpu/deep-rings-2026-12-07, call 2).
    if (proxy_fence) ptx::fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty(slot));
#pragma unroll
    for (int j = 0; j < 4 * kBoxes; ++j) mma_chain_step(acc, a[j], b[j]);
  }
  // acc[0..1]: token g, columns n0 + 2t and n0 + 2t + 1, rounded as the unfused GEMM stores them.
  const __nv_bfloat162 out = __floats2bfloat162_rn(acc[0], acc[1]);
  if constexpr (!kSiluMul) {
    if (g < M) {
      const int n0 = row0 + warp * 8;
      *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(g) * N + n0 + 2 * t) = out;
    }
  } else {
    // Warps [0, kConsumers / 2) hold gate columns, the others the up columns of the same channels.
    constexpr int kHalfWarps = kConsumers / 2;
    constexpr int kHalfRows = kRows / 2;
    uint32_t* exchange = reinterpret_cast<uint32_t*>(
        shared_raw + (base - ptx::shared_address(shared_raw)) + kStages * kStageBytes +
        2 * kStages * 8);                                 // [8 tokens][kHalfRows / 2] bf16 pairs
    const int channel = (warp % kHalfWarps) * 8 + 2 * t;  // of this CTA's kHalfRows
    const int slot = g * (kHalfRows / 2) + channel / 2;
    if (warp >= kHalfWarps && g < M) exchange[slot] = *reinterpret_cast<const uint32_t*>(&out);
    ptx::named_barrier_sync(1, 32 * kConsumers);  // the producer warp has left
    if (warp < kHalfWarps && g < M) {
      const uint32_t gate = *reinterpret_cast<const uint32_t*>(&out);
      const uint32_t up = exchange[slot];
      const uint32_t act = device::silu_mul_bits(gate & 0xffffu, up & 0xffffu) |
                           static_cast<uint32_t>(device::silu_mul_bits(gate >> 16, up >> 16)) << 16;
      *reinterpret_cast<uint32_t*>(y + static_cast<size_t>(g) * N + row0 + channel) = act;
    }
  }
}

// cuTensorMapEncodeTiled from the driver, found through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                               cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
      throw std::runtime_error("skinny stream GEMM: the driver has no cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A [rows, cols] bf16 row-major matrix read in boxes of [box_rows][64] with the 128-byte swizzle;
// rows past `rows` read as zero.
CUtensorMap tensor_map(const void* data, int rows, int cols, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t row_bytes[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {kBoxK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(data), dims, row_bytes, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw std::runtime_error("skinny stream GEMM: cuTensorMapEncodeTiled failed (CUresult " +
                             std::to_string(static_cast<int>(r)) + ") for a [" +
                             std::to_string(rows) + ", " + std::to_string(cols) + "] matrix");
  }
  return map;
}

// kSiluMul: w is [2N, K], y [M, N] (see the kernel).
template <class R, bool kSiluMul>
void launch_ring(const void* x, const void* w, void* y, int M, int N, int K, cudaStream_t stream);

// One ring instance and what it takes.
struct RingInstance {
  const char* name;
  int rows;     // weight rows a CTA
  int stage_k;  // k a stage
  void (*launch)(const void*, const void*, void*, int, int, int, cudaStream_t);
  void (*launch_silu_mul)(const void*, const void*, void*, int, int, int, cudaStream_t);
  bool takes(int N, int K) const { return N % rows == 0 && K % stage_k == 0; }
};
const RingInstance kRings[] = {{"decode", DecodeRing::kRows, DecodeRing::kStageK,
                                launch_ring<DecodeRing, false>, launch_ring<DecodeRing, true>},
                               {"wide", WideRing::kRows, WideRing::kStageK,
                                launch_ring<WideRing, false>, launch_ring<WideRing, true>}};
const RingInstance& kDecode = kRings[0];
const RingInstance& kWide = kRings[1];

const RingInstance* ring_named(const std::string& name) {
  for (const RingInstance& ring : kRings) {
    if (name == ring.name) return &ring;
  }
  return nullptr;
}

// Diagnostics for the matrix failure of reports/gpu/decode-chain-2026-12-06, read once:
// BIH_GEMM_SKINNY_PDL=0 launches without programmatic stream serialization (the wait in the
// kernel is then a no-op); BIH_GEMM_SKINNY_RING=decode or wide serves every shape it takes with
// that ring ("auto", the default: ring_for); BIH_GEMM_SKINNY_FENCE=0 drops the proxy fence before
// each slot's release (the race it closed).
struct StreamDiagnostics {
  bool programmatic_launch = true;
  const RingInstance* ring = nullptr;  // null: "auto"
  bool proxy_fence = true;
};
const StreamDiagnostics& diagnostics() {
  static const StreamDiagnostics d = [] {
    StreamDiagnostics r;
    const char* pdl = std::getenv("BIH_GEMM_SKINNY_PDL");
    r.programmatic_launch = pdl == nullptr || std::string(pdl) != "0";
    if (const char* ring = std::getenv("BIH_GEMM_SKINNY_RING"); ring != nullptr) {
      const std::string name = ring;
      r.ring = ring_named(name);
      if (r.ring == nullptr && name != "auto") {
        std::string valid = "auto";
        for (const RingInstance& known : kRings) valid += std::string(", ") + known.name;
        throw std::invalid_argument("BIH_GEMM_SKINNY_RING=" + name + ": valid values are " + valid);
      }
    }
    const char* fence = std::getenv("BIH_GEMM_SKINNY_FENCE");
    r.proxy_fence = fence == nullptr || std::string(fence) != "0";
    return r;
  }();
  return d;
}

// The ring for a shape: "decode" while its CTAs fit 4 an SM at once, "wide" past that.
const RingInstance& ring_for(int N, int K) {
  if (const RingInstance* forced = diagnostics().ring) {
    return forced->takes(N, K) ? *forced : kDecode;  // decode takes every supported shape
  }
  return N / kDecode.rows > 4 * multiprocessor_count() && kWide.takes(N, K) ? kWide : kDecode;
}

template <class R, bool kSiluMul>
void launch_ring(const void* x, const void* w, void* y, int M, int N, int K, cudaStream_t stream) {
  const int weight_rows = kSiluMul ? 2 * N : N;
  const CUtensorMap w_map = tensor_map(w, weight_rows, K, kSiluMul ? R::kRows / 2 : R::kRows);
  const CUtensorMap x_map = tensor_map(x, M, K, 8);
  auto* kernel = skinny_stream_kernel<R, kSiluMul>;
  const size_t shared_bytes = kSiluMul ? R::kFusedSharedBytes : R::kSharedBytes;
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), shared_bytes);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(weight_rows / R::kRows));
  config.blockDim = dim3(32 * (R::kConsumers + 1));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &early;
  config.numAttrs = diagnostics().programmatic_launch ? 1 : 0;
  cudaCheck(cudaLaunchKernelEx(&config, kernel, w_map, x_map, static_cast<__nv_bfloat16*>(y), M, N,
                               K, diagnostics().proxy_fence ? 1 : 0, gemm_release()));
}

void check_supported(const char* who, int M, int N, int K, const void* x, const void* w) {
  if (!skinny_stream_supports(M, N, K, x, w)) {
    throw std::invalid_argument(std::string(who) + ": needs 1 <= M <= 8, N a multiple of " +
                                std::to_string(DecodeRing::kRows) + ", K a multiple of " +
                                std::to_string(DecodeRing::kStageK) +
                                " and 16-byte aligned x and w; got M=" + std::to_string(M) +
                                " N=" + std::to_string(N) + " K=" + std::to_string(K));
  }
}

void check_silu_mul_supported(const char* who, const RingInstance& ring, int M, int I, int K,
                              const void* x, const void* w) {
  if (!skinny_stream_supports(M, 2 * I, K, x, w) || I % (ring.rows / 2) != 0) {
    throw std::invalid_argument(std::string(who) + ": needs 1 <= M <= 8, I a multiple of " +
                                std::to_string(ring.rows / 2) + " (ring " + ring.name +
                                "), K a multiple of " + std::to_string(ring.stage_k) +
                                " and 16-byte aligned x and w; got M=" + std::to_string(M) +
                                " I=" + std::to_string(I) + " K=" + std::to_string(K));
  }
}

}  // namespace

bool skinny_stream_silu_mul_supports(int M, int I, int K, const void* x, const void* w) {
  return I > 0 && skinny_stream_supports(M, 2 * I, K, x, w) &&
         I % (ring_for(2 * I, K).rows / 2) == 0;
}

void launch_skinny_stream_silu_mul(const void* x, const void* w, void* act, int M, int I, int K,
                                   cudaStream_t stream) {
  const RingInstance& ring = ring_for(2 * I, K);
  check_silu_mul_supported("launch_skinny_stream_silu_mul", ring, M, I, K, x, w);
  ring.launch_silu_mul(x, w, act, M, I, K, stream);
}

void launch_skinny_stream_silu_mul_ring(const std::string& ring, const void* x, const void* w,
                                        void* act, int M, int I, int K, cudaStream_t stream) {
  const RingInstance* named = ring_named(ring);
  if (named == nullptr || !named->takes(2 * I, K)) {
    throw std::invalid_argument("launch_skinny_stream_silu_mul_ring: ring " + ring +
                                " does not take 2I=" + std::to_string(2 * I) +
                                " K=" + std::to_string(K));
  }
  check_silu_mul_supported("launch_skinny_stream_silu_mul_ring", *named, M, I, K, x, w);
  named->launch_silu_mul(x, w, act, M, I, K, stream);
}

bool skinny_stream_supports(int M, int N, int K, const void* x, const void* w) {
  return M >= 1 && M <= 8 && N >= DecodeRing::kRows && N % DecodeRing::kRows == 0 &&
         K >= DecodeRing::kStageK && K % DecodeRing::kStageK == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void launch_skinny_stream(const void* x, const void* w, void* y, int M, int N, int K,
                          cudaStream_t stream) {
  check_supported("launch_skinny_stream", M, N, K, x, w);
  ring_for(N, K).launch(x, w, y, M, N, K, stream);
}

std::vector<std::string> skinny_stream_rings(int N, int K) {
  std::vector<std::string> names;
  for (const RingInstance& ring : kRings) {
    if (ring.takes(N, K)) names.push_back(ring.name);
  }
  return names;
}

std::string skinny_stream_ring_for(int N, int K) { return ring_for(N, K).name; }

void launch_skinny_stream_ring(const std::string& ring, const void* x, const void* w, void* y,
                               int M, int N, int K, cudaStream_t stream) {
  check_supported("launch_skinny_stream_ring", M, N, K, x, w);
  const RingInstance* named = ring_named(ring);
  if (named != nullptr && named->takes(N, K)) return named->launch(x, w, y, M, N, K, stream);
  throw std::invalid_argument("launch_skinny_stream_ring: ring " + ring +
                              " does not take N=" + std::to_string(N) + " K=" + std::to_string(K) +
                              " (skinny_stream_rings lists those that do)");
}

}  // namespace bih::cuda
