// weights_hash_cache.hpp: one run's memory of bih's synthetic weights hashes, so that the
// scenarios of a run that share a model pay for its hash once.
//
// bih's own engine hashes a synthetic model by generating it again from (preset, seed) and
// hashing every value on the host: about a second for qwen3-1.7b on the GPU, paid again by each
// of the GPU matrix's 27 runnable scenarios, though all of them name the same model. The answer
// is a function of the model spec and of the bih binary that computes it, so the run keeps it in
// its work folder keyed by both (the executable's path, size and modification time stand for the
// binary) and the driver removes the file when the run ends. Models read from files, and every
// other engine's hash (computed from what its adapter was handed), are never cached.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace bih {

// The file a run's workers share, inside its work folder (out/work/...).
std::string weights_hash_cache_file(const std::string& run_work_dir);

// The hash recorded in `cache_file` under `key`, or else compute() recorded there and returned.
// An unreadable or malformed cache file counts as empty and is rewritten; a cache that cannot be
// written costs only the saving (the hash is still returned).
std::string cached_weights_hash(const std::string& cache_file, const std::string& key,
                                const std::function<std::string()>& compute);

// The key of a synthetic model's hash: the engine, the model spec as JSON, and this executable.
std::string weights_hash_key(const std::string& engine_kind, const nlohmann::json& model);

}  // namespace bih
