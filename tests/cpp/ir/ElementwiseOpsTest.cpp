// Meta functions of the elementwise ops on hand-computed cases: type
// promotion, TensorIterator's output layout, broadcasting, casts and the
// errors torch raises. Depends on ir/Graph.h and gtest.
#include "ir/Error.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {

// The metadata of the single (or first) result of one op.
TensorMeta
resultOf(Graph &graph, std::string_view op,
         const std::vector<Argument> &arguments,
         const std::vector<std::pair<std::string, Argument>> &keywords = {}) {
  return graph.addOp(op, arguments, keywords)->result()->meta();
}

const Device kCuda{DeviceType::CUDA, 0};

} // namespace

TEST(ElementwiseOps, PromotesTensorsAndScalarsByCategory) {
  Graph graph;
  Value *ints = graph.addInput(TensorMeta(DType::Int32, {2, 3}));
  Value *halfScalar = graph.addInput(TensorMeta(DType::Float64, {}));
  Value *bytes = graph.addInput(TensorMeta(DType::UInt8, {3}));
  // A 0-d tensor of a higher category wins with its own type.
  EXPECT_EQ(resultOf(graph, "aten::add.Tensor", {ints, halfScalar}).dtype,
            DType::Float64);
  // A Python float gives the default float type.
  EXPECT_EQ(resultOf(graph, "aten::mul.Scalar", {ints, 2.5}).dtype,
            DType::Float32);
  // A Python int does not widen int32; uint8 with int32 gives int32.
  EXPECT_EQ(resultOf(graph, "aten::add.Scalar", {ints, int64_t{7}}).dtype,
            DType::Int32);
  EXPECT_EQ(resultOf(graph, "aten::sub.Tensor", {bytes, ints}).sizes,
            (Shape{2, 3}));
}

TEST(ElementwiseOps, ResultFollowsTheMemoryOrderOfTheInputs) {
  Graph graph;
  // A [3, 4] tensor laid out column-major (a transpose of [4, 3]).
  Value *transposed =
      graph.addInput(TensorMeta(DType::Float32, {3, 4}, {1, 3}));
  Value *row = graph.addInput(TensorMeta(DType::Float32, {4}));
  TensorMeta sum = resultOf(graph, "aten::add.Tensor", {transposed, row});
  EXPECT_EQ(sum.sizes, (Shape{3, 4}));
  EXPECT_EQ(sum.strides, (Shape{1, 3}));
  // rsub iterates `other` first: a contiguous other decides.
  Value *contiguous = graph.addInput(TensorMeta(DType::Float32, {3, 4}));
  EXPECT_EQ(
      resultOf(graph, "aten::rsub.Tensor", {transposed, contiguous}).strides,
      (Shape{4, 1}));
}

TEST(ElementwiseOps, BroadcastsAndRefusesMismatches) {
  Graph graph;
  Value *column = graph.addInput(TensorMeta(DType::Float32, {3, 1}));
  Value *row = graph.addInput(TensorMeta(DType::Float32, {1, 4}));
  Value *five = graph.addInput(TensorMeta(DType::Float32, {5}));
  EXPECT_EQ(resultOf(graph, "aten::maximum", {column, row}).sizes,
            (Shape{3, 4}));
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {row, five}), Error);
  EXPECT_THROW(graph.addOp("aten::eq.Tensor", {row, five}), Error);
}

TEST(ElementwiseOps, UnaryOpsKeepOrPromoteTheirType) {
  Graph graph;
  Value *longs = graph.addInput(TensorMeta(DType::Int64, {2}));
  Value *complex = graph.addInput(TensorMeta(DType::Complex64, {2}));
  Value *flags = graph.addInput(TensorMeta(DType::Bool, {2}));
  Value *floats = graph.addInput(TensorMeta(DType::Float32, {2}));
  EXPECT_EQ(resultOf(graph, "aten::sqrt", {longs}).dtype, DType::Float32);
  EXPECT_EQ(resultOf(graph, "aten::abs", {longs}).dtype, DType::Int64);
  EXPECT_EQ(resultOf(graph, "aten::abs", {complex}).dtype, DType::Float32);
  EXPECT_EQ(resultOf(graph, "aten::sign", {flags}).dtype, DType::Bool);
  EXPECT_EQ(resultOf(graph, "aten::isnan", {floats}).dtype, DType::Bool);
  EXPECT_EQ(resultOf(graph, "aten::bitwise_not", {flags}).dtype, DType::Bool);
  // torch's kernels refuse these dtypes.
  EXPECT_THROW(graph.addOp("aten::bitwise_not", {floats}), Error);
  EXPECT_THROW(graph.addOp("aten::neg", {flags}), Error);
  EXPECT_THROW(graph.addOp("aten::gelu", {longs}), Error);
  EXPECT_THROW(graph.addOp("aten::sign", {complex}), Error);
}

