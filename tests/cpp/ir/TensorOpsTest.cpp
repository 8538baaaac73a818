// Meta functions of the tensor-creation, combining and indexing ops on
// hand-computed cases, and the errors they raise.
// Depends on ir/Graph.h, ir/Error.h, gtest.
#include "ir/Error.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {

using Ints = std::vector<int64_t>;
using Keywords = std::vector<std::pair<std::string, Argument>>;

// A graph to add inputs and ops to, returning each op's result metas.
class OpBuilder {
public:
  Value *input(const TensorMeta &meta) { return graph_.addInput(meta); }
  std::vector<TensorMeta> run(const char *op, std::vector<Argument> arguments,
                              Keywords keywords = {}) {
    std::vector<TensorMeta> metas;
    for (const auto &value : graph_.addOp(op, arguments, keywords)->results())
      metas.push_back(value->meta());
    return metas;
  }

private:
  Graph graph_;
};

TensorMeta single(const char *op, std::vector<Argument> arguments,
                  Keywords keywords = {}) {
  Graph graph;
  return graph.addOp(op, arguments, keywords)->result()->meta();
}

const TensorMeta kImage(DType::Float32, {2, 3, 4, 5});
const TensorMeta kChannelsLast(DType::Float32, {2, 3, 4, 5}, {60, 1, 15, 3});

} // namespace

TEST(TensorOps, FactoriesInferDTypeFromTheFillValue) {
  EXPECT_EQ(single("aten::zeros", {Ints{2, 3}}),
            TensorMeta(DType::Float32, {2, 3}));
  EXPECT_EQ(single("aten::full", {Ints{2}, true}).dtype, DType::Bool);
  EXPECT_EQ(single("aten::full", {Ints{2}, int64_t{3}}).dtype, DType::Int64);
  EXPECT_EQ(single("aten::full", {Ints{2}, 3.5}).dtype, DType::Float32);
  EXPECT_EQ(
      single("aten::full", {Ints{2}, 3.5}, {{"dtype", DType::Int8}}).dtype,
      DType::Int8);
  EXPECT_EQ(single("aten::scalar_tensor", {int64_t{1}}),
            TensorMeta(DType::Float32, {}));
  EXPECT_EQ(single("aten::empty.memory_format", {Ints{2, 3, 4, 5}},
                   {{"memory_format", MemoryFormat::ChannelsLast}}),
            kChannelsLast);
  EXPECT_EQ(single("aten::empty_strided", {Ints{2, 3}, Ints{1, 2}}),
            TensorMeta(DType::Float32, {2, 3}, {1, 2}));
  EXPECT_THROW(single("aten::ones", {Ints{2, -1}}), Error);
}

TEST(TensorOps, ArangeCountsLikeTorch) {
  EXPECT_EQ(single("aten::arange", {int64_t{5}}),
            TensorMeta(DType::Int64, {5}));
  EXPECT_EQ(
      single("aten::arange.start_step", {int64_t{0}, int64_t{10}, int64_t{3}}),
      TensorMeta(DType::Int64, {4}));
  EXPECT_EQ(single("aten::arange.start_step", {0.0, 1.0, 0.1}),
            TensorMeta(DType::Float32, {10}));
  EXPECT_EQ(
      single("aten::arange.start_step", {int64_t{10}, int64_t{0}, int64_t{-3}}),
      TensorMeta(DType::Int64, {4}));
  // An int64 result counts with truncated bounds: 0..3 in steps of 1.
  EXPECT_EQ(single("aten::arange.start", {0.5, int64_t{3}},
                   {{"dtype", DType::Int64}}),
            TensorMeta(DType::Int64, {3}));
  EXPECT_THROW(
      single("aten::arange.start_step", {int64_t{0}, int64_t{5}, int64_t{0}}),
      Error);
  EXPECT_THROW(
      single("aten::arange.start_step", {int64_t{0}, int64_t{-5}, int64_t{1}}),
      Error);
}

