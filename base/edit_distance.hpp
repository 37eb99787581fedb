// edit_distance.hpp: "did you mean ...?" for misspelt keys.
//
// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions, so "tpe" is one
// edit from "tep"), and the nearest candidate within a distance small enough to be a typo.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bih {

// Insertions, deletions, substitutions and adjacent transpositions, each costing 1.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, when it is close enough to be a plausible typo: at most
// max(1, min(3, |word| / 3)) edits. Ties go to the earlier candidate. nullopt when none is close.
std::optional<std::string> nearest_key(std::string_view word,
                                       const std::vector<std::string>& candidates);

}  // namespace bih
