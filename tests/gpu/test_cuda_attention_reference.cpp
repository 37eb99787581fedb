// test_cuda_attention_reference.cpp: the staged CUDA attention kernel (attention_with_splits)
// against the kernel it replaced (attention_with_splits_reference), bit for bit.
//
// The rewrite stages K and V in shared memory, computes the softmax factors once, in parallel, and
// (invariant) builds each tile's partial sums in one warp, the tiles' warps in parallel, while
// keeping every operation and its order; so every input must give the same output bits from both
// kernels, in both families. Covered: head_dim 128 (qwen3), 64, 256, 72 (unpadded key rows), 200 (a
// partial second 128), 100, 8, 10 and 254 (element-wise staging; 10 and 254 no multiple of 4), a
// misaligned pool (element-wise staging at 128), GQA groups 1 to 8, block sizes 1, 5, 7 and 16
// (tiles straddling blocks), every context 0..600 plus longer ones (1 to 10 passes of 128 keys),
// decode and prefill rows, a chunked prefill of one sequence, M 1, 3 and 64, vendor splits 1, 2, 3,
// 5 and 16 (parts crossing and meeting pass edges), large queries (weights underflowing to 0),
// repeated blocks (tied scores), and inputs holding NaN, infinities and signed zeros; every batch
// with passes of 32, 64 and 128 keys as well as the launcher's own pick; and split KV (segments of
// 128 keys in blocks of their own, folded by the last of them to finish) at every context to 1280,
// on the qwen3 shape and the odd ones.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/bf16.hpp"
#include "models/cuda/attention_reference.hpp"
#include "models/cuda/kernels.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace {

using bih::bf16;
using bih::KernelFamily;
using bih::test::DeviceBuffer;
namespace cuda = bih::cuda;

struct Shape {
  const char* name;
  int n_heads, kv_heads, head_dim, block_size;
  int num_blocks;           // physical blocks in the pool
  int stride;               // block table entries per row: contexts up to stride * block_size
  float q_scale;            // spread of the queries (large: most weights underflow to 0)
  bool misaligned = false;  // pool pointers 2 bytes past a 16-byte boundary
  bool special = false;     // sprinkle NaN, infinities, signed zeros and huge values
};

// One query row: its block table, context, phase and q [n_heads * head_dim].
struct Row {
  std::vector<int32_t> table;
  int context = 0;
  bool decode = false;
  std::vector<bf16> q;
};

// Uniform values in [-scale, scale), with a few special values when `special` is set.
std::vector<bf16> random_values(size_t n, std::mt19937_64& rng, float scale, bool special) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  const float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             0.0f,
                             -0.0f,
                             3.0e38f,
                             -3.0e38f};
  std::vector<bf16> v(n);
  for (auto& x : v) {
    x = bih::to_bf16(uniform(rng));
    if (special && rng() % 4096 == 0) x = bih::to_bf16(kSpecials[rng() % std::size(kSpecials)]);
  }
  return v;
}

// A paged KV pool of random keys and values on the device: [num_blocks, block_size, kv_heads,
// head_dim] each.
class DevicePool {
 public:
  DevicePool(const Shape& s, uint64_t seed) : shape_(s), k_(elements(s) + 8), v_(elements(s) + 8) {
    std::mt19937_64 rng(seed);
    const std::vector<bf16> k = random_values(elements(s), rng, 1.0f, s.special);
    const std::vector<bf16> v = random_values(elements(s), rng, 1.0f, s.special);
    bih::test::copy_to_device(k_.get() + offset(), k.data(), k.size() * sizeof(bf16));
    bih::test::copy_to_device(v_.get() + offset(), v.data(), v.size() * sizeof(bf16));
  }

  cuda::KvPool pool() const {
    return cuda::KvPool{k_.get() + offset(), v_.get() + offset(), shape_.num_blocks,
                        shape_.block_size,   shape_.kv_heads,     shape_.head_dim};
  }

 private:
  static size_t elements(const Shape& s) {
    return static_cast<size_t>(s.num_blocks) * s.block_size * s.kv_heads * s.head_dim;
  }
  size_t offset() const { return shape_.misaligned ? 1 : 0; }  // cudaMalloc is 256-byte aligned

  Shape shape_;
  DeviceBuffer<bf16> k_, v_;
};

