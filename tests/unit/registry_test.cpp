#include <gtest/gtest.h>

#include "ops/registry.hpp"

namespace kiln {
namespace {

TEST(OpRegistry, EveryOpIsRegisteredOncePerOpsetRange) {
  EXPECT_TRUE(ops::OpRegistry::instance().duplicates().empty())
      << "duplicate: " << ops::OpRegistry::instance().duplicates().front();
}

TEST(OpRegistry, CoreOpsResolveAcrossOpsetsAndUnknownOpsNameThemselves) {
  const auto& reg = ops::OpRegistry::instance();
  for (const char* op : {"Conv", "MatMul", "Relu", "Softmax", "Reshape", "Gather", "If", "Loop"}) {
    for (int opset : {7, 13, 18, ops::kMaxOnnxOpset}) {
      EXPECT_NE(reg.find("", op, opset), nullptr) << op << " at opset " << opset;
    }
  }
  try {
    reg.get("", "NoSuchOp", 17);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("NoSuchOp"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
