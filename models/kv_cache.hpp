// kv_cache.hpp: the paged KV cache's block bookkeeping, with prefix caching.
//
// One BlockManager serves every TP rank: ranks hold different KV heads of the same blocks, so the
// block tables are computed once per step and shared. A full block's identity is a chained hash of
// its tokens and every token before it (vLLM's scheme); with prefix caching on, a new sequence
// whose leading full blocks are already cached reuses them instead of recomputing their KV.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace bih {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size, bool prefix_caching);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_free() const { return static_cast<int>(clean_.size() + evictable_.size()); }

  // Chained hash of one full block: hash(parent, tokens[block_size]).
  static uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

  // Takes cached blocks for the longest run of leading full blocks of `tokens` that is cached,
  // leaving at least one token to compute. Appends them to block_table and returns how many tokens
  // they cover (0 when prefix caching is off).
  int acquire_prefix(std::span<const int32_t> tokens, std::vector<int32_t>& block_table);

  // Grows block_table to cover num_tokens positions with fresh blocks.
  void ensure_capacity(int num_tokens, std::vector<int32_t>& block_table);

  // Registers every full block of `tokens` (the first num_computed of them have KV in the table)
  // that is not yet registered; `registered` counts the table's blocks already hashed.
  void register_full_blocks(std::span<const int32_t> tokens, int num_computed,
                            const std::vector<int32_t>& block_table, int& registered);

  // Drops one reference to every block of the table and clears it.
  void release(std::vector<int32_t>& block_table);

  // Forgets every cached block that no sequence holds (all of them between generations): later
  // sequences find no prefix until new blocks are registered.
  void reset_prefix_cache();

 private:
  struct Block {
    int ref_count = 0;
    bool hashed = false;
    uint64_t hash = 0;
    std::list<int32_t>::iterator lru;  // position in evictable_ when ref_count == 0 and hashed
  };
  int32_t allocate();

  int block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> clean_;    // free, holding no cached content
  std::list<int32_t> evictable_;  // free, cached content kept; front is least recently freed
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block
};

}  // namespace bih
