// Meta functions of the linear-algebra ops on hand-computed cases: matrix
// products, convolution and pooling shapes and layouts, attention, errors.
// Depends on ir/Graph.h, ir/Error.h, gtest.
#include "ir/Error.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {

using Ints = std::vector<int64_t>;
using Keywords = std::vector<std::pair<std::string, Argument>>;

// Runs `op` with tensor arguments made graph inputs: each TensorMeta in
// `tensors` becomes an input, passed in order before `rest`.
std::vector<TensorMeta> run(const char *op, std::vector<TensorMeta> tensors,
                            std::vector<Argument> rest = {},
                            Keywords keywords = {}) {
  Graph graph;
  std::vector<Argument> arguments;
  for (const TensorMeta &tensor : tensors)
    arguments.push_back(graph.addInput(tensor));
  arguments.insert(arguments.end(), rest.begin(), rest.end());
  std::vector<TensorMeta> metas;
  for (const auto &value : graph.addOp(op, arguments, keywords)->results())
    metas.push_back(value->meta());
  return metas;
}

TensorMeta f32(Shape sizes) { return TensorMeta(DType::Float32, sizes); }

const Device kMeta{DeviceType::Meta, -1};
const Device kCuda{DeviceType::CUDA, 0};

} // namespace

TEST(LinearAlgebraOps, MatrixProducts) {
  TensorMeta transposed(DType::Float32, {3, 4}, {1, 3});
  EXPECT_EQ(run("aten::mm", {transposed, f32({4, 5})})[0], f32({3, 5}));
  EXPECT_EQ(run("aten::addmm", {f32({5}), f32({3, 4}), f32({4, 5})})[0],
            f32({3, 5}));
  EXPECT_EQ(run("aten::bmm", {f32({2, 3, 4}), f32({2, 4, 5})})[0],
            f32({2, 3, 5}));
  EXPECT_EQ(
      run("aten::baddbmm", {f32({1, 3, 1}), f32({2, 3, 4}), f32({2, 4, 5})})[0],
      f32({2, 3, 5}));
  EXPECT_EQ(run("aten::mv", {f32({3, 4}), f32({4})})[0], f32({3}));
  EXPECT_EQ(run("aten::addmv", {f32({1}), f32({3, 4}), f32({4})})[0], f32({3}));
  EXPECT_EQ(run("aten::dot", {f32({4}), f32({4})})[0], f32({}));
}

TEST(LinearAlgebraOps, MatrixProductErrors) {
  EXPECT_THROW(run("aten::mm", {f32({3, 4}), f32({5, 6})}), Error);
  EXPECT_THROW(
      run("aten::mm", {f32({3, 4}), TensorMeta(DType::Float64, {4, 5})}),
      Error);
  EXPECT_THROW(run("aten::mm", {f32({2, 3, 4}), f32({4, 5})}), Error);
  EXPECT_THROW(run("aten::bmm", {f32({2, 3, 4}), f32({3, 4, 5})}), Error);
  EXPECT_THROW(run("aten::dot", {f32({3}), f32({4})}), Error);
  EXPECT_THROW(run("aten::addmm", {f32({2, 2}), f32({3, 4}), f32({4, 5})}),
               Error);
}

TEST(LinearAlgebraOps, MatmulCoversEveryRankCombination) {
  EXPECT_EQ(run("aten::matmul", {f32({4}), f32({4})})[0], f32({}));
  EXPECT_EQ(run("aten::matmul", {f32({3, 4}), f32({4})})[0], f32({3}));
  EXPECT_EQ(run("aten::matmul", {f32({4}), f32({4, 6})})[0], f32({6}));
  EXPECT_EQ(run("aten::matmul", {f32({2, 3, 4}), f32({4})})[0], f32({2, 3}));
  EXPECT_EQ(run("aten::matmul", {f32({4}), f32({2, 4, 6})})[0], f32({2, 6}));
  EXPECT_EQ(run("aten::matmul", {f32({5, 1, 3, 4}), f32({2, 4, 6})})[0],
            f32({5, 2, 3, 6}));
  EXPECT_EQ(run("aten::matmul", {f32({3, 4}), f32({2, 4, 6})})[0],
            f32({2, 3, 6}));
  EXPECT_THROW(run("aten::matmul", {f32({}), f32({3})}), Error);
  EXPECT_THROW(run("aten::matmul", {f32({2, 3, 4}), f32({3, 5, 6})}), Error);
  EXPECT_THROW(run("aten::matmul", {f32({2, 3, 4}), f32({3, 4, 6})}), Error);
}