Row random_row(const Shape& s, std::mt19937_64& rng, int context, bool decode) {
  Row r;
  r.table.resize(s.stride);
  // Drawn with replacement from the pool: repeated blocks give tied scores.
  for (auto& b : r.table) b = static_cast<int32_t>(rng() % s.num_blocks);
  r.context = context;
  r.decode = decode;
  r.q = random_values(static_cast<size_t>(s.n_heads) * s.head_dim, rng, s.q_scale, s.special);
  return r;
}

enum class Kernel { staged, reference };

// out [rows, n_heads * head_dim] bits of one launch; keys_per_pass as attention_with_splits takes
// it, and split: the split-KV scratch given (the staged kernel only).
std::vector<uint16_t> run(Kernel kernel, KernelFamily family, int vendor_splits, const Shape& s,
                          const DevicePool& pool, const std::vector<Row>& rows,
                          int keys_per_pass = 0, bool split = false) {
  const int M = static_cast<int>(rows.size());
  std::vector<int32_t> tables, contexts;
  std::vector<uint8_t> decode;
  std::vector<bf16> q;
  for (const Row& r : rows) {
    tables.insert(tables.end(), r.table.begin(), r.table.end());
    contexts.push_back(r.context);
    decode.push_back(r.decode ? 1 : 0);
    q.insert(q.end(), r.q.begin(), r.q.end());
  }
  const DeviceBuffer<int32_t> dtables(tables), dcontexts(contexts);
  const DeviceBuffer<uint8_t> ddecode(decode);
  const DeviceBuffer<bf16> dq(q), dout(q.size());
  const cuda::AttentionBatch batch{dtables.get(), s.stride, dcontexts.get(), ddecode.get()};
  if (kernel == Kernel::staged) {
    const size_t scratch_bytes =
        split ? cuda::attention_split_scratch_bytes(s.head_dim, s.stride * s.block_size) : 0;
    const DeviceBuffer<uint8_t> scratch(std::max<size_t>(scratch_bytes, 1));
    EXPECT_EQ(cudaMemset(scratch.get(), 0, scratch_bytes), cudaSuccess);
    cuda::attention_with_splits(family, dq.get(), pool.pool(), batch, M, s.n_heads, vendor_splits,
                                dout.get(), nullptr, keys_per_pass, split ? scratch.get() : nullptr,
                                scratch_bytes);
  } else {
    cuda::attention_with_splits_reference(family, dq.get(), pool.pool(), batch, M, s.n_heads,
                                          vendor_splits, dout.get(), nullptr);
  }
  const std::vector<bf16> out = dout.download(0, q.size());
  std::vector<uint16_t> out_bits(out.size());
  for (size_t i = 0; i < out.size(); ++i) out_bits[i] = out[i].bits;
  return out_bits;
}

// The batch under both kernels, invariant family and vendor with each split count, the staged
// kernel at every pass length: equal bits, reported by the first differing (row, head, dim).
// Returns the elements compared.
size_t expect_same_bits(const std::string& what, const Shape& s, const DevicePool& pool,
                        const std::vector<Row>& rows, bool split = false) {
  const size_t row_width = static_cast<size_t>(s.n_heads) * s.head_dim;
  size_t compared = 0;
  const std::pair<KernelFamily, int> launches[] = {
      {KernelFamily::invariant, 16}, {KernelFamily::vendor, 1}, {KernelFamily::vendor, 2},
      {KernelFamily::vendor, 3},     {KernelFamily::vendor, 5}, {KernelFamily::vendor, 16}};
  for (const auto& [family, splits] : launches) {
    const std::vector<uint16_t> reference = run(Kernel::reference, family, splits, s, pool, rows);
    for (const int keys_per_pass : {0, 32, 64, 128}) {
      const std::vector<uint16_t> staged =
          run(Kernel::staged, family, splits, s, pool, rows, keys_per_pass, split);
      EXPECT_EQ(staged.size(), reference.size());
      size_t differ = 0, first = staged.size();
      for (size_t i = 0; i < staged.size() && i < reference.size(); ++i) {
        if (staged[i] != reference[i]) {
          ++differ;
          first = std::min(first, i);
        }
      }
      compared += staged.size();
      if (differ > 0) {
        const Row& r = rows[first / row_width];
        ADD_FAILURE() << what << " " << s.name << " " << bih::to_string(family)
                      << " splits=" << splits << " keys_per_pass=" << keys_per_pass << ": "
                      << differ << " of " << staged.size() << " differ; first at row "
                      << first / row_width << " (context " << r.context
                      << (r.decode ? ", decode" : ", prefill") << ") head "
                      << first % row_width / s.head_dim << " dim " << first % s.head_dim << ": "
                      << staged[first] << " vs reference " << reference[first];
      }
    }
  }
  return compared;
}

