#pragma once
// Inputs for checking a model: values the caller gave (tensors, or .pb files), seeded random data
// for the rest, and input sets read from a directory. The precision gate checks on them; the
// CLI's run, verify, bench and profile commands make their feeds with them too.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/precision.hpp"
#include "runtime/session.hpp"

namespace kiln::compiler {

// The value a symbolic dim takes when `dims` does not give it: the low end of its declared range
// (at least 1), or the high end when bounded.
enum class DimChoice { Min, Max };

// Random data for a declared input: floats uniform in [-1, 1), integers 0 or 1, bools, strings
// of digits (low-precision types alike); an optional input is given, a sequence gets two tensors.
// Unknown dims are 1.
RtValue random_input(const IoInfo& input, const std::map<std::string, int64_t>& dims,
                     DimChoice choice, uint64_t seed);

// The names of the symbolic dims of `inputs`, in the order they first appear.
std::vector<std::string> symbolic_dim_names(const std::vector<IoInfo>& inputs);

// OptionError when `dims` names a dim that is not in `known` (a typo would otherwise run at the
// default size and look like success): the message lists the known names and the closest one.
void check_dim_names(const std::map<std::string, int64_t>& dims,
                     const std::vector<std::string>& known);

// Feeds for every declared input: the value in `given`, else the file in `files`, else random
// data (each input seeded from `seed` and its position, so one input's data does not depend on
// the others). A value or file for an input the model lacks is NotFound; a dim no input has is
// an OptionError (check_dim_names).
runtime::Feeds make_feeds(const std::vector<IoInfo>& inputs,
                          const std::map<std::string, std::string>& files,
                          const std::map<std::string, int64_t>& dims, uint64_t seed,
                          DimChoice choice = DimChoice::Min, const runtime::Feeds& given = {});

// True when some input has a symbolic dim with a bounded range wider than one value, so the
// low and high ends make different input sets.
bool has_bounded_range(const std::vector<IoInfo>& inputs);

// Input sets from a directory of NAME.pb files (TensorProto; the file is matched to an input by
// its name, else by the name inside the proto), or of subdirectories holding such files, one set
// each. Inputs a set lacks are filled with random data.
std::vector<runtime::Feeds> read_input_sets(const std::string& dir,
                                            const std::vector<IoInfo>& inputs, uint64_t seed);

}  // namespace kiln::compiler