TEST(LinearAlgebraOps, LinearIsInputTimesWeightTransposed) {
  EXPECT_EQ(run("aten::linear", {f32({2, 3, 4}), f32({5, 4}), f32({5})})[0],
            f32({2, 3, 5}));
  EXPECT_EQ(run("aten::linear", {f32({4}), f32({4})})[0], f32({}));
  EXPECT_THROW(run("aten::linear", {f32({2, 4}), f32({5, 3})}), Error);
  EXPECT_THROW(run("aten::linear", {f32({2, 4}), f32({5, 4}), f32({3})}),
               Error);
}

TEST(LinearAlgebraOps, ConvolutionShapes) {
  // (7 + 2*1 - 2*(3-1) - 1) / 2 + 1 = 3 per spatial dim; 6 output channels.
  std::vector<Argument> strided = {Ints{2}, Ints{1}, Ints{2},
                                   false,   Ints{0}, int64_t{2}};
  EXPECT_EQ(run("aten::convolution",
                {f32({2, 4, 7, 7}), f32({6, 2, 3, 3}), f32({6})}, strided)[0],
            f32({2, 6, 3, 3}));
  // Transposed: (5-1)*2 - 2*1 + 1*(3-1) + 1 + 1 = 10; out = 2 * groups(2).
  EXPECT_EQ(run("aten::convolution", {f32({1, 4, 5}), f32({4, 2, 3})},
                {Argument(), Ints{2}, Ints{1}, Ints{1}, true, Ints{1},
                 int64_t{2}})[0],
            f32({1, 4, 10}));
  EXPECT_EQ(run("aten::conv2d.padding", {f32({2, 4, 7, 6}), f32({6, 4, 2, 3})},
                {Argument(), Ints{1}, "same"})[0],
            f32({2, 6, 7, 6}));
  EXPECT_EQ(run("aten::conv1d", {f32({4, 9}), f32({6, 4, 3})})[0], f32({6, 7}));
}

TEST(LinearAlgebraOps, ConvolutionLayoutFollowsTheDevicesKernel) {
  TensorMeta channelsLast(DType::Float32, {2, 4, 7, 7}, {196, 1, 28, 4});
  std::vector<Argument> plain = {Argument(), Ints{1}, Ints{0},   Ints{1},
                                 false,      Ints{0}, int64_t{1}};
  TensorMeta weight = f32({6, 4, 3, 3});
  EXPECT_EQ(run("aten::convolution", {channelsLast, weight}, plain)[0],
            TensorMeta(DType::Float32, {2, 6, 5, 5}, {150, 1, 30, 6}));
  // torch's meta kernel always gives a contiguous result.
  TensorMeta onMeta = channelsLast;
  onMeta.device = kMeta;
  weight.device = kMeta;
  EXPECT_EQ(run("aten::convolution", {onMeta, weight}, plain)[0],
            TensorMeta(DType::Float32, {2, 6, 5, 5}, kMeta));
  // cuDNN keeps float64 contiguous.
  TensorMeta doubles(DType::Float64, {2, 4, 7, 7}, {196, 1, 28, 4}, 0, kCuda);
  TensorMeta doubleWeight(DType::Float64, {6, 4, 3, 3}, kCuda);
  EXPECT_EQ(run("aten::convolution", {doubles, doubleWeight}, plain)[0],
            TensorMeta(DType::Float64, {2, 6, 5, 5}, kCuda));
}

TEST(LinearAlgebraOps, ConvolutionErrors) {
  std::vector<Argument> plain = {Argument(), Ints{1}, Ints{0},   Ints{1},
                                 false,      Ints{0}, int64_t{1}};
  EXPECT_THROW(
      run("aten::convolution", {f32({2, 3, 7, 7}), f32({6, 4, 3, 3})}, plain),
      Error);
  EXPECT_THROW(
      run("aten::convolution", {f32({2, 4, 2, 2}), f32({6, 4, 3, 3})}, plain),
      Error);
  EXPECT_THROW(
      run("aten::convolution", {f32({2, 4, 7}), f32({6, 4, 3, 3})}, plain),
      Error);
  EXPECT_THROW(run("aten::conv2d.padding",
                   {f32({2, 4, 7, 7}), f32({6, 4, 3, 3})},
                   {Argument(), Ints{2}, "same"}),
               Error);
  EXPECT_THROW(run("aten::conv2d.padding",
                   {f32({2, 4, 7, 7}), f32({6, 4, 3, 3})},
                   {Argument(), Ints{1}, "full"}),
               Error);
}