// Contexts at and around every tile edge up to 600, the pass edges beyond, and the stride's end.
std::vector<int> edge_contexts(const Shape& s) {
  std::vector<int> c = {0,   1,   2,   3,   5,   8,   15,  16,  17,  31,  32,   33,   47,  48,  49,
                        63,  64,  65,  100, 127, 128, 129, 143, 144, 200, 255,  256,  257, 300, 383,
                        384, 385, 511, 512, 513, 599, 600, 767, 768, 769, 1024, 1279, 1280};
  const int max_context = s.stride * s.block_size;
  c.erase(std::remove_if(c.begin(), c.end(), [&](int x) { return x > max_context; }), c.end());
  return c;
}

const Shape kQwen3{"qwen3 16/8 hd128 bs16", 16, 8, 128, 16, 256, 80, 1.5f};

TEST(CudaAttentionReference, EveryContextTo600MatchesTheReferenceKernel) {
  BIH_SKIP_WITHOUT_GPU();
  const DevicePool pool(kQwen3, 11);
  std::mt19937_64 rng(12);
  std::vector<Row> all;
  for (int context = 0; context <= 600; ++context) {
    all.push_back(random_row(kQwen3, rng, context, rng() % 2 == 0));
  }
  for (int context : {767, 768, 769, 1024, 1279, 1280}) {
    all.push_back(random_row(kQwen3, rng, context, rng() % 2 == 0));
  }
  std::shuffle(all.begin(), all.end(), rng);  // batches of mixed lengths and phases
  size_t compared = 0;
  for (size_t begin = 0; begin < all.size(); begin += 64) {
    const std::vector<Row> batch(all.begin() + begin,
                                 all.begin() + std::min(all.size(), begin + 64));
    compared += expect_same_bits("batch at " + std::to_string(begin), kQwen3, pool, batch);
  }
  std::printf("[measured] %zu output elements equal the reference kernel's bits\n", compared);
}

TEST(CudaAttentionReference, DecodeAndChunkedPrefillBatchesMatchTheReferenceKernel) {
  BIH_SKIP_WITHOUT_GPU();
  const DevicePool pool(kQwen3, 21);
  std::mt19937_64 rng(22);
  // M = 1: the decode step of one sequence, the shape the kernel bench times.
  for (int context : {1, 16, 17, 64, 128, 129, 512, 600, 1280}) {
    expect_same_bits("decode M=1 context " + std::to_string(context), kQwen3, pool,
                     {random_row(kQwen3, rng, context, true)});
  }
  // M = 3: decode, prefill and a fresh one-token sequence side by side.
  expect_same_bits("M=3", kQwen3, pool,
                   {random_row(kQwen3, rng, 300, true), random_row(kQwen3, rng, 77, false),
                    random_row(kQwen3, rng, 1, true)});
  // M = 64: chunks of one sequence's prefill (contexts c+1 .. c+64, one block table), the last
  // chunk ending in the sequence's first decode row.
  const Row sequence = random_row(kQwen3, rng, 0, false);
  for (int chunk_begin : {0, 100, 537}) {
    std::vector<Row> chunk;
    for (int i = 1; i <= 64; ++i) {
      Row r = sequence;
      r.context = chunk_begin + i;
      r.q = random_row(kQwen3, rng, 0, false).q;
      chunk.push_back(r);
    }
    if (chunk_begin == 537) chunk.back().decode = true;
    expect_same_bits("chunked prefill from " + std::to_string(chunk_begin), kQwen3, pool, chunk);
  }
}

