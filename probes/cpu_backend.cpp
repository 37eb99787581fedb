// cpu_backend.cpp: the probes' CPU backend (probe_backend.hpp): models/cpu/kernels.hpp on host
// arrays, and collectives on an EmulatedGroup whose ranks are threads.
#include <chrono>
#include <memory>
#include <vector>

#include "models/comm/emulated.hpp"
#include "models/cpu/kernels.hpp"
#include "probes/probe_backend.hpp"

namespace bih::probe {
namespace {

class CpuBackend final : public ProbeBackend {
 public:
  Gemm bind_gemm(KernelFamily family, Weights w, int N, int K) override {
    return [=](const bf16* x, bf16* y, int M) { cpu::gemm(family, x, w->data(), y, M, N, K); };
  }

  std::string gemm_reduction(KernelFamily family, int M, int N, int K) override {
    const bool split = family == KernelFamily::vendor && M < cpu::kVendorSplitKMaxM;
    return "splitK " + std::to_string(split ? cpu::kVendorSplitK : 1);
  }

  RmsNorm bind_rms_norm(Weights w, int H, float eps) override {
    return [=](const bf16* x, bf16* y, int M) { cpu::rms_norm(x, w->data(), y, M, H, eps); };
  }

  AddRmsNorm bind_add_rms_norm(Weights w, int H, float eps) override {
    return [=](bf16* residual, const bf16* x, bf16* y, int M) {
      cpu::add_rms_norm(residual, x, w->data(), y, M, H, eps);
    };
  }

  HeadNormRope bind_head_norm_rope(Weights w, int heads, int head_dim, float eps,
                                   std::shared_ptr<const cpu::RopeTable> rope) override {
    return [=](bf16* x, const int32_t* positions, int M) {
      cpu::head_norm_rope(x, w->data(), positions, M, heads, head_dim, eps, *rope);
    };
  }

  SiluMul bind_silu_mul(int I) override {
    return [=](const bf16* gate_up, bf16* y, int M) { cpu::silu_mul(gate_up, y, M, I); };
  }

  Embedding bind_embedding(Weights table, int vocab, int H) override {
    return [=](const int32_t* ids, bf16* y, int M) { cpu::embedding(table->data(), ids, y, M, H); };
  }

  GreedySample bind_greedy_sample(int V) override {
    return [=](const bf16* logits, int32_t* tokens, float* logprobs, int M) {
      cpu::greedy_sample(logits, M, V, tokens, logprobs);
    };
  }

  Attention bind_attention(KernelFamily family, std::shared_ptr<const KvContents> kv,
                           int heads) override {
    // The pool [num_blocks, block_size, kv_heads, head_dim], filled by write_kv.
    struct Pool {
      std::vector<bf16> k, v;
      cpu::KvPool view;
    };
    auto pool = std::make_shared<Pool>();
    const size_t elements =
        static_cast<size_t>(kv->num_blocks) * kv->block_size * kv->kv_heads * kv->head_dim;
    pool->k.resize(elements);
    pool->v.resize(elements);
    pool->view = cpu::KvPool{pool->k.data(), pool->v.data(), kv->num_blocks,
                             kv->block_size, kv->kv_heads,   kv->head_dim};
    for (const KvContents::Write& w : kv->writes) {
      cpu::write_kv(pool->view, w.k.data(), w.v.data(), w.slots.data(),
                    static_cast<int>(w.slots.size()));
    }
    return [=](const bf16* q, const AttentionRow* rows, int M, bf16* out) {
      std::vector<cpu::AttentionQuery> queries(M);
      int num_decode = 0;
      for (int m = 0; m < M; ++m) {
        queries[m] = {kv->tables.at(rows[m].table).data(), rows[m].context_len, rows[m].decode};
        num_decode += rows[m].decode;
      }
      cpu::attention(family, q, pool->view, queries.data(), M, heads, num_decode, out);
    };
  }

  CollectiveOp bind_collective(Collective c, ReduceOrder order, int tp) override {
    CollectiveOrders orders;
    orders.all_reduce = orders.reduce_scatter = orders.all_gather = order;
    return
        [=](std::vector<std::vector<bf16>>& in, std::vector<std::vector<bf16>>& out, size_t count) {
          EmulatedGroup group(tp, orders, {}, std::chrono::seconds(60));
          run_ranks(
              tp,
              [&](int r) {
                Communicator& comm = group.rank(r);
                switch (c) {
                  case Collective::all_reduce:
                    comm.all_reduce(in[r].data(), count);
                    break;
                  case Collective::reduce_scatter:
                    comm.reduce_scatter(in[r].data(), out[r].data(), count);
                    break;
                  case Collective::all_gather:
                    comm.all_gather(in[r].data(), out[r].data(), count);
                    break;
                }
              },
              [&](const std::string& why) { group.abort(why); });
        };
  }
};

}  // namespace

std::shared_ptr<ProbeBackend> make_cpu_backend() { return std::make_shared<CpuBackend>(); }

}  // namespace bih::probe
