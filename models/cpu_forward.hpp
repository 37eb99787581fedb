// cpu_forward.hpp: the CPU backend's forward step, every TP rank on its own thread.
//
// Each rank holds its shard of the weights (tp_shard.hpp) and its slice of the paged KV cache, runs
// the Qwen3 decoder on the step's rows with the kernels of models/cpu/, and combines partial sums
// through its Communicator (emulated: models/comm/). Trace capture records every op's output for
// the traced rows, for `bih explain`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/forward.hpp"
#include "models/tp_shard.hpp"
#include "models/weights.hpp"

namespace bih {

class CpuForward final : public ForwardBackend {
 public:
  // `comms[r]` is rank r's communicator (size tp); they must outlive this object.
  CpuForward(std::shared_ptr<const ModelWeights> weights, EngineOptions options,
             std::vector<Communicator*> comms);
  ~CpuForward() override;

  void run(StepBatch& step) override;
  std::string describe() const override { return "cpu"; }

 private:
  struct RankState;
  void forward_rank(int rank, StepBatch& step);

  std::shared_ptr<const ModelWeights> weights_;
  EngineOptions options_;
  std::vector<Communicator*> comms_;
  cpu::RopeTable rope_;
  int num_blocks_ = 0;
  std::vector<std::unique_ptr<RankState>> ranks_;
};

}  // namespace bih
