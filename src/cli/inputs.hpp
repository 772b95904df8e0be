#pragma once
// The inputs of a run: files the user gave (--input NAME=FILE.pb), values of symbolic dims
// (--dim NAME=V), seeded random data for the rest; and input sets read from a directory.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/precision.hpp"
#include "runtime/session.hpp"

namespace kiln::cli {

struct InputOptions {
  std::vector<std::string> files;      // NAME=FILE.pb
  std::vector<std::string> dim_specs;  // NAME=V
  uint64_t seed = 0;

  // --input as name -> path and --dim as name -> value; UsageError on a malformed spec.
  std::map<std::string, std::string> file_map() const;
  std::map<std::string, int64_t> dims() const;
};

// Registers --input, --dim and --seed on `cmd`.
void add_input_options(CLI::App* cmd, InputOptions& options);

// The value a symbolic dim takes when --dim does not give it: the low end of its declared range
// (at least 1), or the high end when bounded.
enum class DimChoice { Min, Max };

// Random data for a declared input: floats uniform in [-1, 1), integers 0 or 1, bools, strings
// of digits (low-precision types alike); an optional input is given, a sequence gets two tensors.
// Unknown dims are 1.
RtValue random_input(const IoInfo& input, const std::map<std::string, int64_t>& dims,
                     DimChoice choice, uint64_t seed);

// The names of the symbolic dims of `inputs`, in the order they first appear.
std::vector<std::string> symbolic_dim_names(const std::vector<IoInfo>& inputs);

// UsageError when --dim names a dim that is not in `known` (a typo would otherwise run at the
// default size and look like success): the message lists the known names and the closest one.
void check_dim_names(const std::map<std::string, int64_t>& dims,
                     const std::vector<std::string>& known);

// Feeds for every declared input: the file given for it, else random data (each input seeded
// from `seed` and its position, so one input's data does not depend on the others). A file for
// an input the model lacks is NotFound; a dim no input has is a UsageError (check_dim_names).
runtime::Feeds make_feeds(const std::vector<IoInfo>& inputs,
                          const std::map<std::string, std::string>& files,
                          const std::map<std::string, int64_t>& dims, uint64_t seed,
                          DimChoice choice = DimChoice::Min);

// True when some input has a symbolic dim with a bounded range wider than one value, so the
// low and high ends make different input sets.
bool has_bounded_range(const std::vector<IoInfo>& inputs);

// Input sets from a directory of NAME.pb files (TensorProto; the file is matched to an input by
// its name, else by the name inside the proto), or of subdirectories holding such files, one set
// each. Inputs a set lacks are filled with random data.
std::vector<runtime::Feeds> read_input_sets(const std::string& dir,
                                            const std::vector<IoInfo>& inputs, uint64_t seed);

// "name: float[1,3,8,8]" lines for the feeds.
std::string describe_feeds(const runtime::Feeds& feeds);

}  // namespace kiln::cli
