// nccl_fingerprint.cpp: the NCCL order fingerprint of nccl_fingerprint.hpp (CUDA + NCCL leaf).
#include "probes/nccl_fingerprint.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>

#include "models/bf16.hpp"
#include "models/comm/reduce_order.hpp"
#include "models/cuda/emulated_gpu.hpp"
#include "models/cuda/nccl_comm.hpp"

extern char** environ;

namespace bih::nccl {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("nccl fingerprint: ") + what + ": " +
                             cudaGetErrorString(e));
  }
}

void check_nccl(ncclResult_t e, const char* what) {
  if (e != ncclSuccess) {
    throw std::runtime_error(std::string("nccl fingerprint: ") + what + ": " +
                             ncclGetErrorString(e));
  }
}

// A value of magnitude 2^-8..2^8 with random sign and mantissa: chains in different orders round
// differently for most elements (see collective_probes.cpp).
std::vector<bf16> spread_values(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int> exponent(-8, 8), mantissa(0, 127), sign(0, 1);
  std::vector<bf16> v(n);
  for (auto& e : v) {
    const float m = 1.0f + mantissa(rng) / 128.0f;
    e = to_bf16((sign(rng) ? -1.0f : 1.0f) * std::ldexp(m, exponent(rng)));
  }
  return v;
}

// One emulated model: its name and, for ring, the ring order.
struct Model {
  std::string name;
  ReduceOrder order;
  std::vector<int> ring;  // empty except for ring
};

std::vector<Model> candidate_models(int n, int max_ranks_for_all_rings) {
  std::vector<Model> models;
  std::vector<int> ring(n);
  std::iota(ring.begin(), ring.end(), 0);
  do {
    std::string name = "ring(";
    for (int i = 0; i < n; ++i) name += (i ? "-" : "") + std::to_string(ring[i]);
    models.push_back({name + ")", ReduceOrder::ring, ring});
  } while (n <= max_ranks_for_all_rings && std::next_permutation(ring.begin() + 1, ring.end()));
  models.push_back({"tree", ReduceOrder::tree, {}});
  models.push_back({"fixed", ReduceOrder::fixed, {}});
  return models;
}

bool is_claimed(const std::string& model, const std::vector<std::string>& claimed) {
  for (const auto& c : claimed) {
    if (model == c || model.rfind(c + "(", 0) == 0) return true;
  }
  return false;
}

// Device buffers and streams of all ranks, released on every path.
struct Ranks {
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<void*> send, recv;
  ~Ranks() {
    for (size_t r = 0; r < streams.size(); ++r) {
      cudaSetDevice(static_cast<int>(r));
      if (send[r]) cudaFree(send[r]);
      if (recv[r]) cudaFree(recv[r]);
      cudaStreamDestroy(streams[r]);
    }
    for (ncclComm_t c : comms) {
      if (c) ncclCommDestroy(c);
    }
  }
};

// One row: which models reproduce the outputs at every position. outputs[r] is rank r's result
// (all_reduce: the whole message of `count`; reduce_scatter: its block of `multiplier`).
FingerprintEntry compare_with_models(const std::string& collective, const std::string& via,
                                     size_t count, size_t multiplier,
                                     const std::vector<const bf16*>& input_ptrs,
                                     const std::vector<std::vector<bf16>>& outputs,
                                     const std::vector<Model>& models,
                                     std::vector<std::string> claimed) {
  const int n = static_cast<int>(input_ptrs.size());
  const bool all_reduce = collective == "all_reduce";
  FingerprintEntry entry;
  entry.collective = collective;
  entry.via = via;
  entry.count_per_rank = count;
  entry.claimed = std::move(claimed);
  std::vector<bf16> predicted(all_reduce ? count : multiplier);
  for (const Model& model : models) {
    const RankSequences sequences{model.ring, {}};
    // all_reduce: a position is an element index, matched when every rank holds the model's
    // bits there. reduce_scatter: a position is (rank, element of its block).
    std::vector<char> matched(count, 1);
    if (all_reduce) {
      all_reduce_range(model.order, input_ptrs, count, 0, count, sequences, predicted.data());
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) matched[i] &= outputs[r][i] == predicted[i];
      }
    } else {
      for (int r = 0; r < n; ++r) {
        reduce_scatter_block(model.order, input_ptrs, multiplier, r, sequences, predicted.data());
        for (size_t i = 0; i < multiplier; ++i) {
          matched[r * multiplier + i] = outputs[r][i] == predicted[i];
        }
      }
    }
    const size_t hits = static_cast<size_t>(std::count(matched.begin(), matched.end(), 1));
    entry.models.push_back({model.name, hits});
    if (!entry.claim_met && hits == count && is_claimed(model.name, entry.claimed)) {
      entry.claim_met = true;
      entry.matched_model = model.name;
    }
  }
  entry.positions = count;
  return entry;
}

