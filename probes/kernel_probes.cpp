// kernel_probes.cpp: probe cases for every kernel of models/cpu/kernels.hpp, both families.
//
// Shapes are the tiny preset's (models/config.hpp): the five GEMMs of a layer and the lm_head,
// the norms at hidden 256, head_norm_rope on 16 heads of 16, attention with 16 query heads over 8
// KV heads in four modes (prefill rows, decode rows, a chunk of the row's own prefill, a
// prefix-cache hit that reads the row's keys from other physical blocks). Data is random bf16 from
// the seed. The vendor family claims variance only where kernels.hpp says it splits (GEMM at small
// M, decode attention by decode count); its other ops are the invariant kernels themselves.
// CUDA kernels are listed as unsupported until the CUDA backend exists.
#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cpu/kernels.hpp"
#include "probes/probe.hpp"

namespace bih::probe {
namespace {

using cpu::AttentionQuery;
using cpu::KvPool;

constexpr const char* kNoCudaBackend = "no CUDA backend in this build yet";

ModelConfig tiny() { return *preset_config("tiny"); }

std::vector<bf16> random_bf16(std::mt19937& rng, size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<bf16> v(n);
  for (auto& e : v) e = to_bf16(dist(rng));
  return v;
}

int random_int(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// Builds [M, width] rows: `reference` at `positions`, fresh random rows elsewhere.
std::vector<bf16> batch_rows(const std::vector<bf16>& reference, const Batch& batch,
                             std::mt19937& filler, float stddev = 1.0f) {
  const size_t width = reference.size();
  std::vector<bf16> rows = random_bf16(filler, batch.M * width, stddev);
  for (int p : batch.positions)
    std::copy(reference.begin(), reference.end(), rows.begin() + p * width);
  return rows;
}

RowBits pick_rows(const std::vector<bf16>& out, size_t width, const std::vector<int>& positions) {
  RowBits rows;
  for (int p : positions) {
    std::vector<uint32_t> bits(width);
    for (size_t j = 0; j < width; ++j) bits[j] = out[p * width + j].bits;
    rows.push_back(std::move(bits));
  }
  return rows;
}

// The id's common tail: ",m=1..64,pos=first|middle|last,backend=cpu)".
std::string sweep_tail(const SweepOptions& o, Backend backend) {
  return ",m=" + format_batch_sizes(o.batch_sizes) + ",pos=" + format_positions(o.exhaustive) +
         ",backend=" + to_string(backend) + ")";
}

// A kernel case: on the CPU it runs `make_runner(seed)`'s batches; on CUDA it is unsupported.
Case kernel_case(const std::string& op, KernelFamily family, Backend backend,
                 const std::string& shape, Expect expect, int bit_width,
                 std::function<BatchRunner(uint32_t seed)> make_runner) {
  Case c;
  c.op = op;
  c.expect = expect;
  const std::string head = op + "(family=" + to_string(family) + ",dtype=bf16," + shape;
  c.id = [head, backend](const SweepOptions& o) { return head + sweep_tail(o, backend); };
  if (backend != Backend::cpu) {
    c.unsupported_reason = kNoCudaBackend;
    return c;
  }
  c.run = [id = c.id, op, expect, bit_width, make_runner](const SweepOptions& o) {
    return sweep(id(o), op, expect, SweepSpec{bit_width, 1}, make_runner(o.seed), o);
  };
  return c;
}

// ---- the row-wise kernels -------------------------------------------------------------------

// The negation of v with its last mantissa bit flipped: v + near_negation(v) is one ulp of v, a
// sum whose terms are 2^8 times larger than it.
bf16 near_negation(bf16 v) { return bf16{static_cast<uint16_t>(v.bits ^ 0x8001u)}; }

// Inputs whose dot products nearly cancel: x = [a, a] and each w row = [b, near_negation(b)], so
// every result is about 2^-8 of its partial sums and the fp32 rounding of those partial sums (which
// a change of reduction order moves) reaches the bf16 result. Random data alone would hide most
// order changes below bf16's rounding step.
BatchRunner gemm_runner(KernelFamily family, int N, int K, uint32_t seed) {
  std::mt19937 rng(seed + 1u);
  const int half = K / 2;
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, static_cast<size_t>(N) * K, 0.02f));
  for (int n = 0; n < N; ++n) {
    bf16* row = w->data() + static_cast<size_t>(n) * K;
    for (int k = 0; k < half; ++k) row[half + k] = near_negation(row[k]);
  }
  auto x = std::make_shared<std::vector<bf16>>(random_bf16(rng, K));
  std::copy_n(x->begin(), half, x->begin() + half);
  return [=](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*x, b, filler);  // [M, K]
    std::vector<bf16> y(static_cast<size_t>(b.M) * N);         // [M, N]
    cpu::gemm(family, rows.data(), w->data(), y.data(), b.M, N, K);
    return pick_rows(y, N, b.positions);
  };
}

