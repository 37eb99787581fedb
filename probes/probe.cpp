// probe.cpp: the probe engine of probe.hpp: sweep driver, filters, table, JSON, exit code; and the
// backend plumbing of probe_backend.hpp (the CUDA hook, the threads of an emulated group's ranks).
#include "probes/probe.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <exception>
#include <set>
#include <stdexcept>
#include <thread>

#include "base/errors.hpp"
#include "models/comm/communicator.hpp"
#include "probes/probe_backend.hpp"

namespace bih::probe {
namespace {

std::function<Result(const SweepOptions&)>& nccl_runner_slot() {
  static std::function<Result(const SweepOptions&)> runner;
  return runner;
}

CudaBackendHook& cuda_hook_slot() {
  static CudaBackendHook hook;
  return hook;
}

std::string hex(uint32_t bits, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, width == 16 ? "0x%04x" : "0x%08x", bits);
  return buf;
}

// Glob with * (any run) and ? (one character), over the whole string.
bool glob_match(const char* pattern, const char* text) {
  if (*pattern == '\0') return *text == '\0';
  if (*pattern == '*') {
    for (const char* t = text;; ++t) {
      if (glob_match(pattern + 1, t)) return true;
      if (*t == '\0') return false;
    }
  }
  if (*text == '\0') return false;
  return (*pattern == '?' || *pattern == *text) && glob_match(pattern + 1, text + 1);
}

}  // namespace

std::string to_string(Status s) {
  switch (s) {
    case Status::invariant:
      return "invariant";
    case Status::variant:
      return "variant";
    case Status::unsupported:
      return "unsupported";
    case Status::model_match:
      return "model_match";
    case Status::model_mismatch:
      return "model_mismatch";
  }
  return "?";
}

std::string to_string(Expect e) {
  switch (e) {
    case Expect::invariant:
      return "invariant";
    case Expect::variant:
      return "variant";
    case Expect::model_match:
      return "model_match";
  }
  return "?";
}

std::vector<int> SweepOptions::default_batch_sizes() {
  std::vector<int> sizes(64);
  for (int m = 1; m <= 64; ++m) sizes[m - 1] = m;
  return sizes;
}

std::vector<int> probed_positions(int M, bool exhaustive) {
  std::vector<int> positions;
  if (exhaustive) {
    for (int p = 0; p < M; ++p) positions.push_back(p);
    return positions;
  }
  for (int p : {0, M / 2, M - 1}) {
    if (std::find(positions.begin(), positions.end(), p) == positions.end()) positions.push_back(p);
  }
  return positions;
}

