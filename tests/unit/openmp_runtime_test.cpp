// The OpenMP runtime the CPU kernels run on (src/backends/cpu/openmp_runtime.hpp): one runtime for
// oneDNN and Kiln's loops, LLVM's libomp in the default build, and its regions run every
// iteration on the team asked for.
#include "backends/cpu/openmp_runtime.hpp"

#include <gtest/gtest.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace kiln::backends::cpu {
namespace {

TEST(OpenMPRuntime, OneRuntimeRunsOneDnnAndKilnsLoops) {
  const std::string kernels = openmp_kernels_runtime();
  EXPECT_EQ(kernels, openmp_loops_runtime());
#if KILN_OPENMP_LLVM
  // libdnnl.so.2 names libgomp.so.1, yet its calls bind to libomp, which Kiln links first.
  EXPECT_EQ(kernels.rfind("libomp", 0), 0u) << kernels;
#else
  EXPECT_NE(kernels, "none");
#endif
}

TEST(OpenMPRuntime, WaitPolicyNamesTheRuntime) {
  const std::string line = describe_openmp_wait_policy();
  EXPECT_EQ(line.rfind(openmp_kernels_runtime() + ": ", 0), 0u) << line;
#if KILN_OPENMP_LLVM
  EXPECT_NE(line.find("yielding"), std::string::npos) << line;
#endif
}

#if KILN_OPENMP_LLVM
TEST(OpenMPRuntime, TeamSpinIsSetPerThreadAndRestored) {
  const int before = team_spin_ms();
  ASSERT_GT(before, 1);  // libomp's default, 200 ms
  set_team_spin(TeamSpin::Brief);
  EXPECT_EQ(team_spin_ms(), 1);
  int other = -1;
  std::thread([&] { other = team_spin_ms(); }).join();
  EXPECT_EQ(other, before);  // another thread's teams keep the default
  set_team_spin(TeamSpin::Default);
  EXPECT_EQ(team_spin_ms(), before);
}
#endif

#ifdef _OPENMP
TEST(OpenMPRuntime, RegionsRunEveryIterationOnTheTeamAskedFor) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (int round = 0; round < 50; ++round) {  // back-to-back regions, as a run opens them
      std::vector<int> hits(4099, 0);
      std::atomic<int> team{0};
#pragma omp parallel for schedule(static)
      for (int i = 0; i < static_cast<int>(hits.size()); ++i) {
        hits[i] += 1;
        if (i == 0) team = omp_get_num_threads();
      }
      ASSERT_EQ(team.load(), threads);
      for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << i;
    }
  }
  omp_set_num_threads(saved);
}
#endif

}  // namespace
}  // namespace kiln::backends::cpu
