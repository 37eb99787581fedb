// kernel_probes.cpp: probe cases for every kernel, both families, on the CPU and CUDA backends.
//
// Shapes: the tiny preset's (models/config.hpp) on both backends: the five GEMMs of a layer and the
// lm_head, the norms at hidden 256, head_norm_rope on 16 heads of 16, attention with 16 query heads
// over 8 KV heads in four modes (prefill rows, decode rows, a chunk of the row's own prefill, a
// prefix-cache hit that reads the row's keys from other physical blocks). On CUDA also qwen3-1.7b's
// (the shapes a GPU runs): its five GEMMs, the norms at 2048, head_norm_rope and attention at
// head_dim 128, silu_mul at 6144; not its embedding and sampling, whose loops a 151936-row
// vocabulary does not change (it only costs host time to fill). Data is random bf16 from the seed,
// made here; a backend (probe_backend.hpp) only runs the op, so both backends see the same inputs.
// Claims: the invariant family is invariant. The vendor family claims variance where it splits:
// decode attention by decode count (kernels.hpp, both backends) and the GEMM; its other ops are the
// invariant kernels themselves. The CPU vendor GEMM splits K below kVendorSplitKMaxM rows, so it
// claims variant. The CUDA vendor GEMM is cuBLASLt's heuristic, whose choice depends on the GPU and
// the library: its claim is read at run time from the split the heuristic picks at each swept M
// (variant when some M splits the K reduction otherwise than M=1, invariant when none does), and
// the result's detail says which.
#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cpu/kernels.hpp"
#include "probes/probe.hpp"
#include "probes/probe_backend.hpp"

namespace bih::probe {
namespace {

using BackendPtr = std::shared_ptr<ProbeBackend>;

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

// Makes a case's batch runner on a backend, from the seed.
using RunnerMaker = std::function<BatchRunner(const BackendPtr& backend, uint32_t seed)>;
// A claim read from the backend when the case runs: the expectation and a note on why.
using RunTimeClaim =
    std::function<std::pair<Expect, std::string>(ProbeBackend& backend, const SweepOptions& o)>;

// A kernel case: runs make_runner's batches on a fresh backend of its kind, or is unsupported
// with the reason the backend choice gives.
Case kernel_case(const std::string& op, KernelFamily family, Backend backend,
                 const BackendChoice& choice, const std::string& shape, Expect expect,
                 int bit_width, RunnerMaker make_runner, RunTimeClaim claim = {}) {
  Case c;
  c.op = op;
  c.expect = expect;
  const std::string head = op + "(family=" + to_string(family) + ",dtype=bf16," + shape;
  c.id = [head, backend](const SweepOptions& o) { return head + sweep_tail(o, backend); };
  if (!choice.make) {
    c.unsupported_reason = choice.unavailable;
    return c;
  }
  c.run = [id = c.id, op, expect, bit_width, make = choice.make, make_runner,
           claim](const SweepOptions& o) {
    const BackendPtr backend = make();
    Expect claimed = expect;
    std::string why;
    if (claim) std::tie(claimed, why) = claim(*backend, o);
    Result r = sweep(id(o), op, claimed, SweepSpec{bit_width, 1}, make_runner(backend, o.seed), o);
    if (!why.empty()) r.detail += "; " + why;
    return r;
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
BatchRunner gemm_runner(const BackendPtr& backend, KernelFamily family, int N, int K,
                        uint32_t seed) {
  std::mt19937 rng(seed + 1u);
  const int half = K / 2;
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, static_cast<size_t>(N) * K, 0.02f));
  for (int n = 0; n < N; ++n) {
    bf16* row = w->data() + static_cast<size_t>(n) * K;
    for (int k = 0; k < half; ++k) row[half + k] = near_negation(row[k]);
  }
  auto x = std::make_shared<std::vector<bf16>>(random_bf16(rng, K));
  std::copy_n(x->begin(), half, x->begin() + half);
  const ProbeBackend::Gemm gemm = backend->bind_gemm(family, std::move(w), N, K);
  return [backend, gemm, x, N](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*x, b, filler);  // [M, K]
    std::vector<bf16> y(static_cast<size_t>(b.M) * N);         // [M, N]
    gemm(rows.data(), y.data(), b.M);
    return pick_rows(y, N, b.positions);
  };
}

// The claim of a GEMM whose split is chosen per M by a library heuristic: variant when some swept
// M splits the K reduction otherwise than M=1 (the reference), invariant when every M keeps it.
std::pair<Expect, std::string> claim_from_gemm_reduction(ProbeBackend& backend, KernelFamily family,
                                                         int N, int K, const SweepOptions& o) {
  const std::string reference = backend.gemm_reduction(family, 1, N, K);
  for (int M : o.batch_sizes) {
    const std::string at_m = backend.gemm_reduction(family, M, N, K);
    if (at_m != reference) {
      return {Expect::variant, "claimed variant: the K reduction is split '" + reference +
                                   "' at M=1, '" + at_m + "' at M=" + std::to_string(M)};
    }
  }
  return {Expect::invariant,
          "claimed invariant: the K reduction is split '" + reference + "' at every swept M"};
}

BatchRunner rms_norm_runner(const BackendPtr& backend, int H, float eps, uint32_t seed) {
  std::mt19937 rng(seed + 2u);
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, H, 0.5f));
  auto x = std::make_shared<std::vector<bf16>>(random_bf16(rng, H));
  const ProbeBackend::RmsNorm norm = backend->bind_rms_norm(std::move(w), H, eps);
  return [backend, norm, x, H](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*x, b, filler);  // [M, H]
    std::vector<bf16> y(rows.size());
    norm(rows.data(), y.data(), b.M);
    return pick_rows(y, H, b.positions);
  };
}