std::string format_batch_sizes(const std::vector<int>& sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size();) {
    size_t j = i;
    while (j + 1 < sizes.size() && sizes[j + 1] == sizes[j] + 1) ++j;
    if (!out.empty()) out += '|';
    out += std::to_string(sizes[i]);
    if (j > i) out += ".." + std::to_string(sizes[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_batch_sizes(const std::string& text, const std::string& option) {
  const auto bad = [&](const std::string& why) {
    return InputError(option + " '" + text + "': " + why +
                      "; expected sizes from 1 to 4096 as a list and/or ranges, e.g. 1..64 or "
                      "1,2,8,16..32");
  };
  std::set<int> sizes;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const size_t dots = item.find("..");
    int lo = 0, hi = 0;
    try {
      size_t used = 0;
      if (dots == std::string::npos) {
        lo = hi = std::stoi(item, &used);
        if (used != item.size()) throw bad("'" + item + "' is not a number");
      } else {
        const std::string a = item.substr(0, dots), b = item.substr(dots + 2);
        lo = std::stoi(a, &used);
        if (used != a.size()) throw bad("'" + a + "' is not a number");
        hi = std::stoi(b, &used);
        if (used != b.size()) throw bad("'" + b + "' is not a number");
      }
    } catch (const std::logic_error&) {
      throw bad("'" + item + "' is not a size or a range");
    }
    if (lo < 1 || hi > 4096 || lo > hi) throw bad("'" + item + "' is out of range");
    for (int m = lo; m <= hi; ++m) sizes.insert(m);
    start = end + 1;
  }
  if (sizes.empty()) throw bad("no sizes");
  return {sizes.begin(), sizes.end()};
}

std::string format_positions(bool exhaustive) { return exhaustive ? "all" : "first|middle|last"; }

uint64_t ulp_distance(uint32_t a, uint32_t b, int bit_width) {
  // Map sign-magnitude onto a monotone integer line on which adjacent values differ by one
  // (-0 and +0 are one apart).
  const auto ordered = [bit_width](uint32_t bits) -> int64_t {
    const uint32_t sign = bit_width == 16 ? 0x8000u : 0x80000000u;
    const int64_t magnitude = bits & (sign - 1);
    return (bits & sign) ? -magnitude - 1 : magnitude;
  };
  const int64_t d = ordered(a) - ordered(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

bool meets_expectation(const Result& r) {
  switch (r.status) {
    case Status::unsupported:
      return true;
    case Status::invariant:
      return r.expect == Expect::invariant;
    case Status::variant:
      return r.expect == Expect::variant;
    case Status::model_match:
      return r.expect == Expect::model_match;
    case Status::model_mismatch:
      return false;
  }
  return false;
}

Result sweep(const std::string& id, const std::string& op, Expect expect, const SweepSpec& spec,
             const BatchRunner& run, const SweepOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  Result result;
  result.id = id;
  result.op = op;
  result.expect = expect;
  std::optional<Difference> first_batch_difference;   // vs the bs=1 reference
  std::optional<Difference> first_repeat_difference;  // run 2 vs run 1, same batch
  std::vector<RowBits> first_run_rows;  // run 1's rows: [batch index][position][column]

  std::vector<uint32_t> reference;
  for (int r = 1; r <= spec.runs; ++r) {
    // The filler stream restarts each run: run 2 sees exactly run 1's batches.
    std::mt19937 filler(options.seed * 7919u + 17u);
    const RowBits alone = run(Batch{1, {0}, true}, filler);
    if (r == 1) reference = alone.at(0);
    const auto compare = [&](int M, int position, const std::vector<uint32_t>& got,
                             const std::vector<uint32_t>& want, std::optional<Difference>& slot) {
      if (slot || got == want) return;
      for (size_t c = 0; c < got.size() && c < want.size(); ++c) {
        if (got[c] != want[c]) {
          slot = Difference{
              r,       M,      position,       static_cast<int>(c),
              want[c], got[c], spec.bit_width, ulp_distance(want[c], got[c], spec.bit_width)};
          return;
        }
      }
      slot = Difference{r, M, position,       static_cast<int>(std::min(got.size(), want.size())),
                        0, 0, spec.bit_width, 0};  // lengths differ: a broken runner
    };
    if (r > 1) compare(1, 0, alone.at(0), reference, first_repeat_difference);
    for (size_t b = 0; b < options.batch_sizes.size(); ++b) {
      const int M = options.batch_sizes[b];
      const std::vector<int> positions = probed_positions(M, options.exhaustive);
      RowBits rows = run(Batch{M, positions, false}, filler);
      for (size_t i = 0; i < positions.size(); ++i) {
        compare(M, positions[i], rows.at(i), reference, first_batch_difference);
        if (r > 1) compare(M, positions[i], rows[i], first_run_rows[b][i], first_repeat_difference);
        ++result.rows_compared;
      }
      if (r == 1 && spec.runs > 1) first_run_rows.push_back(std::move(rows));
    }
  }

  const auto describe = [](const Difference& d) {
    return "M=" + std::to_string(d.batch_size) + " pos=" + std::to_string(d.position) +
           " col=" + std::to_string(d.column) + ": " + hex(d.reference_bits, d.bit_width) + " vs " +
           hex(d.got_bits, d.bit_width) + " (" + std::to_string(d.ulp) + " ulp)";
  };
  if (first_repeat_difference) {
    result.status = Status::variant;
    result.nondeterministic = true;
    result.first_difference = first_repeat_difference;
    result.detail =
        "nondeterministic: run 2 differs from run 1 at " + describe(*first_repeat_difference);
    if (first_batch_difference && first_batch_difference->run == 1) {
      result.detail += "; vs bs=1 first at " + describe(*first_batch_difference);
    }
  } else if (first_batch_difference) {
    result.status = Status::variant;
    result.first_difference = first_batch_difference;
    result.detail = "first differs from bs=1 at " + describe(*first_batch_difference);
  } else {
    result.status = Status::invariant;
    result.detail = std::to_string(result.rows_compared) + " rows bitwise equal to bs=1" +
                    (spec.runs > 1 ? " in " + std::to_string(spec.runs) + " runs" : "");
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases = kernel_cases();
  for (auto& c : collective_cases()) cases.push_back(std::move(c));
  return cases;
}

void set_nccl_runner(std::function<Result(const SweepOptions&)> runner) {
  nccl_runner_slot() = std::move(runner);
}

const std::function<Result(const SweepOptions&)>& nccl_runner() { return nccl_runner_slot(); }

void set_cuda_backend(CudaBackendHook hook) { cuda_hook_slot() = std::move(hook); }

BackendChoice backend_choice(Backend backend) {
  if (backend == Backend::cpu) return {make_cpu_backend, ""};
  const CudaBackendHook& hook = cuda_hook_slot();
  if (!hook.make) return {{}, kBuiltWithoutCuda};
  std::string why = hook.unavailable ? hook.unavailable() : "";
  if (!why.empty()) return {{}, std::move(why)};
  return {hook.make, ""};
}

void run_ranks(int ranks, const std::function<void(int rank)>& body,
               const std::function<void(const std::string& why)>& abort) {
  std::vector<std::exception_ptr> failures(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        failures[r] = std::current_exception();
        try {
          abort("rank " + std::to_string(r) + " failed");
        } catch (...) {  // the rank's own failure is the one to report
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::exception_ptr aborted;
  for (const std::exception_ptr& f : failures) {
    if (!f) continue;
    try {
      std::rethrow_exception(f);
    } catch (const CommAborted&) {
      if (!aborted) aborted = f;
    }  // anything else leaves here: a rank's own failure
  }
  if (aborted) std::rethrow_exception(aborted);
}

bool filter_matches(const std::string& filter, const std::string& op, const std::string& id) {
  if (filter == "all") return true;
  if (filter.find_first_of("*?(") != std::string::npos) {
    return glob_match(filter.c_str(), id.c_str());
  }
  if (filter.find('=') == std::string::npos) return filter == op;
  // key=value[,key=value...]: each one a whole item of the id's list.
  size_t start = 0;
  while (start <= filter.size()) {
    const size_t end = std::min(filter.find(',', start), filter.size());
    const std::string item = filter.substr(start, end - start);
    if (id.find("(" + item + ",") == std::string::npos &&
        id.find("," + item + ",") == std::string::npos &&
        id.find("," + item + ")") == std::string::npos) {
      return false;
    }
    start = end + 1;
  }
  return true;
}

std::vector<Case> select_cases(const std::vector<Case>& cases,
                               const std::vector<std::string>& filters,
                               const SweepOptions& options) {
  std::vector<Case> selected;
  std::vector<bool> taken(cases.size(), false);
  for (const std::string& filter : filters) {
    bool any = false;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (!filter_matches(filter, cases[i].op, cases[i].id(options))) continue;
      any = true;
      if (!taken[i]) taken[i] = true;
    }
    if (!any) {
      std::string ops;
      std::set<std::string> seen;
      for (const Case& c : cases) {
        if (seen.insert(c.op).second) ops += (ops.empty() ? "" : ", ") + c.op;
      }
      throw InputError("probe filter '" + filter + "' selects no case; valid: 'all', an op name (" +
                       ops +
                       "), items of an id (e.g. backend=cuda or family=vendor,backend=cuda) or a "
                       "glob over a canonical id, e.g. 'gemm(family=vendor*' (bih probe --list "
                       "prints the ids)");
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    if (taken[i]) selected.push_back(cases[i]);
  }
  return selected;
}

std::vector<Result> run_cases(const std::vector<Case>& cases, const SweepOptions& options,
                              const std::function<void(const Result&)>& on_result) {
  std::vector<Result> results;
  for (const Case& c : cases) {
    Result r;
    if (c.run) {
      r = c.run(options);
    } else {
      r.id = c.id(options);
      r.op = c.op;
      r.expect = c.expect;
      r.status = Status::unsupported;
      r.detail = c.unsupported_reason;
    }
    if (on_result) on_result(r);
    results.push_back(std::move(r));
  }
  return results;
}

std::string render_table(const std::vector<Result>& results) {
  size_t id_width = 2;
  for (const Result& r : results) id_width = std::max(id_width, r.id.size());
  std::string out =
      "  id" + std::string(id_width - 2, ' ') + "  status          expect       detail\n";
  int counts[5] = {0, 0, 0, 0, 0};
  int unmet = 0;
  for (const Result& r : results) {
    const bool ok = meets_expectation(r);
    unmet += !ok;
    ++counts[static_cast<int>(r.status)];
    std::string row = ok ? "  " : "✗ ";
    row += r.id + std::string(id_width - r.id.size(), ' ') + "  ";
    std::string status = to_string(r.status);
    row += status + std::string(status.size() < 16 ? 16 - status.size() : 1, ' ');
    std::string expect = r.status == Status::unsupported ? "-" : to_string(r.expect);
    row += expect + std::string(expect.size() < 13 ? 13 - expect.size() : 1, ' ');
    out += row + r.detail + "\n";
  }
  out += std::to_string(results.size()) + " probes: ";
  bool first = true;
  for (Status s : {Status::invariant, Status::variant, Status::unsupported, Status::model_match,
                   Status::model_mismatch}) {
    if (counts[static_cast<int>(s)] == 0) continue;
    out += (first ? "" : ", ") + std::to_string(counts[static_cast<int>(s)]) + " " + to_string(s);
    first = false;
  }
  out += "; " + std::to_string(unmet) + " not as claimed\n";
  return out;
}

nlohmann::json to_json(const std::vector<Result>& results, const SweepOptions& options) {
  nlohmann::json j;
  j["schema"] = "bih.probe/1";
  j["options"] = {{"batch_sizes", format_batch_sizes(options.batch_sizes)},
                  {"positions", format_positions(options.exhaustive)},
                  {"seed", options.seed}};
  j["results"] = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json e = {{"id", r.id},
                        {"op", r.op},
                        {"status", to_string(r.status)},
                        {"expect", to_string(r.expect)},
                        {"as_claimed", meets_expectation(r)},
                        {"detail", r.detail},
                        {"nondeterministic", r.nondeterministic},
                        {"rows_compared", r.rows_compared},
                        {"wall_s", r.wall_s}};
    if (r.first_difference) {
      const Difference& d = *r.first_difference;
      e["first_difference"] = {{"run", d.run},
                               {"batch_size", d.batch_size},
                               {"position", d.position},
                               {"column", d.column},
                               {"reference_bits", hex(d.reference_bits, d.bit_width)},
                               {"got_bits", hex(d.got_bits, d.bit_width)},
                               {"ulp", d.ulp}};
    } else {
      e["first_difference"] = nullptr;
    }
    if (!r.extra.is_null()) e["extra"] = r.extra;
    j["results"].push_back(std::move(e));
  }
  return j;
}

int exit_code(const std::vector<Result>& results) {
  for (const Result& r : results) {
    if (!meets_expectation(r)) return static_cast<int>(ExitCode::conformance_failure);
  }
  return static_cast<int>(ExitCode::ok);
}

}  // namespace bih::probe
