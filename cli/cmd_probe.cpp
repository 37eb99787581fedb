// cmd_probe.cpp: `bih probe OP...`: op-level invariance probes without a model (probes/).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/atomic_file.hpp"
#include "cli/commands.hpp"
#include "probes/probe.hpp"
#if defined(BIH_HAVE_CUDA)
#include "probes/cuda_probes.hpp"
#endif
#if defined(BIH_HAVE_NCCL)
#include "probes/nccl_fingerprint.hpp"
#endif

namespace bih::cli {
namespace {

#if defined(BIH_HAVE_NCCL)
// The NCCL case's result: model_match when the claimed order model reproduces every position of
// every size and collective; the whole fingerprint goes to the result's "extra".
probe::Result run_nccl_probe(const probe::SweepOptions& options) {
  nccl::FingerprintOptions fo;
  fo.seed = options.seed;
  const nccl::Fingerprint f = nccl::run_fingerprint(fo);
  std::fputs(nccl::render(f).c_str(), stdout);
  probe::Result r;
  r.extra = nccl::to_json(f);
  if (!f.supported) {
    r.status = probe::Status::unsupported;
    r.detail = f.reason;
    return r;
  }
  r.status = f.claim_met() ? probe::Status::model_match : probe::Status::model_mismatch;
  size_t met = 0;
  for (const auto& e : f.entries) met += e.claim_met;
  r.detail = std::to_string(f.gpus) + " GPUs, NCCL " + f.nccl_version + ": claimed model met in " +
             std::to_string(met) + "/" + std::to_string(f.entries.size()) +
             " (collective, size) entries" + (f.note.empty() ? "" : "; " + f.note);
  return r;
}
#endif

}  // namespace

Command add_probe_command(CLI::App& app) {
  struct Args {
    std::vector<std::string> filters;
    std::string batch_sizes = "1..64";
    bool exhaustive = false;
    unsigned seed = 0;
    std::string json;
    bool list = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Op-level invariance probes without a model: each kernel and collective is run on a row "
      "alone and inside batches, and compared bitwise (exit 1 when an op is not as its family or "
      "order model claims)");
  cmd->add_option("ops", args->filters,
                  "What to probe: 'all', an op name (gemm, rms_norm, add_rms_norm, "
                  "head_norm_rope, silu_mul, embedding, attention, greedy_sample, all_reduce, "
                  "reduce_scatter, all_gather, nccl), items of the ids (e.g. backend=cuda, tp=4, "
                  "'family=vendor,backend=cpu') or a glob over canonical ids, e.g. "
                  "'gemm(family=vendor*'. Every op has cpu and cuda cases; the cuda ones report "
                  "unsupported, with the reason, where this build has no CUDA or no GPU is visible")
      ->required();
  cmd->add_option("--batch-sizes", args->batch_sizes,
                  "Batch sizes M to sweep, e.g. 1..64 or 1,8,64")
      ->capture_default_str();
  cmd->add_flag("--exhaustive", args->exhaustive,
                "Probe every row position of every batch, not only first, middle and last");
  cmd->add_option("--seed", args->seed, "Seed of all random data")->capture_default_str();
  cmd->add_option("--json", args->json, "Also write the results as JSON to FILE (atomically)");
  cmd->add_flag("--list", args->list,
                "Print the selected canonical ids, each with the reason when it cannot run here, "
                "and run nothing");
  return {cmd, [args] {
#if defined(BIH_HAVE_CUDA)
            probe::install_cuda_backend();
#endif
#if defined(BIH_HAVE_NCCL)
            probe::set_nccl_runner(run_nccl_probe);
#endif
            probe::SweepOptions options;
            options.batch_sizes = probe::parse_batch_sizes(args->batch_sizes, "--batch-sizes");
            options.exhaustive = args->exhaustive;
            options.seed = args->seed;
            const std::vector<probe::Case> cases =
                probe::select_cases(probe::all_cases(), args->filters, options);
            if (args->list) {
              for (const auto& c : cases) {
                const std::string id = c.id(options);
                if (c.run) {
                  std::printf("%s\n", id.c_str());
                } else {
                  std::printf("%s  (unsupported here: %s)\n", id.c_str(),
                              c.unsupported_reason.c_str());
                }
              }
              return 0;
            }
            const std::vector<probe::Result> results = probe::run_cases(cases, options);
            std::fputs(probe::render_table(results).c_str(), stdout);
            if (!args->json.empty()) {
              write_file_atomically(args->json, probe::to_json(results, options).dump(2) + "\n");
            }
            return probe::exit_code(results);
          }};
}

}  // namespace bih::cli