TEST(CudaAttentionReference, OtherShapesMatchTheReferenceKernel) {
  BIH_SKIP_WITHOUT_GPU();
  const Shape shapes[] = {
      {"8/1 hd64 bs7", 8, 1, 64, 7, 160, 92, 1.5f},
      {"4/4 hd256 bs16", 4, 4, 256, 16, 96, 80, 1.5f},
      {"6/2 hd72 bs16", 6, 2, 72, 16, 96, 80, 1.5f},
      {"4/2 hd100 bs5", 4, 2, 100, 5, 300, 256, 1.5f},
      {"2/1 hd8 bs1", 2, 1, 8, 1, 1400, 1280, 1.5f},
      {"16/8 hd128 bs16 misaligned", 16, 8, 128, 16, 256, 80, 1.5f, true},
      {"16/8 hd128 bs16 large q", 16, 8, 128, 16, 256, 80, 24.0f},
      {"16/8 hd128 bs16 special values", 16, 8, 128, 16, 256, 80, 1.5f, false, true},
      {"8/4 hd64 bs16 special values", 8, 4, 64, 16, 128, 80, 4.0f, false, true},
      // Weighted V sums in 4-dim lane groups per 128 dims: a head_dim that is no multiple of 4,
      // below one lane group's reach and in a second, partial group of 128.
      {"3/1 hd10 bs3", 3, 1, 10, 3, 200, 430, 1.5f},
      {"4/2 hd200 bs16", 4, 2, 200, 16, 96, 80, 1.5f},
      {"2/2 hd254 bs16 special values", 2, 2, 254, 16, 96, 80, 1.5f, false, true},
  };
  uint64_t seed = 31;
  for (const Shape& s : shapes) {
    const DevicePool pool(s, ++seed);
    std::mt19937_64 rng(++seed);
    std::vector<Row> rows;
    for (int context : edge_contexts(s)) {
      rows.push_back(random_row(s, rng, context, true));
      rows.push_back(random_row(s, rng, context, false));
    }
    for (size_t begin = 0; begin < rows.size(); begin += 64) {
      const std::vector<Row> batch(rows.begin() + begin,
                                   rows.begin() + std::min(rows.size(), begin + 64));
      expect_same_bits("batch at " + std::to_string(begin), s, pool, batch);
    }
  }
}

// Split KV: launches of few (row, head) blocks with the scratch given. Rows of 1 to 3 (16 to 48
// qwen3 blocks, at most half of any Hopper's multiprocessors) at every edge context, so that the
// segments' last tiles, a segment of one tile and a context of exactly one segment (which the
// split launch finishes itself) all occur; then the odd shapes.
TEST(CudaAttentionReference, SplitKvMatchesTheReferenceKernel) {
  BIH_SKIP_WITHOUT_GPU();
  const DevicePool pool(kQwen3, 61);
  std::mt19937_64 rng(62);
  const std::vector<int> contexts = edge_contexts(kQwen3);
  for (size_t i = 0; i < contexts.size(); ++i) {
    expect_same_bits("split M=1 context " + std::to_string(contexts[i]), kQwen3, pool,
                     {random_row(kQwen3, rng, contexts[i], true)}, true);
    const int other = contexts[(i * 7 + 3) % contexts.size()];
    expect_same_bits("split M=3", kQwen3, pool,
                     {random_row(kQwen3, rng, contexts[i], true),
                      random_row(kQwen3, rng, other, false), random_row(kQwen3, rng, 129, true)},
                     true);
  }
  const Shape shapes[] = {
      {"2/1 hd8 bs1", 2, 1, 8, 1, 1400, 1280, 1.5f},
      {"3/1 hd10 bs3", 3, 1, 10, 3, 200, 430, 1.5f},
      {"4/2 hd200 bs16", 4, 2, 200, 16, 96, 80, 1.5f},
      {"2/2 hd254 bs16 special values", 2, 2, 254, 16, 96, 80, 1.5f, false, true},
      {"16/8 hd128 bs16 large q", 16, 8, 128, 16, 256, 80, 24.0f},
  };
  uint64_t seed = 63;
  for (const Shape& s : shapes) {
    const DevicePool odd(s, ++seed);
    std::mt19937_64 odd_rng(++seed);
    for (int context : edge_contexts(s)) {
      expect_same_bits(
          "split context " + std::to_string(context), s, odd,
          {random_row(s, odd_rng, context, true), random_row(s, odd_rng, context, false)}, true);
    }
  }
}