TEST(ElementwiseOps, DivisionModesAndPowers) {
  Graph graph;
  Value *ints = graph.addInput(TensorMeta(DType::Int32, {2}));
  EXPECT_EQ(resultOf(graph, "aten::div.Tensor", {ints, ints}).dtype,
            DType::Float32);
  EXPECT_EQ(resultOf(graph, "aten::div.Tensor_mode", {ints, ints},
                     {{"rounding_mode", "floor"}})
                .dtype,
            DType::Int32);
  EXPECT_THROW(graph.addOp("aten::div.Tensor_mode", {ints, ints},
                           {{"rounding_mode", "round"}}),
               Error);
  EXPECT_THROW(graph.addOp("aten::pow.Tensor_Scalar", {ints, int64_t{-1}}),
               Error);
  EXPECT_EQ(resultOf(graph, "aten::pow.Tensor_Scalar", {ints, 0.5}).dtype,
            DType::Float32);
}

TEST(ElementwiseOps, SubtractionAndAlphaChecks) {
  Graph graph;
  Value *flags = graph.addInput(TensorMeta(DType::Bool, {2}));
  Value *ints = graph.addInput(TensorMeta(DType::Int64, {2}));
  EXPECT_THROW(graph.addOp("aten::sub.Tensor", {flags, flags}), Error);
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {ints, ints}, {{"alpha", 0.5}}),
               Error);
  EXPECT_EQ(
      resultOf(graph, "aten::add.Tensor", {ints, ints}, {{"alpha", int64_t{2}}})
          .dtype,
      DType::Int64);
}

TEST(ElementwiseOps, WhereClampAndMaskedFill) {
  Graph graph;
  Value *condition = graph.addInput(TensorMeta(DType::Bool, {2, 1}));
  Value *ints = graph.addInput(TensorMeta(DType::Int64, {3}));
  Value *floats = graph.addInput(TensorMeta(DType::Float32, {}));
  TensorMeta selected =
      resultOf(graph, "aten::where.self", {condition, ints, floats});
  EXPECT_EQ(selected.dtype, DType::Float32);
  EXPECT_EQ(selected.sizes, (Shape{2, 3}));
  EXPECT_THROW(graph.addOp("aten::where.self", {ints, ints, ints}), Error);
  EXPECT_EQ(resultOf(graph, "aten::clamp", {ints, 0.5}).dtype, DType::Float32);
  EXPECT_THROW(graph.addOp("aten::clamp", {ints}), Error);
  // masked_fill keeps self's type and broadcasts with the mask.
  TensorMeta filled =
      resultOf(graph, "aten::masked_fill.Scalar", {ints, condition, 2.5});
  EXPECT_EQ(filled.dtype, DType::Int64);
  EXPECT_EQ(filled.sizes, (Shape{2, 3}));
}

TEST(ElementwiseOps, CastsPreserveLayoutAndAliasWhenNothingChanges) {
  Graph graph;
  Value *transposed =
      graph.addInput(TensorMeta(DType::Float32, {3, 4}, {1, 3}, 5));
  TensorMeta copy = resultOf(graph, "aten::_to_copy", {transposed},
                             {{"dtype", DType::Float16}});
  EXPECT_EQ(copy.dtype, DType::Float16);
  EXPECT_EQ(copy.strides, (Shape{1, 3}));
  EXPECT_EQ(copy.storageOffset, 0);
  // `to` without a change returns self itself: same strides and offset.
  TensorMeta alias =
      resultOf(graph, "aten::to.dtype", {transposed, DType::Float32});
  EXPECT_EQ(alias, transposed->meta());
  TensorMeta contiguous =
      resultOf(graph, "aten::_to_copy", {transposed},
               {{"memory_format", MemoryFormat::Contiguous}});
  EXPECT_EQ(contiguous.strides, (Shape{4, 1}));
  TensorMeta moved =
      resultOf(graph, "aten::_to_copy", {transposed}, {{"device", kCuda}});
  EXPECT_EQ(moved.device, kCuda);
  EXPECT_THROW(graph.addOp("aten::_to_copy", {transposed},
                           {{"memory_format", MemoryFormat::ChannelsLast}}),
               Error);
}

TEST(ElementwiseOps, RefusesComplex32) {
  Graph graph;
  Value *half = graph.addInput(TensorMeta(DType::Float16, {2}));
  Value *complex = graph.addInput(TensorMeta(DType::Complex64, {}));
  EXPECT_THROW(graph.addOp("aten::add.Tensor", {half, complex}), Unsupported);
}
