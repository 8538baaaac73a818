// Meta functions of the view ops on hand-computed cases: strides and storage
// offsets of views, copies where no view exists, and errors.
// Depends on ir/Graph.h, ir/Error.h, gtest.
#include "ir/Error.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {

using Ints = std::vector<int64_t>;

// The only result of `op` on `input` with the further arguments.
TensorMeta viewOf(const TensorMeta &input, const char *op,
                  std::vector<Argument> rest = {},
                  std::vector<std::pair<std::string, Argument>> keywords = {}) {
  Graph graph;
  std::vector<Argument> arguments = {graph.addInput(input)};
  arguments.insert(arguments.end(), rest.begin(), rest.end());
  return graph.addOp(op, arguments, keywords)->result()->meta();
}

std::vector<TensorMeta> piecesOf(const TensorMeta &input, const char *op,
                                 std::vector<Argument> rest) {
  Graph graph;
  std::vector<Argument> arguments = {graph.addInput(input)};
  arguments.insert(arguments.end(), rest.begin(), rest.end());
  std::vector<TensorMeta> metas;
  for (const auto &value : graph.addOp(op, arguments)->results())
    metas.push_back(value->meta());
  return metas;
}

const TensorMeta kMatrix(DType::Float32, {4, 6});
// A [4, 6] matrix stored transposed: strides (1, 4).
const TensorMeta kTransposed(DType::Float32, {4, 6}, {1, 4});

} // namespace

TEST(ViewOps, ViewOfContiguousSplitsAndMergesDims) {
  EXPECT_EQ(viewOf(kMatrix, "aten::view", {Ints{2, -1, 3}}),
            TensorMeta(DType::Float32, {2, 4, 3}));
  EXPECT_EQ(viewOf(kMatrix, "aten::view", {Ints{24}}),
            TensorMeta(DType::Float32, {24}));
}

TEST(ViewOps, ViewKeepsOffsetAndSplitsNonContiguousChunks) {
  // Columns 1..4 of an [8, 6] matrix: rows are chunks of stride 6.
  TensorMeta sliced(DType::Float32, {8, 4}, {6, 1}, 1);
  EXPECT_EQ(viewOf(sliced, "aten::view", {Ints{2, 4, 2, 2}}),
            TensorMeta(DType::Float32, {2, 4, 2, 2}, {24, 6, 2, 1}, 1));
  // Merging the rows is impossible: they are not adjacent in memory.
  EXPECT_THROW(viewOf(sliced, "aten::view", {Ints{32}}), Error);
}

TEST(ViewOps, ViewOfTransposedMatrixOnlySplits) {
  EXPECT_EQ(viewOf(kTransposed, "aten::view", {Ints{2, 2, 6}}),
            TensorMeta(DType::Float32, {2, 2, 6}, {2, 1, 4}));
  try {
    viewOf(kTransposed, "aten::view", {Ints{24}});
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("Use .reshape"),
              std::string::npos);
  }
}

TEST(ViewOps, ViewRejectsWrongElementCounts) {
  EXPECT_THROW(viewOf(kMatrix, "aten::view", {Ints{5, -1}}), Error);
  EXPECT_THROW(viewOf(kMatrix, "aten::view", {Ints{-1, -1}}), Error);
  EXPECT_THROW(viewOf(kMatrix, "aten::view", {Ints{25}}), Error);
}

TEST(ViewOps, ReshapeCopiesWhereNoViewExists) {
  TensorMeta offset(DType::Float32, {4, 6}, {1, 4}, 3);
  EXPECT_EQ(viewOf(offset, "aten::reshape", {Ints{24}}),
            TensorMeta(DType::Float32, {24}));
  EXPECT_EQ(viewOf(offset, "aten::reshape", {Ints{2, 2, 6}}),
            TensorMeta(DType::Float32, {2, 2, 6}, {2, 1, 4}, 3));
}

TEST(ViewOps, PermuteTransposeAndT) {
  TensorMeta cube(DType::Int64, {2, 3, 4});
  EXPECT_EQ(viewOf(cube, "aten::permute", {Ints{2, 0, -2}}),
            TensorMeta(DType::Int64, {4, 2, 3}, {1, 12, 4}));
  EXPECT_EQ(viewOf(cube, "aten::transpose.int", {int64_t{0}, int64_t{-1}}),
            TensorMeta(DType::Int64, {4, 3, 2}, {1, 4, 12}));
  EXPECT_EQ(viewOf(kMatrix, "aten::t"),
            TensorMeta(DType::Float32, {6, 4}, {1, 6}));
  EXPECT_THROW(viewOf(cube, "aten::t"), Error);
  EXPECT_THROW(viewOf(cube, "aten::permute", {Ints{0, 1}}), Error);
  EXPECT_THROW(viewOf(cube, "aten::permute", {Ints{0, 1, 1}}), Error);
  EXPECT_THROW(viewOf(cube, "aten::transpose.int", {int64_t{0}, int64_t{3}}),
               Error);
}

