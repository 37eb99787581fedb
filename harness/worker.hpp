// worker.hpp: `bih worker`, one scenario's generations in one process.
//
// The driver runs every scenario in a child process (one per GPU for NCCL ranks) so that a crash,
// an abort or a hang becomes an `error` verdict and the run goes on. The worker reads the resolved
// scenario, builds the model and the engine (emulated TP ranks as threads), runs its share of the
// plan and writes one generation dump per
// generation, plus meta.json (model identity, timings), into its work folder. It reports progress
// on stdout as lines "@progress TEXT" that the driver shows.
#pragma once

#include <string>

namespace bih {

struct WorkerArgs {
  std::string scenario_file;  // resolved scenario JSON written by the driver
  std::string work_dir;       // where dumps go
  bool fresh = false;         // run the plan's fresh-process generations instead of the main ones
  // ranks: nccl: this process is TP rank `rank` (GPU `rank`), joining the NCCL communicator of
  // `nccl_unique_id` (hex, made by the driver). Rank 0 writes the dumps; the others only compute.
  int rank = -1;
  std::string nccl_unique_id;
};

// Returns the process exit code (0 on success); throws InputError / InfraError on failure.
int run_worker(const WorkerArgs& args);

// File name of a generation dump in a work folder: "gen-bs=64#2.json" made filesystem-safe.
std::string generation_file_name(const std::string& label);

}  // namespace bih
