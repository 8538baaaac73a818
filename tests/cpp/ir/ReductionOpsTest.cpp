// Meta functions of the reduction ops on hand-computed cases: result types,
// reduced shapes with and without keepdim, and the errors torch raises.
// Depends on ir/Graph.h and gtest.
#include "ir/Error.h"
#include "ir/Graph.h"
#include "tests/cpp/ir/OpTestSupport.h"

#include <gtest/gtest.h>

using namespace kiln;
using kiln::testing::resultsOf;

namespace {

TensorMeta resultOf(Graph &graph, std::string_view op,
                    const std::vector<Argument> &arguments) {
  return resultsOf(graph, op, arguments).at(0);
}

} // namespace

TEST(ReductionOps, SumsAccumulateIntegersInInt64) {
  Graph graph;
  Value *ints = graph.addInput(TensorMeta(DType::Int32, {2, 3}));
  Value *flags = graph.addInput(TensorMeta(DType::Bool, {2, 3}));
  TensorMeta total = resultOf(graph, "aten::sum", {ints});
  EXPECT_EQ(total.dtype, DType::Int64);
  EXPECT_EQ(total.sizes, Shape{});
  EXPECT_EQ(resultOf(graph, "aten::prod", {flags}).dtype, DType::Int64);
  TensorMeta rows = resultOf(graph, "aten::sum.dim_IntList",
                             {ints, std::vector<int64_t>{-1}, true});
  EXPECT_EQ(rows.sizes, (Shape{2, 1}));
  // dim=[] and dim=None reduce every dim.
  EXPECT_EQ(resultOf(graph, "aten::sum.dim_IntList",
                     {ints, std::vector<int64_t>{}, false})
                .sizes,
            Shape{});
  EXPECT_EQ(graph
                .addOp("aten::sum.dim_IntList", {ints, Argument(), false},
                       {{"dtype", DType::Float16}})
                ->result()
                ->meta()
                .dtype,
            DType::Float16);
}

TEST(ReductionOps, ResultsAreContiguous) {
  Graph graph;
  Value *transposed =
      graph.addInput(TensorMeta(DType::Float32, {3, 4}, {1, 3}));
  TensorMeta kept = resultOf(graph, "aten::amax",
                             {transposed, std::vector<int64_t>{0}, true});
  EXPECT_EQ(kept.sizes, (Shape{1, 4}));
  EXPECT_EQ(kept.strides, (Shape{4, 1}));
  TensorMeta scanned = resultOf(graph, "aten::cumsum", {transposed, 0});
  EXPECT_EQ(scanned.strides, (Shape{4, 1}));
}

TEST(ReductionOps, MeanNeedsAFloatingType) {
  Graph graph;
  Value *ints = graph.addInput(TensorMeta(DType::Int64, {4}));
  EXPECT_THROW(graph.addOp("aten::mean", {ints}), Error);
  EXPECT_EQ(graph.addOp("aten::mean", {ints}, {{"dtype", DType::Float64}})
                ->result()
                ->meta()
                .dtype,
            DType::Float64);
}

TEST(ReductionOps, ExtremaWithIndicesAndArgExtrema) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float16, {2, 3, 4}));
  std::vector<TensorMeta> both = resultsOf(graph, "aten::max.dim", {x, 1});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].dtype, DType::Float16);
  EXPECT_EQ(both[0].sizes, (Shape{2, 4}));
  EXPECT_EQ(both[1].dtype, DType::Int64);
  TensorMeta index = resultOf(graph, "aten::argmax", {x, Argument(), true});
  EXPECT_EQ(index.sizes, (Shape{1, 1, 1}));
  EXPECT_EQ(index.dtype, DType::Int64);
}

TEST(ReductionOps, EmptyInputsNeedAnIdentityOrNamedNonEmptyDims) {
  Graph graph;
  Value *empty = graph.addInput(TensorMeta(DType::Float32, {0, 3}));
  EXPECT_THROW(graph.addOp("aten::amax", {empty, std::vector<int64_t>{0}}),
               Error);
  EXPECT_THROW(graph.addOp("aten::max", {empty}), Error);
  EXPECT_EQ(
      resultOf(graph, "aten::amax", {empty, std::vector<int64_t>{1}}).sizes,
      (Shape{0}));
  EXPECT_EQ(resultOf(graph, "aten::sum", {empty}).sizes, Shape{});
}

TEST(ReductionOps, VarianceAnyAndNorms) {
  Graph graph;
  Value *complex = graph.addInput(TensorMeta(DType::Complex128, {2, 3}));
  Value *bytes = graph.addInput(TensorMeta(DType::UInt8, {2, 3}));
  Value *ints = graph.addInput(TensorMeta(DType::Int32, {2, 3}));
  std::vector<TensorMeta> varMean =
      resultsOf(graph, "aten::var_mean.correction", {complex});
  EXPECT_EQ(varMean[0].dtype, DType::Float64);
  EXPECT_EQ(varMean[1].dtype, DType::Complex128);
  EXPECT_EQ(resultOf(graph, "aten::any.dim", {bytes, 0}).dtype, DType::UInt8);
  EXPECT_EQ(resultOf(graph, "aten::all", {ints}).dtype, DType::Bool);
  EXPECT_EQ(resultOf(graph, "aten::linalg_vector_norm", {complex}).dtype,
            DType::Float64);
  EXPECT_THROW(graph.addOp("aten::linalg_vector_norm", {ints}), Error);
  EXPECT_THROW(graph.addOp("aten::var.correction", {ints}), Error);
}

TEST(ReductionOps, RefusesBadDims) {
  Graph graph;
  Value *x = graph.addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *scalar = graph.addInput(TensorMeta(DType::Float32, {}));
  EXPECT_THROW(
      graph.addOp("aten::sum.dim_IntList", {x, std::vector<int64_t>{2}}),
      Error);
  EXPECT_THROW(
      graph.addOp("aten::sum.dim_IntList", {x, std::vector<int64_t>{1, -1}}),
      Error);
  EXPECT_THROW(graph.addOp("aten::cumsum", {x, -3}), Error);
  // A 0-d tensor takes dims 0 and -1.
  EXPECT_EQ(resultOf(graph, "aten::max.dim", {scalar, -1}).sizes, Shape{});
}
