#pragma once
// The input flags of a run: files the user gave (--input NAME=FILE.pb), values of symbolic dims
// (--dim NAME=V) and the seed of the random data for the rest (compiler/feeds.hpp makes the
// feeds from them).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "compiler/feeds.hpp"

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

// What the precision gate uses to make inputs, for the commands that run models.
using compiler::check_dim_names;
using compiler::DimChoice;
using compiler::has_bounded_range;
using compiler::make_feeds;
using compiler::random_input;
using compiler::read_input_sets;
using compiler::symbolic_dim_names;

// "name: float[1,3,8,8]" lines for the feeds.
std::string describe_feeds(const runtime::Feeds& feeds);

}  // namespace kiln::cli