// The rows of NCCL's own all_reduce and reduce_scatter: one process, ncclCommInitAll, one group
// call over all GPUs.
void add_nccl_entries(int n, const FingerprintOptions& options, const std::vector<Model>& models,
                      const std::vector<std::string>& all_reduce_claim, std::mt19937& rng,
                      Fingerprint& f) {
  Ranks ranks;
  ranks.comms.assign(n, nullptr);
  ranks.streams.assign(n, nullptr);
  ranks.send.assign(n, nullptr);
  ranks.recv.assign(n, nullptr);
  std::vector<int> devices(n);
  std::iota(devices.begin(), devices.end(), 0);
  check_nccl(ncclCommInitAll(ranks.comms.data(), n, devices.data()), "ncclCommInitAll");
  for (int r = 0; r < n; ++r) {
    check_cuda(cudaSetDevice(r), "cudaSetDevice");
    check_cuda(cudaStreamCreate(&ranks.streams[r]), "cudaStreamCreate");
  }

  for (size_t multiplier : options.count_multipliers) {
    const size_t count = static_cast<size_t>(n) * multiplier;  // elements each rank sends
    const size_t bytes = count * sizeof(bf16);
    std::vector<std::vector<bf16>> inputs(n);
    std::vector<const bf16*> input_ptrs(n);
    for (int r = 0; r < n; ++r) {
      inputs[r] = spread_values(rng, count);
      input_ptrs[r] = inputs[r].data();
      check_cuda(cudaSetDevice(r), "cudaSetDevice");
      if (ranks.send[r]) cudaFree(ranks.send[r]);
      if (ranks.recv[r]) cudaFree(ranks.recv[r]);
      ranks.send[r] = ranks.recv[r] = nullptr;
      check_cuda(cudaMalloc(&ranks.send[r], bytes), "cudaMalloc");
      check_cuda(cudaMalloc(&ranks.recv[r], bytes), "cudaMalloc");
      check_cuda(cudaMemcpy(ranks.send[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice),
                 "cudaMemcpy to device");
    }

    for (const char* collective : {"all_reduce", "reduce_scatter"}) {
      const bool all_reduce = std::strcmp(collective, "all_reduce") == 0;
      const size_t out_count = all_reduce ? count : multiplier;
      const std::vector<std::string> claimed =
          all_reduce ? all_reduce_claim : std::vector<std::string>{"ring"};
      // A collective NCCL refuses under the user's NCCL_* env (NCCL_ALGO=Tree has no
      // reduce_scatter) is recorded as that entry's error; the other entries still run.
      ncclResult_t status = ncclGroupStart();
      for (int r = 0; r < n && status == ncclSuccess; ++r) {
        status = all_reduce
                     ? ncclAllReduce(ranks.send[r], ranks.recv[r], count, ncclBfloat16, ncclSum,
                                     ranks.comms[r], ranks.streams[r])
                     : ncclReduceScatter(ranks.send[r], ranks.recv[r], multiplier, ncclBfloat16,
                                         ncclSum, ranks.comms[r], ranks.streams[r]);
      }
      const ncclResult_t end_status = ncclGroupEnd();
      if (status == ncclSuccess) status = end_status;
      if (status != ncclSuccess) {
        FingerprintEntry failed;
        failed.collective = collective;
        failed.count_per_rank = count;
        failed.claimed = claimed;
        failed.error = std::string("NCCL refused it: ") + ncclGetErrorString(status);
        f.entries.push_back(std::move(failed));
        continue;
      }
      std::vector<std::vector<bf16>> outputs(n, std::vector<bf16>(out_count));
      for (int r = 0; r < n; ++r) {
        check_cuda(cudaSetDevice(r), "cudaSetDevice");
        check_cuda(cudaStreamSynchronize(ranks.streams[r]), "cudaStreamSynchronize");
        check_cuda(cudaMemcpy(outputs[r].data(), ranks.recv[r], out_count * sizeof(bf16),
                              cudaMemcpyDeviceToHost),
                   "cudaMemcpy to host");
      }
      f.entries.push_back(compare_with_models(collective, "nccl", count, multiplier, input_ptrs,
                                              outputs, models, claimed));
    }
  }
}

// The rows of NcclCommunicator's `fixed` order: each rank a thread with its own communicator
// (ncclCommInitRank), the collectives built from NCCL primitives plus a fixed-order sum. They
// claim the `fixed` model at every position.
void add_fixed_order_entries(int n, const FingerprintOptions& options,
                             const std::vector<Model>& models, std::mt19937& rng, Fingerprint& f) {
  const size_t sizes = options.count_multipliers.size();
  // inputs[s][r]: rank r's message for size s (the all_reduce message, and the reduce_scatter
  // input of n blocks); outputs likewise.
  std::vector<std::vector<std::vector<bf16>>> inputs(sizes), ar_out(sizes), rs_out(sizes);
  for (size_t s = 0; s < sizes; ++s) {
    const size_t count = static_cast<size_t>(n) * options.count_multipliers[s];
    for (int r = 0; r < n; ++r) inputs[s].push_back(spread_values(rng, count));
    ar_out[s].resize(n);
    rs_out[s].resize(n);
  }
  const cuda::NcclUniqueId id = cuda::new_nccl_unique_id();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        cuda::NcclCommunicator::Options comm_options;
        comm_options.orders = {ReduceOrder::fixed, ReduceOrder::fixed, ReduceOrder::ring};
        comm_options.watchdog = std::chrono::minutes(2);
        comm_options.init_timeout = std::chrono::minutes(2);
        cuda::NcclCommunicator comm(r, n, id, r, comm_options);
        for (size_t s = 0; s < sizes; ++s) {
          const size_t multiplier = options.count_multipliers[s];
          const size_t count = static_cast<size_t>(n) * multiplier;
          cuda::DeviceBf16Buffer message(count, r), blocks(count, r), block(multiplier, r);
          message.upload(inputs[s][r], comm.stream());
          blocks.upload(inputs[s][r], comm.stream());
          comm.all_reduce(message.data(), count);
          comm.reduce_scatter(blocks.data(), block.data(), multiplier);
          comm.synchronize();
          ar_out[s][r] = message.download(comm.stream());
          rs_out[s][r] = block.download(comm.stream());
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!errors[r].empty()) {
      throw std::runtime_error(
          "nccl fingerprint: the fixed order of NcclCommunicator failed on "
          "rank " +
          std::to_string(r) + ": " + errors[r]);
    }
  }
  for (size_t s = 0; s < sizes; ++s) {
    const size_t multiplier = options.count_multipliers[s];
    const size_t count = static_cast<size_t>(n) * multiplier;
    std::vector<const bf16*> input_ptrs(n);
    for (int r = 0; r < n; ++r) input_ptrs[r] = inputs[s][r].data();
    f.entries.push_back(compare_with_models("all_reduce", "bih_fixed", count, multiplier,
                                            input_ptrs, ar_out[s], models, {"fixed"}));
    f.entries.push_back(compare_with_models("reduce_scatter", "bih_fixed", count, multiplier,
                                            input_ptrs, rs_out[s], models, {"fixed"}));
  }
}

}  // namespace