TEST(ViewOps, ExpandBroadcastsWithStrideZero) {
  TensorMeta column(DType::Float32, {3, 1}, {1, 1}, 2);
  EXPECT_EQ(viewOf(column, "aten::expand", {Ints{2, -1, 5}}),
            TensorMeta(DType::Float32, {2, 3, 5}, {0, 1, 0}, 2));
  EXPECT_THROW(viewOf(column, "aten::expand", {Ints{4, 5}}), Error);
  EXPECT_THROW(viewOf(column, "aten::expand", {Ints{-1, 3, 1}}), Error);
}

TEST(ViewOps, SqueezeAndUnsqueeze) {
  TensorMeta ones(DType::Float32, {1, 3, 1, 2});
  EXPECT_EQ(viewOf(ones, "aten::squeeze"), TensorMeta(DType::Float32, {3, 2}));
  EXPECT_EQ(viewOf(ones, "aten::squeeze.dim", {int64_t{-2}}),
            TensorMeta(DType::Float32, {1, 3, 2}, {6, 2, 1}));
  EXPECT_EQ(viewOf(ones, "aten::squeeze.dims", {Ints{0, 1}}),
            TensorMeta(DType::Float32, {3, 1, 2}, {2, 2, 1}));
  EXPECT_EQ(viewOf(kTransposed, "aten::unsqueeze", {int64_t{1}}),
            TensorMeta(DType::Float32, {4, 1, 6}, {1, 24, 4}));
  EXPECT_EQ(viewOf(kTransposed, "aten::unsqueeze", {int64_t{-1}}),
            TensorMeta(DType::Float32, {4, 6, 1}, {1, 4, 1}));
}

TEST(ViewOps, SliceClampsBoundsAndMovesTheOffset) {
  // x[:, -5:-1:2] of a [4, 6] matrix: columns 1 and 3.
  EXPECT_EQ(viewOf(kMatrix, "aten::slice.Tensor",
                   {int64_t{1}, int64_t{-5}, int64_t{-1}, int64_t{2}}),
            TensorMeta(DType::Float32, {4, 2}, {6, 2}, 1));
  // Out-of-range bounds clamp; an end before the start gives an empty slice.
  EXPECT_EQ(viewOf(kMatrix, "aten::slice.Tensor",
                   {int64_t{0}, int64_t{-100}, int64_t{100}}),
            kMatrix);
  EXPECT_EQ(viewOf(kMatrix, "aten::slice.Tensor",
                   {int64_t{0}, int64_t{3}, int64_t{1}}),
            TensorMeta(DType::Float32, {0, 6}, {6, 1}, 18));
  EXPECT_EQ(viewOf(kMatrix, "aten::slice.Tensor", {int64_t{1}},
                   {{"start", Argument()}, {"end", int64_t{2}}}),
            TensorMeta(DType::Float32, {4, 2}, {6, 1}, 0));
  EXPECT_THROW(viewOf(kMatrix, "aten::slice.Tensor",
                      {int64_t{0}, int64_t{0}, int64_t{2}, int64_t{0}}),
               Error);
}

TEST(ViewOps, SelectNarrowAndDiagonal) {
  EXPECT_EQ(viewOf(kTransposed, "aten::select.int", {int64_t{1}, int64_t{-1}}),
            TensorMeta(DType::Float32, {4}, {1}, 20));
  EXPECT_THROW(viewOf(kMatrix, "aten::select.int", {int64_t{0}, int64_t{4}}),
               Error);
  EXPECT_EQ(
      viewOf(kMatrix, "aten::narrow", {int64_t{1}, int64_t{-4}, int64_t{3}}),
      TensorMeta(DType::Float32, {4, 3}, {6, 1}, 2));
  EXPECT_THROW(
      viewOf(kMatrix, "aten::narrow", {int64_t{1}, int64_t{4}, int64_t{3}}),
      Error);
  EXPECT_EQ(viewOf(kMatrix, "aten::diagonal", {int64_t{1}}),
            TensorMeta(DType::Float32, {4}, {7}, 1));
  EXPECT_EQ(viewOf(kMatrix, "aten::diagonal", {int64_t{-2}}),
            TensorMeta(DType::Float32, {2}, {7}, 12));
  EXPECT_THROW(
      viewOf(kMatrix, "aten::diagonal", {int64_t{0}, int64_t{1}, int64_t{-1}}),
      Error);
}

