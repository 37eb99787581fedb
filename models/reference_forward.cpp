// reference_forward.cpp: the fp64 numerical reference of the Qwen3 forward (HF modeling_qwen3.py).
//
// Deliberately naive: plain loops, one sequence, no KV cache, no tiling, every value a double.
// Weights are widened from bf16 exactly and nothing is rounded afterwards, so this is as close
// to the real-number forward as fp64 gets; the engine's bf16 outputs are compared against it
// with a stated tolerance.
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/weights.hpp"

namespace bih {
namespace {

using Vec = std::vector<double>;

// The decimal the float eps was written from (1e-6f -> 1e-6): HF adds the config's decimal value.
double eps_as_decimal(float f) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  double d = 0.0;
  std::from_chars(buf, end, d);
  return d;
}

Vec widen(const std::vector<bf16>& w) {
  Vec out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = to_float(w[i]);
  return out;
}

// y[n] = sum_k W[n, k] * x[k]; W is [N, K] row-major (HF's out x in), widened element by element
// (exact) so that a 150k-row embedding never needs a double copy.
Vec matvec(const std::vector<bf16>& W, const double* x, size_t N, size_t K) {
  Vec y(N, 0.0);
  for (size_t n = 0; n < N; ++n) {
    const bf16* row = W.data() + n * K;
    double acc = 0.0;
    for (size_t k = 0; k < K; ++k) acc += static_cast<double>(to_float(row[k])) * x[k];
    y[n] = acc;
  }
  return y;
}

// In place over x[0..n): x * w / sqrt(mean(x^2) + eps).
void rmsnorm(double* x, const Vec& w, size_t n, double eps) {
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * inv * w[i];
}

// HF's apply_rotary_pos_emb with rotate_half: pairs (i, i + d/2) rotate by pos * inv_freq[i].
void rope(double* x, size_t d, const Vec& inv_freq, size_t pos) {
  const size_t half = d / 2;
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = x[i], b = x[i + half];
    x[i] = a * c - b * s;         // x * cos + rotate_half(x) * sin, first half: -x2
    x[i + half] = b * c + a * s;  // second half: +x1
  }
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

std::vector<double> reference_logits_fp64(const ModelWeights& weights,
                                          const std::vector<int32_t>& tokens) {
  const ModelConfig& c = weights.config;
  const size_t T = tokens.size(), H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const size_t V = c.vocab_size, NH = c.num_heads, NKV = c.num_kv_heads;
  if (NKV == 0 || NH % NKV != 0) {
    throw std::invalid_argument("reference_logits_fp64: num_kv_heads must divide num_heads");
  }
  const size_t Q = NH * D, KV = NKV * D, group = NH / NKV;  // query heads per KV head
  const double eps = eps_as_decimal(c.rms_norm_eps);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int32_t t : tokens) {
    if (t < 0 || static_cast<size_t>(t) >= V) {
      throw std::out_of_range("reference_logits_fp64: token " + std::to_string(t) +
                              " outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }

  // Shapes are trusted below (plain indexing), so check them once here.
  auto expect_size = [](const std::vector<bf16>& w, size_t n, const std::string& what) {
    if (w.size() != n) {
      throw std::invalid_argument("reference_logits_fp64: " + what + " has " +
                                  std::to_string(w.size()) + " values, expected " +
                                  std::to_string(n));
    }
  };
  expect_size(weights.embed_tokens, V * H, "embed_tokens");
  expect_size(weights.norm, H, "norm");
  if (!c.tie_word_embeddings) expect_size(weights.lm_head, V * H, "lm_head");
  if (weights.layers.size() != static_cast<size_t>(c.num_layers)) {
    throw std::invalid_argument("reference_logits_fp64: layer count differs from the config");
  }
  for (const LayerWeights& L : weights.layers) {
    expect_size(L.input_layernorm, H, "input_layernorm");
    expect_size(L.q_proj, Q * H, "q_proj");
    expect_size(L.k_proj, KV * H, "k_proj");
    expect_size(L.v_proj, KV * H, "v_proj");
    expect_size(L.q_norm, D, "q_norm");
    expect_size(L.k_norm, D, "k_norm");
    expect_size(L.o_proj, H * Q, "o_proj");
    expect_size(L.post_attention_layernorm, H, "post_attention_layernorm");
    expect_size(L.gate_proj, I * H, "gate_proj");
    expect_size(L.up_proj, I * H, "up_proj");
    expect_size(L.down_proj, H * I, "down_proj");
  }

  Vec inv_freq(D / 2);  // 1 / theta^(2i/d)
  for (size_t i = 0; i < D / 2; ++i) {
    inv_freq[i] = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(D));
  }

  // Residual stream x: [T, H].
  const std::vector<bf16>& embed = weights.embed_tokens;  // [V, H]
  Vec x(T * H);
  for (size_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < H; ++h)
      x[t * H + h] = to_float(embed[static_cast<size_t>(tokens[t]) * H + h]);
  }

  for (const LayerWeights& layer : weights.layers) {
    const Vec in_norm = widen(layer.input_layernorm),
              post_norm = widen(layer.post_attention_layernorm);
    const Vec q_norm = widen(layer.q_norm), k_norm = widen(layer.k_norm);
    const auto &Wq = layer.q_proj, &Wk = layer.k_proj, &Wv = layer.v_proj, &Wo = layer.o_proj;
    const auto &Wg = layer.gate_proj, &Wu = layer.up_proj, &Wd = layer.down_proj;

    // Attention block. q: [T, NH*D], k/v: [T, NKV*D].
    Vec q(T * Q), k(T * KV), v(T * KV);
    for (size_t t = 0; t < T; ++t) {
      Vec normed(x.begin() + t * H, x.begin() + (t + 1) * H);
      rmsnorm(normed.data(), in_norm, H, eps);
      const Vec qt = matvec(Wq, normed.data(), Q, H);
      const Vec kt = matvec(Wk, normed.data(), KV, H);
      const Vec vt = matvec(Wv, normed.data(), KV, H);
      std::copy(qt.begin(), qt.end(), q.begin() + t * Q);
      std::copy(kt.begin(), kt.end(), k.begin() + t * KV);
      std::copy(vt.begin(), vt.end(), v.begin() + t * KV);
      for (size_t h = 0; h < NH; ++h) {
        rmsnorm(&q[t * Q + h * D], q_norm, D, eps);
        rope(&q[t * Q + h * D], D, inv_freq, t);
      }
      for (size_t h = 0; h < NKV; ++h) {
        rmsnorm(&k[t * KV + h * D], k_norm, D, eps);
        rope(&k[t * KV + h * D], D, inv_freq, t);
      }
    }
    Vec attn(T * Q, 0.0);  // [T, NH*D], heads concatenated as HF's reshape does
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < NH; ++h) {
        const size_t kvh = h / group;  // repeat_kv: query head h reads KV head h / group
        const double* qh = &q[t * Q + h * D];
        Vec scores(t + 1);
        double max_score = -INFINITY;
        for (size_t s = 0; s <= t; ++s) {  // causal: keys 0..t
          const double* ks = &k[s * KV + kvh * D];
          double dot = 0.0;
          for (size_t d = 0; d < D; ++d) dot += qh[d] * ks[d];
          scores[s] = dot * scale;
          max_score = std::max(max_score, scores[s]);
        }
        double denom = 0.0;
        for (size_t s = 0; s <= t; ++s) {
          scores[s] = std::exp(scores[s] - max_score);
          denom += scores[s];
        }
        double* out = &attn[t * Q + h * D];
        for (size_t s = 0; s <= t; ++s) {
          const double p = scores[s] / denom;
          const double* vs = &v[s * KV + kvh * D];
          for (size_t d = 0; d < D; ++d) out[d] += p * vs[d];
        }
      }
    }
    for (size_t t = 0; t < T; ++t) {
      const Vec o = matvec(Wo, &attn[t * Q], H, Q);
      for (size_t h = 0; h < H; ++h) x[t * H + h] += o[h];
    }

    // MLP block.
    for (size_t t = 0; t < T; ++t) {
      Vec normed(x.begin() + t * H, x.begin() + (t + 1) * H);
      rmsnorm(normed.data(), post_norm, H, eps);
      const Vec gate = matvec(Wg, normed.data(), I, H);
      Vec act = matvec(Wu, normed.data(), I, H);
      for (size_t i = 0; i < I; ++i) act[i] *= silu(gate[i]);
      const Vec down = matvec(Wd, act.data(), H, I);
      for (size_t h = 0; h < H; ++h) x[t * H + h] += down[h];
    }
  }

  const Vec final_norm = widen(weights.norm);
  const std::vector<bf16>& lm_head = weights.output_embedding();  // [V, H]
  Vec logits(T * V);                                              // [T, V]
  for (size_t t = 0; t < T; ++t) {
    rmsnorm(&x[t * H], final_norm, H, eps);
    const Vec row = matvec(lm_head, &x[t * H], V, H);
    std::copy(row.begin(), row.end(), logits.begin() + t * V);
  }
  return logits;
}

}  // namespace bih
