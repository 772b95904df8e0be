#pragma once
// numpy's .npz files (np.savez, np.savez_compressed): a zip of .npy arrays, one per input. The
// compile pipeline reads calibration input sets from them, the format Python users keep
// calibration data in.
#include <string>

#include "runtime/precision.hpp"

namespace kiln::compiler {

// The arrays of the .npz file at `path` by name (the member's name without ".npy"). Supports
// stored and deflated members, zip64 sizes, and little-endian bool, integer and float arrays in C
// order; anything else (a pickled object array, big-endian or Fortran-order data) is refused
// naming the member. A file that is not a well-formed .npz is InvalidArgument, a missing one
// NotFound.
runtime::Feeds read_npz(const std::string& path);

// The same from the file's bytes; `path` names it in errors (the fuzz target's entry).
runtime::Feeds parse_npz(const std::string& bytes, const std::string& path);

}  // namespace kiln::compiler
