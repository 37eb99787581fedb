// cuda_probes.cpp: the probes' CUDA backend of cuda_probes.hpp (CUDA leaf, in bih_cuda).
//
// Every binding copies its constant operands to the device once and keeps them, with growable
// device arrays for a batch's operands, in a state shared by the returned function; a call uploads
// the batch, launches on the default stream and downloads the result (the download waits for the
// stream, so a call returns with everything done and a launch error surfaces as an exception
// there). The GEMM is one CudaGemm per backend, so each case pins its invariant algorithm afresh,
// exactly as the engine pins it once per process. Collectives run on one EmulatedGpuGroup per
// case: each batch's rank threads upload, run the collective and download on their own streams.
// No CUDA header here: only the CUDA leaf's plain C++ APIs.
#include "probes/cuda_probes.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/cuda/device_info.hpp"
#include "models/cuda/emulated_gpu.hpp"
#include "models/cuda/gemm.hpp"
#include "models/cuda/kernels.hpp"

namespace bih::probe {
namespace {

// An owning device array of T that grows on demand (its contents are not kept when it grows).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { cuda::device_free(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }

  // Room for at least n elements. cudaFree waits for the device, so work still reading the old
  // array finishes first.
  T* reserve(size_t n) {
    if (n > capacity_) {
      cuda::device_free(ptr_);
      ptr_ = nullptr;
      capacity_ = 0;
      ptr_ = static_cast<T*>(cuda::device_alloc(n * sizeof(T)));
      capacity_ = n;
    }
    return ptr_;
  }

  // host[n] -> elements [0, n), on the default stream.
  T* upload(const T* host, size_t n) {
    reserve(n);
    cuda::copy_to_device(ptr_, host, n * sizeof(T), nullptr);
    return ptr_;
  }

  // Elements [0, n) -> host[n], after everything enqueued on the default stream; waits for it.
  void download(T* host, size_t n) const {
    cuda::copy_to_host(host, ptr_, n * sizeof(T), nullptr);
    cuda::synchronize(nullptr);
  }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

class CudaBackend final : public ProbeBackend {
 public:
  Gemm bind_gemm(KernelFamily family, Weights w, int N, int K) override {
    struct State {
      DeviceArray<bf16> w;  // [N, K]
      DeviceArray<bf16> x;  // [M, K]
      DeviceArray<bf16> y;  // [M, N]
    };
    auto st = std::make_shared<State>();
    st->w.upload(w->data(), w->size());
    cuda::synchronize(nullptr);
    std::shared_ptr<cuda::CudaGemm> gemm = cuda_gemm();
    return [st, gemm, family, N, K](const bf16* x, bf16* y, int M) {
      const size_t y_count = static_cast<size_t>(M) * N;
      st->x.upload(x, static_cast<size_t>(M) * K);
      st->y.reserve(y_count);
      gemm->gemm(family, st->x.get(), st->w.get(), st->y.get(), M, N, K, nullptr);
      st->y.download(y, y_count);
    };
  }

  std::string gemm_reduction(KernelFamily family, int M, int N, int K) override {
    const cuda::GemmAlgoConfig c = family == KernelFamily::vendor
                                       ? cuda_gemm()->vendor_config(M, N, K)
                                       : cuda_gemm()->invariant_config(N, K);
    if (!c.cublaslt) return "own kernel, sequential K";
    std::string split = "splitK " + std::to_string(c.splitk_num) + " reduction " +
                        std::to_string(c.reduction_scheme);
    // Partial sums of one element (split-K, stream-K) need a workspace larger than the tile
    // scheduler's counters (gemm.hpp): so does a split the algorithm does not report as split-K.
    if (c.workspace_bytes > cuda::CudaGemmOptions{}.scheduler_workspace_bytes) {
      split += " with partial sums in workspace";
    }
    return split;
  }

  RmsNorm bind_rms_norm(Weights w, int H, float eps) override {
    struct State {
      DeviceArray<bf16> w, x, y;  // [H], [M, H], [M, H]
    };
    auto st = std::make_shared<State>();
    st->w.upload(w->data(), w->size());
    cuda::synchronize(nullptr);
    return [st, H, eps](const bf16* x, bf16* y, int M) {
      const size_t count = static_cast<size_t>(M) * H;
      st->x.upload(x, count);
      st->y.reserve(count);
      cuda::rms_norm(st->x.get(), st->w.get(), st->y.get(), M, H, eps, nullptr);
      st->y.download(y, count);
    };
  }