bool Fingerprint::claim_met() const {
  if (!supported || entries.empty()) return false;
  return std::all_of(entries.begin(), entries.end(), [](const auto& e) { return e.claim_met; });
}

std::vector<std::string> claimed_all_reduce_models(const std::string& nccl_algo) {
  std::string a = nccl_algo;
  std::transform(a.begin(), a.end(), a.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool excludes = a.find('^') != std::string::npos;  // "^ring": anything but ring
  const bool tree = a.find("tree") != std::string::npos;
  const bool ring = a.find("ring") != std::string::npos;
  if (tree != ring) return {(tree != excludes) ? "tree" : "ring"};
  return {"ring", "tree"};  // unset, both named, or neither: NCCL picks per size
}

Fingerprint run_fingerprint(const FingerprintOptions& options) {
  Fingerprint f;
  // NVLink multicast (NVLS) reduces in the switch, outside every order model: always off.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("NCCL_", 0) != 0) continue;
    const size_t eq = kv.find('=');
    f.nccl_env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess) {
    f.nccl_version = std::to_string(version / 10000) + "." + std::to_string((version / 100) % 100) +
                     "." + std::to_string(version % 100);
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  f.gpus = n;
  if (n < 2) {
    f.reason = "needs at least 2 GPUs in one process; found " + std::to_string(n);
    return f;
  }
  if (n > kMaxRanks) {
    f.reason = "more GPUs (" + std::to_string(n) + ") than the order models accept";
    return f;
  }
  f.supported = true;
  f.orders_coincide = n == 2;
  f.validated = n >= 3;
  if (n == 2) {
    f.note =
        "not validated: at n=2 every order model gives the same bits (one commutative add), so "
        "agreement says nothing about NCCL's order; validating the emulated orders needs n>=3 "
        "GPUs";
  } else if (n > options.max_ranks_for_all_rings) {
    f.note = "n=" + std::to_string(n) + ": only the ring order 0..n-1 is tried";
  }

  const auto algo = f.nccl_env.find("NCCL_ALGO");
  const std::vector<std::string> all_reduce_claim =
      claimed_all_reduce_models(algo == f.nccl_env.end() ? "" : algo->second);
  const std::vector<Model> models = candidate_models(n, options.max_ranks_for_all_rings);
  std::mt19937 rng(options.seed + 4242u);
  add_nccl_entries(n, options, models, all_reduce_claim, rng, f);
  if (options.check_fixed_order) add_fixed_order_entries(n, options, models, rng, f);
  return f;
}

nlohmann::json to_json(const Fingerprint& f) {
  nlohmann::json j = {{"supported", f.supported},
                      {"reason", f.reason},
                      {"gpus", f.gpus},
                      {"nccl_version", f.nccl_version},
                      {"nccl_env", f.nccl_env},
                      {"orders_coincide", f.orders_coincide},
                      {"validated", f.validated},
                      {"note", f.note},
                      {"claim_met", f.claim_met()}};
  j["entries"] = nlohmann::json::array();
  for (const auto& e : f.entries) {
    nlohmann::json models = nlohmann::json::object();
    for (const auto& m : e.models) {
      models[m.model] = {{"positions_matched", m.positions_matched},
                         {"fraction", e.positions ? static_cast<double>(m.positions_matched) /
                                                        static_cast<double>(e.positions)
                                                  : 0.0}};
    }
    j["entries"].push_back({{"collective", e.collective},
                            {"via", e.via},
                            {"count_per_rank", e.count_per_rank},
                            {"positions", e.positions},
                            {"models", models},
                            {"claimed", e.claimed},
                            {"claim_met", e.claim_met},
                            {"matched_model", e.matched_model},
                            {"error", e.error}});
  }
  return j;
}

std::string render(const Fingerprint& f) {
  std::string out = "NCCL " + (f.nccl_version.empty() ? std::string("?") : f.nccl_version) + ", " +
                    std::to_string(f.gpus) + " GPUs";
  for (const auto& [k, v] : f.nccl_env) out += ", " + k + "=" + v;
  out += "\n";
  if (!f.supported) return out + "unsupported: " + f.reason + "\n";
  if (!f.note.empty()) out += f.note + "\n";
  for (const auto& e : f.entries) {
    char head[128];
    std::snprintf(head, sizeof head, "  %-14s via %-9s count=%-9zu ", e.collective.c_str(),
                  e.via.c_str(), e.count_per_rank);
    out += head;
    if (!e.error.empty()) {
      out += "error: " + e.error + "\n";
      continue;
    }
    for (const auto& m : e.models) {
      char cell[96];
      std::snprintf(cell, sizeof cell, "%s %.4f  ", m.model.c_str(),
                    static_cast<double>(m.positions_matched) / static_cast<double>(e.positions));
      out += cell;
    }
    std::string claimed;
    for (const auto& c : e.claimed) claimed += (claimed.empty() ? "" : "|") + c;
    out +=
        "claim " + claimed + ": " + (e.claim_met ? "met by " + e.matched_model : "NOT met") + "\n";
  }
  return out;
}

}  // namespace bih::nccl
