// probe.hpp: op-level invariance probes (`bih probe OP`): cases, statuses and the sweep driver.
//
// A probe answers one question without a model: does one op give a row the same bits whatever
// batch it runs in? Each case has a canonical id naming everything that fixes its numbers, e.g.
//   gemm(family=vendor,dtype=bf16,n=256,k=768,m=1..64,pos=all,backend=cpu)
// The driver computes a reference row alone (M=1), then runs batches of every swept size M with
// that same row at the probed positions (first, middle, last; or all of them) and fresh random
// rows elsewhere, and compares the row's output bits with the reference. Collective probes also
// run the sweep twice, so a run-to-run difference shows up as `nondeterministic`.
// One thin file per op family registers its cases: kernel_probes.cpp, collective_probes.cpp; each
// case of both backends, cpu and cuda, runs its op through a backend (probe_backend.hpp). The CUDA
// backend is a CUDA leaf that the CLI installs; without it, or without a visible GPU, the CUDA
// cases are listed as `unsupported` with the reason.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace bih::probe {

// invariant / variant / unsupported are the op probes' answers; the NCCL fingerprint answers
// whether the emulated order model it claims reproduces real NCCL's bits.
enum class Status { invariant, variant, unsupported, model_match, model_mismatch };
std::string to_string(Status s);

// What the op's family or order model claims (DESIGN.md), checked against the status.
enum class Expect { invariant, variant, model_match };
std::string to_string(Expect e);

struct SweepOptions {
  std::vector<int> batch_sizes = default_batch_sizes();  // every M to try; 1 is the reference
  bool exhaustive = false;  // every row position of every batch, not only first/middle/last
  uint32_t seed = 0;        // all random data derives from it
  static std::vector<int> default_batch_sizes();  // 1..64
};

// The positions probed in a batch of M rows: {0, M/2, M-1} deduplicated, or 0..M-1.
std::vector<int> probed_positions(int M, bool exhaustive);

// "1..64", "1..8|16|32..64": the id's spelling of a batch-size list (runs of consecutive sizes
// become ranges; '|' separates, so ids keep ',' for their own key=value list).
std::string format_batch_sizes(const std::vector<int>& sizes);
// "1..64", "1,2,8", "1..8,16" -> sizes (sorted, unique). Throws InputError naming `option`.
std::vector<int> parse_batch_sizes(const std::string& text, const std::string& option);
// "all" when exhaustive, "first|middle|last" otherwise.
std::string format_positions(bool exhaustive);

// The first place where a row's bits differ from its reference.
struct Difference {
  int run = 1;         // 1, or 2 for the repeat of a nondeterminism check
  int batch_size = 0;  // M
  int position = 0;    // the row's index in the batch
  int column = 0;      // output element within the row
  uint32_t reference_bits = 0;
  uint32_t got_bits = 0;
  int bit_width = 16;  // 16 (bf16) or 32 (fp32 / int32)
  uint64_t ulp = 0;    // distance in representable values (same-width ordering)
};

struct Result {
  std::string id;
  std::string op;
  Status status = Status::unsupported;
  Expect expect = Expect::invariant;
  std::string detail;  // why unsupported, the first difference, a summary
  std::optional<Difference> first_difference;
  bool nondeterministic = false;  // the repeat run differed from the first
  int64_t rows_compared = 0;
  double wall_s = 0;
  nlohmann::json extra;  // case-specific facts (the NCCL fingerprint's table)
};

// Whether a result agrees with its claim. An unsupported case claims nothing on this machine.
bool meets_expectation(const Result& r);

// One registered case. `run` is empty for a case this build cannot run; then `unsupported_reason`
// says why and the case is still listed, never silently skipped.
struct Case {
  std::string op;
  std::function<std::string(const SweepOptions&)> id;  // canonical id under the options
  Expect expect = Expect::invariant;
  std::function<Result(const SweepOptions&)> run;
  std::string unsupported_reason;
};

// Rows of an op's output as bit patterns: [positions][columns], one uint32 per element.
using RowBits = std::vector<std::vector<uint32_t>>;
// One batch to run: M rows; every row at `positions` is the reference row, every other row is
// fresh data drawn from `filler`. `reference` marks the reference computation itself (M=1), for
// probes whose reference differs from a batched M=1 run (a prefix-cache hit reads other blocks).
struct Batch {
  int M = 1;
  std::vector<int> positions;
  bool reference = false;
};
// Returns the output bits of the rows at batch.positions, in that order.
using BatchRunner = std::function<RowBits(const Batch& batch, std::mt19937& filler)>;

struct SweepSpec {
  int bit_width = 16;  // of the output elements
  int runs = 1;        // 2: repeat the sweep and flag run-to-run differences
};

// The sweep driver: reference = run(1, {0}); then every M of options.batch_sizes with the probed
// positions; bitwise comparison; the first difference (run 1 before run 2) is reported.
Result sweep(const std::string& id, const std::string& op, Expect expect, const SweepSpec& spec,
             const BatchRunner& run, const SweepOptions& options);

// ULP distance between two bit patterns of the given width (bf16 when 16, binary32 when 32).
uint64_t ulp_distance(uint32_t a, uint32_t b, int bit_width);

// ---- registry and selection ----------------------------------------------------------------
// The cases of this binary and machine: a CUDA case can run only once the CUDA backend is
// installed (set_cuda_backend in probe_backend.hpp) and sees a GPU; call these after installing.
std::vector<Case> kernel_cases();      // cpu, then cuda
std::vector<Case> collective_cases();  // cpu, then cuda emulated groups, then nccl
std::vector<Case> all_cases();         // kernels, then collectives

// The NCCL fingerprint lives in the CUDA leaf; the CLI installs it where this build has NCCL.
void set_nccl_runner(std::function<Result(const SweepOptions&)> runner);
const std::function<Result(const SweepOptions&)>& nccl_runner();  // empty when none installed

// A filter selects cases: "all"; an op name ("gemm", "nccl"); key=value items that must each be a
// whole item of the id ("backend=cuda", "family=vendor,backend=cuda"); or a glob (* and ?) over
// the whole canonical id, e.g. 'gemm(family=vendor*'. Throws InputError for a filter that selects
// nothing, listing the op names.
bool filter_matches(const std::string& filter, const std::string& op, const std::string& id);
std::vector<Case> select_cases(const std::vector<Case>& cases,
                               const std::vector<std::string>& filters,
                               const SweepOptions& options);

// Runs the cases in order; on_result sees each result as it is made (for progress output).
std::vector<Result> run_cases(const std::vector<Case>& cases, const SweepOptions& options,
                              const std::function<void(const Result&)>& on_result = {});

// The terminal table: mark, id, status, expect, detail; then a totals line.
std::string render_table(const std::vector<Result>& results);
// {"schema": "bih.probe/1", "options": ..., "results": [...]}.
nlohmann::json to_json(const std::vector<Result>& results, const SweepOptions& options);
// 0 when every result meets its expectation, 1 otherwise (a conformance failure).
int exit_code(const std::vector<Result>& results);

}  // namespace bih::probe
