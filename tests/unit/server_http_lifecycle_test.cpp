// HttpServer start / stop with several I/O threads. Regression: stop() closed the acceptor from
// one I/O thread while the aborted accept's completion ran on another, which could re-arm an
// accept on the socket being torn down and crash (about one stop in forty, seen as kiln-serve
// dying with SIGSEGV when a later flag error unwound a started HTTP server).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "server/http/http_server.hpp"
#include "server/server.hpp"

namespace kiln::server::http {
namespace {

TEST(ServerHttpLifecycle, RepeatedStartStopWithManyThreads) {
  namespace fs = std::filesystem;
  const fs::path repo =
      fs::temp_directory_path() / ("kiln_http_lifecycle_" + std::to_string(getpid()));
  fs::create_directories(repo);
  ServerOptions options;
  options.repository.paths = {repo.string()};
  InferenceServer core(options);
  ASSERT_TRUE(core.start());
  for (int i = 0; i < 300; ++i) {
    HttpOptions o;
    o.address = "127.0.0.1";
    o.port = 0;
    o.threads = 8;
    HttpServer server(core, o);
    server.start();
    ASSERT_NE(server.port(), 0);
    // Stopped by the destructor, as when an exception unwinds kiln-serve's main.
  }
  fs::remove_all(repo);
}

}  // namespace
}  // namespace kiln::server::http
