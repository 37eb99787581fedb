#include "models/kv_cache.hpp"

#include <stdexcept>
#include <string>

#include "base/mix64.hpp"

namespace bih {

BlockManager::BlockManager(int num_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), blocks_(num_blocks) {
  clean_.reserve(num_blocks);
  // Hand out low block ids first: a stack popped from the back.
  for (int b = num_blocks - 1; b >= 0; --b) clean_.push_back(b);
}

uint64_t BlockManager::block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull);
  for (int32_t t : tokens) h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 1));
  return h;
}

int32_t BlockManager::allocate() {
  int32_t id;
  if (!clean_.empty()) {
    id = clean_.back();
    clean_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();
    evictable_.pop_front();
    cached_.erase(blocks_[id].hash);
    blocks_[id].hashed = false;
  } else {
    throw std::runtime_error("KV cache exhausted: all " + std::to_string(blocks_.size()) +
                             " blocks are in use; lower plan.max_num_seqs or max_model_len");
  }
  blocks_[id].ref_count = 1;
  return id;
}

int BlockManager::acquire_prefix(std::span<const int32_t> tokens,
                                 std::vector<int32_t>& block_table) {
  if (!prefix_caching_ || tokens.empty()) return 0;
  const int max_blocks = (static_cast<int>(tokens.size()) - 1) / block_size_;
  uint64_t parent = 0;
  int hits = 0;
  for (int i = 0; i < max_blocks; ++i) {
    parent = block_hash(parent, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_));
    auto it = cached_.find(parent);
    if (it == cached_.end()) break;
    Block& block = blocks_[it->second];
    if (block.ref_count++ == 0) evictable_.erase(block.lru);
    block_table.push_back(it->second);
    ++hits;
  }
  return hits * block_size_;
}

void BlockManager::ensure_capacity(int num_tokens, std::vector<int32_t>& block_table) {
  const int needed = (num_tokens + block_size_ - 1) / block_size_;
  while (static_cast<int>(block_table.size()) < needed) block_table.push_back(allocate());
}

void BlockManager::register_full_blocks(std::span<const int32_t> tokens, int num_computed,
                                        const std::vector<int32_t>& block_table, int& registered) {
  if (!prefix_caching_) return;
  const int full = num_computed / block_size_;
  uint64_t parent = 0;
  // Recompute the chain from the start: blocks are few and this keeps no per-sequence state.
  for (int i = 0; i < full; ++i) {
    parent = block_hash(parent, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_));
    if (i < registered) continue;
    Block& block = blocks_[block_table[i]];
    if (!block.hashed && !cached_.contains(parent)) {
      block.hashed = true;
      block.hash = parent;
      cached_[parent] = block_table[i];
    }
  }
  if (full > registered) registered = full;
}

void BlockManager::release(std::vector<int32_t>& block_table) {
  for (int32_t id : block_table) {
    Block& block = blocks_[id];
    if (--block.ref_count > 0) continue;
    if (block.hashed) {
      evictable_.push_back(id);
      block.lru = std::prev(evictable_.end());
    } else {
      clean_.push_back(id);
    }
  }
  block_table.clear();
}

void BlockManager::reset_prefix_cache() {
  for (int32_t id : evictable_) {
    blocks_[id].hashed = false;
    cached_.erase(blocks_[id].hash);
    clean_.push_back(id);
  }
  evictable_.clear();
}

}  // namespace bih
