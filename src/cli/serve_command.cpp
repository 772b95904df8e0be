#include "cli/serve_command.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace kiln::cli {

int serve_command(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path server = ec ? fs::path("kiln-serve") : self.parent_path() / "kiln-serve";
  std::vector<char*> args;
  std::string name = server.string();
  args.push_back(name.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(name.c_str(), args.data());
  std::cerr << "kiln serve: cannot run " << name << ": " << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace kiln::cli