// Output columns: y[H] then the updated residual[H].
BatchRunner add_rms_norm_runner(const BackendPtr& backend, int H, float eps, uint32_t seed) {
  std::mt19937 rng(seed + 3u);
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, H, 0.5f));
  auto residual_x = std::make_shared<std::vector<bf16>>(random_bf16(rng, 2 * H));  // [2H]
  const ProbeBackend::AddRmsNorm norm = backend->bind_add_rms_norm(std::move(w), H, eps);
  return [backend, norm, residual_x, H](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> both = batch_rows(*residual_x, b, filler);  // [M, 2H]
    std::vector<bf16> residual(static_cast<size_t>(b.M) * H), x(residual.size());
    for (int m = 0; m < b.M; ++m) {
      std::copy_n(both.begin() + 2 * H * m, H, residual.begin() + H * m);
      std::copy_n(both.begin() + 2 * H * m + H, H, x.begin() + H * m);
    }
    std::vector<bf16> y(residual.size());
    norm(residual.data(), x.data(), y.data(), b.M);
    std::vector<bf16> out(both.size());  // [M, 2H]: y then residual
    for (int m = 0; m < b.M; ++m) {
      std::copy_n(y.begin() + H * m, H, out.begin() + 2 * H * m);
      std::copy_n(residual.begin() + H * m, H, out.begin() + 2 * H * m + H);
    }
    return pick_rows(out, 2 * H, b.positions);
  };
}

BatchRunner head_norm_rope_runner(const BackendPtr& backend, const ModelConfig& cfg,
                                  uint32_t seed) {
  constexpr int kMaxPos = 4096;
  constexpr int kReferencePosition = 1234;  // far enough for large rotation angles
  const int heads = cfg.num_heads, dim = cfg.head_dim;
  std::mt19937 rng(seed + 4u);
  auto w = std::make_shared<std::vector<bf16>>(random_bf16(rng, dim, 0.5f));
  auto x = std::make_shared<std::vector<bf16>>(random_bf16(rng, static_cast<size_t>(heads) * dim));
  auto rope = std::make_shared<cpu::RopeTable>(cpu::RopeTable::make(dim, cfg.rope_theta, kMaxPos));
  const ProbeBackend::HeadNormRope norm_rope =
      backend->bind_head_norm_rope(std::move(w), heads, dim, cfg.rms_norm_eps, std::move(rope));
  return [backend, norm_rope, x, heads, dim](const Batch& b, std::mt19937& filler) {
    std::vector<bf16> rows = batch_rows(*x, b, filler);  // [M, heads, dim]
    std::vector<int32_t> positions(b.M);
    for (auto& p : positions) p = random_int(filler, 0, kMaxPos - 1);
    for (int p : b.positions) positions[p] = kReferencePosition;
    norm_rope(rows.data(), positions.data(), b.M);
    return pick_rows(rows, static_cast<size_t>(heads) * dim, b.positions);
  };
}

