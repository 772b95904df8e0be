// `kiln compile`: ONNX in, optimized engine file out.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/load_model.hpp"
#include "onnx/onnx_io.hpp"
#include "passes/pass_manager.hpp"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

size_t count_nodes(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& [op, count] : ir::op_histogram(g)) n += count;
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), ErrorCode::NotFound, "cannot open model file '{}'", path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace

int compile_command(const CompileOptions& o) {
  auto start = std::chrono::steady_clock::now();
  std::string bytes = read_file(o.model);
  KILN_CHECK_ARG(!engine::has_engine_magic(bytes),
                 "'{}' is already a compiled Kiln engine; compile its ONNX model instead", o.model);
  KILN_CHECK_ARG(!(o.no_optimize && !o.dump_after.empty()),
                 "--dump-after needs the optimizer: drop --no-optimize");
  std::string output = o.output;
  if (output.empty()) output = fs::path(o.model).replace_extension(".kiln").string();
  KILN_CHECK_ARG(fs::weakly_canonical(output) != fs::weakly_canonical(o.model),
                 "the engine file would overwrite the model '{}': choose another -o", o.model);

  engine::EngineInfo info;
  info.source_hash = engine::hash_bytes(bytes.data(), bytes.size());
  if (!o.target.empty()) info.target = engine::Target::parse(o.target);

  onnx_io::ImportOptions import;
  import.base_dir = fs::absolute(o.model).parent_path().string();
  ir::Model model;
  try {
    model = onnx_io::import_model_bytes(bytes, import);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", o.model, e.message()));
  }
  model.source_path = o.model;
  size_t before = count_nodes(*model.graph);

  if (!o.no_optimize) {
    passes::PassManagerOptions pm_options = passes::PassManagerOptions::from_env();
    if (o.trace_passes) pm_options.trace = &std::cout;
    if (!o.dump_after.empty()) {
      pm_options.dump_after = o.dump_after;
      pm_options.dump = &std::cout;
    }
    passes::PassManager pm(pm_options);
    passes::add_default_passes(pm);
    pm.run(*model.graph);
  }
  size_t after = count_nodes(*model.graph);
  std::cout << fmt::format("nodes: {} -> {}{}\n", before, after,
                           o.no_optimize ? " (not optimized)" : "");

  engine::write_engine(model, info, output);
  // Read the engine back and compare: a writer bug must fail the compile, not the deployment.
  engine::ReadOptions check;
  check.check_target = false;
  engine::LoadedEngine loaded = engine::read_engine(output, check);
  if (ir::print_graph(*loaded.model.graph) != ir::print_graph(*model.graph)) {
    fs::remove(output);
    fail(ErrorCode::Internal, "the engine written to '{}' does not read back as the same graph",
         output);
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("wrote {}: {} bytes ({} of weights) in {:.1f} ms\n", output, loaded.size,
                           loaded.weights_size, ms);
  std::cout << describe_engine(loaded.info);
  return 0;
}

}  // namespace kiln::cli
