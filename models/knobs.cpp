#include "models/knobs.hpp"

#include <array>
#include <utility>

namespace bih {
namespace {

template <class E, size_t N>
using Table = std::array<std::pair<E, const char*>, N>;

constexpr Table<Backend, 3> kBackends{
    {{Backend::cpu, "cpu"}, {Backend::cuda, "cuda"}, {Backend::automatic, "auto"}}};
constexpr Table<RankKind, 2> kRankKinds{
    {{RankKind::emulated, "emulated"}, {RankKind::nccl, "nccl"}}};
constexpr Table<ReduceOrder, 4> kOrders{{{ReduceOrder::ring, "ring"},
                                         {ReduceOrder::tree, "tree"},
                                         {ReduceOrder::fixed, "fixed"},
                                         {ReduceOrder::arrival, "arrival"}}};
constexpr Table<KernelFamily, 3> kFamilies{{{KernelFamily::invariant, "invariant"},
                                            {KernelFamily::vendor, "vendor"},
                                            {KernelFamily::tp_invariant, "tp_invariant"}}};
constexpr Table<GraphMode, 3> kGraphModes{
    {{GraphMode::none, "none"}, {GraphMode::piecewise, "piecewise"}, {GraphMode::full, "full"}}};

template <class E, size_t N>
std::string name_of(const Table<E, N>& table, E v) {
  for (const auto& [e, s] : table) {
    if (e == v) return s;
  }
  return "?";
}

template <class E, size_t N>
std::optional<E> parse_in(const Table<E, N>& table, std::string_view s) {
  for (const auto& [e, name] : table) {
    if (s == name) return e;
  }
  return std::nullopt;
}

template <class E, size_t N>
std::vector<std::string> names(const Table<E, N>& table) {
  std::vector<std::string> out;
  for (const auto& entry : table) out.emplace_back(entry.second);
  return out;
}

}  // namespace

std::string to_string(Backend v) { return name_of(kBackends, v); }
std::string to_string(RankKind v) { return name_of(kRankKinds, v); }
std::string to_string(ReduceOrder v) { return name_of(kOrders, v); }
std::string to_string(KernelFamily v) { return name_of(kFamilies, v); }
std::string to_string(GraphMode v) { return name_of(kGraphModes, v); }

std::optional<Backend> parse_backend(std::string_view s) { return parse_in(kBackends, s); }
std::optional<RankKind> parse_rank_kind(std::string_view s) { return parse_in(kRankKinds, s); }
std::optional<ReduceOrder> parse_reduce_order(std::string_view s) { return parse_in(kOrders, s); }
std::optional<KernelFamily> parse_kernel_family(std::string_view s) {
  return parse_in(kFamilies, s);
}
std::optional<GraphMode> parse_graph_mode(std::string_view s) { return parse_in(kGraphModes, s); }

std::vector<std::string> spellings_backend() { return names(kBackends); }
std::vector<std::string> spellings_rank_kind() { return names(kRankKinds); }
std::vector<std::string> spellings_reduce_order() { return names(kOrders); }
std::vector<std::string> spellings_kernel_family() { return names(kFamilies); }
std::vector<std::string> spellings_graph_mode() { return names(kGraphModes); }

}  // namespace bih
