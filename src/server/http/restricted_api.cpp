#include "server/http/restricted_api.hpp"

#include <cctype>

#include "core/error.hpp"

namespace kiln::server::http {

void RestrictedApi::add(std::string_view spec, std::string_view flag) {
  static const char* kCategories[] = {"health",        "metadata",     "inference",
                                      "shared-memory", "model-config", "model-repository",
                                      "statistics",    "trace",        "logging"};
  // Categories hold neither ':' nor '=', so the first ':' ends them and the first '=' after it
  // ends the key.
  const size_t colon = spec.find(':');
  const size_t eq = colon == std::string_view::npos ? colon : spec.find('=', colon);
  KILN_CHECK_ARG(colon != std::string_view::npos && eq != std::string_view::npos && eq > colon + 1,
                 "{} '{}' must be <categories>:<key>=<value>", flag, spec);
  std::string key(spec.substr(colon + 1, eq - colon - 1));
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string value(spec.substr(eq + 1));
  const std::string_view categories = spec.substr(0, colon);
  size_t start = 0;
  while (start <= categories.size()) {
    size_t comma = categories.find(',', start);
    if (comma == std::string_view::npos) comma = categories.size();
    const std::string category(categories.substr(start, comma - start));
    bool known = false;
    for (const char* k : kCategories) known |= category == k;
    KILN_CHECK_ARG(known, "{}: unknown category '{}'", flag, category);
    KILN_CHECK_ARG(!by_category.count(category), "{}: category '{}' given twice", flag, category);
    by_category[category] = {key, value};
    start = comma + 1;
  }
}

}  // namespace kiln::server::http
