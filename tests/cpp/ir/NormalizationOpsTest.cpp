// Meta functions of the normalization ops on hand-computed cases, with the
// results that depend on the device (CPU kernels versus CUDA's). Depends on
// ir/Graph.h and gtest.
#include "ir/Error.h"
#include "ir/Graph.h"
#include "tests/cpp/ir/OpTestSupport.h"

#include <gtest/gtest.h>

using namespace kiln;
using kiln::testing::resultsOf;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

} // namespace

TEST(NormalizationOps, SoftmaxIsContiguous) {
  Graph graph;
  Value *transposed =
      graph.addInput(TensorMeta(DType::Float32, {3, 4}, {1, 3}));
  TensorMeta result =
      resultsOf(graph, "aten::_softmax", {transposed, 1, false})[0];
  EXPECT_EQ(result.strides, (Shape{4, 1}));
  EXPECT_EQ(resultsOf(graph, "aten::log_softmax.int",
                      {transposed, 0, DType::Float64})[0]
                .dtype,
            DType::Float64);
  EXPECT_THROW(graph.addOp("aten::_softmax", {transposed, 2, false}), Error);
}

TEST(NormalizationOps, HalfToFloatSoftmaxOnlyOffTheCpu) {
  Graph graph;
  Value *cpu = graph.addInput(TensorMeta(DType::Float16, {2, 3}));
  Value *cuda = graph.addInput(TensorMeta(DType::Float16, {2, 3}, kCuda));
  EXPECT_THROW(graph.addOp("aten::_softmax", {cpu, 1, true}), Error);
  EXPECT_EQ(resultsOf(graph, "aten::_softmax", {cuda, 1, true})[0].dtype,
            DType::Float32);
}

TEST(NormalizationOps, LayerNormStatisticsPerRow) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2, 3, 4}));
  Value *weight = graph.addInput(TensorMeta(DType::Float32, {3, 4}));
  std::vector<TensorMeta> results =
      resultsOf(graph, "aten::native_layer_norm",
                {x, std::vector<int64_t>{3, 4}, weight, Argument(), 1e-5});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].sizes, (Shape{2, 3, 4}));
  EXPECT_EQ(results[1].sizes, (Shape{2, 1, 1}));
  EXPECT_EQ(results[2].sizes, (Shape{2, 1, 1}));
  EXPECT_THROW(
      graph.addOp("aten::native_layer_norm", {x, std::vector<int64_t>{4, 4},
                                              Argument(), Argument(), 1e-5}),
      Error);
  // CUDA keeps float16 statistics in float32; the CPU kernel in float16.
  Value *half = graph.addInput(TensorMeta(DType::Float16, {2, 4}, kCuda));
  EXPECT_EQ(resultsOf(graph, "aten::native_layer_norm",
                      {half, std::vector<int64_t>{4}, Argument(), Argument(),
                       1e-5})[1]
                .dtype,
            DType::Float32);
}

TEST(NormalizationOps, BatchNormStatisticsDependOnTheDevice) {
  Graph graph;
  Value *cpu = graph.addInput(TensorMeta(DType::Float32, {2, 3, 4}));
  Value *stats = graph.addInput(TensorMeta(DType::Float32, {3}));
  std::vector<TensorMeta> eval =
      resultsOf(graph, "aten::native_batch_norm",
                {cpu, Argument(), Argument(), stats, stats, false, 0.1, 1e-5});
  EXPECT_EQ(eval[1].sizes, (Shape{0})); // the CPU saves nothing in eval mode
  Value *cuda = graph.addInput(TensorMeta(DType::Float16, {2, 3, 4}, kCuda));
  std::vector<TensorMeta> train =
      resultsOf(graph, "aten::_native_batch_norm_legit.no_stats",
                {cuda, Argument(), Argument(), true, 0.1, 1e-5});
  EXPECT_EQ(train[1].sizes, (Shape{3}));
  EXPECT_EQ(train[1].dtype, DType::Float32);
  // Eval mode needs running statistics; parameters need one per channel.
  EXPECT_THROW(graph.addOp("aten::native_batch_norm",
                           {cpu, Argument(), Argument(), Argument(), Argument(),
                            false, 0.1, 1e-5}),
               Error);
  Value *four = graph.addInput(TensorMeta(DType::Float32, {4}));
  EXPECT_THROW(
      graph.addOp("aten::native_batch_norm", {cpu, four, Argument(), Argument(),
                                              Argument(), true, 0.1, 1e-5}),
      Error);
}

TEST(NormalizationOps, GroupNormShapesAndChecks) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float64, {2, 6, 5}));
  std::vector<TensorMeta> results =
      resultsOf(graph, "aten::native_group_norm",
                {x, Argument(), Argument(), 2, 6, 5, 3, 1e-5});
  EXPECT_EQ(results[0].sizes, (Shape{2, 6, 5}));
  EXPECT_EQ(results[1].sizes, (Shape{2, 3}));
  EXPECT_EQ(results[1].dtype, DType::Float64);
  EXPECT_THROW(graph.addOp("aten::group_norm", {x, 4}), Error);
  EXPECT_THROW(graph.addOp("aten::native_group_norm",
                           {x, Argument(), Argument(), 2, 6, 4, 3, 1e-5}),
               Error);
  Value *transposed =
      graph.addInput(TensorMeta(DType::Float32, {2, 6, 5}, {1, 2, 12}));
  // group_norm makes its input contiguous; native_group_norm needs it so.
  EXPECT_EQ(resultsOf(graph, "aten::group_norm", {transposed, 3})[0].strides,
            (Shape{30, 5, 1}));
  EXPECT_THROW(
      graph.addOp("aten::native_group_norm",
                  {transposed, Argument(), Argument(), 2, 6, 5, 3, 1e-5}),
      Error);
}
