// bench_cuda_gemm.cpp: the invariant GEMM against cuBLAS's default heuristics, side by side.
//
// One benchmark per (qwen3-1.7b shape, M) times both families in the same iteration, interleaved,
// with CUDA events, and reports inv_TFLOPs, vendor_TFLOPs and ratio = invariant / vendor
// throughput. The iteration time Google Benchmark prints is the invariant family's time per GEMM;
// the label names the invariant configuration serving that M (the reference or a companion, see
// models/cuda/gemm.hpp). Before the table: per shape, every invariant configuration with its M
// range, the companion search's notes (and the pin time), and the vendor's choice at each M.
// Weights and activations rotate over enough copies to exceed twice the L2 cache (where that
// takes at most 8 copies), so small shapes are timed from HBM as in a real decode step.
//
// After the table, per M, a model step's GEMM time in both families: num_layers x (qkv, o_proj,
// gate_up, down) + lm_head, from the measured times (lm_head at the same M, as in a prefill that
// samples every row; a decode step at batch size M is exactly that).
//
// Skinny/<shape>/M=...: the own skinny tensor-core kernel (gemm_skinny.hpp) launched directly,
// whether or not it serves a band, against the vendor family at the same M: its time, the weight
// bytes it reads per second (weight_TBps) and speedup = vendor time / skinny time.
//
// StepGemms/M=...: one decode step's GEMMs as the engine runs them: every layer's qkv, o_proj,
// gate_up and down on that layer's own weights, then lm_head, captured in one CUDA graph per
// family and replayed, so launch gaps and programmatic dependent launch are those of a full-graph
// step, and each weight is read once from HBM (3.44 GB at qwen3-1.7b: no L2 reuse). Counters:
// <family>_ms per step and <family>_copy, the step's weight bytes per second as a fraction of the
// copy bandwidth measured in the same run (issue 18's target: 0.75 at M=1).
//
// Flags: --pin_m=N (the reference's heuristic M), --companions=0 (the reference for every M, as
// before companions), --skinny=N (the skinny kernel offered to bands up to M=N), --ms=1,64,512,4096
// (the Ms measured).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cuda/copy_bandwidth.hpp"
#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cuda/check.hpp"
#include "models/cuda/cuda_handles.hpp"
#include "models/cuda/device_info.hpp"
#include "models/cuda/gemm.hpp"
#include "models/cuda/gemm_skinny.hpp"

namespace {

using bih::bf16;
using bih::KernelFamily;

using Shape = bih::LinearShape;
const std::vector<Shape> kShapes = bih::linear_shapes(*bih::preset_config("qwen3-1.7b"));
std::vector<int> g_ms = {1, 64, 512, 4096};

// Seconds per GEMM measured for (shape name, M): invariant, vendor.
// Seconds per launch of each family at (shape, M), for the step summary.
struct FamilySeconds {
  double invariant = 0, vendor = 0, tp_invariant = 0;
};
std::map<std::pair<std::string, int>, FamilySeconds> g_seconds;

// Set from the flags before the first use (compare pinning choices without rebuilding).
bih::cuda::CudaGemmOptions g_options;

bih::cuda::CudaGemm& shared_gemm() {
  static bih::cuda::CudaGemm gemm(g_options);
  return gemm;
}

// A device buffer filled with small bf16 values (the values do not change the timing much, but
// zeros could take shortcuts in hardware power management).
struct DeviceBf16 {
  bf16* p = nullptr;
  explicit DeviceBf16(size_t n) {
    cudaCheck(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(bf16)));
    std::vector<bf16> host(std::min<size_t>(n, size_t{1} << 20));
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = bih::to_bf16(((i * 37) % 17) / 64.0f - 0.125f);
    for (size_t off = 0; off < n; off += host.size()) {
      const size_t count = std::min(host.size(), n - off);
      cudaCheck(cudaMemcpy(p + off, host.data(), count * sizeof(bf16), cudaMemcpyHostToDevice));
    }
  }
  ~DeviceBf16() { cudaFree(p); }
  DeviceBf16(const DeviceBf16&) = delete;
  DeviceBf16& operator=(const DeviceBf16&) = delete;
};

