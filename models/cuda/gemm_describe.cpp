// gemm_describe.cpp: what a GEMM configuration is, read from cuBLASLt, and said in words.
//
// describe_algo is the one reader of a cuBLASLt algorithm's fields, so the pinned, companion and
// vendor configurations are described alike; identity() is what the pin and the companion search
// compare to tell kernels apart; describe() and the range texts are the log and benchmark lines.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "models/cuda/gemm_internal.hpp"

namespace bih::cuda {
namespace {

template <class T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  cublasCheck(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return value;
}

uint32_t algo_min_alignment(const cublasLtMatmulAlgo_t& algo) {
  uint32_t most = 0;
  for (auto attr :
       {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES}) {
    uint32_t value = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &value, sizeof(value), &written) ==
        CUBLAS_STATUS_SUCCESS) {
      most = std::max(most, value);
    }
  }
  return most;
}

}  // namespace

namespace detail {

GemmAlgoConfig describe_algo(const cublasLtMatmulAlgo_t& algo, size_t workspace, int chosen_at_m) {
  GemmAlgoConfig c;
  c.cublaslt = true;
  c.algo_id = algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
  c.tile_id = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  c.stages_id = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  c.splitk_num = algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  c.reduction_scheme = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  c.cta_swizzling = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  c.custom_option = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  c.inner_shape_id = algo_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
  c.cluster_shape_id = algo_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  c.workspace_bytes = workspace;
  c.min_alignment_bytes = algo_min_alignment(algo);
  c.chosen_at_m = chosen_at_m;
  return c;
}

// The fields that make two configurations the same kernel: not workspace, M or provenance.
std::string identity(const GemmAlgoConfig& c) {
  if (c.skinny) return "skinny";
  std::ostringstream s;
  s << c.algo_id << '/' << c.tile_id << '/' << c.stages_id << '/' << c.splitk_num << '/'
    << c.reduction_scheme << '/' << c.cta_swizzling << '/' << c.custom_option << '/'
    << c.inner_shape_id << '/' << c.cluster_shape_id;
  return s.str();
}

std::string range_text(int first, int last) {
  std::string s = "M=" + std::to_string(first);
  if (last != first) s += ".." + std::to_string(last);
  return s;
}

// One configuration, without companions: the own kernel's reason, or the cuBLASLt fields.
std::string describe_single(const GemmAlgoConfig& c) {
  std::ostringstream s;
  if (c.skinny) {
    s << "own skinny kernel (mma.sync m16n8k16, one k16 chain per element)";
    if (c.validated_max_m > 0) s << " valid M=" << c.validated_min_m << ".." << c.validated_max_m;
    return s.str();
  }
  if (!c.cublaslt) {
    s << "own tiled kernel (" << c.reason << ")";
    return s.str();
  }
  s << "cublasLt algo " << c.algo_id << " tile " << c.tile_id << " stages " << c.stages_id
    << " splitK " << c.splitk_num << " reduction " << c.reduction_scheme << " swizzle "
    << c.cta_swizzling << " custom " << c.custom_option << " inner " << c.inner_shape_id
    << " cluster " << c.cluster_shape_id << " workspace " << c.workspace_bytes << " align "
    << c.min_alignment_bytes << " chosen at M=" << c.chosen_at_m;
  if (c.validated_max_m > 0) s << " valid M=" << c.validated_min_m << ".." << c.validated_max_m;
  return s.str();
}

}  // namespace detail

using detail::describe_single;
using detail::range_text;

std::string GemmAlgoConfig::describe() const {
  std::string s = describe_single(*this);
  if (companions.empty()) return s;
  // The reference serves what no companion does: the gaps in 1..validated_max_m, and beyond.
  std::string served;
  int next = 1;
  auto add = [&](const std::string& range) { served += (served.empty() ? "" : ", ") + range; };
  for (const GemmCompanion& c : companions) {
    if (c.first_m > next) add(range_text(next, c.first_m - 1));
    next = c.last_m + 1;
  }
  if (next <= validated_max_m) add(range_text(next, validated_max_m));
  add("M>" + std::to_string(validated_max_m));
  s += " (reference: serves " + served + ")";
  for (const GemmCompanion& c : companions) {
    s += "; " + range_text(c.first_m, c.last_m) + ": " + describe_single(c.config) +
         " (bitwise = reference on " + std::to_string(c.tested_ms.size()) + " Ms)";
  }
  return s;
}

const GemmAlgoConfig& GemmAlgoConfig::serving(int M) const {
  for (const GemmCompanion& c : companions) {
    if (M >= c.first_m && M <= c.last_m) return c.config;
  }
  return *this;
}

}  // namespace bih::cuda