BatchRunner silu_mul_runner(const BackendPtr& backend, int I, uint32_t seed) {
  std::mt19937 rng(seed + 5u);
  auto gate_up = std::make_shared<std::vector<bf16>>(random_bf16(rng, 2 * I));
  const ProbeBackend::SiluMul silu_mul = backend->bind_silu_mul(I);
  return [backend, silu_mul, gate_up, I](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*gate_up, b, filler);  // [M, 2I]
    std::vector<bf16> y(static_cast<size_t>(b.M) * I);               // [M, I]
    silu_mul(rows.data(), y.data(), b.M);
    return pick_rows(y, I, b.positions);
  };
}

BatchRunner embedding_runner(const BackendPtr& backend, int vocab, int H, uint32_t seed) {
  std::mt19937 rng(seed + 6u);
  auto table =
      std::make_shared<std::vector<bf16>>(random_bf16(rng, static_cast<size_t>(vocab) * H));
  const int32_t reference_id = random_int(rng, 0, vocab - 1);
  const ProbeBackend::Embedding embed = backend->bind_embedding(std::move(table), vocab, H);
  return [backend, embed, reference_id, vocab, H](const Batch& b, std::mt19937& filler) {
    std::vector<int32_t> ids(b.M);
    for (auto& id : ids) id = random_int(filler, 0, vocab - 1);
    for (int p : b.positions) ids[p] = reference_id;
    std::vector<bf16> y(static_cast<size_t>(b.M) * H);
    embed(ids.data(), y.data(), b.M);
    return pick_rows(y, H, b.positions);
  };
}

