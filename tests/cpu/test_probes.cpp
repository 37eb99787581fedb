// test_probes.cpp: `bih probe` flags every vendor op and order model that is variant and passes
// every invariant one; ids are stable strings and filters select the right cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "base/errors.hpp"
#include "probes/probe.hpp"
#include "probes/probe_backend.hpp"
#include "run_bih.hpp"

namespace bih::probe::test_probes {
namespace {

// Runs every CPU case matching `filter` once per test binary (the results are shared by tests).
const std::map<std::string, Result>& results_for(const std::string& filter) {
  static std::map<std::string, std::map<std::string, Result>> cache;
  auto it = cache.find(filter);
  if (it != cache.end()) return it->second;
  const SweepOptions options;
  std::map<std::string, Result> by_id;
  for (const Result& r : run_cases(select_cases(all_cases(), {filter}, options), options)) {
    by_id[r.id] = r;
  }
  return cache[filter] = by_id;
}

bool is_cpu(const std::string& id) { return id.find("backend=cpu") != std::string::npos; }

TEST(ProbeIds, CanonicalIdsAreStableStrings) {
  const SweepOptions options;
  std::set<std::string> ids;
  for (const Case& c : all_cases()) {
    EXPECT_TRUE(ids.insert(c.id(options)).second) << "duplicate id " << c.id(options);
  }
  EXPECT_TRUE(
      ids.count("gemm(family=vendor,dtype=bf16,n=256,k=768,m=1..64,pos=first|middle|last,"
                "backend=cpu)"));
  EXPECT_TRUE(
      ids.count("gemm(family=invariant,dtype=bf16,n=512,k=256,m=1..64,"
                "pos=first|middle|last,backend=cuda)"));
  EXPECT_TRUE(
      ids.count("attention(family=vendor,dtype=bf16,mode=decode,heads=16,kv_heads=8,"
                "head_dim=16,ctx=150,m=1..64,pos=first|middle|last,backend=cpu)"));
  EXPECT_TRUE(
      ids.count("reduce_scatter(order=ring,tp=4,dtype=bf16,h=256,m=1..64,"
                "pos=first|middle|last,backend=cpu,comm=emulated)"));
  // CUDA: every CPU case's twin, plus qwen3-1.7b's shapes.
  EXPECT_TRUE(
      ids.count("reduce_scatter(order=ring,tp=4,dtype=bf16,h=256,m=1..64,"
                "pos=first|middle|last,backend=cuda,comm=emulated)"));
  EXPECT_TRUE(
      ids.count("gemm(family=vendor,dtype=bf16,n=2048,k=6144,m=1..64,pos=first|middle|last,"
                "backend=cuda)"));
  EXPECT_TRUE(
      ids.count("attention(family=invariant,dtype=bf16,mode=prefix_hit,heads=16,kv_heads=8,"
                "head_dim=128,ctx=150,m=1..64,pos=first|middle|last,backend=cuda)"));
  for (const std::string& id : ids) {
    const size_t cpu = id.find("backend=cpu");
    if (cpu == std::string::npos) continue;
    std::string twin = id;
    twin.replace(cpu, 11, "backend=cuda");
    EXPECT_TRUE(ids.count(twin)) << "no CUDA twin of " << id;
  }
  EXPECT_TRUE(ids.count(
      "nccl(collectives=all_reduce|reduce_scatter,dtype=bf16,op=sum,backend=cuda,comm=nccl)"));

  SweepOptions custom;
  custom.batch_sizes = parse_batch_sizes("1..8,16,32..33", "--batch-sizes");
  custom.exhaustive = true;
  EXPECT_EQ(all_cases().front().id(custom),
            "gemm(family=invariant,dtype=bf16,n=512,k=256,m=1..8|16|32..33,pos=all,backend=cpu)");
}

TEST(ProbeIds, BatchSizesParseAndRejectNonsense) {
  EXPECT_EQ(parse_batch_sizes("3,1..2,2", "x"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(format_batch_sizes({1, 2, 3, 5, 7, 8}), "1..3|5|7..8");
  for (const char* bad : {"", "0", "4..2", "a", "1..", "1,,2", "5000"}) {
    EXPECT_THROW(parse_batch_sizes(bad, "--batch-sizes"), InputError) << "'" << bad << "'";
  }
  EXPECT_EQ(probed_positions(1, false), (std::vector<int>{0}));
  EXPECT_EQ(probed_positions(2, false), (std::vector<int>{0, 1}));
  EXPECT_EQ(probed_positions(7, false), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(probed_positions(4, true), (std::vector<int>{0, 1, 2, 3}));
}

TEST(ProbeFilters, SelectByOpNameGlobAndAll) {
  const SweepOptions o;
  const std::vector<Case> cases = all_cases();
  const auto ids_of = [&](const std::vector<std::string>& filters) {
    std::vector<std::string> ids;
    for (const Case& c : select_cases(cases, filters, o)) ids.push_back(c.id(o));
    return ids;
  };
  const auto gemm = ids_of({"gemm"});
  EXPECT_EQ(gemm.size(), 30u);  // 2 families x (5 tiny shapes on cpu, 5 tiny + 5 qwen3 on cuda)
  for (const auto& id : gemm) EXPECT_EQ(id.rfind("gemm(", 0), 0u) << id;
  const auto vendor = ids_of({"gemm(family=vendor*"});
  EXPECT_EQ(vendor.size(), 15u);
  for (const auto& id : vendor) EXPECT_NE(id.find("family=vendor"), std::string::npos) << id;
  EXPECT_EQ(ids_of({"all"}).size(), cases.size());
  // Two filters select their union, each case once, in registry order.
  const auto both = ids_of({"rms_norm", "gemm(family=vendor*", "rms_norm"});
  EXPECT_EQ(both.size(), 15u + 6u);
  // key=value items: each must be a whole item of the id.
  const auto cuda = ids_of({"backend=cuda"});
  EXPECT_EQ(cuda.size(), 2u * 28u + 48u + 1u);  // kernels, emulated collectives, nccl
  for (const auto& id : cuda) EXPECT_NE(id.find("backend=cuda"), std::string::npos) << id;
  EXPECT_EQ(ids_of({"family=vendor,backend=cpu"}).size(), 15u);
  EXPECT_EQ(ids_of({"tp=8,order=ring,backend=cpu"}).size(), 3u);
  EXPECT_EQ(ids_of({"h=2048"}).size(), 2u * 2u);                   // rms_norm, add_rms_norm on cuda
  EXPECT_EQ(ids_of({"h=256,backend=cpu"}).size(), 2u * 3u + 48u);  // norms, embedding, comms
  EXPECT_THROW(select_cases(cases, {"backend=cud"}, o), InputError);
  EXPECT_THROW(select_cases(cases, {"family=vendor,backend=nope"}, o), InputError);
  EXPECT_EQ(ids_of({"*tp=3*comm=emulated)"}).size(), 3u * 4u * 2u);
  // "rms_norm" is an op name, not a prefix: add_rms_norm is not selected.
  for (const auto& id : ids_of({"rms_norm"})) EXPECT_EQ(id.rfind("rms_norm(", 0), 0u) << id;
  EXPECT_THROW(select_cases(cases, {"gem"}, o), InputError);
  EXPECT_THROW(select_cases(cases, {"gemm(family=nope*"}, o), InputError);
}

TEST(ProbeKernels, EveryInvariantFamilyKernelIsInvariant) {
  int checked = 0;
  for (const auto& [id, r] : results_for("*(family=invariant,*backend=cpu)")) {
    EXPECT_EQ(r.status, Status::invariant) << id << ": " << r.detail;
    EXPECT_EQ(r.expect, Expect::invariant) << id;
    EXPECT_GT(r.rows_compared, 64) << id;
    ++checked;
  }
  EXPECT_EQ(checked, 15);  // 5 gemms, 2 norms, rope, silu, embedding, 4 attention modes, sample
}

TEST(ProbeKernels, VendorGemmAndDecodeAttentionAreCaughtWithTheirFirstDifference) {
  int variant = 0;
  for (const auto& [id, r] : results_for("*(family=vendor,*backend=cpu)")) {
    const bool splits = r.op == "gemm" || id.find("mode=decode") != std::string::npos;
    if (!splits) {  // the vendor family shares these kernels with the invariant one
      EXPECT_EQ(r.status, Status::invariant) << id << ": " << r.detail;
      continue;
    }
    ++variant;
    EXPECT_EQ(r.expect, Expect::variant) << id;
    ASSERT_EQ(r.status, Status::variant) << id << ": " << r.detail;
    ASSERT_TRUE(r.first_difference.has_value()) << id;
    const Difference& d = *r.first_difference;
    EXPECT_NE(d.reference_bits, d.got_bits) << id;
    EXPECT_GT(d.ulp, 0u) << id;
    EXPECT_FALSE(r.nondeterministic) << id;
    if (r.op == "gemm") {
      // Vendor split-K runs below kVendorSplitKMaxM rows, as M=1 does: the first difference is
      // the first M that leaves it.
      EXPECT_EQ(d.batch_size, 16) << id << ": " << r.detail;
    } else {
      EXPECT_GT(d.batch_size, 1) << id << ": " << r.detail;
    }
    EXPECT_NE(r.detail.find("M=" + std::to_string(d.batch_size)), std::string::npos) << r.detail;
  }
  EXPECT_EQ(variant, 6);
}

TEST(ProbeCollectives, OrderModelsGiveTheStatusesOfTheDesignTable) {
  int checked = 0;
  for (const auto& [id, r] : results_for("*comm=emulated)")) {
    if (!is_cpu(id)) continue;
    ++checked;
    const bool gather = r.op == "all_gather";
    const bool tp2 = id.find("tp=2,") != std::string::npos;
    const bool ring = id.find("order=ring") != std::string::npos;
    const bool arrival = id.find("order=arrival") != std::string::npos;
    const bool variant = !gather && !tp2 && (ring || arrival);
    EXPECT_EQ(r.status, variant ? Status::variant : Status::invariant) << id << ": " << r.detail;
    EXPECT_TRUE(meets_expectation(r)) << id;
    if (arrival && variant) {
      EXPECT_TRUE(r.nondeterministic) << id << ": " << r.detail;
      EXPECT_EQ(r.detail.rfind("nondeterministic", 0), 0u) << r.detail;
    }
    if (ring && variant) {
      EXPECT_FALSE(r.nondeterministic) << id << ": ring is deterministic: " << r.detail;
      ASSERT_TRUE(r.first_difference.has_value());
      EXPECT_GT(r.first_difference->batch_size, 1) << id;
    }
  }
  EXPECT_EQ(checked, 3 * 4 * 4);
}

// Restores the CUDA hook as this test binary has it (none: it does not link the CUDA leaf).
struct CudaHookGuard {
  CudaHookGuard() = default;
  CudaHookGuard(const CudaHookGuard&) = delete;
  CudaHookGuard& operator=(const CudaHookGuard&) = delete;
  ~CudaHookGuard() { set_cuda_backend({}); }
};

TEST(ProbeCuda, CudaCasesAreListedAsUnsupportedWithTheReason) {
  const CudaHookGuard guard;
  SweepOptions o;
  o.batch_sizes = {1};
  // This binary has no CUDA backend installed; then one that sees no GPU is.
  for (const std::string reason : {kBuiltWithoutCuda, kNoCudaGpu}) {
    if (reason == kNoCudaGpu) {
      set_cuda_backend(
          {[] { return std::string(kNoCudaGpu); }, [] { return std::shared_ptr<ProbeBackend>(); }});
    }
    int cuda = 0;
    for (const Result& r : run_cases(select_cases(all_cases(), {"backend=cuda"}, o), o)) {
      ++cuda;
      EXPECT_EQ(r.status, Status::unsupported) << r.id;
      EXPECT_TRUE(meets_expectation(r));
      if (r.op == "nccl") continue;  // needs >= 2 GPUs and an NCCL build
      EXPECT_EQ(r.detail, reason) << r.id;
    }
    EXPECT_EQ(cuda, 2 * 28 + 48 + 1) << reason;  // kernels of 2 families, emulated comms, NCCL
  }
}

// The bih binary installs the CUDA backend where it is built with CUDA: without a GPU (CI compiles
// with nvcc on machines without one) its CUDA cases say so; with a GPU they run.
TEST(ProbeCuda, BihBinarySaysWhyItCannotRunCudaCasesOrRunsThem) {
  const auto dir = testing::fresh_dir("probe-cuda");
  const std::string json = (dir / "probe.json").string();
  const auto r = testing::run_bih({"probe", "rms_norm(family=invariant,*h=256,*backend=cuda)",
                                   "all_reduce(order=ring,tp=3,*backend=cuda,comm=emulated)",
                                   "--batch-sizes", "1..3", "--json", json});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["results"].size(), 2u) << r.output;
  const bool ran = j["results"][0]["status"] != "unsupported";
  for (const auto& e : j["results"]) {
    if (!BIH_BINARY_HAS_CUDA) {
      EXPECT_EQ(e["status"], "unsupported") << e.dump();
      EXPECT_EQ(e["detail"], kBuiltWithoutCuda) << e.dump();
    } else if (!ran) {  // no GPU here: every CUDA case says so
      EXPECT_EQ(e["status"], "unsupported") << e.dump();
      EXPECT_EQ(e["detail"], kNoCudaGpu) << e.dump();
    } else {  // a GPU: both ran and are as claimed
      EXPECT_NE(e["status"], "unsupported") << e.dump();
      EXPECT_TRUE(e["as_claimed"].get<bool>()) << e.dump();
    }
  }
  const auto list = testing::run_bih({"probe", "backend=cuda", "--list"});
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("gemm(family=vendor,dtype=bf16,n=2048,k=6144,"), std::string::npos)
      << list.output;
  if (!ran) {
    const std::string reason = BIH_BINARY_HAS_CUDA ? kNoCudaGpu : kBuiltWithoutCuda;
    EXPECT_NE(list.output.find("backend=cuda)  (unsupported here: " + reason + ")"),
              std::string::npos)
        << list.output;
  }
}

// Every CUDA case runs through whatever backend the hook installs. Here the CPU backend stands in
// for the GPU: each CUDA twin of a CPU case must give that case's status, and the GEMM claim that
// the vendor family reads from the backend must follow its split.
TEST(ProbeCuda, CudaCasesRunThroughTheInstalledBackend) {
  const CudaHookGuard guard;
  set_cuda_backend({[] { return std::string(); }, make_cpu_backend});
  SweepOptions o;
  o.batch_sizes = parse_batch_sizes("1..3,15..17", "--batch-sizes");  // across kVendorSplitKMaxM
  std::map<std::string, Result> by_id;
  const std::vector<Case> cases = all_cases();
  // The tiny-shape kernels and a sample of the collectives (qwen3's shapes are GPU-sized). Not
  // `arrival`: its status follows thread timing, and on a loaded two-core machine the threads can
  // arrive in one order in both runs, so its twin's status may differ from the CPU case's by
  // chance (1 of 12 runs beside two busy loops did).
  const auto selected = select_cases(
      cases,
      {"gemm(*k=256,*", "gemm(*k=768,*", "*norm(*h=256,*", "*head_dim=16,*", "silu_mul(*i=768,*",
       "*vocab=2048*", "*order=ring,tp=3,*", "*order=fixed,tp=4,*", "*order=tree,tp=8,*"},
      o);
  for (const Result& r : run_cases(selected, o)) by_id[r.id] = r;
  int twins = 0;
  for (const auto& [id, r] : by_id) {
    const size_t at = id.find("backend=cpu");
    if (at == std::string::npos) continue;
    std::string twin_id = id;
    twin_id.replace(at, 11, "backend=cuda");
    ASSERT_TRUE(by_id.count(twin_id)) << twin_id;
    const Result& twin = by_id.at(twin_id);
    ++twins;
    EXPECT_EQ(twin.status, r.status) << twin_id << ": " << twin.detail;
    EXPECT_TRUE(meets_expectation(twin)) << twin_id << ": " << twin.detail;
    if (r.op == "gemm" && id.find("family=vendor") != std::string::npos) {
      EXPECT_EQ(twin.expect, Expect::variant) << twin.detail;
      EXPECT_NE(twin.detail.find("claimed variant: the K reduction is split 'splitK 4' at M=1, "
                                 "'splitK 1' at M=16"),
                std::string::npos)
          << twin.detail;
    }
  }
  EXPECT_EQ(twins, 2 * 15 + 3 * 3);

  // A sweep that stays below the split point: the CUDA vendor GEMM then claims invariance (the
  // CPU case keeps its fixed claim and fails it).
  o.batch_sizes = {1, 2, 8};
  const auto gemm = select_cases(cases, {"gemm(family=vendor,*n=256,k=768,*"}, o);
  ASSERT_EQ(gemm.size(), 2u);
  const std::vector<Result> results = run_cases(gemm, o);
  EXPECT_EQ(results[0].status, Status::invariant);
  EXPECT_FALSE(meets_expectation(results[0])) << results[0].detail;
  EXPECT_EQ(results[1].status, Status::invariant);
  EXPECT_EQ(results[1].expect, Expect::invariant);
  EXPECT_TRUE(meets_expectation(results[1])) << results[1].detail;
  EXPECT_NE(results[1].detail.find("claimed invariant: the K reduction is split 'splitK 4' at "
                                   "every swept M"),
            std::string::npos)
      << results[1].detail;
}

TEST(ProbeEngine, SweepReportsTheFirstDifferenceAndRunToRunVariance) {
  // A synthetic op whose row changes bits at M >= 5, last position only.
  const BatchRunner batchy = [](const Batch& b, std::mt19937&) {
    RowBits rows;
    for (int p : b.positions) {
      rows.push_back({0x3f80u, (b.M >= 5 && p == b.M - 1) ? 0x3f81u : 0x3f80u});
    }
    return rows;
  };
  SweepOptions o;
  o.batch_sizes = {1, 2, 4, 5, 6};
  Result r = sweep("x", "x", Expect::invariant, SweepSpec{16, 1}, batchy, o);
  EXPECT_EQ(r.status, Status::variant);
  ASSERT_TRUE(r.first_difference);
  EXPECT_EQ(r.first_difference->batch_size, 5);
  EXPECT_EQ(r.first_difference->position, 4);
  EXPECT_EQ(r.first_difference->column, 1);
  EXPECT_EQ(r.first_difference->ulp, 1u);
  EXPECT_EQ(r.detail, "first differs from bs=1 at M=5 pos=4 col=1: 0x3f80 vs 0x3f81 (1 ulp)");
  EXPECT_FALSE(meets_expectation(r));
  EXPECT_EQ(exit_code({r}), 1);

  // A synthetic op whose bits change between calls (a counter), batch-independent in each run.
  auto calls = std::make_shared<int>(0);
  const BatchRunner flaky = [calls](const Batch& b, std::mt19937&) {
    const uint32_t bits = (*calls)++ < 1 + 5 ? 0x4000u : 0x4001u;  // run 2 gets other bits
    return RowBits(b.positions.size(), std::vector<uint32_t>{bits});
  };
  r = sweep("y", "y", Expect::variant, SweepSpec{16, 2}, flaky, o);
  EXPECT_EQ(r.status, Status::variant);
  EXPECT_TRUE(r.nondeterministic);
  ASSERT_TRUE(r.first_difference);
  EXPECT_EQ(r.first_difference->run, 2);
  EXPECT_EQ(r.first_difference->batch_size, 1);
  EXPECT_TRUE(meets_expectation(r));
}

TEST(ProbeEngine, UlpDistanceCrossesZero) {
  EXPECT_EQ(ulp_distance(0x3f80, 0x3f81, 16), 1u);
  EXPECT_EQ(ulp_distance(0x0000, 0x8000, 16), 1u);  // +0 and -0 are adjacent
  EXPECT_EQ(ulp_distance(0x0001, 0x8001, 16), 3u);
  EXPECT_EQ(ulp_distance(0x3f800000u, 0x3f800002u, 32), 2u);
}

TEST(ProbeCli, ExitCodesTableAndJson) {
  const auto dir = testing::fresh_dir("probe-cli");
  const std::string json = (dir / "probe.json").string();
  auto r =
      testing::run_bih({"probe", "gemm(family=vendor,*n=256,k=768*backend=cpu)",
                        "attention(family=invariant,*mode=decode*head_dim=16*", "--json", json});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("variant"), std::string::npos) << r.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["schema"], "bih.probe/1");
  // Registry order: the cpu invariant-family attention, the cpu vendor gemm, then the cuda case.
  ASSERT_EQ(j["results"].size(), 3u);
  EXPECT_EQ(j["results"][0]["op"], "attention");
  EXPECT_EQ(j["results"][0]["status"], "invariant");
  EXPECT_EQ(j["results"][1]["op"], "gemm");
  EXPECT_EQ(j["results"][1]["status"], "variant");
  EXPECT_EQ(j["results"][1]["first_difference"]["batch_size"], 16);
  EXPECT_EQ(j["results"][2]["op"], "attention");
  EXPECT_NE(j["results"][2]["id"].get<std::string>().find("backend=cuda"), std::string::npos);
  EXPECT_TRUE(j["results"][2]["as_claimed"].get<bool>());  // unsupported here, or run on a GPU

  // A claim that fails is a conformance failure: exit 1 (vendor gemm is claimed variant, and a
  // sweep that never leaves split-K cannot show it).
  r = testing::run_bih(
      {"probe", "gemm(family=vendor,*n=256,k=768*backend=cpu)", "--batch-sizes", "1..8"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("1 not as claimed"), std::string::npos) << r.output;

  r = testing::run_bih({"probe", "no_such_op"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("selects no case"), std::string::npos) << r.output;
  r = testing::run_bih({"probe", "gemm", "--batch-sizes", "0..3"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = testing::run_bih({"probe", "all_reduce", "--list"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all_reduce(order=tree,tp=8,"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace bih::probe::test_probes
