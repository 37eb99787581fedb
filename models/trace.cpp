#include "models/trace.hpp"

#include <algorithm>
#include <array>

namespace bih {

int op_order(const std::string& op) {
  static constexpr std::array<const char*, 18> kOrder{
      "embedding", "attn_norm",   "qkv",           "q_norm_rope", "k_norm_rope", "attention",
      "o_proj",    "attn_reduce", "attn_residual", "mlp_norm",    "gate_up",     "act",
      "down",      "mlp_reduce",  "mlp_residual",  "final_norm",  "lm_head",     "logprob"};
  for (size_t i = 0; i < kOrder.size(); ++i) {
    if (op == kOrder[i]) return static_cast<int>(i);
  }
  return static_cast<int>(kOrder.size());
}

std::vector<TraceEntry> TraceSink::sorted() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TraceEntry> out = entries_;
  // Layer -1 ops before the first layer (embedding) and after the last (final norm, lm_head).
  auto layer_key = [](const TraceEntry& e) {
    if (e.layer >= 0) return e.layer;
    return op_order(e.op) <= op_order("attn_norm") ? -1 : 1 << 20;
  };
  std::stable_sort(out.begin(), out.end(), [&](const TraceEntry& a, const TraceEntry& b) {
    const int la = layer_key(a), lb = layer_key(b);
    if (la != lb) return la < lb;
    const int oa = op_order(a.op), ob = op_order(b.op);
    if (oa != ob) return oa < ob;
    if (a.position != b.position) return a.position < b.position;
    return a.rank < b.rank;
  });
  return out;
}

}  // namespace bih
