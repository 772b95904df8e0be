// KernelPreference: which of several kernels for one op the kernel table's select() returns, by
// the backend's preference and each kernel's KernelDef::library (the GPU backend's
// KILN_GPU_OWN_KERNELS; docs/GPU.md). Entries of a table of its own, so no real kernel moves.
#include <gtest/gtest.h>

#include "backends/kernel_table.hpp"
#include "fake_device.hpp"
#include "ir/graph.hpp"

namespace kiln {
namespace {

constexpr const char* kTable = "preference-test";

// Relu: a vendor library's kernel (the default by priority) and an own one that refuses
// negative alphas of a made-up attribute; Sigmoid: a library's only.
bool register_kernels() {
  auto add = [](const char* op, const char* name, const char* library, int priority,
                backends::KernelCheck check) {
    backends::KernelDef d;
    d.backend = kTable;
    d.op_type = op;
    d.name = name;
    d.library = library;
    d.priority = priority;
    d.check = std::move(check);
    d.create = [](const ir::Node&) -> std::unique_ptr<backends::Kernel> { return nullptr; };
    backends::KernelTable::instance().add(std::move(d));
  };
  auto yes = [](const ir::Node&) { return std::string(); };
  add("Relu", "lib.relu", "vendorlib", 0, yes);
  add("Relu", "own.relu", "", -1, [](const ir::Node& n) {
    return n.attributes().count("refuse") ? std::string("refused") : std::string();
  });
  add("Sigmoid", "lib.sigmoid", "vendorlib", 0, yes);
  return true;
}
const bool kRegistered = register_kernels();

ir::Node* make_node(ir::Graph& g, const char* op) {
  ir::Value* x = g.add_input("x", TypeInfo::tensor(DataType::Float32, Shape::from_values({4})));
  return g.add_node(op, "", op, {x}, {g.add_value("y")});
}

TEST(KernelPreference, OrdersOwnKernelsBeforeLibrariesOrLeavesLibrariesOut) {
  ASSERT_TRUE(kRegistered);
  testing::FakeDevice dev;
  const backends::KernelTable& table = backends::KernelTable::instance();
  ir::Graph g;
  ir::Node* relu = make_node(g, "Relu");
  EXPECT_EQ(table.select(dev, kTable, *relu).kernel, "lib.relu") << "by priority";
  dev.set_kernel_preference(backends::KernelPreference::Own);
  EXPECT_EQ(table.select(dev, kTable, *relu).kernel, "own.relu");
  dev.set_kernel_preference(backends::KernelPreference::OwnOnly);
  EXPECT_EQ(table.select(dev, kTable, *relu).kernel, "own.relu");

  // An own kernel that refuses the node: Own still finds the library's, OwnOnly does not.
  relu->set_attribute("refuse", ir::Attribute(int64_t{1}));
  dev.set_kernel_preference(backends::KernelPreference::Own);
  EXPECT_EQ(table.select(dev, kTable, *relu).kernel, "lib.relu");
  dev.set_kernel_preference(backends::KernelPreference::OwnOnly);
  backends::Support s = table.select(dev, kTable, *relu);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.reason.find("own.relu: refused"), std::string::npos) << s.reason;

  ir::Graph g2;
  ir::Node* sigmoid = make_node(g2, "Sigmoid");
  s = table.select(dev, kTable, *sigmoid);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.reason.find("only Kiln's own"), std::string::npos) << s.reason;
  dev.set_kernel_preference(backends::KernelPreference::Own);
  EXPECT_EQ(table.select(dev, kTable, *sigmoid).kernel, "lib.sigmoid");
}

}  // namespace
}  // namespace kiln
