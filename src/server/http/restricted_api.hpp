#pragma once
// Restricted API categories, tritonserver's --http-restricted-api and --grpc-restricted-protocol
// ("<category>[,<category>...]:<key>=<value>"): calls to an endpoint or RPC of a listed category
// must carry header / metadata `key` (lower-cased: gRPC sends metadata keys in lower case, and
// HTTP header names are case-insensitive) with `value`. One parser serves both frontends.
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::server::http {

struct RestrictedApi {
  std::map<std::string, std::pair<std::string, std::string>> by_category;  // category -> key,value
  // Adds one value of `flag` (named in errors); InvalidArgument for an unknown category, a
  // category given twice or a malformed value. The value may itself hold ':' and '='.
  void add(std::string_view spec, std::string_view flag = "--http-restricted-api");
};

}  // namespace kiln::server::http
