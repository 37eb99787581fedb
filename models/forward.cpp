// forward.cpp: what both forward backends share (forward.hpp): rank threads, trace helpers.
#include "models/forward.hpp"

#include <bit>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

#include "models/comm/communicator.hpp"
#include "models/tree_sum.hpp"

namespace bih {

void run_ranks(int n, const std::function<void(int)>& work,
               const std::function<void(int)>& on_failure) {
  std::vector<std::exception_ptr> errors(n);
  auto run_one = [&](int i) {
    try {
      work(i);
    } catch (...) {
      errors[i] = std::current_exception();
      on_failure(i);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n > 0 ? n - 1 : 0);
  for (int i = 1; i < n; ++i) threads.emplace_back(run_one, i);
  if (n > 0) run_one(0);
  for (auto& t : threads) t.join();
  std::exception_ptr first_abort;
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CommAborted&) {
      if (!first_abort) first_abort = e;
    } catch (...) {
      throw;
    }
  }
  if (first_abort) std::rethrow_exception(first_abort);
}

// FNV-1a over the K and V rows a query attends to on one rank: equal hashes, equal context.
uint64_t kv_context_hash(const cpu::KvPool& kv, const cpu::AttentionQuery& q) {
  uint64_t h = 1469598103934665603ull;
  const size_t row = static_cast<size_t>(kv.num_kv_heads) * kv.head_dim;
  for (int pos = 0; pos < q.context_len; ++pos) {
    const size_t slot = static_cast<size_t>(q.block_table[pos / kv.block_size]) * kv.block_size +
                        pos % kv.block_size;
    for (const bf16* base : {kv.k + slot * row, kv.v + slot * row}) {
      for (size_t i = 0; i < row; ++i) {
        h = (h ^ base[i].bits) * 1099511628211ull;
      }
    }
  }
  return h;
}

std::string attention_trace_detail(KernelFamily family, const cpu::AttentionQuery& query,
                                   int num_decode) {
  std::string detail = "attention over " + std::to_string(query.context_len) + " keys";
  if (family == KernelFamily::vendor && query.decode) {
    return detail + " (vendor decode: " + std::to_string(cpu::vendor_decode_splits(num_decode)) +
           " KV splits for " + std::to_string(num_decode) + " decode queries)";
  }
  return detail + " (tiles of " + std::to_string(cpu::kAttentionTile) + " absolute positions)";
}

void trace_sampled_token(StepBatch& step, size_t index, int vocab_size) {
  step.trace->record(TraceEntry{-1,
                                "logprob",
                                -1,
                                step.trace_positions.back(),
                                "log-softmax over " + std::to_string(vocab_size) +
                                    " logits, token " + std::to_string(step.sampled[index]),
                                {std::bit_cast<uint32_t>(step.sampled_logprob[index]),
                                 static_cast<uint32_t>(step.sampled[index])},
                                true});
}

void check_tp_invariant_model(const ModelConfig& c, int tp) {
  if (!tp_invariant_tp_ok(tp)) {
    throw std::invalid_argument("kernels tp_invariant: tp=" + std::to_string(tp) +
                                " is not supported (1, 2, 4 or 8: the K chunk tree has " +
                                std::to_string(kTpInvariantChunks) + " leaves)");
  }
  const std::pair<const char*, int> ks[] = {
      {"hidden_size (qkv, gate_up, lm_head K)", c.hidden_size},
      {"num_heads*head_dim (o_proj K)", c.q_size()},
      {"intermediate_size (down K)", c.intermediate_size}};
  for (const auto& [what, K] : ks) {
    if (K % kTpInvariantChunks != 0) {
      throw std::invalid_argument("kernels tp_invariant: " + std::string(what) + " = " +
                                  std::to_string(K) + " is not a multiple of " +
                                  std::to_string(kTpInvariantChunks) +
                                  " (every contraction is split into that many K chunks)");
    }
  }
}

std::string tp_invariant_gemm_detail(int M, int N, int K) {
  return "gemm M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
         " (tp_invariant: " + std::to_string(kTpInvariantChunks) +
         " fixed K chunks, one tree, for every M and TP)";
}

std::string tp_invariant_partial_detail(int M, int N, int K_local, int tp) {
  return "gemm M=" + std::to_string(M) + " N=" + std::to_string(N) +
         " K=" + std::to_string(K_local) +
         " (tp_invariant: " + std::to_string(kTpInvariantChunks / tp) + " of " +
         std::to_string(kTpInvariantChunks) + " K chunks, fp32 subtree, unrounded)";
}

std::string tp_invariant_reduce_detail(bool sp, int tp) {
  return (sp ? "reduce_scatter_tree_f32" : "all_reduce_tree_f32") +
         std::string(" (chunk tree over the fp32 partials of ") + std::to_string(tp) +
         " ranks, one bf16 rounding; collectives.* orders do not apply)";
}

}  // namespace bih