TEST(LinearAlgebraOps, PoolingShapesAndLayouts) {
  TensorMeta channelsLast(DType::Float32, {2, 3, 8, 7}, {168, 1, 21, 3});
  std::vector<TensorMeta> pooled =
      run("aten::max_pool2d_with_indices", {channelsLast},
          {Ints{3, 2}, Ints{2}, Ints{1, 0}, Ints{1}, true});
  ASSERT_EQ(pooled.size(), 2u);
  // H: ceil((8 + 2 - 3) / 2) + 1 = 5; W: ceil((7 - 2) / 2) + 1 = 4.
  EXPECT_EQ(pooled[0],
            TensorMeta(DType::Float32, {2, 3, 5, 4}, {60, 1, 12, 3}));
  EXPECT_EQ(pooled[1].dtype, DType::Int64);
  EXPECT_EQ(run("aten::avg_pool2d", {f32({3, 8, 7})}, {Ints{2}})[0],
            f32({3, 4, 3}));
  EXPECT_EQ(
      run("aten::adaptive_avg_pool2d", {f32({2, 3, 8, 7})}, {Ints{1, 1}})[0],
      f32({2, 3, 1, 1}));
  EXPECT_THROW(
      run("aten::max_pool2d", {f32({2, 3, 4, 4})}, {Ints{2}, Ints{2}, Ints{2}}),
      Error);
  EXPECT_THROW(run("aten::max_pool2d", {f32({2, 3, 2, 2})}, {Ints{3}}), Error);
  EXPECT_THROW(run("aten::avg_pool2d", {f32({4, 4})}, {Ints{2}}), Error);
}

TEST(LinearAlgebraOps, AttentionPicksTheCpuKernelsLayout) {
  // A query stored as [batch, seq, heads, dim], viewed as [b, h, s, d].
  TensorMeta query(DType::Float32, {2, 3, 4, 5}, {60, 5, 15, 1});
  TensorMeta key = f32({2, 3, 6, 5});
  EXPECT_EQ(run("aten::scaled_dot_product_attention", {query, key, key})[0],
            query);
  // Dropout needs the math kernel: a contiguous result.
  EXPECT_EQ(run("aten::scaled_dot_product_attention", {query, key, key},
                {Argument(), 0.5})[0],
            f32({2, 3, 4, 5}));
  // A different value head dim also takes the math kernel.
  EXPECT_EQ(run("aten::scaled_dot_product_attention",
                {query, key, f32({1, 3, 6, 7})})[0],
            f32({2, 3, 4, 7}));
  std::vector<TensorMeta> flash = run(
      "aten::_scaled_dot_product_flash_attention_for_cpu", {query, key, key});
  ASSERT_EQ(flash.size(), 2u);
  EXPECT_EQ(flash[0], query);
  EXPECT_EQ(flash[1], TensorMeta(DType::Float32, {2, 3, 4}, {12, 1, 3}));
  // An explicit mask contradicts is_causal.
  EXPECT_THROW(run("aten::scaled_dot_product_attention",
                   {query, key, key, f32({4, 6})}, {0.0, true}),
               Error);
  TensorMeta onCuda = f32({2, 3, 4, 5});
  onCuda.device = kCuda;
  EXPECT_THROW(
      run("aten::scaled_dot_product_attention", {onCuda, onCuda, onCuda}),
      Unsupported);
}

TEST(LinearAlgebraOps,
     UpsampleNearestKeepsChannelsLastExceptFewChannelsOnCuda) {
  TensorMeta channelsLast(DType::Float32, {2, 3, 4, 5}, {60, 1, 15, 3});
  EXPECT_EQ(run("aten::upsample_nearest2d", {channelsLast}, {Ints{8, 10}})[0],
            TensorMeta(DType::Float32, {2, 3, 8, 10}, {240, 1, 30, 3}));
  // Scales truncate: 4 * 1.5 = 6, 5 * 2.3 = 11.5 -> 11.
  EXPECT_EQ(run("aten::upsample_nearest2d.vec", {f32({2, 3, 4, 5})},
                {Argument(), std::vector<double>{1.5, 2.3}})[0],
            f32({2, 3, 6, 11}));
  // Integer scale factors read as floats.
  EXPECT_EQ(run("aten::upsample_nearest2d.vec", {f32({2, 3, 4, 5})},
                {Argument(), Ints{2, 3}})[0],
            f32({2, 3, 8, 15}));
  TensorMeta onCuda = channelsLast;
  onCuda.device = kCuda;
  EXPECT_EQ(run("aten::upsample_nearest2d", {onCuda}, {Ints{8, 10}})[0],
            TensorMeta(DType::Float32, {2, 3, 8, 10}, kCuda));
  EXPECT_THROW(run("aten::upsample_nearest2d.vec", {f32({2, 3, 4, 5})},
                   {Ints{8, 10}, std::vector<double>{2.0, 2.0}}),
               Error);
}
