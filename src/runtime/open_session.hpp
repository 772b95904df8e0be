#pragma once
// Opening a Session from bytes in memory (an ONNX ModelProto or a .kiln engine), for the C ABI and
// the Python package, whose users hand over buffers as often as paths.
#include <memory>
#include <string_view>

#include "runtime/session.hpp"

namespace kiln::runtime {

// Engines are told apart by their magic and are not optimized again; ONNX bytes may not refer to
// external data (there is no directory to resolve it against). The bytes are not kept.
std::unique_ptr<Session> open_session_from_bytes(std::string_view bytes, SessionOptions options);

}  // namespace kiln::runtime
