#include "base/edit_distance.hpp"

#include <algorithm>

namespace bih {

size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: distance between a[0, i) and b[0, j). Three rows suffice for the transposition term.
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<size_t> before_prev(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      const size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], before_prev[j - 2] + 1);
      }
    }
    std::swap(before_prev, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::optional<std::string> nearest_key(std::string_view word,
                                       const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3));
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace bih