  AddRmsNorm bind_add_rms_norm(Weights w, int H, float eps) override {
    struct State {
      DeviceArray<bf16> w, residual, x, y;  // [H], then [M, H] each
    };
    auto st = std::make_shared<State>();
    st->w.upload(w->data(), w->size());
    cuda::synchronize(nullptr);
    return [st, H, eps](bf16* residual, const bf16* x, bf16* y, int M) {
      const size_t count = static_cast<size_t>(M) * H;
      st->residual.upload(residual, count);
      st->x.upload(x, count);
      st->y.reserve(count);
      cuda::add_rms_norm(st->residual.get(), st->x.get(), st->w.get(), st->y.get(), M, H, eps,
                         nullptr);
      st->y.download(y, count);
      st->residual.download(residual, count);
    };
  }

  HeadNormRope bind_head_norm_rope(Weights w, int heads, int head_dim, float eps,
                                   std::shared_ptr<const cpu::RopeTable> rope) override {
    struct State {
      DeviceArray<bf16> w;             // [head_dim]
      DeviceArray<bf16> x;             // [M, heads, head_dim]
      DeviceArray<int32_t> positions;  // [M]
      cuda::DeviceRopeTable rope;
    };
    auto st = std::make_shared<State>();
    st->w.upload(w->data(), w->size());
    st->rope = cuda::upload_rope_table(*rope);
    cuda::synchronize(nullptr);
    return [st, heads, head_dim, eps](bf16* x, const int32_t* positions, int M) {
      const size_t count = static_cast<size_t>(M) * heads * head_dim;
      st->x.upload(x, count);
      st->positions.upload(positions, M);
      cuda::head_norm_rope(st->x.get(), st->w.get(), st->positions.get(), M, heads, head_dim, eps,
                           st->rope, nullptr);
      st->x.download(x, count);
    };
  }

  SiluMul bind_silu_mul(int I) override {
    struct State {
      DeviceArray<bf16> gate_up, y;  // [M, 2I], [M, I]
    };
    auto st = std::make_shared<State>();
    return [st, I](const bf16* gate_up, bf16* y, int M) {
      const size_t count = static_cast<size_t>(M) * I;
      st->gate_up.upload(gate_up, 2 * count);
      st->y.reserve(count);
      cuda::silu_mul(st->gate_up.get(), st->y.get(), M, I, nullptr);
      st->y.download(y, count);
    };
  }

  Embedding bind_embedding(Weights table, int vocab, int H) override {
    struct State {
      DeviceArray<bf16> table;   // [vocab, H]
      DeviceArray<int32_t> ids;  // [M]
      DeviceArray<bf16> y;       // [M, H]
    };
    auto st = std::make_shared<State>();
    st->table.upload(table->data(), table->size());
    cuda::synchronize(nullptr);
    return [st, vocab, H](const int32_t* ids, bf16* y, int M) {
      const size_t count = static_cast<size_t>(M) * H;
      st->ids.upload(ids, M);
      st->y.reserve(count);
      cuda::embedding(st->table.get(), vocab, st->ids.get(), st->y.get(), M, H, nullptr);
      st->y.download(y, count);
    };
  }

  GreedySample bind_greedy_sample(int V) override {
    struct State {
      DeviceArray<bf16> logits;      // [M, V]
      DeviceArray<int32_t> tokens;   // [M]
      DeviceArray<float> logprobs;   // [M]
      DeviceArray<uint8_t> scratch;  // greedy_sample_scratch_bytes(M)
    };
    auto st = std::make_shared<State>();
    return [st, V](const bf16* logits, int32_t* tokens, float* logprobs, int M) {
      st->logits.upload(logits, static_cast<size_t>(M) * V);
      st->tokens.reserve(M);
      st->logprobs.reserve(M);
      st->scratch.reserve(cuda::greedy_sample_scratch_bytes(M));
      cuda::greedy_sample(st->logits.get(), M, V, st->tokens.get(), st->logprobs.get(),
                          st->scratch.get(), nullptr);
      st->tokens.download(tokens, M);
      st->logprobs.download(logprobs, M);
    };
  }