size_t l2_bytes() {
  int device = 0;
  int bytes = 0;
  cudaCheck(cudaGetDevice(&device));
  cudaCheck(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device));
  return static_cast<size_t>(bytes);
}

// One (shape, M)'s operands: enough copies of the weight and activations to exceed twice the L2
// cache (at most 8), so small shapes are read from HBM as in a decode step; the output; and the
// timing events.
struct Operands {
  Operands(const Shape& shape, int m) : s(shape), M(m) {
    const size_t x_elems = static_cast<size_t>(M) * s.K;    // [M, K]
    const size_t w_elems = static_cast<size_t>(s.N) * s.K;  // [N, K]
    const size_t set_bytes = (x_elems + w_elems) * sizeof(bf16);
    const size_t sets = std::clamp<size_t>((2 * l2_bytes() + set_bytes - 1) / set_bytes, 1, 8);
    for (size_t i = 0; i < sets; ++i) {
      xs.push_back(std::make_unique<DeviceBf16>(x_elems));
      ws.push_back(std::make_unique<DeviceBf16>(w_elems));
    }
    y = std::make_unique<DeviceBf16>(static_cast<size_t>(M) * s.N);  // [M, N]
  }
  int sets() const { return static_cast<int>(ws.size()); }
  size_t weight_bytes() const { return static_cast<size_t>(s.N) * s.K * sizeof(bf16); }