BatchRunner rms_norm_runner(int H, float eps, uint32_t seed) {
  std::mt19937 rng(seed + 2u);
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, H, 0.5f));
  auto x = std::make_shared<std::vector<bf16>>(random_bf16(rng, H));
  return [=](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*x, b, filler);  // [M, H]
    std::vector<bf16> y(rows.size());
    cpu::rms_norm(rows.data(), w->data(), y.data(), b.M, H, eps);
    return pick_rows(y, H, b.positions);
  };
}

// Output columns: y[H] then the updated residual[H].
BatchRunner add_rms_norm_runner(int H, float eps, uint32_t seed) {
  std::mt19937 rng(seed + 3u);
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, H, 0.5f));
  auto residual_x = std::make_shared<std::vector<bf16>>(random_bf16(rng, 2 * H));  // [2H]
  return [=](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> both = batch_rows(*residual_x, b, filler);  // [M, 2H]
    std::vector<bf16> residual(static_cast<size_t>(b.M) * H), x(residual.size());
    for (int m = 0; m < b.M; ++m) {
      std::copy_n(both.begin() + 2 * H * m, H, residual.begin() + H * m);
      std::copy_n(both.begin() + 2 * H * m + H, H, x.begin() + H * m);
    }
    std::vector<bf16> y(residual.size());
    cpu::add_rms_norm(residual.data(), x.data(), w->data(), y.data(), b.M, H, eps);
    std::vector<bf16> out(both.size());  // [M, 2H]: y then residual
    for (int m = 0; m < b.M; ++m) {
      std::copy_n(y.begin() + H * m, H, out.begin() + 2 * H * m);
      std::copy_n(residual.begin() + H * m, H, out.begin() + 2 * H * m + H);
    }
    return pick_rows(out, 2 * H, b.positions);
  };
}

BatchRunner head_norm_rope_runner(const ModelConfig& cfg, uint32_t seed) {
  constexpr int kMaxPos = 4096;
  constexpr int kReferencePosition = 1234;  // far enough for large rotation angles
  const int heads = cfg.num_heads, dim = cfg.head_dim;
  const float eps = cfg.rms_norm_eps;
  std::mt19937 rng(seed + 4u);
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, dim, 0.5f));
  auto x = std::make_shared<std::vector<bf16>>(random_bf16(rng, static_cast<size_t>(heads) * dim));
  auto rope = std::make_shared<cpu::RopeTable>(cpu::RopeTable::make(dim, cfg.rope_theta, kMaxPos));
  return [=](const Batch& b, std::mt19937& filler) {
    std::vector<bf16> rows = batch_rows(*x, b, filler);  // [M, heads, dim]
    std::vector<int32_t> positions(b.M);
    for (auto& p : positions) p = random_int(filler, 0, kMaxPos - 1);
    for (int p : b.positions) positions[p] = kReferencePosition;
    cpu::head_norm_rope(rows.data(), w->data(), positions.data(), b.M, heads, dim, eps, *rope);
    return pick_rows(rows, static_cast<size_t>(heads) * dim, b.positions);
  };
}