  Attention bind_attention(KernelFamily family, std::shared_ptr<const KvContents> kv,
                           int heads) override {
    struct State {
      DeviceArray<bf16> k, v;  // [num_blocks, block_size, kv_heads, head_dim]
      cuda::KvPool pool;
      DeviceArray<bf16> q, out;                   // [M, heads, head_dim]
      DeviceArray<int32_t> tables, context_lens;  // [M, blocks_per_table], [M]
      DeviceArray<uint8_t> decode;                // [M]
    };
    auto st = std::make_shared<State>();
    const size_t elements =
        static_cast<size_t>(kv->num_blocks) * kv->block_size * kv->kv_heads * kv->head_dim;
    st->pool = cuda::KvPool{st->k.reserve(elements),
                            st->v.reserve(elements),
                            kv->num_blocks,
                            kv->block_size,
                            kv->kv_heads,
                            kv->head_dim};
    {
      // The pool is filled as the engine fills it: write_kv at the slots of each write, in order
      // on the default stream (so each upload waits for the previous write_kv's reads).
      DeviceArray<int64_t> slots;
      DeviceArray<bf16> keys, values;
      for (const KvContents::Write& w : kv->writes) {
        const int n = static_cast<int>(w.slots.size());
        slots.upload(w.slots.data(), w.slots.size());
        keys.upload(w.k.data(), w.k.size());
        values.upload(w.v.data(), w.v.size());
        cuda::write_kv(st->pool, keys.get(), values.get(), slots.get(), n, nullptr);
      }
      cuda::synchronize(nullptr);
    }
    return [st, kv, family, heads](const bf16* q, const AttentionRow* rows, int M, bf16* out) {
      const int stride = kv->blocks_per_table;
      std::vector<int32_t> tables(static_cast<size_t>(M) * stride), context_lens(M);
      std::vector<uint8_t> decode(M);
      int num_decode = 0;
      for (int m = 0; m < M; ++m) {
        const std::vector<int32_t>& table = kv->tables.at(rows[m].table);
        std::copy(table.begin(), table.end(), tables.begin() + static_cast<size_t>(m) * stride);
        context_lens[m] = rows[m].context_len;
        decode[m] = rows[m].decode ? 1 : 0;
        num_decode += rows[m].decode;
      }
      const size_t count = static_cast<size_t>(M) * heads * kv->head_dim;
      st->q.upload(q, count);
      st->tables.upload(tables.data(), tables.size());
      st->context_lens.upload(context_lens.data(), context_lens.size());
      st->decode.upload(decode.data(), decode.size());
      st->out.reserve(count);
      cuda::attention(
          family, st->q.get(), st->pool,
          cuda::AttentionBatch{st->tables.get(), stride, st->context_lens.get(), st->decode.get()},
          M, heads, num_decode, st->out.get(), nullptr);
      st->out.download(out, count);
    };
  }

  CollectiveOp bind_collective(Collective c, ReduceOrder order, int tp) override {
    CollectiveOrders orders;
    orders.all_reduce = orders.reduce_scatter = orders.all_gather = order;
    struct State {
      explicit State(int ranks) : in(ranks), out(ranks) {}
      std::vector<DeviceArray<bf16>> in, out;  // [rank]: each rank's input and output
      // Destroyed first: it waits for the ranks' streams before the arrays go.
      std::unique_ptr<cuda::EmulatedGpuGroup> group;
    };
    auto st = std::make_shared<State>(tp);
    st->group = std::make_unique<cuda::EmulatedGpuGroup>(tp, orders, std::vector<int>{}, 0,
                                                         std::chrono::seconds(60));
    return [st, c, tp](std::vector<std::vector<bf16>>& in, std::vector<std::vector<bf16>>& out,
                       size_t count) {
      // Sized here, outside the rank threads, while nothing runs: each rank's download of the
      // previous call waited for its stream, which waited until every peer had read that rank's
      // input (emulated_gpu.hpp), and the threads were joined.
      for (int r = 0; r < tp; ++r) {
        st->in[r].reserve(in[r].size());
        st->out[r].reserve(out[r].size());
      }
      run_ranks(
          tp,
          [&](int r) {
            cuda::EmulatedGpuRank& comm = st->group->rank(r);
            bf16* device_in = st->in[r].get();
            bf16* device_out = st->out[r].get();
            cuda::copy_to_device(device_in, in[r].data(), in[r].size() * sizeof(bf16),
                                 comm.stream());
            std::vector<bf16>* result = &out[r];
            const bf16* device_result = device_out;
            switch (c) {
              case Collective::all_reduce:
                comm.all_reduce(device_in, count);
                result = &in[r];
                device_result = device_in;
                break;
              case Collective::reduce_scatter:
                comm.reduce_scatter(device_in, device_out, count);
                break;
              case Collective::all_gather:
                comm.all_gather(device_in, device_out, count);
                break;
            }
            cuda::copy_to_host(result->data(), device_result, result->size() * sizeof(bf16),
                               comm.stream());
            cuda::synchronize(comm.stream());
          },
          [&](const std::string& why) { st->group->abort(why); });
    };
  }

 private:
  // Made on first use: collective and row-kernel cases need no cuBLASLt handle.
  std::shared_ptr<cuda::CudaGemm> cuda_gemm() {
    if (!gemm_) gemm_ = std::make_shared<cuda::CudaGemm>();
    return gemm_;
  }

  std::shared_ptr<cuda::CudaGemm> gemm_;
};

}  // namespace

std::shared_ptr<ProbeBackend> make_cuda_backend() { return std::make_shared<CudaBackend>(); }

void install_cuda_backend() {
  set_cuda_backend(CudaBackendHook{
      [] { return cuda::device_count() == 0 ? std::string(kNoCudaGpu) : std::string(); },
      make_cuda_backend});
}

}  // namespace bih::probe