TEST(TensorOps, LikeOpsPreserveDenseLayoutsAndClone) {
  OpBuilder b;
  Value *cl = b.input(kChannelsLast);
  EXPECT_EQ(b.run("aten::empty_like", {cl})[0], kChannelsLast);
  EXPECT_EQ(b.run("aten::zeros_like", {cl},
                  {{"memory_format", MemoryFormat::Contiguous}})[0],
            kImage);
  EXPECT_EQ(
      b.run("aten::full_like", {cl, 2.0}, {{"dtype", DType::Int32}})[0].dtype,
      DType::Int32);
  // A sliced (non-dense) input gets dense strides in its own memory order.
  Value *sliced = b.input(TensorMeta(DType::Float32, {3, 2}, {1, 6}, 1));
  EXPECT_EQ(b.run("aten::clone", {sliced})[0],
            TensorMeta(DType::Float32, {3, 2}, {1, 3}));
  EXPECT_EQ(b.run("aten::new_zeros", {sliced, Ints{4}})[0],
            TensorMeta(DType::Float32, {4}));
}

TEST(TensorOps, CopyKeepsSelfsStridesAndOffset) {
  OpBuilder b;
  TensorMeta strided(DType::Float32, {3, 4}, {2, 6}, 1);
  Value *self = b.input(strided);
  Value *source = b.input(TensorMeta(DType::Float64, {4}));
  EXPECT_EQ(b.run("aten::copy", {self, source})[0], strided);
  Value *expanded = b.input(TensorMeta(DType::Float32, {3, 4}, {1, 0}));
  EXPECT_EQ(b.run("aten::copy", {expanded, source})[0],
            TensorMeta(DType::Float32, {3, 4}));
  Value *tooBig = b.input(TensorMeta(DType::Float32, {2, 3, 4}));
  EXPECT_THROW(b.run("aten::copy", {self, tooBig}), Error);
}

TEST(TensorOps, CatPromotesSkipsLegacyEmptyAndKeepsChannelsLast) {
  OpBuilder b;
  Value *a = b.input(TensorMeta(DType::Int32, {2, 3}));
  Value *c = b.input(TensorMeta(DType::Float16, {2, 5}));
  Value *legacy = b.input(TensorMeta(DType::Float64, {0}));
  EXPECT_EQ(
      b.run("aten::cat", {std::vector<Value *>{a, c, legacy}, int64_t{-1}})[0],
      TensorMeta(DType::Float64, {2, 8}));
  Value *cl = b.input(kChannelsLast);
  EXPECT_EQ(b.run("aten::cat", {std::vector<Value *>{cl, cl}, int64_t{1}})[0],
            TensorMeta(DType::Float32, {2, 6, 4, 5}, {120, 1, 30, 6}));
  Value *plain = b.input(kImage);
  EXPECT_EQ(
      b.run("aten::cat", {std::vector<Value *>{cl, plain}, int64_t{0}})[0],
      TensorMeta(DType::Float32, {4, 3, 4, 5}));
  EXPECT_THROW(b.run("aten::cat", {std::vector<Value *>{a, c}, int64_t{0}}),
               Error);
  Value *scalar = b.input(TensorMeta(DType::Float32, {}));
  EXPECT_THROW(b.run("aten::cat", {std::vector<Value *>{scalar}}), Error);
}

TEST(TensorOps, StackSplitsTheConcatenatedDim) {
  OpBuilder b;
  Value *cl = b.input(kChannelsLast);
  EXPECT_EQ(b.run("aten::stack", {std::vector<Value *>{cl, cl}, int64_t{1}})[0],
            TensorMeta(DType::Float32, {2, 2, 3, 4, 5}, {120, 3, 1, 30, 6}));
  EXPECT_EQ(
      b.run("aten::stack", {std::vector<Value *>{cl, cl}, int64_t{-1}})[0],
      TensorMeta(DType::Float32, {2, 3, 4, 5, 2}));
  Value *other = b.input(TensorMeta(DType::Float32, {2, 3, 5, 4}));
  EXPECT_THROW(b.run("aten::stack", {std::vector<Value *>{cl, other}}), Error);
}