  // Average seconds per launch of run(x, w, y) over `reps` launches, rotating over the sets.
  template <class Run>
  double time(int reps, Run&& run) const {
    cudaCheck(cudaEventRecord(start.get(), nullptr));
    for (int i = 0; i < reps; ++i) {
      const size_t set = static_cast<size_t>(i) % ws.size();
      run(xs[set]->p, ws[set]->p, y->p);
    }
    cudaCheck(cudaEventRecord(stop.get(), nullptr));
    cudaCheck(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms * 1e-3 / reps;
  }
  double time_family(KernelFamily family, int reps) const {
    return time(reps, [&](const bf16* x, const bf16* w, bf16* out) {
      shared_gemm().gemm(family, x, w, out, M, s.N, s.K, nullptr);
    });
  }
  double time_skinny(int reps) const {
    return time(reps, [&](const bf16* x, const bf16* w, bf16* out) {
      bih::cuda::launch_skinny_gemm(x, w, out, M, s.N, s.K, nullptr);
    });
  }

  Shape s;
  int M;
  std::vector<std::unique_ptr<DeviceBf16>> xs;  // [sets] of [M, K]
  std::vector<std::unique_ptr<DeviceBf16>> ws;  // [sets] of [N, K]
  std::unique_ptr<DeviceBf16> y;                // [M, N]
  bih::cuda::OwnedEvent start{cudaEventDefault};
  bih::cuda::OwnedEvent stop{cudaEventDefault};
};

void bench_skinny(benchmark::State& state, Shape s, int M) {
  const Operands operands(s, M);
  operands.time_skinny(operands.sets());  // warm-up
  operands.time_family(KernelFamily::vendor, operands.sets());
  const int reps = 200;
  double skinny_seconds = 0.0;
  double vendor_seconds = 0.0;
  for (auto _ : state) {
    const double own = operands.time_skinny(reps);
    const double ven = operands.time_family(KernelFamily::vendor, reps);
    skinny_seconds += own;
    vendor_seconds += ven;
    state.SetIterationTime(own);
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["skinny_us"] = skinny_seconds / iterations * 1e6;
  state.counters["vendor_us"] = vendor_seconds / iterations * 1e6;
  state.counters["speedup"] = vendor_seconds / skinny_seconds;
  state.counters["weight_TBps"] =
      static_cast<double>(operands.weight_bytes()) / (skinny_seconds / iterations) * 1e-12;
  state.SetLabel(s.name);
}

void bench_shape(benchmark::State& state, Shape s, int M) {
  const Operands operands(s, M);
  // Warm-up: pins the invariant algorithm, asks the vendor heuristic, loads the kernels.
  const int probe = operands.sets();
  operands.time_family(KernelFamily::invariant, probe);
  operands.time_family(KernelFamily::vendor, probe);
  const double estimate = std::min(operands.time_family(KernelFamily::invariant, probe),
                                   operands.time_family(KernelFamily::vendor, probe));
  // About 2 ms of GEMMs per timed batch, so launch gaps and event resolution stay small.
  const int reps = static_cast<int>(std::clamp(2e-3 / std::max(estimate, 1e-7), 1.0, 500.0));

  double invariant_seconds = 0.0;
  double vendor_seconds = 0.0;
  double tp_invariant_seconds = 0.0;
  operands.time_family(KernelFamily::tp_invariant, 1);  // warm-up
  for (auto _ : state) {
    const double inv = operands.time_family(KernelFamily::invariant, reps);
    const double ven = operands.time_family(KernelFamily::vendor, reps);
    // The CUDA-core chunk tree is slow at prefill sizes: time it once per batch, not per rep.
    const int tp_reps = std::max(1, M > 64 ? reps / 16 : reps);
    tp_invariant_seconds += operands.time_family(KernelFamily::tp_invariant, tp_reps);
    invariant_seconds += inv;
    vendor_seconds += ven;
    state.SetIterationTime(inv);
  }

  const double flops = 2.0 * M * s.N * s.K;
  const double iterations = static_cast<double>(state.iterations());
  g_seconds[{s.name, M}] = {invariant_seconds / iterations, vendor_seconds / iterations,
                            tp_invariant_seconds / iterations};
  const double inv_tflops = flops * iterations / invariant_seconds * 1e-12;
  const double vendor_tflops = flops * iterations / vendor_seconds * 1e-12;
  state.counters["inv_TFLOPs"] = inv_tflops;
  state.counters["vendor_TFLOPs"] = vendor_tflops;
  state.counters["ratio"] = inv_tflops / vendor_tflops;
  // kernels tp_invariant (gemm_chunk_tree.cu) beside both, and its weight bandwidth (decode).
  state.counters["tpinv_us"] = tp_invariant_seconds / iterations * 1e6;
  state.counters["tpinv_TFLOPs"] = flops * iterations / tp_invariant_seconds * 1e-12;
  state.counters["tpinv_weight_TBps"] =
      static_cast<double>(operands.weight_bytes()) / (tp_invariant_seconds / iterations) * 1e-12;
  state.counters["buffer_sets"] = static_cast<double>(operands.sets());
  const bih::cuda::GemmAlgoConfig config = shared_gemm().invariant_config(s.N, s.K);
  const bool companion = &config.serving(M) != &config;
  state.SetLabel(std::string(s.name) +
                 (config.serving(M).skinny ? std::string(" companion own skinny kernel")
                                           : (companion ? " companion tile " : " reference tile ") +
                                                 std::to_string(config.serving(M).tile_id)));
}

// One decode step's GEMMs at M tokens: every layer's own weights, in the engine's order.
class StepGemms {
 public:
  explicit StepGemms(int m) : M(m) {
    const int layers = bih::preset_config("qwen3-1.7b")->num_layers;
    for (const Shape& s : kShapes) {
      const int copies = s.name == "lm_head" ? 1 : layers;
      for (int i = 0; i < copies; ++i) {
        ws_[s.name].push_back(std::make_unique<DeviceBf16>(static_cast<size_t>(s.N) * s.K));
        weight_bytes_ += 2.0 * s.N * s.K;
      }
      xs_[s.name] = std::make_unique<DeviceBf16>(static_cast<size_t>(M) * s.K);  // [M, K]
      ys_[s.name] = std::make_unique<DeviceBf16>(static_cast<size_t>(M) * s.N);  // [M, N]
    }
  }
  double weight_bytes() const { return weight_bytes_; }

  // Seconds per step of `family`: the step captured once, replayed `reps` times.
  double time(KernelFamily family, int reps) {
    enqueue(family);  // pins and loads outside the capture
    stream_.synchronize();
    cudaGraph_t graph = nullptr;
    cudaCheck(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
    enqueue(family);
    cudaCheck(cudaStreamEndCapture(stream_.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    cudaCheck(cudaGraphLaunch(exec, stream_.get()));  // warm-up
    cudaCheck(cudaEventRecord(start_.get(), stream_.get()));
    for (int i = 0; i < reps; ++i) cudaCheck(cudaGraphLaunch(exec, stream_.get()));
    cudaCheck(cudaEventRecord(stop_.get(), stream_.get()));
    cudaCheck(cudaEventSynchronize(stop_.get()));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms * 1e-3 / reps;
  }

 private:
  // Every layer's GEMMs in kShapes' order, then lm_head.
  void enqueue(KernelFamily family) {
    const auto run = [&](const Shape& s, int copy) {
      shared_gemm().gemm(family, xs_.at(s.name)->p, ws_.at(s.name)[copy]->p, ys_.at(s.name)->p, M,
                         s.N, s.K, stream_.get());
    };
    const int layers = static_cast<int>(ws_.at("qkv").size());
    for (int layer = 0; layer < layers; ++layer) {
      for (const Shape& s : kShapes) {
        if (s.name != "lm_head") run(s, layer);
      }
    }
    for (const Shape& s : kShapes) {
      if (s.name == "lm_head") run(s, 0);
    }
  }

  int M;
  double weight_bytes_ = 0.0;
  std::map<std::string, std::vector<std::unique_ptr<DeviceBf16>>> ws_;  // [copies] of [N, K]
  std::map<std::string, std::unique_ptr<DeviceBf16>> xs_, ys_;
  bih::cuda::OwnedStream stream_;
  bih::cuda::OwnedEvent start_{cudaEventDefault};
  bih::cuda::OwnedEvent stop_{cudaEventDefault};
};

void bench_step_gemms(benchmark::State& state, int M) {
  StepGemms step(M);
  const double copy = bih::bench::copy_bandwidth();
  constexpr int kReps = 10;
  const KernelFamily families[] = {KernelFamily::invariant, KernelFamily::vendor,
                                   KernelFamily::tp_invariant};
  double seconds[3] = {0.0, 0.0, 0.0};
  for (auto _ : state) {
    double step_seconds[3];
    for (int f = 0; f < 3; ++f) {
      step_seconds[f] = step.time(families[f], kReps);
      seconds[f] += step_seconds[f];
    }
    state.SetIterationTime(step_seconds[0]);  // the time column: the invariant family's step
  }
  const char* names[] = {"inv", "vendor", "tpinv"};
  for (int f = 0; f < 3; ++f) {
    const double per_step = seconds[f] / static_cast<double>(state.iterations());
    state.counters[std::string(names[f]) + "_ms"] = per_step * 1e3;
    state.counters[std::string(names[f]) + "_copy"] = step.weight_bytes() / per_step / copy;
  }
  state.counters["copy_TBps"] = copy * 1e-12;
  state.counters["weights_GB"] = step.weight_bytes() * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--pin_m=", 0) == 0) {
      g_options.pin_m = std::stoi(arg.substr(8));
    } else if (arg.rfind("--companions=", 0) == 0) {
      g_options.companions = std::stoi(arg.substr(13)) != 0;
    } else if (arg.rfind("--skinny=", 0) == 0) {
      g_options.skinny_max_m = std::stoi(arg.substr(9));
    } else if (arg.rfind("--ms=", 0) == 0) {
      g_ms.clear();
      std::istringstream list(arg.substr(5));
      for (std::string m; std::getline(list, m, ',');) g_ms.push_back(std::stoi(m));
    } else {
      std::fprintf(stderr,
                   "bih_cuda_bench: unknown argument %s (valid: --pin_m=N, --companions=0|1, "
                   "--skinny=MAX_M, "
                   "--ms=M,M,...)\n",
                   argv[i]);
      return 2;
    }
  }
  if (bih::cuda::device_count() == 0) {
    // The GEMM benchmarks need a device to register; the statically registered ones (decode
    // step, kernels) still run, to report their skips.
    std::fprintf(stderr, "bih_cuda_bench: no CUDA device; nothing to measure\n");
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  }
  for (const Shape& s : kShapes) {
    const bih::cuda::GemmAlgoConfig config = shared_gemm().invariant_config(s.N, s.K);
    std::fprintf(stderr, "[invariant] %-8s N=%-6d K=%-5d %s\n", s.name.c_str(), s.N, s.K,
                 config.describe().c_str());
    if (!config.companion_notes.empty()) {
      std::fprintf(stderr, "[invariant] %-8s companion search: %s\n", s.name.c_str(),
                   config.companion_notes.c_str());
    }
    for (int m : g_ms) {
      const bih::cuda::GemmAlgoConfig& serving = config.serving(m);
      if (serving.skinny) {
        std::fprintf(stderr, "[invariant] %-8s M=%-5d companion: own skinny kernel\n",
                     s.name.c_str(), m);
      } else {
        std::fprintf(stderr, "[invariant] %-8s M=%-5d %s: tile %u stages %u cluster %u\n",
                     s.name.c_str(), m, &serving == &config ? "reference" : "companion",
                     serving.tile_id, serving.stages_id, serving.cluster_shape_id);
      }
      std::fprintf(stderr, "[vendor]    %-8s M=%-5d %s\n", s.name.c_str(), m,
                   shared_gemm().vendor_config(m, s.N, s.K).describe().c_str());
    }
  }
  for (const Shape& s : kShapes) {
    for (int m : g_ms) {
      const std::string name = std::string("Gemm/") + s.name + "/M=" + std::to_string(m);
      benchmark::RegisterBenchmark(name.c_str(), bench_shape, s, m)
          ->UseManualTime()
          ->Iterations(20)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (int m : g_ms) {
    if (m > 64) continue;  // decode sizes: the tp_invariant chunk tree is slow past them
    const std::string name = "StepGemms/M=" + std::to_string(m);
    benchmark::RegisterBenchmark(name.c_str(), bench_step_gemms, m)
        ->UseManualTime()
        ->Iterations(3)
        ->Unit(benchmark::kMicrosecond);
  }
  for (const Shape& s : kShapes) {
    for (int m : {1, 8, 16, 32}) {
      const std::string name = std::string("Skinny/") + s.name + "/M=" + std::to_string(m);
      benchmark::RegisterBenchmark(name.c_str(), bench_skinny, s, m)
          ->UseManualTime()
          ->Iterations(5)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // The step summary, for each M at which every shape was measured (a filter may skip some).
  const int layers = bih::preset_config("qwen3-1.7b")->num_layers;
  for (int m : g_ms) {
    double invariant = 0.0;
    double vendor = 0.0;
    double tp_invariant = 0.0;
    double weight_bytes = 0.0;  // what one step's GEMMs read of the weights, each once
    bool complete = true;
    for (const Shape& s : kShapes) {
      const auto it = g_seconds.find({s.name, m});
      if (it == g_seconds.end()) {
        complete = false;
        break;
      }
      const double times = s.name == "lm_head" ? 1.0 : layers;
      invariant += times * it->second.invariant;
      vendor += times * it->second.vendor;
      tp_invariant += times * it->second.tp_invariant;
      weight_bytes += times * 2.0 * s.N * s.K;
    }
    if (!complete) continue;
    std::printf(
        "[step] M=%-5d GEMMs of one step (%d layers + lm_head): invariant %.3f ms, "
        "vendor %.3f ms, ratio %.2f; tp_invariant %.3f ms; weights %.2f GB at %.2f / %.2f / "
        "%.2f TB/s\n",
        m, layers, invariant * 1e3, vendor * 1e3, vendor / invariant, tp_invariant * 1e3,
        weight_bytes * 1e-9, weight_bytes / invariant * 1e-12, weight_bytes / vendor * 1e-12,
        weight_bytes / tp_invariant * 1e-12);
  }
  return 0;
}
