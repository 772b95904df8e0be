// The HTTP frontend's own request parser, JSON memory scopes and the request memory budget:
// what a hostile client can make them do (issue 13).
#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>

#include "expect_error.hpp"
#include "server/http/infer_codec.hpp"
#include "server/http/request_parser.hpp"
#include "server/http/routes.hpp"
#include "server/json_memory.hpp"
#include "server/memory_budget.hpp"

namespace kiln::server::http {
namespace {

namespace bhttp = boost::beast::http;

// Feeds `bytes` to a fresh parser, the way Beast's read loop does, and returns the error.
boost::system::error_code parse(RequestParser& parser, std::string_view bytes) {
  boost::system::error_code ec;
  parser.eager(true);
  while (!bytes.empty() && !parser.is_done()) {
    const size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    if (ec) return ec;
    if (used == 0) break;
    bytes.remove_prefix(used);
  }
  return ec;
}

std::string chunked(std::string_view trailer) {
  return "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
         "2\r\n{}\r\n0\r\n" +
         std::string(trailer) + "\r\n";
}

TEST(HttpRequestParser, TrailerFieldsAreDropped) {
  RequestParser parser(nullptr, 1 << 20, 8192);
  ASSERT_FALSE(parse(parser, chunked("Authorization: Bearer t\r\nX-A: 1\r\n")));
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.get().body(), "{}");
  EXPECT_EQ(parser.get().count(bhttp::field::authorization), 0u);
  EXPECT_EQ(parser.get().count("X-A"), 0u);
  EXPECT_EQ(parser.get().count(bhttp::field::host), 1u);
}

TEST(HttpRequestParser, FieldPastBeastsStorageIsHeaderLimitNotAThrow) {
  for (const std::string& field :
       {"X-Big: " + std::string(70000, 'v'), std::string(70000, 'n') + ": 1"}) {
    RequestParser header(nullptr, 1 << 20, 1 << 20);
    EXPECT_EQ(parse(header, "GET / HTTP/1.1\r\n" + field + "\r\n\r\n"), bhttp::error::header_limit);
    RequestParser trailer(nullptr, 1 << 20, 1 << 20);
    // A trailer field is dropped, but one too long for a field is still refused, never thrown.
    const auto ec = parse(trailer, chunked(field + "\r\n"));
    EXPECT_TRUE(!ec || ec == bhttp::error::header_limit) << ec.message();
    RequestParser small(nullptr, 1 << 20, 8192);
    EXPECT_EQ(parse(small, chunked(field + "\r\n")), bhttp::error::header_limit);
  }
}

TEST(HttpRequestParser, OnlyChunkedTransferCoding) {
  for (const char* te : {"gzip", "gzip, chunked", "chunked, chunked", "identity"}) {
    RequestParser parser(nullptr, 1 << 20, 8192);
    EXPECT_EQ(parse(parser, std::string("POST / HTTP/1.1\r\nTransfer-Encoding: ") + te +
                                "\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
              ParseError::unsupported_transfer_encoding)
        << te;
  }
  RequestParser parser(nullptr, 1 << 20, 8192);
  EXPECT_FALSE(parse(parser, "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n"));
}

TEST(HttpRequestParser, BodiesLeaseFromTheBudget) {
  MemoryBudget budget(100);
  RequestParser fits(&budget, 1 << 20, 8192);
  ASSERT_FALSE(parse(fits, "POST / HTTP/1.1\r\nContent-Length: 60\r\n\r\n" + std::string(60, 'a')));
  EXPECT_EQ(budget.used(), 60u);
  RequestParser over(&budget, 1 << 20, 8192);
  EXPECT_EQ(parse(over, "POST / HTTP/1.1\r\nContent-Length: 60\r\n\r\n{"),
            ParseError::memory_budget);
  EXPECT_EQ(budget.used(), 60u);
  RequestParser chunks(&budget, 1 << 20, 8192);
  EXPECT_EQ(parse(chunks,
                  "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "1e\r\n" +
                      std::string(30, 'b') + "\r\n1e\r\n" + std::string(30, 'b')),
            ParseError::memory_budget);
  {
    MemoryLease lease;
    Request request = fits.release(lease);
    EXPECT_EQ(request.body().size(), 60u);
    EXPECT_EQ(lease.bytes(), 60u);
  }
  EXPECT_EQ(budget.used(), 30u);  // the partly read chunked body still holds its first chunk
}

TEST(HttpBearer, SchemeIsCaseInsensitiveTokenIsExact) {
  EXPECT_TRUE(bearer_matches("Bearer tok", "tok"));
  EXPECT_TRUE(bearer_matches("bearer tok", "tok"));
  EXPECT_TRUE(bearer_matches("BEARER   tok", "tok"));
  EXPECT_FALSE(bearer_matches("Bearer tak", "tok"));
  EXPECT_FALSE(bearer_matches("Bearer tok2", "tok"));
  EXPECT_FALSE(bearer_matches("Bearer to", "tok"));
  EXPECT_FALSE(bearer_matches("Bearertok", "tok"));
  EXPECT_FALSE(bearer_matches("Basic tok", "tok"));
  EXPECT_FALSE(bearer_matches("Bearer ", ""));
}

TEST(JsonMemory, NestingDepthSkipsStrings) {
  EXPECT_EQ(json_nesting_depth(R"({"a":[[1],[2,[3]]]})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"({"a":"[[[[\"[[["})"), 1u);
  EXPECT_EQ(json_nesting_depth(std::string(1000, '[')), 1000u);
}

TEST(JsonMemory, ScopeStopsAParseAtItsLimit) {
  std::string big = "[";
  for (int i = 0; i < 100000; ++i) big += "1,";
  big += "1]";
  {
    JsonMemoryScope scope(size_t{64} << 20, "the test JSON");
    JsonDocument doc;
    doc.Parse(big.data(), big.size());
    ASSERT_FALSE(doc.HasParseError());
    EXPECT_GT(scope.used(), big.size());
  }
  JsonMemoryScope scope(size_t{64} << 10, "the test JSON");
  JsonDocument doc;
  expect_error([&] { doc.Parse(big.data(), big.size()); }, ErrorCode::InvalidArgument,
               "the test JSON needs more than 65536 bytes");
}

TEST(JsonMemory, RequestCostIsBoundedByItsSize) {
  // A deep document is refused before any parse tree exists for it.
  expect_error([] { decode_infer_request(std::string(1 << 20, '['), std::nullopt); },
               ErrorCode::InvalidArgument, "nested deeper than");
}

TEST(MemoryBudgetTest, AcquireReleaseAndLeases) {
  MemoryBudget budget(10);
  EXPECT_TRUE(budget.try_acquire(6));
  EXPECT_FALSE(budget.try_acquire(5));
  EXPECT_FALSE(budget.try_acquire(SIZE_MAX));
  {
    MemoryLease lease(budget);
    EXPECT_TRUE(lease.grow(4));
    EXPECT_FALSE(lease.grow(1));
    MemoryLease moved = std::move(lease);
    EXPECT_EQ(moved.bytes(), 4u);
    EXPECT_EQ(budget.used(), 10u);
  }
  EXPECT_EQ(budget.used(), 6u);
  budget.release(6);
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace kiln::server::http
