// probe_backend.hpp: what a probe case needs from a backend: each op on host arrays.
//
// The cases (kernel_probes.cpp, collective_probes.cpp) make every input on the host from the seed
// and compare output bits on the host; a backend only runs the op, so the CPU and CUDA cases of an
// op see the same inputs. Each bind_* call takes the op's constant operands (a weight, a table, the
// KV cache's contents) once and returns the op over one batch's host arrays: a device backend
// copies the constants to the device when binding, and uploads and downloads the batch's arrays
// around each launch. The CPU backend (cpu_backend.cpp) calls models/cpu/kernels.hpp and the
// emulated group. The CUDA backend is a CUDA leaf (cuda_probes.cpp): the CLI installs it with
// set_cuda_backend(), so that this core never includes a CUDA header, and a binary without it
// still lists every CUDA case as `unsupported`, with the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/cpu/kernels.hpp"
#include "models/knobs.hpp"

namespace bih::probe {

enum class Collective { all_reduce, reduce_scatter, all_gather };
const char* collective_name(Collective c);  // "all_reduce", ... (the op name of its cases)

// The paged KV cache of the attention probes as host data: the pool's geometry, its block tables,
// and the writes that fill every slot of the pool (what write_kv stores).
struct KvContents {
  int num_blocks = 0;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int blocks_per_table = 0;
  std::vector<std::vector<int32_t>> tables;  // [tables][blocks_per_table]: physical block ids
  struct Write {
    std::vector<int64_t> slots;  // [n]: block * block_size + offset
    std::vector<bf16> k, v;      // [n, kv_heads * head_dim]
  };
  std::vector<Write> writes;
};

// One query row of attention: it attends to positions [0, context_len) of
// KvContents::tables[table].
struct AttentionRow {
  int table = 0;
  int context_len = 0;
  bool decode = false;
};

using Weights = std::shared_ptr<const std::vector<bf16>>;

class ProbeBackend {
 public:
  virtual ~ProbeBackend() = default;

  // y[M,N] = x[M,K] · w[N,K]^T.
  using Gemm = std::function<void(const bf16* x, bf16* y, int M)>;
  virtual Gemm bind_gemm(KernelFamily family, Weights w, int N, int K) = 0;
  // How `family` splits each output element's K reduction at M, e.g. "splitK 4": two batch sizes
  // with the same answer sum every element along the same chain.
  virtual std::string gemm_reduction(KernelFamily family, int M, int N, int K) = 0;

  // y[M,H] = rms_norm(x) * w, w [H].
  using RmsNorm = std::function<void(const bf16* x, bf16* y, int M)>;
  virtual RmsNorm bind_rms_norm(Weights w, int H, float eps) = 0;
  // residual[M,H] += x in place; y[M,H] = rms_norm(residual) * w.
  using AddRmsNorm = std::function<void(bf16* residual, const bf16* x, bf16* y, int M)>;
  virtual AddRmsNorm bind_add_rms_norm(Weights w, int H, float eps) = 0;
  // x[M, heads, head_dim] in place: per-head rms_norm with w [head_dim], then RoPE at positions[M].
  using HeadNormRope = std::function<void(bf16* x, const int32_t* positions, int M)>;
  virtual HeadNormRope bind_head_norm_rope(Weights w, int heads, int head_dim, float eps,
                                           std::shared_ptr<const cpu::RopeTable> rope) = 0;
  // y[M,I] = silu(gate) * up, gate_up [M, 2I].
  using SiluMul = std::function<void(const bf16* gate_up, bf16* y, int M)>;
  virtual SiluMul bind_silu_mul(int I) = 0;
  // y[M,H] = table[ids[m]], table [vocab, H].
  using Embedding = std::function<void(const int32_t* ids, bf16* y, int M)>;
  virtual Embedding bind_embedding(Weights table, int vocab, int H) = 0;
  // tokens[M], logprobs[M]: the argmax of each logits row [M, V] and its log-softmax.
  using GreedySample =
      std::function<void(const bf16* logits, int32_t* tokens, float* logprobs, int M)>;
  virtual GreedySample bind_greedy_sample(int V) = 0;
  // q[M, heads, head_dim] -> out[M, heads * head_dim] over the KV cache `kv`; the decode rows
  // among rows[M] are the step's decode count (what the vendor family splits by).
  using Attention = std::function<void(const bf16* q, const AttentionRow* rows, int M, bf16* out)>;
  virtual Attention bind_attention(KernelFamily family, std::shared_ptr<const KvContents> kv,
                                   int heads) = 0;

  // One collective over in.size() ranks of an emulated group with `order`; count is per rank, as
  // Communicator takes it. all_reduce: in[r] [count] is summed in place; reduce_scatter: in[r]
  // [tp*count] -> out[r] [count]; all_gather: in[r] [count] -> out[r] [tp*count]. The caller sizes
  // out.
  using CollectiveOp = std::function<void(std::vector<std::vector<bf16>>& in,
                                          std::vector<std::vector<bf16>>& out, size_t count)>;
  virtual CollectiveOp bind_collective(Collective c, ReduceOrder order, int tp) = 0;
};

// The CPU backend: models/cpu/kernels.hpp and EmulatedGroup (ranks as threads, CPU memory).
std::shared_ptr<ProbeBackend> make_cpu_backend();

// Runs body(r) on one thread per rank of a group of `ranks` and joins them. A rank that throws
// calls abort(why) first, so that peers waiting in a collective wake (with CommAborted); then the
// failure of a rank that failed on its own is rethrown (a peer's CommAborted only if none did).
void run_ranks(int ranks, const std::function<void(int rank)>& body,
               const std::function<void(const std::string& why)>& abort);

// ---- the CUDA backend's hook -----------------------------------------------------------------
// What the CUDA leaf installs. `unavailable` says why this machine cannot run the CUDA cases (""
// when it can); `make` gives a fresh backend, called once per case run (so nothing with device
// state outlives a case, and nothing is left for static destruction after the CUDA runtime is
// gone).
struct CudaBackendHook {
  std::function<std::string()> unavailable;
  std::function<std::shared_ptr<ProbeBackend>()> make;
};
void set_cuda_backend(CudaBackendHook hook);  // an empty hook uninstalls

// The reasons a CUDA case is `unsupported`.
inline constexpr const char* kBuiltWithoutCuda = "built without CUDA";
inline constexpr const char* kNoCudaGpu = "no CUDA GPU visible";

// The cases of one backend: how to make it, or why this binary or machine cannot run them.
struct BackendChoice {
  std::function<std::shared_ptr<ProbeBackend>()> make;  // empty when unavailable
  std::string unavailable;
};
BackendChoice backend_choice(Backend backend);

}  // namespace bih::probe
