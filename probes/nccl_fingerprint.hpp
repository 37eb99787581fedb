// nccl_fingerprint.hpp: which summation order real NCCL uses, per element, against bih's models.
//
// In one process, one communicator per visible GPU (ncclCommInitAll, NVLink multicast forced off
// with NCCL_NVLS_ENABLE=0), bf16 sum all_reduce and reduce_scatter run on inputs whose per-rank
// values span many magnitudes, so that different chains round differently. For every element
// position the real bits are compared with each emulated order model of models/comm/reduce_order
// (ring under every ring order with rank 0 first, tree, fixed), and the fraction of positions each
// model reproduces is recorded, with whether the model the emulation claims for NCCL (ring for
// reduce_scatter; ring or tree for all_reduce, as NCCL_ALGO pins it) reproduces them all.
// Rows "via bih_fixed" run the `fixed` order that NcclCommunicator (models/cuda/nccl_comm.hpp)
// builds from NCCL primitives, one thread per GPU; they claim the `fixed` model, bit for bit.
// Plain C++ header: the CLI and tests include it; only nccl_fingerprint.cpp sees CUDA and NCCL.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bih::nccl {

struct ModelMatch {
  std::string model;             // "ring(0-1-2)", "tree", "fixed"
  size_t positions_matched = 0;  // of FingerprintEntry::positions
};

struct FingerprintEntry {
  std::string collective;     // "all_reduce" | "reduce_scatter"
  std::string via = "nccl";   // "nccl": NCCL's own collective; "bih_fixed": NcclCommunicator's
                              // `fixed` order (all-gather or send/recv + a fixed-order sum)
  size_t count_per_rank = 0;  // elements each rank sends (the whole message for all_reduce)
  size_t positions = 0;       // element positions compared (all of every rank's output)
  std::vector<ModelMatch> models;
  std::vector<std::string> claimed;  // the models the emulation claims here
  bool claim_met = false;            // some claimed model reproduces every position
  std::string matched_model;         // that model, or "" when none
  std::string error;                 // NCCL refused the collective (e.g. NCCL_ALGO=Tree for
                                     // reduce_scatter); no positions were compared
};

struct Fingerprint {
  bool supported = false;
  std::string reason;  // why unsupported
  int gpus = 0;
  std::string nccl_version;
  std::map<std::string, std::string> nccl_env;  // NCCL_* as the run saw it
  bool orders_coincide = false;                 // n == 2: every order model gives the same bits
  // n >= 3: the orders differ, so a match says which one NCCL used. At n == 2 every claim is met
  // whatever NCCL does (one commutative add): the emulated orders are "not validated" there.
  bool validated = false;
  std::string note;
  std::vector<FingerprintEntry> entries;
  bool claim_met() const;  // every entry's claim met (false when unsupported)
};

struct FingerprintOptions {
  // Elements per rank = gpus * multiplier, for each multiplier.
  std::vector<size_t> count_multipliers = {1, 64, 4096, size_t{1} << 20};
  unsigned seed = 0;
  // Ring orders are tried exhaustively up to this many ranks ((n-1)! of them); above, only 0..n-1.
  int max_ranks_for_all_rings = 5;
  // Also run the rows via bih_fixed (NcclCommunicator's `fixed` order).
  bool check_fixed_order = true;
};

// Runs the fingerprint on every visible GPU. Never throws for a missing GPU or too few GPUs:
// returns supported = false with the reason. Throws std::runtime_error when a CUDA or NCCL call
// fails on a machine that has the GPUs.
Fingerprint run_fingerprint(const FingerprintOptions& options = {});

// The models the emulation claims for NCCL's all_reduce given NCCL_ALGO: {"tree"} when it pins
// tree (or excludes ring with "^ring"), {"ring"} likewise, both when it is unset or names both.
std::vector<std::string> claimed_all_reduce_models(const std::string& nccl_algo);

nlohmann::json to_json(const Fingerprint& f);
// Human lines: NCCL version, env, one line per entry (collective, size, model fractions, claim).
std::string render(const Fingerprint& f);

}  // namespace bih::nccl
