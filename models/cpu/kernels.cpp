// kernels.cpp: the CPU backend's row-wise kernels (norms, RoPE, SiLU, embedding, KV write,
// sampling).
//
// Each kernel handles one row at a time with reductions in a fixed sequential order, so a row's
// result never depends on the batch around it. The GEMM lives in gemm.cpp, attention in
// attention.cpp.
#include "models/cpu/kernels.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace bih::cpu {
namespace {

// 1 / sqrt(mean(x^2) + eps) with x^2 summed in index order in fp32 (HF Qwen3RMSNorm's variance).
float inverse_rms(const bf16* x, int n, float eps) {
  float sum_sq = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = to_float(x[i]);
    sum_sq += v * v;
  }
  const float variance = sum_sq / static_cast<float>(n);
  return 1.0f / std::sqrt(variance + eps);
}

// y[n] = bf16(bf16(x * inv_rms) * w): HF normalizes in fp32, casts to bf16, then scales.
void rms_norm_row(const bf16* x, const bf16* w, bf16* y, int n, float eps) {
  const float inv_rms = inverse_rms(x, n, eps);
  for (int i = 0; i < n; ++i) {
    const float normed = round_bf16(to_float(x[i]) * inv_rms);
    y[i] = to_bf16(normed * to_float(w[i]));
  }
}

}  // namespace

void rms_norm(const bf16* x, const bf16* w, bf16* y, int M, int H, float eps) {
  for (int m = 0; m < M; ++m) {
    const size_t row = static_cast<size_t>(m) * H;
    rms_norm_row(x + row, w, y + row, H, eps);
  }
}

void add_rms_norm(bf16* residual, const bf16* x, const bf16* w, bf16* y, int M, int H, float eps) {
  for (int m = 0; m < M; ++m) {
    bf16* res = residual + static_cast<size_t>(m) * H;
    const bf16* xm = x + static_cast<size_t>(m) * H;
    for (int h = 0; h < H; ++h) res[h] = to_bf16(to_float(res[h]) + to_float(xm[h]));
    rms_norm_row(res, w, y + static_cast<size_t>(m) * H, H, eps);
  }
}

RopeTable RopeTable::make(int head_dim, double theta, int max_pos) {
  if (head_dim <= 0 || head_dim % 2 != 0 || max_pos < 0 || !(theta > 0.0)) {
    throw std::invalid_argument(
        "RopeTable::make: need an even head_dim > 0, max_pos >= 0 and "
        "theta > 0; got head_dim " +
        std::to_string(head_dim) + ", max_pos " + std::to_string(max_pos));
  }
  RopeTable table;
  table.head_dim = head_dim;
  table.max_pos = max_pos;
  const int half = head_dim / 2;
  table.cos.resize(static_cast<size_t>(max_pos) * half);
  table.sin.resize(static_cast<size_t>(max_pos) * half);
  for (int i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(theta, 2.0 * i / static_cast<double>(head_dim));
    for (int pos = 0; pos < max_pos; ++pos) {
      const double angle = static_cast<double>(pos) * inv_freq;
      table.cos[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::cos(angle));
      table.sin[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

void head_norm_rope(bf16* x, const bf16* w, const int32_t* positions, int M, int n_heads,
                    int head_dim, float eps, const RopeTable& rope) {
  if (rope.head_dim != head_dim) {
    throw std::invalid_argument("head_norm_rope: RoPE table built for head_dim " +
                                std::to_string(rope.head_dim) + ", tensor has " +
                                std::to_string(head_dim));
  }
  for (int m = 0; m < M; ++m) {
    if (positions[m] < 0 || positions[m] >= rope.max_pos) {
      throw std::out_of_range("head_norm_rope: position " + std::to_string(positions[m]) +
                              " outside the RoPE table [0, " + std::to_string(rope.max_pos) + ")");
    }
  }
  const int half = head_dim / 2;
  std::vector<float> normed(head_dim);
  for (int m = 0; m < M; ++m) {
    const float* cos_row = rope.cos.data() + static_cast<size_t>(positions[m]) * half;
    const float* sin_row = rope.sin.data() + static_cast<size_t>(positions[m]) * half;
    for (int h = 0; h < n_heads; ++h) {
      bf16* head = x + (static_cast<size_t>(m) * n_heads + h) * head_dim;
      const float inv_rms = inverse_rms(head, head_dim, eps);
      for (int d = 0; d < head_dim; ++d) {
        normed[d] = round_bf16(round_bf16(to_float(head[d]) * inv_rms) * to_float(w[d]));
      }
      // rotate_half: out1 = x1*cos - x2*sin, out2 = x2*cos + x1*sin, one rounding each.
      for (int i = 0; i < half; ++i) {
        const float x1 = normed[i];
        const float x2 = normed[i + half];
        head[i] = to_bf16(x1 * cos_row[i] - x2 * sin_row[i]);
        head[i + half] = to_bf16(x2 * cos_row[i] + x1 * sin_row[i]);
      }
    }
  }
}

void silu_mul(const bf16* gate_up, bf16* y, int M, int I) {
  for (int m = 0; m < M; ++m) {
    const bf16* gate = gate_up + static_cast<size_t>(m) * 2 * I;
    const bf16* up = gate + I;
    bf16* ym = y + static_cast<size_t>(m) * I;
    for (int i = 0; i < I; ++i) {
      const float g = to_float(gate[i]);
      const float silu = round_bf16(g / (1.0f + std::exp(-g)));
      ym[i] = to_bf16(silu * to_float(up[i]));
    }
  }
}

void embedding(const bf16* table, const int32_t* ids, bf16* y, int M, int H) {
  for (int m = 0; m < M; ++m) {
    std::memcpy(y + static_cast<size_t>(m) * H, table + static_cast<size_t>(ids[m]) * H,
                sizeof(bf16) * H);
  }
}

void write_kv(const KvPool& kv, const bf16* k, const bf16* v, const int64_t* slots, int M) {
  const size_t row = static_cast<size_t>(kv.num_kv_heads) * kv.head_dim;
  const int64_t num_slots = static_cast<int64_t>(kv.num_blocks) * kv.block_size;
  for (int m = 0; m < M; ++m) {
    if (slots[m] < 0) continue;  // a padding row owns no slot
    if (slots[m] >= num_slots) {
      throw std::out_of_range("write_kv: slot " + std::to_string(slots[m]) +
                              " outside the pool of " + std::to_string(num_slots) + " slots");
    }
    std::memcpy(kv.k + static_cast<size_t>(slots[m]) * row, k + m * row, sizeof(bf16) * row);
    std::memcpy(kv.v + static_cast<size_t>(slots[m]) * row, v + m * row, sizeof(bf16) * row);
  }
}

void greedy_sample(const bf16* logits, int M, int V, int32_t* tokens, float* logprobs) {
  if (V <= 0) throw std::invalid_argument("greedy_sample: empty vocabulary row");
  for (int m = 0; m < M; ++m) {
    const bf16* row = logits + static_cast<size_t>(m) * V;
    int best = 0;
    float best_value = to_float(row[0]);
    for (int j = 1; j < V; ++j) {
      const float value = to_float(row[j]);
      if (value > best_value) {  // strict: a tie keeps the lower id
        best = j;
        best_value = value;
      }
    }
    float sum_exp = 0.0f;
    for (int j = 0; j < V; ++j) sum_exp += std::exp(to_float(row[j]) - best_value);
    tokens[m] = best;
    logprobs[m] = to_float(row[best]) - (best_value + std::log(sum_exp));
  }
}

}  // namespace bih::cpu
