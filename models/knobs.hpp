// knobs.hpp: the enumerated knobs a scenario sets, shared by the harness and the engine.
//
// Each enum has a canonical lower-case spelling (the one scenario files and ids use);
// parse_* returns nullopt for anything else so callers can say what would be valid.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bih {

enum class Backend { cpu, cuda, automatic };            // "cpu" | "cuda" | "auto"
enum class RankKind { emulated, nccl };                 // "emulated" | "nccl"
enum class ReduceOrder { ring, tree, fixed, arrival };  // DESIGN.md's order models
// "invariant" | "vendor" | "tp_invariant" (invariant in the batch AND the TP size; CPU only)
enum class KernelFamily { invariant, vendor, tp_invariant };
enum class GraphMode { none, piecewise, full };  // "none" | "piecewise" | "full"

std::string to_string(Backend v);
std::string to_string(RankKind v);
std::string to_string(ReduceOrder v);
std::string to_string(KernelFamily v);
std::string to_string(GraphMode v);

std::optional<Backend> parse_backend(std::string_view s);
std::optional<RankKind> parse_rank_kind(std::string_view s);
std::optional<ReduceOrder> parse_reduce_order(std::string_view s);
std::optional<KernelFamily> parse_kernel_family(std::string_view s);
std::optional<GraphMode> parse_graph_mode(std::string_view s);

// The valid spellings, for error messages: {"ring", "tree", "fixed", "arrival"}.
std::vector<std::string> spellings_backend();
std::vector<std::string> spellings_rank_kind();
std::vector<std::string> spellings_reduce_order();
std::vector<std::string> spellings_kernel_family();
std::vector<std::string> spellings_graph_mode();

}  // namespace bih
