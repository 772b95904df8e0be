#pragma once
// An option of the compile pipeline whose value parses but makes no sense (a dim name the model
// lacks, --dump-after without the optimizer). It is an InvalidArgument Error for every caller;
// the CLI tells it apart to answer with its usage exit code, as for a bad flag.
#include <string>

#include "core/error.hpp"

namespace kiln::compiler {

class OptionError : public Error {
 public:
  explicit OptionError(const std::string& message) : Error(ErrorCode::InvalidArgument, message) {}
};

}  // namespace kiln::compiler