BatchRunner silu_mul_runner(int I, uint32_t seed) {
  std::mt19937 rng(seed + 5u);
  auto gate_up = std::make_shared<std::vector<bf16>>(random_bf16(rng, 2 * I));
  return [=](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*gate_up, b, filler);  // [M, 2I]
    std::vector<bf16> y(static_cast<size_t>(b.M) * I);               // [M, I]
    cpu::silu_mul(rows.data(), y.data(), b.M, I);
    return pick_rows(y, I, b.positions);
  };
}

BatchRunner embedding_runner(int vocab, int H, uint32_t seed) {
  std::mt19937 rng(seed + 6u);
  auto table =
      std::make_shared<std::vector<bf16>>(random_bf16(rng, static_cast<size_t>(vocab) * H));
  const int32_t reference_id = random_int(rng, 0, vocab - 1);
  return [=](const Batch& b, std::mt19937& filler) {
    std::vector<int32_t> ids(b.M);
    for (auto& id : ids) id = random_int(filler, 0, vocab - 1);
    for (int p : b.positions) ids[p] = reference_id;
    std::vector<bf16> y(static_cast<size_t>(b.M) * H);
    cpu::embedding(table->data(), ids.data(), y.data(), b.M, H);
    return pick_rows(y, H, b.positions);
  };
}

// Output columns: the token id's bits, then the logprob's fp32 bits.
BatchRunner greedy_sample_runner(int vocab, uint32_t seed) {
  std::mt19937 rng(seed + 7u);
  auto logits = std::make_shared<std::vector<bf16>>(random_bf16(rng, vocab, 3.0f));
  return [=](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*logits, b, filler, 3.0f);  // [M, V]
    std::vector<int32_t> tokens(b.M);
    std::vector<float> logprobs(b.M);
    cpu::greedy_sample(rows.data(), b.M, vocab, tokens.data(), logprobs.data());
    RowBits out;
    for (int p : b.positions) {
      out.push_back({static_cast<uint32_t>(tokens[p]), std::bit_cast<uint32_t>(logprobs[p])});
    }
    return out;
  };
}

// ---- attention -------------------------------------------------------------------------------

enum class AttentionMode { prefill, decode, chunked, prefix_hit };

const char* mode_name(AttentionMode m) {
  switch (m) {
    case AttentionMode::prefill:
      return "prefill";
    case AttentionMode::decode:
      return "decode";
    case AttentionMode::chunked:
      return "chunked";
    case AttentionMode::prefix_hit:
      return "prefix_hit";
  }
  return "?";
}

// A paged KV pool with kSeqs random sequences in shuffled physical blocks, and sequence 0 stored a
// second time in other blocks (what a prefix-cache hit reads).
struct AttentionPool {
  static constexpr int kBlockSize = 16;
  static constexpr int kSeqLen = 224;  // room for a 64-token chunk around the reference token
  static constexpr int kSeqs = 8;
  static constexpr int kBlocksPerSeq = kSeqLen / kBlockSize;
  static constexpr int kReferenceContext = 150;  // the reference row attends to [0, 150)

  int kv_heads = 0, head_dim = 0, heads = 0;
  std::vector<bf16> k, v;
  KvPool pool;
  std::vector<std::vector<int32_t>> tables;  // [kSeqs + 1]: the last is seq 0's copy

