#pragma once
// The HTTP request parser of the frontend: Beast's HTTP/1.1 grammar (basic_parser), with what the
// server trusts kept in its own hands.
// - Header fields only. Trailer fields after a chunked body are read and dropped, so routing and
//   credentials come from the header alone (RFC 9110 6.5.1: trailers must not be merged blindly);
//   together they may take no more than the header limit (header_limit error, 431).
// - Every field within Beast's field storage (name or value under 64 KiB): a longer one is a
//   header_limit error (431), not the std::length_error Beast's container throws.
// - The only transfer coding is `chunked`; any other is refused (501), never ignored (an ignored
//   coding would let the body be read as the next request).
// - The body's memory is leased from the server's MemoryBudget before it is appended (the
//   declared Content-Length up front, each chunk as it is announced): 503 when the budget is
//   spent. The lease stays with the request until its answer is written.
#include <boost/beast/http.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "server/memory_budget.hpp"

namespace kiln::server::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;

// Errors of RequestParser beyond Beast's own (boost::beast::http::error).
enum class ParseError {
  unsupported_transfer_encoding = 1,  // 501
  memory_budget = 2,                  // 503
};
const boost::system::error_category& parse_error_category();
boost::system::error_code make_error_code(ParseError e);

class RequestParser : public boost::beast::http::basic_parser<true> {
 public:
  // `budget` may be null (no server-wide budget). `max_body_bytes` bounds one body,
  // `max_header_bytes` the header and, separately, the trailer.
  RequestParser(MemoryBudget* budget, uint64_t max_body_bytes, uint32_t max_header_bytes);

  Request& get() { return request_; }
  // The parsed request; the lease that pays for its body moves to `lease`.
  Request release(MemoryLease& lease);

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target,
                       int version, error_code& ec) override;
  void on_response_impl(int, string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override {}

  Request request_;
  MemoryLease lease_;
  const size_t max_header_bytes_;
  size_t trailer_bytes_ = 0;
};

}  // namespace kiln::server::http

namespace boost::system {
template <>
struct is_error_code_enum<kiln::server::http::ParseError> : std::true_type {};
}  // namespace boost::system
