// The row layout the matrix-tile ops declare (mma_tile.hpp: kAccRowLanes, kAccLaneRows,
// acc_lane_row), which the attention kernel's row reductions rely on, checked against each op's
// own accumulator coordinates (acc_coord).
#include <gtest/gtest.h>

#include <string>

#include "backends/gpu/kernels/mma_tile.hpp"

namespace {

using namespace kiln::backends::gpu::kernels;

template <typename Op>
void check_row_layout(int lanes, const std::string& name) {
  for (int lane = 0; lane < lanes; ++lane) {
    for (int i = 0; i < Op::kAcc; ++i) {
      int r, c;
      Op::acc_coord(lane, i, r, c);
      ASSERT_LT(Op::acc_lane_row(i), Op::kAccLaneRows) << name;
      // Within the lane: the same row exactly when acc_lane_row says so.
      for (int i2 = 0; i2 < Op::kAcc; ++i2) {
        int r2, c2;
        Op::acc_coord(lane, i2, r2, c2);
        EXPECT_EQ(r == r2, Op::acc_lane_row(i) == Op::acc_lane_row(i2))
            << name << " lane " << lane << " acc " << i << " and " << i2;
      }
      // Across lanes: accumulator i holds this row exactly on the lane's group.
      for (int other = 0; other < lanes; ++other) {
        int r2, c2;
        Op::acc_coord(other, i, r2, c2);
        EXPECT_EQ(r == r2, other / Op::kAccRowLanes == lane / Op::kAccRowLanes)
            << name << " lanes " << lane << " and " << other << " acc " << i;
      }
    }
  }
}

TEST(GpuTileLayout, AccumulatorRowsMatchTheirCoordinates) {
  check_row_layout<MmaSm80F16>(32, "mma.sync m16n8k16");
  check_row_layout<MfmaF16>(64, "mfma 16x16x16");
  check_row_layout<FmaTile<uint16_t>>(KILN_WARP_SIZE, "fma");
}

}  // namespace
