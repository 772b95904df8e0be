// The task metrics of `kiln quantize --metric` (compiler/task_metric.hpp) on crafted outputs, and
// the .npz a script metric reads, read back by the calibration's own .npz reader.
#include "compiler/task_metric.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/npz.hpp"
#include "expect_error.hpp"

namespace kiln::compiler {
namespace {

Tensor tensor(std::vector<int64_t> dims, std::vector<float> values) {
  Tensor t(DataType::Float32, std::move(dims));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

TEST(TaskMetric, BuiltInScoresAndDrops) {
  // Two sets of [2, 3] logits; the candidate flips the argmax of one row of four.
  OutputSets ref = {
      {"logits", {tensor({2, 3}, {1, 2, 3, 3, 2, 1}), tensor({2, 3}, {0, 5, 1, 2, 0, 0})}}};
  OutputSets cand = {
      {"logits", {tensor({2, 3}, {1, 2, 3, 3, 2, 1}), tensor({2, 3}, {0, 5, 1, 0, 1, 0})}}};
  MetricEvaluator top1(parse_task_metric("top1"), ref);
  EXPECT_EQ(top1.reference_score(), 1.0);
  EXPECT_DOUBLE_EQ(top1.score(cand), 0.75);
  EXPECT_DOUBLE_EQ(top1.drop(cand), 0.25);
  MetricEvaluator cosine(parse_task_metric("cosine"), ref);
  EXPECT_DOUBLE_EQ(cosine.score(ref), 1.0);
  const double dot = 1 + 4 + 9 + 9 + 4 + 1 + 25 + 1;
  const double aa = 1 + 4 + 9 + 9 + 4 + 1 + 25 + 1 + 4, bb = 1 + 4 + 9 + 9 + 4 + 1 + 25 + 1 + 1;
  EXPECT_NEAR(cosine.score(cand), dot / std::sqrt(aa * bb), 1e-12);
  // The reference's range is [0, 5]: a step is 5 / 255; the largest difference is 2.
  MetricEvaluator steps(parse_task_metric("max-abs-steps"), ref);
  EXPECT_FALSE(steps.higher_is_better());
  EXPECT_EQ(steps.reference_score(), 0.0);
  EXPECT_NEAR(steps.score(cand), 2.0 / (5.0 / 255.0), 1e-9);
  EXPECT_NEAR(steps.drop(cand), 102.0, 1e-9);
}

TEST(TaskMetric, RefusesWhatItCannotScore) {
  OutputSets image = {{"y", {tensor({1, 2, 2}, {1, 2, 3, 4})}}};
  expect_error([&] { MetricEvaluator(parse_task_metric("top1"), image); },
               ErrorCode::InvalidArgument, "needs an output shaped [N, classes]");
  expect_error([&] { parse_task_metric("f1"); }, ErrorCode::InvalidArgument,
               "choose cosine, top1, max-abs-steps or script:PATH");
  expect_error([&] { parse_task_metric("script:/no/such/script.py"); }, ErrorCode::InvalidArgument,
               "no such file");
}

TEST(TaskMetric, NpzConcatenatesTheSetsAlongTheFirstAxis) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "kiln_task_metric_test.npz").string();
  OutputSets arrays = {{"logits", {tensor({1, 3}, {1, 2, 3}), tensor({2, 3}, {4, 5, 6, 7, 8, 9})}},
                       {"score", {tensor({}, {0.5f}), tensor({}, {1.5f})}}};
  write_npz(path, arrays);
  const runtime::Feeds back = read_npz(path);
  std::filesystem::remove(path);
  ASSERT_EQ(back.size(), 2u);
  const Tensor& logits = back.at("logits").tensor();
  EXPECT_EQ(logits.dims(), (std::vector<int64_t>{3, 3}));
  for (int i = 0; i < 9; ++i) EXPECT_EQ(logits.data<float>()[i], float(i + 1));
  const Tensor& score = back.at("score").tensor();
  EXPECT_EQ(score.dims(), (std::vector<int64_t>{2}));  // scalars stacked
  EXPECT_EQ(score.data<float>()[1], 1.5f);
  OutputSets ragged = {{"y", {tensor({1, 3}, {1, 2, 3}), tensor({1, 2}, {1, 2})}}};
  expect_error([&] { write_npz(path, ragged); }, ErrorCode::InvalidArgument,
               "differ beyond the first axis");
}

}  // namespace
}  // namespace kiln::compiler
