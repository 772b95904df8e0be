#include "server/http/request_parser.hpp"

#include <boost/beast/core/string.hpp>
#include <limits>

namespace kiln::server::http {
namespace bhttp = boost::beast::http;

namespace {

class ParseErrorCategory : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "kiln.http.parse"; }
  std::string message(int e) const override {
    switch (static_cast<ParseError>(e)) {
      case ParseError::unsupported_transfer_encoding:
        return "unsupported transfer coding";
      case ParseError::memory_budget:
        return "the server's request memory budget is spent";
    }
    return "unknown parse error";
  }
};

// Beast stores a field's name and value with 16-bit offsets (and 2 bytes of separators).
constexpr size_t kMaxFieldBytes = std::numeric_limits<uint16_t>::max() - 2;

// Whether a Transfer-Encoding value is exactly the one coding this server decodes.
bool is_chunked_only(boost::beast::string_view value) {
  auto trim = [](boost::beast::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  return boost::beast::iequals(trim(value), "chunked");
}

}  // namespace

const boost::system::error_category& parse_error_category() {
  static const ParseErrorCategory category;
  return category;
}

boost::system::error_code make_error_code(ParseError e) {
  return {static_cast<int>(e), parse_error_category()};
}

RequestParser::RequestParser(MemoryBudget* budget, uint64_t max_body_bytes,
                             uint32_t max_header_bytes)
    : lease_(budget ? MemoryLease(*budget) : MemoryLease()), max_header_bytes_(max_header_bytes) {
  body_limit(max_body_bytes);
  header_limit(max_header_bytes);
}

Request RequestParser::release(MemoryLease& lease) {
  lease = std::move(lease_);
  return std::move(request_);
}

void RequestParser::on_request_impl(bhttp::verb method, string_view method_str, string_view target,
                                    int version, error_code& ec) {
  if (target.size() > kMaxFieldBytes) {
    ec = bhttp::error::header_limit;
    return;
  }
  request_.target(target);
  if (method == bhttp::verb::unknown) {
    request_.method_string(method_str);
  } else {
    request_.method(method);
  }
  request_.version(version);
}

void RequestParser::on_response_impl(int, string_view, int, error_code& ec) {
  ec = bhttp::error::bad_method;  // a request parser never sees a status line
}

void RequestParser::on_field_impl(bhttp::field name, string_view name_string, string_view value,
                                  error_code& ec) {
  if (is_header_done()) {  // a trailer field: read, counted, never trusted
    trailer_bytes_ += name_string.size() + value.size() + 4;
    if (trailer_bytes_ > max_header_bytes_) ec = bhttp::error::header_limit;
    return;
  }
  if (name_string.size() > kMaxFieldBytes || value.size() > kMaxFieldBytes) {
    ec = bhttp::error::header_limit;
    return;
  }
  request_.insert(name, name_string, value);
}

void RequestParser::on_header_impl(error_code& ec) {
  auto te = request_.find(bhttp::field::transfer_encoding);
  if (te != request_.end() && !is_chunked_only(te->value())) {
    ec = ParseError::unsupported_transfer_encoding;
  }
}

void RequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                      error_code& ec) {
  if (!content_length || *content_length == 0) return;
  // Beast checks the length against body_limit before this; the lease covers it all at once.
  if (!lease_.grow(static_cast<size_t>(*content_length))) {
    ec = ParseError::memory_budget;
    return;
  }
  request_.body().reserve(static_cast<size_t>(*content_length));
}

std::size_t RequestParser::on_body_impl(string_view body, error_code&) {
  request_.body().append(body.data(), body.size());
  return body.size();
}

void RequestParser::on_chunk_header_impl(std::uint64_t size, string_view, error_code& ec) {
  if (size > 0 && !lease_.grow(static_cast<size_t>(size))) ec = ParseError::memory_budget;
}

std::size_t RequestParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code&) {
  request_.body().append(body.data(), body.size());
  return body.size();
}

}  // namespace kiln::server::http