TEST(ViewOps, SplitChunkAndUnbindGiveSeveralViews) {
  std::vector<TensorMeta> pieces =
      piecesOf(kMatrix, "aten::split.Tensor", {int64_t{4}, int64_t{1}});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], TensorMeta(DType::Float32, {4, 4}, {6, 1}, 0));
  EXPECT_EQ(pieces[1], TensorMeta(DType::Float32, {4, 2}, {6, 1}, 4));

  pieces = piecesOf(kMatrix, "aten::chunk", {int64_t{4}, int64_t{-1}});
  ASSERT_EQ(pieces.size(), 3u); // 6 splits into pieces of 2
  EXPECT_EQ(pieces[2].storageOffset, 4);

  pieces = piecesOf(kMatrix, "aten::split_with_sizes", {Ints{1, 0, 3}});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2], TensorMeta(DType::Float32, {3, 6}, {6, 1}, 6));
  EXPECT_THROW(piecesOf(kMatrix, "aten::split_with_sizes", {Ints{1, 1}}),
               Error);

  pieces = piecesOf(kTransposed, "aten::unbind.int", {int64_t{1}});
  ASSERT_EQ(pieces.size(), 6u);
  EXPECT_EQ(pieces[5], TensorMeta(DType::Float32, {4}, {1}, 20));
}

TEST(ViewOps, ContiguousFlattenAndMovedim) {
  EXPECT_EQ(viewOf(kMatrix, "aten::contiguous"), kMatrix);
  TensorMeta offset(DType::Float32, {4, 6}, {6, 1}, 5);
  EXPECT_EQ(viewOf(offset, "aten::contiguous"), offset);
  EXPECT_EQ(viewOf(kTransposed, "aten::contiguous"),
            TensorMeta(DType::Float32, {4, 6}));
  TensorMeta image(DType::Float32, {2, 3, 4, 5});
  EXPECT_EQ(viewOf(image, "aten::contiguous", {},
                   {{"memory_format", MemoryFormat::ChannelsLast}}),
            TensorMeta(DType::Float32, {2, 3, 4, 5}, {60, 1, 15, 3}));
  EXPECT_EQ(viewOf(image, "aten::flatten.using_ints", {int64_t{1}}),
            TensorMeta(DType::Float32, {2, 60}));
  EXPECT_EQ(viewOf(kTransposed, "aten::flatten.using_ints"),
            TensorMeta(DType::Float32, {24}));
  EXPECT_EQ(viewOf(image, "aten::movedim.int", {int64_t{1}, int64_t{-1}}),
            TensorMeta(DType::Float32, {2, 4, 5, 3}, {60, 5, 1, 20}));
  EXPECT_EQ(viewOf(image, "aten::unflatten.int", {int64_t{2}, Ints{2, -1}}),
            TensorMeta(DType::Float32, {2, 3, 2, 2, 5}));
}

TEST(ViewOps, AsStridedAliasAndViewAsReal) {
  EXPECT_EQ(viewOf(kMatrix, "aten::as_strided", {Ints{2, 2}, Ints{1, 2}}),
            TensorMeta(DType::Float32, {2, 2}, {1, 2}, 0));
  EXPECT_EQ(viewOf(kMatrix, "aten::as_strided", {Ints{2}, Ints{3}, int64_t{7}}),
            TensorMeta(DType::Float32, {2}, {3}, 7));
  EXPECT_EQ(viewOf(kTransposed, "aten::detach"), kTransposed);
  TensorMeta complex(DType::Complex64, {3, 2}, {1, 3}, 1);
  EXPECT_EQ(viewOf(complex, "aten::view_as_real"),
            TensorMeta(DType::Float32, {3, 2, 2}, {2, 6, 1}, 2));
  EXPECT_THROW(viewOf(kMatrix, "aten::view_as_real"), Error);
  // lift_fresh_copy copies into a contiguous tensor.
  EXPECT_EQ(viewOf(kTransposed, "aten::lift_fresh_copy"),
            TensorMeta(DType::Float32, {4, 6}));
}
