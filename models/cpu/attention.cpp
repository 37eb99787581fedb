// attention.cpp: causal GQA attention over the paged KV cache, one query row at a time.
//
// Invariant family: keys are reduced in tiles of kAttentionTile ABSOLUTE positions ([0,16),
// [16,32), ...), each tile a softmax partial (max, sum of exp, weighted V sum), the tiles combined
// in increasing order with the online-softmax rescaling. The tiling depends only on the position,
// so prefill, decode, chunked prefill and prefix-cache hits all reduce a row identically.
// Vendor family: a decode row's context is split into a batch-dependent number of contiguous
// parts (flash-decoding's heuristic), each reduced key by key, the parts combined in order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/cpu/kernels.hpp"

namespace bih::cpu {
namespace {

// A softmax partial over some keys: running max, sum of exp(s - max), and sum of exp(s - max) * v.
struct SoftmaxPartial {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  std::vector<float> acc;  // [head_dim]
  bool empty = true;

  void reset(int head_dim) {
    max = -std::numeric_limits<float>::infinity();
    sum = 0.0f;
    acc.assign(head_dim, 0.0f);
    empty = true;
  }
};

// Folds `part` into `total` (total first, part later in the order). The first partial is taken as
// it is, so no exp(-inf - -inf) ever happens.
void combine(SoftmaxPartial& total, const SoftmaxPartial& part) {
  if (part.empty) return;
  if (total.empty) {
    total = part;
    return;
  }
  const float new_max = std::max(total.max, part.max);
  const float scale_total = std::exp(total.max - new_max);
  const float scale_part = std::exp(part.max - new_max);
  total.sum = total.sum * scale_total + part.sum * scale_part;
  for (size_t d = 0; d < total.acc.size(); ++d) {
    total.acc[d] = total.acc[d] * scale_total + part.acc[d] * scale_part;
  }
  total.max = new_max;
}

// The keys and values of one KV head of one sequence, addressed by absolute position.
class KeyView {
 public:
  KeyView(const KvPool& kv, const int32_t* block_table, int kv_head)
      : kv_(kv), block_table_(block_table), kv_head_(kv_head) {}
  size_t offset(int pos) const {
    const int64_t slot = static_cast<int64_t>(block_table_[pos / kv_.block_size]) * kv_.block_size +
                         pos % kv_.block_size;
    return (static_cast<size_t>(slot) * kv_.num_kv_heads + kv_head_) * kv_.head_dim;
  }
  const bf16* key(int pos) const { return kv_.k + offset(pos); }
  const bf16* value(int pos) const { return kv_.v + offset(pos); }

 private:
  const KvPool& kv_;
  const int32_t* block_table_;
  int kv_head_;
};

// q . k in index order over head_dim, fp32, times the softmax scale.
float score(const float* q, const bf16* k, int head_dim, float scale) {
  float dot = 0.0f;
  for (int d = 0; d < head_dim; ++d) dot += q[d] * to_float(k[d]);
  return dot * scale;
}

// One tile [begin, end) reduced as a block: tile max first, then exp-sum and V-sum in key order.
// `part` is reset and filled (a caller-owned buffer, so the hot loop never allocates).
void tile_partial(const float* q, const KeyView& keys, int begin, int end, int head_dim,
                  float scale, SoftmaxPartial& part) {
  part.reset(head_dim);
  part.empty = begin >= end;
  float scores[kAttentionTile];
  for (int p = begin; p < end; ++p) {
    scores[p - begin] = score(q, keys.key(p), head_dim, scale);
    part.max = std::max(part.max, scores[p - begin]);
  }
  for (int p = begin; p < end; ++p) {
    const float weight = std::exp(scores[p - begin] - part.max);
    part.sum += weight;
    const bf16* v = keys.value(p);
    for (int d = 0; d < head_dim; ++d) part.acc[d] += weight * to_float(v[d]);
  }
}

// Keys [begin, end) folded one at a time with the online-softmax update (the vendor split body).
void streaming_partial(const float* q, const KeyView& keys, int begin, int end, int head_dim,
                       float scale, SoftmaxPartial& part) {
  part.reset(head_dim);
  for (int p = begin; p < end; ++p) {
    const float s = score(q, keys.key(p), head_dim, scale);
    const bf16* v = keys.value(p);
    if (part.empty) {
      part.max = s;
      part.sum = 1.0f;
      for (int d = 0; d < head_dim; ++d) part.acc[d] = to_float(v[d]);
      part.empty = false;
      continue;
    }
    const float new_max = std::max(part.max, s);
    const float rescale = std::exp(part.max - new_max);
    const float weight = std::exp(s - new_max);
    part.sum = part.sum * rescale + weight;
    for (int d = 0; d < head_dim; ++d)
      part.acc[d] = part.acc[d] * rescale + weight * to_float(v[d]);
    part.max = new_max;
  }
}

}  // namespace

void attention(KernelFamily family, const bf16* q, const KvPool& kv, const AttentionQuery* queries,
               int M, int n_heads, int num_decode_queries, bf16* out) {
  const int head_dim = kv.head_dim;
  if (kv.num_kv_heads <= 0 || n_heads % kv.num_kv_heads != 0) {
    throw std::invalid_argument("attention: n_heads " + std::to_string(n_heads) +
                                " is not a multiple of num_kv_heads " +
                                std::to_string(kv.num_kv_heads));
  }
  const int group = n_heads / kv.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int vendor_splits = vendor_decode_splits(num_decode_queries);
  std::vector<float> q_row(head_dim);
  SoftmaxPartial total;  // all tiles or splits folded so far
  SoftmaxPartial part;   // the tile or split being reduced

  for (int m = 0; m < M; ++m) {
    const AttentionQuery& query = queries[m];
    const int context = query.context_len;
    const bool split_kv = family == KernelFamily::vendor && query.decode;
    for (int h = 0; h < n_heads; ++h) {
      const bf16* q_head = q + (static_cast<size_t>(m) * n_heads + h) * head_dim;
      for (int d = 0; d < head_dim; ++d) q_row[d] = to_float(q_head[d]);
      const KeyView keys(kv, query.block_table, h / group);

      total.reset(head_dim);
      if (split_kv) {
        const int chunk = (context + vendor_splits - 1) / vendor_splits;
        for (int begin = 0; begin < context; begin += chunk) {
          streaming_partial(q_row.data(), keys, begin, std::min(context, begin + chunk), head_dim,
                            scale, part);
          combine(total, part);
        }
      } else {
        for (int begin = 0; begin < context; begin += kAttentionTile) {
          tile_partial(q_row.data(), keys, begin, std::min(context, begin + kAttentionTile),
                       head_dim, scale, part);
          combine(total, part);
        }
      }

      bf16* out_head = out + (static_cast<size_t>(m) * n_heads + h) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        out_head[d] = total.empty ? bf16{} : to_bf16(total.acc[d] / total.sum);
      }
    }
  }
}

}  // namespace bih::cpu
