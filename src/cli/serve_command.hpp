#pragma once
// `kiln serve ...`: runs the inference server, the kiln-serve executable installed beside kiln
// (docs/SERVER.md). Kept as its own program so the server's dependencies (Boost.Asio, gRPC) stay
// out of the kiln command.
namespace kiln::cli {

// Replaces this process with kiln-serve, passing argv[1..] (argv[0] is "serve"). Returns only on
// failure, with exit code 1 and a message naming the path it tried.
int serve_command(int argc, char** argv);

}  // namespace kiln::cli
