#pragma once
// Runs one node's work and names the node in any failure: a kiln::Error gains "node X: ...",
// out-of-memory becomes Unavailable and any other exception Internal. A run stopped by its
// RunControl passes through as it is (its caller tells timeouts from failures by the type). The
// interpreter and the executor both run kernels through it, so a user sees the same message from
// either path.
#include <exception>
#include <new>

#include <fmt/format.h>

#include "core/error.hpp"
#include "ir/graph.hpp"
#include "runtime/run_control.hpp"

namespace kiln::runtime {

template <typename Fn>
void with_node_errors(const ir::Node& n, Fn&& fn) {
  try {
    fn();
  } catch (const RunStopped&) {
    throw;
  } catch (const Error& e) {
    if (e.message().rfind("node ", 0) == 0) throw;
    throw Error(e.code(), fmt::format("node {}: {}", n.label(), e.message()));
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::Unavailable, "node {}: out of memory", n.label());
  } catch (const std::exception& e) {
    fail(ErrorCode::Internal, "node {}: {}", n.label(), e.what());
  }
}

}  // namespace kiln::runtime
