// device_weights.cpp: device shards (DeviceModel) and the GPU weights hash (device_weights.hpp).
//
// Both factories run the same placement: the ranks' layouts (models/tp_shard.hpp) carved out of
// one allocation, each replicated tensor once, then a list of slices (a block of a source tensor
// and its device destination) that the factory fills, by generating (synthetic) or by copying
// from the host model (from_host). Placement runs twice: once to measure, once on the allocation.
#include "models/cuda/device_weights.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "models/bf16.hpp"
#include "models/cuda/check.hpp"
#include "models/cuda/cuda_handles.hpp"
#include "models/cuda/device_weights_kernels.hpp"
#include "models/tp_shard.hpp"
#include "models/weights.hpp"

namespace bih::cuda {

static_assert(sizeof(bf16) == sizeof(uint16_t), "the generator writes bf16 as its 16 bits");

namespace {

constexpr size_t kAlignment = 256;  // of every tensor in the arena (cudaMalloc's own alignment)

// Makes `device` current for a scope and restores the caller's device after.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    cudaCheck(cudaGetDevice(&previous_));
    cudaCheck(cudaSetDevice(device));
  }
  ~CurrentDevice() { cudaSetDevice(previous_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

// `count` bf16 values of device memory (on the current device) or of pinned host memory.
template <bool kPinnedHost>
class OwnedBuffer {
 public:
  explicit OwnedBuffer(size_t count) {
    void* p = nullptr;
    if (kPinnedHost) {
      cudaCheck(cudaMallocHost(&p, count * sizeof(bf16)));
    } else {
      cudaCheck(cudaMalloc(&p, count * sizeof(bf16)));
    }
    data_ = static_cast<bf16*>(p);
  }
  ~OwnedBuffer() {
    if (kPinnedHost) {
      cudaFreeHost(data_);
    } else {
      cudaFree(data_);
    }
  }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  bf16* get() const { return data_; }

 private:
  bf16* data_ = nullptr;
};

// Carves tensors out of one allocation starting at `base`; with a null base it only measures.
class ArenaCarver {
 public:
  explicit ArenaCarver(void* base) : base_(static_cast<char*>(base)) {}
  bf16* take(size_t count) {
    offset_ = (offset_ + kAlignment - 1) / kAlignment * kAlignment;
    bf16* p = base_ != nullptr ? reinterpret_cast<bf16*>(base_ + offset_) : nullptr;
    offset_ += count * sizeof(bf16);
    return p;
  }
  size_t used() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

// Row `row` of a row-major matrix with `cols` columns at `p` (null while measuring).
bf16* row_at(bf16* p, size_t row, size_t cols) { return p != nullptr ? p + row * cols : nullptr; }

// One block of a source tensor and where it lands: dest is [slice.rows, slice.cols], contiguous.
struct SliceDestination {
  ShardSlice slice;
  bf16* dest = nullptr;
};

struct Placement {
  std::vector<DeviceRankWeights> ranks;  // in the order of the layouts
  std::vector<SliceDestination> slices;  // every byte of the arena's tensors is in one of them
  size_t bytes = 0;
};

Placement place(const ModelConfig& c, const std::vector<ShardLayout>& layouts, void* base) {
  ArenaCarver arena(base);
  Placement out;
  // A tensor the ranks read whole, stored once per device.
  auto whole = [&](const std::string& name, int rows, int cols) {
    bf16* dest = arena.take(static_cast<size_t>(rows) * cols);
    out.slices.push_back({ShardSlice{name, cols, 0, rows, 0, cols}, dest});
    return dest;
  };
  auto matrix = [&](const ShardMatrix& m) {
    bf16* dest = arena.take(static_cast<size_t>(m.rows) * m.cols);
    size_t row = 0;
    for (const ShardSlice& s : m.slices) {
      out.slices.push_back({s, row_at(dest, row, m.cols)});
      row += s.rows;
    }
    return dest;
  };

  const ShardLayout& first = layouts.front();  // replicated tensors are the same for every rank
  bf16* embed = whole(first.embed_tokens, c.vocab_size, c.hidden_size);
  const bf16* final_norm = whole(first.final_norm, 1, c.hidden_size);
  std::vector<DeviceLayerWeights> shared_norms(first.layers.size());
  for (size_t l = 0; l < first.layers.size(); ++l) {
    const LayerShardLayout& L = first.layers[l];
    shared_norms[l].input_layernorm = whole(L.input_layernorm, 1, c.hidden_size);
    shared_norms[l].post_attention_layernorm = whole(L.post_attention_layernorm, 1, c.hidden_size);
    shared_norms[l].q_norm = whole(L.q_norm, 1, c.head_dim);
    shared_norms[l].k_norm = whole(L.k_norm, 1, c.head_dim);
  }

  for (const ShardLayout& layout : layouts) {
    DeviceRankWeights w;
    w.rank = layout.rank;
    w.tp = layout.tp;
    w.heads_local = layout.heads_local;
    w.kv_heads_local = layout.kv_heads_local;
    w.intermediate_local = layout.intermediate_local;
    w.vocab_local = layout.vocab_local;
    w.embed_tokens = embed;
    w.final_norm = final_norm;
    w.layers = shared_norms;
    for (size_t l = 0; l < layout.layers.size(); ++l) {
      w.layers[l].qkv = matrix(layout.layers[l].qkv);
      w.layers[l].o_proj = matrix(layout.layers[l].o_proj);
      w.layers[l].gate_up = matrix(layout.layers[l].gate_up);
      w.layers[l].down = matrix(layout.layers[l].down);
    }
    // Tied embeddings: the vocab slice is whole contiguous rows of the table already stored.
    const ShardSlice& head = layout.lm_head.slices.front();
    const bool rows_of_embedding = layout.lm_head.slices.size() == 1 &&
                                   head.source == layout.embed_tokens &&
                                   head.cols == head.source_cols;
    w.lm_head =
        rows_of_embedding ? row_at(embed, head.row_begin, head.cols) : matrix(layout.lm_head);
    out.ranks.push_back(std::move(w));
  }
  out.bytes = arena.used();
  return out;
}

// Layouts of `ranks`, validated: at least one, none twice, each in [0, tp) (shard_layout checks
// that and that tp divides the model).
std::vector<ShardLayout> layouts_for(const ModelConfig& config, int tp,
                                     const std::vector<int>& ranks) {
  if (ranks.empty()) throw std::invalid_argument("DeviceModel: no ranks to hold");
  std::vector<ShardLayout> layouts;
  for (int r : ranks) {
    if (std::count(ranks.begin(), ranks.end(), r) > 1) {
      throw std::invalid_argument("DeviceModel: rank " + std::to_string(r) + " listed twice");
    }
    layouts.push_back(shard_layout(config, r, tp));
  }
  return layouts;
}

// Throws std::logic_error unless `slice` lies inside a row-major tensor [count / cols, cols].
void check_slice_inside(const ShardSlice& slice, uint64_t count, uint64_t cols) {
  const uint64_t row_end = static_cast<uint64_t>(slice.row_begin) + slice.rows;
  const uint64_t col_end = static_cast<uint64_t>(slice.col_begin) + slice.cols;
  if (static_cast<uint64_t>(slice.source_cols) != cols || col_end > cols ||
      row_end * cols > count || slice.row_begin < 0 || slice.col_begin < 0) {
    throw std::logic_error("DeviceModel: a shard slice falls outside tensor '" + slice.source +
                           "'");
  }
}

}  // namespace

DeviceModel::DeviceModel(DeviceModel&& other) noexcept
    : config_(std::move(other.config_)),
      device_(other.device_),
      tp_(other.tp_),
      arena_(std::exchange(other.arena_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      ranks_(std::exchange(other.ranks_, {})) {}

DeviceModel& DeviceModel::operator=(DeviceModel&& other) noexcept {
  if (this != &other) {
    release();
    config_ = std::move(other.config_);
    device_ = other.device_;
    tp_ = other.tp_;
    arena_ = std::exchange(other.arena_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    ranks_ = std::exchange(other.ranks_, {});
  }
  return *this;
}

DeviceModel::~DeviceModel() { release(); }

void DeviceModel::release() noexcept {
  if (arena_ == nullptr) return;
  int previous = 0;
  const bool restore = cudaGetDevice(&previous) == cudaSuccess;
  cudaSetDevice(device_);
  cudaFree(arena_);
  if (restore) cudaSetDevice(previous);
  arena_ = nullptr;
  bytes_ = 0;
  ranks_.clear();
}

void DeviceModel::allocate(size_t bytes) {
  void* p = nullptr;
  cudaCheck(cudaMalloc(&p, bytes));
  arena_ = p;
  bytes_ = bytes;
}

const DeviceRankWeights& DeviceModel::rank(int r) const {
  for (const DeviceRankWeights& w : ranks_) {
    if (w.rank == r) return w;
  }
  throw std::out_of_range("DeviceModel on GPU " + std::to_string(device_) + " holds no rank " +
                          std::to_string(r));
}

DeviceModel DeviceModel::synthetic(const ModelConfig& config, uint64_t seed, int tp,
                                   std::vector<int> ranks, int device) {
  const std::vector<TensorSpec> specs = tensor_specs(config);  // validates the config
  std::map<std::string, const TensorSpec*> spec_of;
  for (const TensorSpec& s : specs) spec_of[s.name] = &s;
  const std::vector<ShardLayout> layouts = layouts_for(config, tp, ranks);

  CurrentDevice current(device);
  DeviceModel model;
  model.config_ = config;
  model.device_ = device;
  model.tp_ = tp;
  model.allocate(place(config, layouts, nullptr).bytes);
  Placement placement = place(config, layouts, model.arena_);
  model.ranks_ = std::move(placement.ranks);

  OwnedStream stream;
  for (const SliceDestination& s : placement.slices) {
    auto spec = spec_of.find(s.slice.source);
    if (spec == spec_of.end()) {
      throw std::logic_error("DeviceModel: the shard layout names an unknown tensor '" +
                             s.slice.source + "'");
    }
    const TensorSpec& source = *spec->second;
    check_slice_inside(s.slice, source.element_count(), source.shape.back());
    detail::SyntheticBlock block;
    block.out = reinterpret_cast<uint16_t*>(s.dest);
    block.key = synthetic_key(seed, source.name);
    block.ones = source.is_norm;
    block.source_cols = static_cast<uint64_t>(s.slice.source_cols);
    block.row_begin = static_cast<uint64_t>(s.slice.row_begin);
    block.col_begin = static_cast<uint64_t>(s.slice.col_begin);
    block.rows = static_cast<uint64_t>(s.slice.rows);
    block.cols = static_cast<uint64_t>(s.slice.cols);
    detail::launch_synthetic_block(block, stream.get());
  }
  stream.synchronize();
  return model;
}

DeviceModel DeviceModel::from_host(const ModelWeights& weights, int tp, std::vector<int> ranks,
                                   int device) {
  const ModelConfig& config = weights.config;
  tensor_specs(config);                           // validates the config
  const auto tensors = tensors_by_name(weights);  // validates every tensor's size
  const std::vector<ShardLayout> layouts = layouts_for(config, tp, ranks);

  CurrentDevice current(device);
  DeviceModel model;
  model.config_ = config;
  model.device_ = device;
  model.tp_ = tp;
  model.allocate(place(config, layouts, nullptr).bytes);
  Placement placement = place(config, layouts, model.arena_);
  model.ranks_ = std::move(placement.ranks);

  OwnedStream stream;
  for (const SliceDestination& s : placement.slices) {
    auto tensor = tensors.find(s.slice.source);
    if (tensor == tensors.end()) {
      throw std::logic_error("DeviceModel: the shard layout names an unknown tensor '" +
                             s.slice.source + "'");
    }
    const std::vector<bf16>& source = *tensor->second;
    const size_t source_cols = static_cast<size_t>(s.slice.source_cols);
    check_slice_inside(s.slice, source.size(), source_cols);
    const bf16* from =
        source.data() + static_cast<size_t>(s.slice.row_begin) * source_cols + s.slice.col_begin;
    const size_t row_bytes = static_cast<size_t>(s.slice.cols) * sizeof(bf16);
    const size_t rows = static_cast<size_t>(s.slice.rows);
    if (s.slice.cols == s.slice.source_cols) {  // whole rows: one contiguous block
      cudaCheck(
          cudaMemcpyAsync(s.dest, from, rows * row_bytes, cudaMemcpyHostToDevice, stream.get()));
    } else {  // a column slice: `rows` strided rows of the source
      cudaCheck(cudaMemcpy2DAsync(s.dest, row_bytes, from, source_cols * sizeof(bf16), row_bytes,
                                  rows, cudaMemcpyHostToDevice, stream.get()));
    }
  }
  stream.synchronize();
  return model;
}

std::string synthetic_weights_hash_on_gpu(const ModelConfig& config, uint64_t seed, int device) {
  const std::vector<TensorSpec> specs = tensor_specs(config);  // validates the config
  // The model as a sequence of chunks of at most kMaxChunk values, in hash order.
  constexpr uint64_t kMaxChunk = uint64_t{1} << 24;  // 32 MB of bf16 per buffer
  struct Chunk {
    const TensorSpec* spec;
    uint64_t key, begin, end;
  };
  std::vector<Chunk> chunks;
  uint64_t chunk_capacity = 1;
  for (const TensorSpec& spec : specs) {
    const uint64_t count = spec.element_count();
    const uint64_t key = synthetic_key(seed, spec.name);
    uint64_t begin = 0;
    do {  // a tensor with no values still gets a chunk: the hash absorbs its name and shape
      const uint64_t end = std::min(count, begin + kMaxChunk);
      chunks.push_back({&spec, key, begin, end});
      chunk_capacity = std::max(chunk_capacity, end - begin);
      begin = end;
    } while (begin < count);
  }

  // Two slots, each a device scratch buffer and a pinned host buffer: the GPU generates and
  // downloads chunk k + 1 while the host absorbs chunk k. A slot is refilled only after the host
  // has absorbed its previous chunk, and one stream orders the device side.
  constexpr size_t kSlots = 2;
  CurrentDevice current(device);
  OwnedBuffer<false> scratch(kSlots * chunk_capacity);
  OwnedBuffer<true> host(kSlots * chunk_capacity);
  OwnedEvent downloaded[kSlots];
  OwnedStream stream;  // last: its destructor drains the work before the buffers go
  auto enqueue = [&](size_t k) {
    const Chunk& chunk = chunks[k];
    const size_t slot = k % kSlots;
    const uint64_t count = chunk.end - chunk.begin;
    bf16* device_chunk = scratch.get() + slot * chunk_capacity;
    detail::SyntheticBlock block;
    block.out = reinterpret_cast<uint16_t*>(device_chunk);
    block.key = chunk.key;
    block.ones = chunk.spec->is_norm;
    block.source_cols = chunk.spec->element_count();  // the tensor as one row
    block.col_begin = chunk.begin;
    block.rows = 1;
    block.cols = count;
    detail::launch_synthetic_block(block, stream.get());
    if (count > 0) {
      cudaCheck(cudaMemcpyAsync(host.get() + slot * chunk_capacity, device_chunk,
                                count * sizeof(bf16), cudaMemcpyDeviceToHost, stream.get()));
    }
    cudaCheck(cudaEventRecord(downloaded[slot].get(), stream.get()));
  };

  for (size_t k = 0; k < std::min(kSlots, chunks.size()); ++k) enqueue(k);
  WeightsHasher hasher;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const size_t slot = k % kSlots;
    cudaCheck(cudaEventSynchronize(downloaded[slot].get()));
    const Chunk& chunk = chunks[k];
    if (chunk.begin == 0) hasher.begin_tensor(chunk.spec->name, chunk.spec->shape);
    hasher.absorb_values(host.get() + slot * chunk_capacity, chunk.end - chunk.begin);
    if (k + kSlots < chunks.size()) enqueue(k + kSlots);
  }
  return hasher.digest();
}

}  // namespace bih::cuda
