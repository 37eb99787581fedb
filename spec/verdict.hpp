// verdict.hpp: the outcomes of a scenario (DESIGN.md, "Words"). config_variant: the scenario's
// generations differ from its matrix's reference configuration's (docs/config-comparison.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace bih {

// prefill_variant: decode is batch invariant and reproducible, but scoring the same tokens in one
// prefill (compare.prefill, docs/prefill-and-top-k.md) gives other bits or another argmax.
enum class Verdict {
  invariant,
  batch_variant,
  nondeterministic,
  config_variant,
  prefill_variant,
  error,
  unsupported
};

inline std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::invariant:
      return "invariant";
    case Verdict::batch_variant:
      return "batch_variant";
    case Verdict::nondeterministic:
      return "nondeterministic";
    case Verdict::config_variant:
      return "config_variant";
    case Verdict::prefill_variant:
      return "prefill_variant";
    case Verdict::error:
      return "error";
    case Verdict::unsupported:
      return "unsupported";
  }
  return "?";
}

inline std::optional<Verdict> parse_verdict(std::string_view s) {
  for (Verdict v :
       {Verdict::invariant, Verdict::batch_variant, Verdict::nondeterministic,
        Verdict::config_variant, Verdict::prefill_variant, Verdict::error, Verdict::unsupported}) {
    if (s == to_string(v)) return v;
  }
  return std::nullopt;
}

}  // namespace bih
