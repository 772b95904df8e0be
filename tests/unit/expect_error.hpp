#pragma once
// Asserts that fn throws a kiln::Error with `code` whose message contains `needle`.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.hpp"

namespace kiln {

inline void expect_error(const std::function<void()>& fn, ErrorCode code,
                         const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace kiln