TEST(TensorOps, IndexingShapes) {
  OpBuilder b;
  Value *self = b.input(kImage);
  Value *rows = b.input(TensorMeta(DType::Int64, {7}));
  Value *grid = b.input(TensorMeta(DType::Int64, {2, 1}));
  EXPECT_EQ(b.run("aten::index_select", {self, int64_t{2}, rows})[0],
            TensorMeta(DType::Float32, {2, 3, 7, 5}));
  // Adjacent index tensors replace their dims in place...
  EXPECT_EQ(b.run("aten::index.Tensor",
                  {self, std::vector<Value *>{nullptr, rows, grid}})[0],
            TensorMeta(DType::Float32, {2, 2, 7, 5}));
  // ...separated ones move the broadcast index shape to the front.
  EXPECT_EQ(b.run("aten::index.Tensor",
                  {self, std::vector<Value *>{rows, nullptr, grid}})[0],
            TensorMeta(DType::Float32, {2, 7, 3, 5}));
  Value *mask = b.input(TensorMeta(DType::Bool, {2}));
  EXPECT_THROW(b.run("aten::index.Tensor", {self, std::vector<Value *>{mask}}),
               Unsupported);
  // index_put's result is self-shaped even for masks.
  Value *values = b.input(TensorMeta(DType::Float32, {}));
  EXPECT_EQ(
      b.run("aten::index_put", {self, std::vector<Value *>{mask}, values})[0],
      kImage);
  Value *weight = b.input(TensorMeta(DType::Float32, {10, 4}));
  EXPECT_EQ(b.run("aten::embedding", {weight, grid})[0],
            TensorMeta(DType::Float32, {2, 1, 4}));
  Value *index = b.input(TensorMeta(DType::Int64, {2, 3, 1, 5}));
  EXPECT_EQ(b.run("aten::gather", {self, int64_t{2}, index})[0],
            TensorMeta(DType::Float32, {2, 3, 1, 5}));
  EXPECT_EQ(b.run("aten::scatter.value", {self, int64_t{2}, index, 1.0})[0],
            kImage);
  Value *wide = b.input(TensorMeta(DType::Int64, {2, 4, 1, 5}));
  EXPECT_THROW(b.run("aten::gather", {self, int64_t{2}, wide}), Error);
}

TEST(TensorOps, PaddingFlipRollRepeatAndTriangles) {
  OpBuilder b;
  Value *cl = b.input(kChannelsLast);
  EXPECT_EQ(b.run("aten::constant_pad_nd", {cl, Ints{1, 2}})[0],
            TensorMeta(DType::Float32, {2, 3, 4, 8}, {96, 1, 24, 3}));
  // Only trimming: a clone of the narrowed view.
  Value *transposed = b.input(TensorMeta(DType::Float32, {4, 6}, {1, 4}));
  EXPECT_EQ(b.run("aten::constant_pad_nd", {transposed, Ints{-1, -2}})[0],
            TensorMeta(DType::Float32, {4, 3}, {1, 4}));
  EXPECT_THROW(b.run("aten::constant_pad_nd", {transposed, Ints{-4, -4}}),
               Error);
  EXPECT_EQ(b.run("aten::flip", {transposed, Ints{0}})[0],
            TensorMeta(DType::Float32, {4, 6}, {1, 4}));
  EXPECT_EQ(b.run("aten::roll", {transposed, Ints{1}})[0],
            TensorMeta(DType::Float32, {4, 6}));
  EXPECT_EQ(b.run("aten::repeat", {transposed, Ints{2, 1, 3}})[0],
            TensorMeta(DType::Float32, {2, 4, 18}));
  EXPECT_THROW(b.run("aten::repeat", {transposed, Ints{2}}), Error);
  EXPECT_EQ(b.run("aten::tril", {transposed})[0],
            TensorMeta(DType::Float32, {4, 6}));
}

TEST(TensorOps, SortAndTopk) {
  OpBuilder b;
  Value *transposed = b.input(TensorMeta(DType::BFloat16, {4, 6}, {1, 4}));
  std::vector<TensorMeta> sorted = b.run("aten::sort", {transposed});
  ASSERT_EQ(sorted.size(), 2u);
  EXPECT_EQ(sorted[0], TensorMeta(DType::BFloat16, {4, 6}, {1, 4}));
  EXPECT_EQ(sorted[1], TensorMeta(DType::Int64, {4, 6}, {1, 4}));
  std::vector<TensorMeta> top = b.run("aten::topk", {transposed, int64_t{2}});
  EXPECT_EQ(top[0], TensorMeta(DType::BFloat16, {4, 2}));
  EXPECT_EQ(top[1], TensorMeta(DType::Int64, {4, 2}));
  EXPECT_THROW(b.run("aten::topk", {transposed, int64_t{7}}), Error);
}