  AttentionPool(const ModelConfig& cfg, uint32_t seed)
      : kv_heads(cfg.num_kv_heads), head_dim(cfg.head_dim), heads(cfg.num_heads) {
    std::mt19937 rng(seed + 8u);
    const int num_blocks = (kSeqs + 1) * kBlocksPerSeq;
    const size_t row = static_cast<size_t>(kv_heads) * head_dim;
    k.resize(static_cast<size_t>(num_blocks) * kBlockSize * row);
    v.resize(k.size());
    pool = KvPool{k.data(), v.data(), num_blocks, kBlockSize, kv_heads, head_dim};
    std::vector<int32_t> blocks(num_blocks);
    for (int b = 0; b < num_blocks; ++b) blocks[b] = b;
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (int s = 0; s <= kSeqs; ++s) {
      tables.emplace_back(blocks.begin() + s * kBlocksPerSeq,
                          blocks.begin() + (s + 1) * kBlocksPerSeq);
    }
    std::vector<bf16> seq0_k, seq0_v;
    for (int s = 0; s < kSeqs; ++s) {
      std::vector<bf16> keys = random_bf16(rng, kSeqLen * row);
      std::vector<bf16> values = random_bf16(rng, kSeqLen * row);
      // Odd positions nearly cancel their even neighbour: the same key but for one ulp per element
      // (almost the same softmax weight) and the negated value. The output is then much smaller
      // than the terms summed for it, so a change in how the keys are split and combined reaches
      // the bf16 result instead of vanishing below its rounding step.
      for (int p = 1; p < kSeqLen; p += 2) {
        for (size_t j = 0; j < row; ++j) {
          keys[p * row + j].bits = keys[(p - 1) * row + j].bits ^ 1u;
          values[p * row + j].bits = values[(p - 1) * row + j].bits ^ 0x8000u;
        }
      }
      store(s, keys, values);
      if (s == 0) seq0_k = keys, seq0_v = values;
    }
    store(kSeqs, seq0_k, seq0_v);
  }

  void store(int table, const std::vector<bf16>& keys, const std::vector<bf16>& values) {
    std::vector<int64_t> slots(kSeqLen);
    for (int p = 0; p < kSeqLen; ++p) {
      slots[p] = static_cast<int64_t>(tables[table][p / kBlockSize]) * kBlockSize + p % kBlockSize;
    }
    cpu::write_kv(pool, keys.data(), values.data(), slots.data(), kSeqLen);
  }
};

BatchRunner attention_runner(KernelFamily family, AttentionMode mode, const ModelConfig& cfg,
                             uint32_t seed) {
  auto kv = std::make_shared<AttentionPool>(cfg, seed);
  const size_t q_width = static_cast<size_t>(cfg.num_heads) * cfg.head_dim;
  std::mt19937 rng(seed + 9u);
  auto q_ref = std::make_shared<std::vector<bf16>>(random_bf16(rng, q_width));
  const bool decode = mode == AttentionMode::decode;
  return [=](const Batch& b, std::mt19937& filler) {
    const auto run = [&](const std::vector<bf16>& q, const std::vector<AttentionQuery>& queries) {
      int num_decode = 0;
      for (const auto& query : queries) num_decode += query.decode;
      std::vector<bf16> out(queries.size() * q_width);
      cpu::attention(family, q.data(), kv->pool, queries.data(), static_cast<int>(queries.size()),
                     kv->heads, num_decode, out.data());
      return out;
    };
    const int ref_ctx = AttentionPool::kReferenceContext;
    if (mode == AttentionMode::chunked) {
      // One batch per position: the chunk is M consecutive prefill tokens of sequence 0 with the
      // reference token (context ref_ctx) at the position; the other tokens' queries are random.
      RowBits rows;
      for (int p : b.positions) {
        std::vector<bf16> q = random_bf16(filler, b.M * q_width);
        std::copy(q_ref->begin(), q_ref->end(), q.begin() + p * q_width);
        std::vector<AttentionQuery> queries(b.M);
        for (int m = 0; m < b.M; ++m) queries[m] = {kv->tables[0].data(), ref_ctx - p + m, false};
        const std::vector<bf16> out = run(q, queries);
        rows.push_back(pick_rows(out, q_width, {p})[0]);
      }
      return rows;
    }
    const std::vector<bf16> q = batch_rows(*q_ref, b, filler);  // [M, heads, head_dim]
    std::vector<AttentionQuery> queries(b.M);
    for (int m = 0; m < b.M; ++m) {
      const int seq = random_int(filler, 1, AttentionPool::kSeqs - 1);
      queries[m] = {kv->tables[seq].data(), random_int(filler, 1, AttentionPool::kSeqLen), decode};
    }
    // A prefix-cache hit reads the reference row's keys from the copy in other blocks; its
    // reference is the same row over the blocks it was first written to.
    const bool from_copy = mode == AttentionMode::prefix_hit && !b.reference;
    const int32_t* table = kv->tables[from_copy ? AttentionPool::kSeqs : 0].data();
    for (int p : b.positions) queries[p] = {table, ref_ctx, decode};
    return pick_rows(run(q, queries), q_width, b.positions);
  };
}

}  // namespace

