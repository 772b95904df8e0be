#pragma once
// "Did you mean ...?" for names a user typed: the CLI's commands, options and dim names, the
// compiler's options and the Python package's SessionOptions attributes, so all answer a typo the
// same way.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`; letter case
// counts.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, when close enough to be what was meant: at most a third of
// the word's letters edited (at least one edit allowed), or a candidate that starts with the word
// (an abbreviation of three letters or more). Ties go to the earlier candidate; nullopt when none
// is close.
std::optional<std::string> closest_name(std::string_view word,
                                        const std::vector<std::string>& candidates);

// "; did you mean 'X'?" for the closest candidate, "" when none is close: the tail of a message
// that names the unknown word.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// "'a', 'b', 'c'": the valid names for a message, the first `max` of them and "and N more".
std::string quoted_list(const std::vector<std::string>& names, size_t max = 24);

}  // namespace kiln