// The split path is taken where the contract says: an invariant launch of few blocks whose block
// tables reach past one segment (128 keys) checks the scratch it was given; with tables of 128
// keys, or in the vendor family, it does not split and never reads it.
TEST(CudaAttentionReference, SplitKvRefusesAScratchTooSmall) {
  BIH_SKIP_WITHOUT_GPU();
  const DevicePool pool(kQwen3, 71);
  std::mt19937_64 rng(72);
  const Row row = random_row(kQwen3, rng, 300, true);
  const DeviceBuffer<int32_t> table(row.table), context(std::vector<int32_t>{row.context});
  const DeviceBuffer<uint8_t> decode(std::vector<uint8_t>{1});
  const DeviceBuffer<bf16> q(row.q), out(row.q.size());
  const cuda::AttentionBatch batch{table.get(), kQwen3.stride, context.get(), decode.get()};
  const DeviceBuffer<uint8_t> scratch(16);
  EXPECT_THROW(
      cuda::attention_with_splits(KernelFamily::invariant, q.get(), pool.pool(), batch, 1,
                                  kQwen3.n_heads, 1, out.get(), nullptr, 0, scratch.get(), 16),
      std::invalid_argument);
  // The vendor family never splits KV this way: the same call is fine.
  cuda::attention_with_splits(KernelFamily::vendor, q.get(), pool.pool(), batch, 1, kQwen3.n_heads,
                              1, out.get(), nullptr, 0, scratch.get(), 16);
  const DeviceBuffer<int32_t> one_segment(std::vector<int32_t>{100});
  const cuda::AttentionBatch short_tables{table.get(), 128 / kQwen3.block_size, one_segment.get(),
                                          decode.get()};
  cuda::attention_with_splits(KernelFamily::invariant, q.get(), pool.pool(), short_tables, 1,
                              kQwen3.n_heads, 1, out.get(), nullptr, 0, scratch.get(), 16);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// One scratch through launches of different contexts, as a rank's layers and steps use it: each
// launch's last blocks set the arrival counters back to zero, so every launch folds exactly once
// and gives the reference kernel's bits (a counter left behind would fold early or never). Small
// enough for compute-sanitizer racecheck (SANITIZE_FILTER=*SplitKvReusesItsScratch*).
TEST(CudaAttentionReference, SplitKvReusesItsScratchAcrossLaunches) {
  BIH_SKIP_WITHOUT_GPU();
  const DevicePool pool(kQwen3, 81);
  std::mt19937_64 rng(82);
  const size_t bytes =
      cuda::attention_split_scratch_bytes(kQwen3.head_dim, kQwen3.stride * kQwen3.block_size);
  const DeviceBuffer<uint8_t> scratch(bytes);
  ASSERT_EQ(cudaMemset(scratch.get(), 0, bytes), cudaSuccess);
  const size_t width = static_cast<size_t>(kQwen3.n_heads) * kQwen3.head_dim;
  for (const int context : {300, 129, 1280, 1000, 256}) {
    const Row row = random_row(kQwen3, rng, context, true);
    const std::vector<uint16_t> reference =
        run(Kernel::reference, KernelFamily::invariant, 16, kQwen3, pool, {row});
    const DeviceBuffer<int32_t> table(row.table), contexts(std::vector<int32_t>{row.context});
    const DeviceBuffer<uint8_t> decode(std::vector<uint8_t>{1});
    const DeviceBuffer<bf16> q(row.q), out(width);
    const cuda::AttentionBatch batch{table.get(), kQwen3.stride, contexts.get(), decode.get()};
    for (int launch = 0; launch < 2; ++launch) {
      cuda::attention_with_splits(KernelFamily::invariant, q.get(), pool.pool(), batch, 1,
                                  kQwen3.n_heads, 16, out.get(), nullptr, 0, scratch.get(), bytes);
      const std::vector<bf16> got = out.download(0, width);
      size_t differ = 0;
      for (size_t i = 0; i < width; ++i) differ += got[i].bits != reference[i] ? 1 : 0;
      EXPECT_EQ(differ, 0u) << "context " << context << " launch " << launch;
    }
  }
}

// The comparisons above must see real outputs: the staged kernel's rows are neither all zero
// nor all NaN where there are keys, and exactly zero where there are none.
TEST(CudaAttentionReference, StagedKernelOutputsAreNotDegenerate) {
  BIH_SKIP_WITHOUT_GPU();
  const DevicePool pool(kQwen3, 41);
  std::mt19937_64 rng(42);
  const std::vector<Row> rows = {random_row(kQwen3, rng, 0, true), random_row(kQwen3, rng, 1, true),
                                 random_row(kQwen3, rng, 600, true)};
  const size_t width = static_cast<size_t>(kQwen3.n_heads) * kQwen3.head_dim;
  for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
    const std::vector<uint16_t> out = run(Kernel::staged, family, 16, kQwen3, pool, rows);
    ASSERT_EQ(out.size(), rows.size() * width);
    for (size_t r = 0; r < rows.size(); ++r) {
      size_t zero = 0, finite = 0;
      for (size_t i = r * width; i < (r + 1) * width; ++i) {
        zero += out[i] == 0;
        finite += std::isfinite(bih::to_float(bf16{out[i]}));
      }
      if (rows[r].context == 0) {
        EXPECT_EQ(zero, width) << "context 0 gives zeros";
      } else {
        EXPECT_LT(zero, width / 8) << "context " << rows[r].context;
        EXPECT_EQ(finite, width) << "context " << rows[r].context;
      }
    }
  }
}

}  // namespace