// Output columns: the token id's bits, then the logprob's fp32 bits.
BatchRunner greedy_sample_runner(const BackendPtr& backend, int vocab, uint32_t seed) {
  std::mt19937 rng(seed + 7u);
  auto logits = std::make_shared<std::vector<bf16>>(random_bf16(rng, vocab, 3.0f));
  const ProbeBackend::GreedySample sample = backend->bind_greedy_sample(vocab);
  return [backend, sample, logits](const Batch& b, std::mt19937& filler) {
    const std::vector<bf16> rows = batch_rows(*logits, b, filler, 3.0f);  // [M, V]
    std::vector<int32_t> tokens(b.M);
    std::vector<float> logprobs(b.M);
    sample(rows.data(), tokens.data(), logprobs.data(), b.M);
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

// The paged KV cache of the attention probes: kSeqs random sequences in shuffled physical blocks
// (table s holds sequence s), and sequence 0 stored a second time in other blocks (table kSeqs:
// what a prefix-cache hit reads).
struct AttentionLayout {
  static constexpr int kBlockSize = 16;
  static constexpr int kSeqLen = 224;  // room for a 64-token chunk around the reference token
  static constexpr int kSeqs = 8;
  static constexpr int kBlocksPerSeq = kSeqLen / kBlockSize;
  static constexpr int kReferenceContext = 150;  // the reference row attends to [0, 150)
  static constexpr int kCopyTable = kSeqs;       // sequence 0's copy
};

std::shared_ptr<const KvContents> attention_kv(const ModelConfig& cfg, uint32_t seed) {
  using L = AttentionLayout;
  std::mt19937 rng(seed + 8u);
  auto kv = std::make_shared<KvContents>();
  kv->num_blocks = (L::kSeqs + 1) * L::kBlocksPerSeq;
  kv->block_size = L::kBlockSize;
  kv->kv_heads = cfg.num_kv_heads;
  kv->head_dim = cfg.head_dim;
  kv->blocks_per_table = L::kBlocksPerSeq;
  const size_t row = static_cast<size_t>(cfg.num_kv_heads) * cfg.head_dim;
  std::vector<int32_t> blocks(kv->num_blocks);
  for (int b = 0; b < kv->num_blocks; ++b) blocks[b] = b;
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (int s = 0; s <= L::kSeqs; ++s) {
    kv->tables.emplace_back(blocks.begin() + s * L::kBlocksPerSeq,
                            blocks.begin() + (s + 1) * L::kBlocksPerSeq);
  }
  const auto store = [&](int table, const std::vector<bf16>& keys,
                         const std::vector<bf16>& values) {
    KvContents::Write w{std::vector<int64_t>(L::kSeqLen), keys, values};
    for (int p = 0; p < L::kSeqLen; ++p) {
      w.slots[p] = static_cast<int64_t>(kv->tables[table][p / L::kBlockSize]) * L::kBlockSize +
                   p % L::kBlockSize;
    }
    kv->writes.push_back(std::move(w));
  };
  for (int s = 0; s < L::kSeqs; ++s) {
    std::vector<bf16> keys = random_bf16(rng, L::kSeqLen * row);
    std::vector<bf16> values = random_bf16(rng, L::kSeqLen * row);
    // Odd positions nearly cancel their even neighbour: the same key but for one ulp per element
    // (almost the same softmax weight) and the negated value. The output is then much smaller
    // than the terms summed for it, so a change in how the keys are split and combined reaches
    // the bf16 result instead of vanishing below its rounding step.
    for (int p = 1; p < L::kSeqLen; p += 2) {
      for (size_t j = 0; j < row; ++j) {
        keys[p * row + j].bits = keys[(p - 1) * row + j].bits ^ 1u;
        values[p * row + j].bits = values[(p - 1) * row + j].bits ^ 0x8000u;
      }
    }
    store(s, keys, values);
    if (s == 0) store(L::kCopyTable, keys, values);
  }
  return kv;
}

BatchRunner attention_runner(const BackendPtr& backend, KernelFamily family, AttentionMode mode,
                             const ModelConfig& cfg, uint32_t seed) {
  using L = AttentionLayout;
  const std::shared_ptr<const KvContents> kv = attention_kv(cfg, seed);
  const size_t q_width = static_cast<size_t>(cfg.num_heads) * cfg.head_dim;
  std::mt19937 rng(seed + 9u);
  auto q_ref = std::make_shared<std::vector<bf16>>(random_bf16(rng, q_width));
  const ProbeBackend::Attention attend = backend->bind_attention(family, kv, cfg.num_heads);
  const bool decode = mode == AttentionMode::decode;
  return [=, keep_alive = backend](const Batch& b, std::mt19937& filler) {
    const auto run = [&](const std::vector<bf16>& q, const std::vector<AttentionRow>& rows) {
      std::vector<bf16> out(rows.size() * q_width);  // [M, heads * head_dim]
      attend(q.data(), rows.data(), static_cast<int>(rows.size()), out.data());
      return out;
    };
    const int ref_ctx = L::kReferenceContext;
    if (mode == AttentionMode::chunked) {
      // One batch per position: the chunk is M consecutive prefill tokens of sequence 0 with the
      // reference token (context ref_ctx) at the position; the other tokens' queries are random.
      RowBits rows;
      for (int p : b.positions) {
        std::vector<bf16> q = random_bf16(filler, b.M * q_width);
        std::copy(q_ref->begin(), q_ref->end(), q.begin() + p * q_width);
        std::vector<AttentionRow> chunk(b.M);
        for (int m = 0; m < b.M; ++m) chunk[m] = {0, ref_ctx - p + m, false};
        rows.push_back(pick_rows(run(q, chunk), q_width, {p})[0]);
      }
      return rows;
    }
    const std::vector<bf16> q = batch_rows(*q_ref, b, filler);  // [M, heads, head_dim]
    std::vector<AttentionRow> rows(b.M);
    for (int m = 0; m < b.M; ++m) {
      const int seq = random_int(filler, 1, L::kSeqs - 1);
      rows[m] = {seq, random_int(filler, 1, L::kSeqLen), decode};
    }
    // A prefix-cache hit reads the reference row's keys from the copy in other blocks; its
    // reference is the same row over the blocks it was first written to.
    const bool from_copy = mode == AttentionMode::prefix_hit && !b.reference;
    for (int p : b.positions) rows[p] = {from_copy ? L::kCopyTable : 0, ref_ctx, decode};
    return pick_rows(run(q, rows), q_width, b.positions);
  };
}

// Every kernel case of one model shape, one family, one backend.
void add_shape_cases(std::vector<Case>& cases, Backend backend, const BackendChoice& choice,
                     KernelFamily family, const ModelConfig& cfg, bool vocabulary_ops) {
  const int H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  const float eps = cfg.rms_norm_eps;
  const bool vendor = family == KernelFamily::vendor;
  const auto add = [&](const std::string& op, const std::string& shape, Expect expect,
                       int bit_width, RunnerMaker make_runner, RunTimeClaim claim = {}) {
    cases.push_back(kernel_case(op, family, backend, choice, shape, expect, bit_width,
                                std::move(make_runner), std::move(claim)));
  };
  for (const LinearShape& s : linear_shapes(cfg)) {
    RunTimeClaim claim;
    if (vendor && backend == Backend::cuda) {
      claim = [=](ProbeBackend& b, const SweepOptions& o) {
        return claim_from_gemm_reduction(b, family, s.N, s.K, o);
      };
    }
    add(
        "gemm", "n=" + std::to_string(s.N) + ",k=" + std::to_string(s.K),
        vendor ? Expect::variant : Expect::invariant, 16,
        [=](const BackendPtr& b, uint32_t seed) { return gemm_runner(b, family, s.N, s.K, seed); },
        std::move(claim));
  }
  add("rms_norm", "h=" + std::to_string(H), Expect::invariant, 16,
      [=](const BackendPtr& b, uint32_t seed) { return rms_norm_runner(b, H, eps, seed); });
  add("add_rms_norm", "h=" + std::to_string(H), Expect::invariant, 16,
      [=](const BackendPtr& b, uint32_t seed) { return add_rms_norm_runner(b, H, eps, seed); });
  add("head_norm_rope",
      "heads=" + std::to_string(cfg.num_heads) + ",head_dim=" + std::to_string(cfg.head_dim),
      Expect::invariant, 16,
      [=](const BackendPtr& b, uint32_t seed) { return head_norm_rope_runner(b, cfg, seed); });
  add("silu_mul", "i=" + std::to_string(I), Expect::invariant, 16,
      [=](const BackendPtr& b, uint32_t seed) { return silu_mul_runner(b, I, seed); });
  if (vocabulary_ops) {
    add("embedding", "vocab=" + std::to_string(V) + ",h=" + std::to_string(H), Expect::invariant,
        16, [=](const BackendPtr& b, uint32_t seed) { return embedding_runner(b, V, H, seed); });
  }
  for (AttentionMode mode : {AttentionMode::prefill, AttentionMode::decode, AttentionMode::chunked,
                             AttentionMode::prefix_hit}) {
    const bool splits = vendor && mode == AttentionMode::decode;
    add("attention",
        std::string("mode=") + mode_name(mode) + ",heads=" + std::to_string(cfg.num_heads) +
            ",kv_heads=" + std::to_string(cfg.num_kv_heads) +
            ",head_dim=" + std::to_string(cfg.head_dim) +
            ",ctx=" + std::to_string(AttentionLayout::kReferenceContext),
        splits ? Expect::variant : Expect::invariant, 16, [=](const BackendPtr& b, uint32_t seed) {
          return attention_runner(b, family, mode, cfg, seed);
        });
  }
  if (vocabulary_ops) {
    add("greedy_sample", "vocab=" + std::to_string(V), Expect::invariant, 32,
        [=](const BackendPtr& b, uint32_t seed) { return greedy_sample_runner(b, V, seed); });
  }
}

}  // namespace

std::vector<Case> kernel_cases() {
  const ModelConfig tiny = *preset_config("tiny");
  const ModelConfig qwen3 = *preset_config("qwen3-1.7b");
  std::vector<Case> cases;
  for (Backend backend : {Backend::cpu, Backend::cuda}) {
    const BackendChoice choice = backend_choice(backend);
    for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
      add_shape_cases(cases, backend, choice, family, tiny, true);
      if (backend == Backend::cuda) add_shape_cases(cases, backend, choice, family, qwen3, false);
    }
  }
  return cases;
}

}  // namespace bih::probe