std::vector<Case> kernel_cases() {
  const ModelConfig cfg = tiny();
  const int H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  const float eps = cfg.rms_norm_eps;
  std::vector<Case> cases;
  for (Backend backend : {Backend::cpu, Backend::cuda}) {
    for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
      const bool vendor = family == KernelFamily::vendor;
      for (const LinearShape& s : linear_shapes(cfg)) {
        cases.push_back(kernel_case(
            "gemm", family, backend, "n=" + std::to_string(s.N) + ",k=" + std::to_string(s.K),
            vendor ? Expect::variant : Expect::invariant, 16,
            [=](uint32_t seed) { return gemm_runner(family, s.N, s.K, seed); }));
      }
      cases.push_back(kernel_case("rms_norm", family, backend, "h=" + std::to_string(H),
                                  Expect::invariant, 16,
                                  [=](uint32_t seed) { return rms_norm_runner(H, eps, seed); }));
      cases.push_back(
          kernel_case("add_rms_norm", family, backend, "h=" + std::to_string(H), Expect::invariant,
                      16, [=](uint32_t seed) { return add_rms_norm_runner(H, eps, seed); }));
      cases.push_back(kernel_case(
          "head_norm_rope", family, backend,
          "heads=" + std::to_string(cfg.num_heads) + ",head_dim=" + std::to_string(cfg.head_dim),
          Expect::invariant, 16, [=](uint32_t seed) { return head_norm_rope_runner(cfg, seed); }));
      cases.push_back(kernel_case("silu_mul", family, backend, "i=" + std::to_string(I),
                                  Expect::invariant, 16,
                                  [=](uint32_t seed) { return silu_mul_runner(I, seed); }));
      cases.push_back(kernel_case(
          "embedding", family, backend, "vocab=" + std::to_string(V) + ",h=" + std::to_string(H),
          Expect::invariant, 16, [=](uint32_t seed) { return embedding_runner(V, H, seed); }));
      for (AttentionMode mode : {AttentionMode::prefill, AttentionMode::decode,
                                 AttentionMode::chunked, AttentionMode::prefix_hit}) {
        const bool splits = vendor && mode == AttentionMode::decode;
        cases.push_back(kernel_case(
            "attention", family, backend,
            std::string("mode=") + mode_name(mode) + ",heads=" + std::to_string(cfg.num_heads) +
                ",kv_heads=" + std::to_string(cfg.num_kv_heads) +
                ",head_dim=" + std::to_string(cfg.head_dim) +
                ",ctx=" + std::to_string(AttentionPool::kReferenceContext),
            splits ? Expect::variant : Expect::invariant, 16,
            [=](uint32_t seed) { return attention_runner(family, mode, cfg, seed); }));
      }
      cases.push_back(kernel_case("greedy_sample", family, backend, "vocab=" + std::to_string(V),
                                  Expect::invariant, 32,
                                  [=](uint32_t seed) { return greedy_sample_runner(V, seed); }));
    }
  }
  return cases;
}

}  // namespace bih::probe
