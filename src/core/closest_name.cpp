#include "core/closest_name.hpp"

#include <algorithm>
#include <limits>

namespace kiln {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment over three rows: a swapped pair of letters is one typo, not two.
  const size_t n = b.size();
  std::vector<size_t> before(n + 1), prev(n + 1), cur(n + 1);
  for (size_t j = 0; j <= n; ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= n; ++j) {
      const size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    before.swap(prev);
    prev.swap(cur);
  }
  return prev[n];
}

std::optional<std::string> closest_name(std::string_view word,
                                        const std::vector<std::string>& candidates) {
  // Leading dashes are not letters the user could have mistyped: "--x" is not near "--y" for
  // sharing them.
  auto letters = [](std::string_view s) {
    return s.substr(std::min(s.find_first_not_of('-'), s.size()));
  };
  const std::string_view typed = letters(word);
  // One edit in two letters ("rn" for "run"), a third of them in longer words; a lone letter is
  // too short to guess from.
  const size_t allowed = typed.size() < 2 ? 0 : std::max<size_t>(1, typed.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    if (c == word) return c;
    size_t d = edit_distance(typed, letters(c));
    // An abbreviation ("--iter" for "--iterations") is as good as one typo.
    if (typed.size() >= 3 && letters(c).substr(0, typed.size()) == typed)
      d = std::min<size_t>(d, 1);
    if (d <= allowed && d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> c = closest_name(word, candidates);
  return c ? "; did you mean '" + *c + "'?" : std::string();
}

std::string quoted_list(const std::vector<std::string>& names, size_t max) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < max; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > max) out += " and " + std::to_string(names.size() - max) + " more";
  return out;
}

}  // namespace kiln
