// Convolution, pooling and indexing lowerings, checked against naive
// references computed here in double with torch's semantics: programs are
// lowered to run without torch (no extern steps), run by the loop-IR
// interpreter evaluating both sides of every `where` (so a padded tap that
// loads outside its buffer fails), and one is compiled by the CPU backend.
// Depends on passes/Lowering.h, passes/Scheduler.h, backend/Pipeline.h,
// runtime/ProgramExecutor.h, tests/cpp/passes/LoopInterpreter.h and gtest.
#include "passes/Lowering.h"

#include "backend/Pipeline.h"
#include "ir/Graph.h"
#include "ir/ops/MetaUtils.h"
#include "passes/Scheduler.h"
#include "runtime/ProgramExecutor.h"
#include "tests/cpp/passes/LoopInterpreter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <unordered_set>

using namespace kiln;
using kiln::testing::Interpreter;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A row-major tensor of doubles: inputs and reference results.
struct Dense {
  Shape sizes;
  std::vector<double> values;

  explicit Dense(Shape shape = {}, double fill = 0)
      : sizes(std::move(shape)), values(numelOf(sizes), fill) {}
  int64_t offset(const std::vector<int64_t> &index) const {
    int64_t linear = 0;
    for (size_t d = 0; d < sizes.size(); ++d)
      linear = linear * sizes[d] + index[d];
    return linear;
  }
  double &at(const std::vector<int64_t> &index) {
    return values[offset(index)];
  }
  double at(const std::vector<int64_t> &index) const {
    return values[offset(index)];
  }
};

void forEachIndex(const Shape &sizes,
                  const std::function<void(const std::vector<int64_t> &)> &f) {
  if (numelOf(sizes) == 0)
    return;
  std::vector<int64_t> index(sizes.size(), 0);
  while (true) {
    f(index);
    int64_t d = static_cast<int64_t>(sizes.size()) - 1;
    while (d >= 0 && ++index[d] == sizes[d])
      index[d--] = 0;
    if (d < 0)
      return;
  }
}

// Values in [-1, 1) exact in float32 (the inputs are float32 tensors).
Dense randomDense(Shape sizes, uint32_t seed) {
  Dense tensor(std::move(sizes));
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (double &value : tensor.values)
    value = uniform(generator);
  return tensor;
}

// torch's pooled extent (pooling_output_shape).
int64_t pooledSize(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                   int64_t dilation, bool ceilMode) {
  int64_t span =
      in + 2 * pad - dilation * (kernel - 1) - 1 + (ceilMode ? stride - 1 : 0);
  int64_t out = span / stride + 1;
  if (ceilMode && (out - 1) * stride >= in + pad)
    --out;
  return out;
}

// --- References, written after torch's CPU kernels ---

struct ConvolutionParameters {
  Shape stride, padding, dilation;
  int64_t groups = 1;
};

Dense referenceConvolution(const Dense &x, const Dense &w, const Dense *bias,
                           const ConvolutionParameters &p) {
  size_t spatial = x.sizes.size() - 2;
  Shape sizes{x.sizes[0], w.sizes[0]};
  for (size_t s = 0; s < spatial; ++s)
    sizes.push_back((x.sizes[s + 2] + 2 * p.padding[s] -
                     p.dilation[s] * (w.sizes[s + 2] - 1) - 1) /
                        p.stride[s] +
                    1);
  Dense result(sizes);
  int64_t groupIn = w.sizes[1], groupOut = w.sizes[0] / p.groups;
  Shape taps(w.sizes.begin() + 1, w.sizes.end()); // c, k...
  forEachIndex(sizes, [&](const std::vector<int64_t> &out) {
    int64_t group = out[1] / groupOut;
    double sum = bias ? bias->values[out[1]] : 0;
    forEachIndex(taps, [&](const std::vector<int64_t> &tap) {
      std::vector<int64_t> in{out[0], group * groupIn + tap[0]};
      for (size_t s = 0; s < spatial; ++s) {
        int64_t position = out[s + 2] * p.stride[s] - p.padding[s] +
                           tap[s + 1] * p.dilation[s];
        if (position < 0 || position >= x.sizes[s + 2])
          return;
        in.push_back(position);
      }
      std::vector<int64_t> at{out[1]};
      at.insert(at.end(), tap.begin(), tap.end());
      sum += x.at(in) * w.at(at);
    });
    result.at(out) = sum;
  });
  return result;
}

struct PoolParameters {
  int64_t kernelH, kernelW, strideH, strideW, padH = 0, padW = 0;
  int64_t dilationH = 1, dilationW = 1;
  bool ceilMode = false;
};

// The pooled sizes of a [..., H, W] input.
Shape pooledShape(const Shape &input, const PoolParameters &p) {
  Shape sizes = input;
  size_t h = sizes.size() - 2, w = sizes.size() - 1;
  sizes[h] = pooledSize(input[h], p.kernelH, p.padH, p.strideH, p.dilationH,
                        p.ceilMode);
  sizes[w] = pooledSize(input[w], p.kernelW, p.padW, p.strideW, p.dilationW,
                        p.ceilMode);
  return sizes;
}

// cpu_max_pool: the first valid position starts the search, and a later
// value wins when greater or NaN.
std::pair<Dense, Dense> referenceMaxPool(const Dense &x,
                                         const PoolParameters &p) {
  Shape sizes = pooledShape(x.sizes, p);
  Dense values(sizes), indices(sizes);
  size_t h = sizes.size() - 2;
  int64_t height = x.sizes[h], width = x.sizes[h + 1];
  forEachIndex(sizes, [&](const std::vector<int64_t> &out) {
    int64_t h0 = out[h] * p.strideH - p.padH;
    int64_t w0 = out[h + 1] * p.strideW - p.padW;
    int64_t h1 = std::min(h0 + (p.kernelH - 1) * p.dilationH + 1, height);
    int64_t w1 = std::min(w0 + (p.kernelW - 1) * p.dilationW + 1, width);
    while (h0 < 0)
      h0 += p.dilationH;
    while (w0 < 0)
      w0 += p.dilationW;
    double best = -kInf;
    int64_t position = h0 * width + w0;
    std::vector<int64_t> in = out;
    for (in[h] = h0; in[h] < h1; in[h] += p.dilationH)
      for (in [h + 1] = w0; in[h + 1] < w1; in[h + 1] += p.dilationW) {
        double value = x.at(in);
        if (value > best || std::isnan(value)) {
          best = value;
          position = in[h] * width + in[h + 1];
        }
      }
    values.at(out) = best;
    indices.at(out) = static_cast<double>(position);
  });
  return {values, indices};
}

// cpu_avg_pool: the divisor counts the window within the padded input (or
// within the input without count_include_pad), unless overridden.
Dense referenceAvgPool(const Dense &x, const PoolParameters &p,
                       bool countIncludePad, int64_t divisorOverride = 0) {
  Shape sizes = pooledShape(x.sizes, p);
  Dense result(sizes);
  size_t h = sizes.size() - 2;
  int64_t height = x.sizes[h], width = x.sizes[h + 1];
  forEachIndex(sizes, [&](const std::vector<int64_t> &out) {
    int64_t h0 = out[h] * p.strideH - p.padH;
    int64_t w0 = out[h + 1] * p.strideW - p.padW;
    int64_t h1 = std::min(h0 + p.kernelH, height + p.padH);
    int64_t w1 = std::min(w0 + p.kernelW, width + p.padW);
    int64_t poolSize = (h1 - h0) * (w1 - w0);
    h0 = std::max<int64_t>(h0, 0);
    w0 = std::max<int64_t>(w0, 0);
    h1 = std::min(h1, height);
    w1 = std::min(w1, width);
    if (h0 >= h1 || w0 >= w1)
      return;
    double sum = 0;
    std::vector<int64_t> in = out;
    for (in[h] = h0; in[h] < h1; ++in[h])
      for (in [h + 1] = w0; in[h + 1] < w1; ++in[h + 1])
        sum += x.at(in);
    int64_t divisor = divisorOverride   ? divisorOverride
                      : countIncludePad ? poolSize
                                        : (h1 - h0) * (w1 - w0);
    result.at(out) = sum / static_cast<double>(divisor);
  });
  return result;
}

Dense referenceAdaptiveAvgPool(const Dense &x, int64_t outH, int64_t outW) {
  Shape sizes = x.sizes;
  size_t h = sizes.size() - 2;
  sizes[h] = outH;
  sizes[h + 1] = outW;
  Dense result(sizes);
  int64_t height = x.sizes[h], width = x.sizes[h + 1];
  auto start = [](int64_t o, int64_t in, int64_t out) {
    return static_cast<int64_t>(std::floor(double(o * in) / double(out)));
  };
  auto end = [](int64_t o, int64_t in, int64_t out) {
    return static_cast<int64_t>(std::ceil(double((o + 1) * in) / double(out)));
  };
  forEachIndex(sizes, [&](const std::vector<int64_t> &out) {
    int64_t h0 = start(out[h], height, outH), h1 = end(out[h], height, outH);
    int64_t w0 = start(out[h + 1], width, outW);
    int64_t w1 = end(out[h + 1], width, outW);
    double sum = 0;
    std::vector<int64_t> in = out;
    for (in[h] = h0; in[h] < h1; ++in[h])
      for (in [h + 1] = w0; in[h + 1] < w1; ++in[h + 1])
        sum += x.at(in);
    result.at(out) = sum / double(h1 - h0) / double(w1 - w0);
  });
  return result;
}

// --- Graphs, lowering and comparison ---

Value *op(Graph &graph, std::string_view name,
          const std::vector<Argument> &arguments) {
  return graph.addOp(name, arguments)->result(0);
}

int countExterns(const loop::Program &program) {
  int count = 0;
  for (const loop::Step &step : program.steps)
    count += step.kind == loop::Step::Kind::Extern;
  return count;
}

Value *convolution(Graph &graph, Value *x, Value *w, Value *bias,
                   const ConvolutionParameters &p, bool transposed = false) {
  Shape outputPadding(p.stride.size(), 0);
  return graph
      .addOp("aten::convolution",
             {x, w, bias ? Argument(bias) : Argument::none(), p.stride,
              p.padding, p.dilation, transposed, outputPadding,
              Argument(p.groups)})
      ->result(0);
}

Node *maxPool(Graph &graph, Value *x, const PoolParameters &p) {
  return graph.addOp("aten::max_pool2d_with_indices",
                     {x, Shape{p.kernelH, p.kernelW},
                      Shape{p.strideH, p.strideW}, Shape{p.padH, p.padW},
                      Shape{p.dilationH, p.dilationW}, p.ceilMode});
}

Value *avgPool(Graph &graph, Value *x, const PoolParameters &p,
               bool countIncludePad, int64_t divisorOverride = 0) {
  return graph
      .addOp("aten::avg_pool2d",
             {x, Shape{p.kernelH, p.kernelW}, Shape{p.strideH, p.strideW},
              Shape{p.padH, p.padW}, p.ceilMode, countIncludePad,
              divisorOverride ? Argument(divisorOverride) : Argument::none()})
      ->result(0);
}

Value *adaptiveAvgPool(Graph &graph, Value *x, int64_t outH, int64_t outW) {
  return graph.addOp("aten::_adaptive_avg_pool2d", {x, Shape{outH, outW}})
      ->result(0);
}

/// Lowers `graph` for a program without torch, checks that it has no
/// extern steps and runs it on `inputs`; every output, row-major.
std::vector<std::vector<double>>
runStandalone(const std::shared_ptr<Graph> &graph,
              const std::vector<std::vector<double>> &inputs) {
  loop::Program program = lowerGraph(graph, Device{}, /*standalone=*/true);
  EXPECT_EQ(countExterns(program), 0) << program.str();
  Interpreter run(program);
  run.evaluateBothBranches();
  for (size_t i = 0; i < inputs.size(); ++i)
    run.setInput(static_cast<int64_t>(i), inputs[i]);
  run.run();
  std::vector<std::vector<double>> outputs;
  for (size_t i = 0; i < program.outputs.size(); ++i)
    outputs.push_back(run.output(i));
  return outputs;
}

void expectClose(const std::vector<double> &actual,
                 const std::vector<double> &expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  int failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double a = actual[i], e = expected[i];
    bool close = std::isnan(e) ? std::isnan(a)
                 : std::isinf(e)
                     ? a == e
                     : std::fabs(a - e) <= tolerance * (1 + std::fabs(e));
    if (!close && ++failures <= 5)
      ADD_FAILURE() << "element " << i << ": " << a << ", expected " << e;
  }
  EXPECT_EQ(failures, 0);
}

/// A convolution of random inputs (the input laid out with
/// `inputStrides` where given), lowered, run and compared with the
/// reference.
void checkConvolution(const Shape &input, const Shape &weight, bool withBias,
                      const ConvolutionParameters &p, DType dtype,
                      Shape inputStrides = {}) {
  SCOPED_TRACE("input " + shapeToString(input) + " weight " +
               shapeToString(weight));
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(inputStrides.empty()
                                 ? TensorMeta(dtype, input)
                                 : TensorMeta(dtype, input, inputStrides));
  Value *w = graph->addInput(TensorMeta(dtype, weight));
  Value *b =
      withBias ? graph->addInput(TensorMeta(dtype, {weight[0]})) : nullptr;
  graph->setOutputs({convolution(*graph, x, w, b, p)});
  Dense xs = randomDense(input, 1), ws = randomDense(weight, 2);
  Dense bs = randomDense({weight[0]}, 3);
  std::vector<std::vector<double>> inputs{xs.values, ws.values};
  if (withBias)
    inputs.push_back(bs.values);
  auto outputs = runStandalone(graph, inputs);
  Dense expected = referenceConvolution(xs, ws, withBias ? &bs : nullptr, p);
  EXPECT_EQ(graph->outputs()[0].toTensor()->meta().sizes, expected.sizes);
  expectClose(outputs.at(0), expected.values,
              dtype == DType::Float64 ? 1e-12 : 2e-6);
}

} // namespace

TEST(ConvolutionLowering, Conv2dStridePaddingBiasOddSizesBatch3) {
  checkConvolution({3, 4, 7, 13}, {6, 4, 3, 3}, true,
                   {{2, 2}, {1, 1}, {1, 1}, 1}, DType::Float32);
}

TEST(ConvolutionLowering, Conv2dDilationAndGroupsWithoutBias) {
  checkConvolution({1, 6, 13, 7}, {6, 2, 3, 2}, false,
                   {{1, 1}, {2, 1}, {2, 2}, 3}, DType::Float32);
}

TEST(ConvolutionLowering, DepthwiseWithChannelMultiplierAndBias) {
  checkConvolution({3, 4, 7, 7}, {8, 1, 3, 3}, true,
                   {{1, 2}, {1, 1}, {1, 1}, 4}, DType::Float32);
}

TEST(ConvolutionLowering, OneByOneKernels) {
  checkConvolution({3, 5, 7, 13}, {3, 5, 1, 1}, true,
                   {{1, 1}, {0, 0}, {1, 1}, 1}, DType::Float32);
  checkConvolution({1, 4, 7, 13}, {6, 2, 1, 1}, false,
                   {{2, 2}, {0, 0}, {1, 1}, 2}, DType::Float32);
}

TEST(ConvolutionLowering, Conv1dAndConv3dWithOneValueLists) {
  // One value in stride, padding and dilation stands for every dim.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3, 13}));
  Value *w = graph->addInput(TensorMeta(DType::Float32, {4, 3, 3}));
  graph->setOutputs({convolution(*graph, x, w, nullptr, {{2}, {2}, {2}, 1})});
  Dense xs = randomDense({2, 3, 13}, 4), ws = randomDense({4, 3, 3}, 5);
  auto outputs = runStandalone(graph, {xs.values, ws.values});
  expectClose(outputs[0],
              referenceConvolution(xs, ws, nullptr, {{2}, {2}, {2}, 1}).values,
              2e-6);

  checkConvolution({1, 2, 5, 6, 4}, {3, 2, 3, 3, 2}, true,
                   {{2, 1, 1}, {1, 1, 0}, {1, 2, 1}, 1}, DType::Float32);
}

TEST(ConvolutionLowering, Float64AndChannelsLastInput) {
  checkConvolution({2, 3, 7, 7}, {4, 3, 3, 3}, true,
                   {{1, 1}, {1, 1}, {1, 1}, 1}, DType::Float64);
  // [N, C, H, W] stored as [N, H, W, C]: the result is channels-last too.
  checkConvolution({2, 3, 7, 5}, {4, 3, 3, 3}, true,
                   {{2, 1}, {1, 1}, {1, 1}, 1}, DType::Float32,
                   {7 * 5 * 3, 1, 5 * 3, 3});
}

TEST(ConvolutionLowering, Float16AccumulatesInFloat32) {
  // Small integers: exact in float16, so the result is too.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float16, {1, 2, 5, 5}));
  Value *w = graph->addInput(TensorMeta(DType::Float16, {2, 2, 3, 3}));
  ConvolutionParameters p{{1, 1}, {1, 1}, {1, 1}, 1};
  graph->setOutputs({convolution(*graph, x, w, nullptr, p)});
  loop::Program program = lowerGraph(graph, Device{}, true);
  bool accumulatesInFloat32 = false;
  for (const loop::Step &step : program.steps)
    for (const loop::Loop &loop : step.kernel.loops)
      for (const loop::Reduction &reduction : loop.reductions)
        accumulatesInFloat32 |= reduction.dtype() == DType::Float32;
  EXPECT_TRUE(accumulatesInFloat32);
  Dense xs({1, 2, 5, 5}), ws({2, 2, 3, 3});
  for (size_t i = 0; i < xs.values.size(); ++i)
    xs.values[i] = double(int64_t(i % 7) - 3);
  for (size_t i = 0; i < ws.values.size(); ++i)
    ws.values[i] = double(int64_t(i % 3) - 1);
  auto outputs = runStandalone(graph, {xs.values, ws.values});
  expectClose(outputs[0], referenceConvolution(xs, ws, nullptr, p).values, 0);
}

TEST(ConvolutionLowering, JitKeepsLargeAndTransposedConvolutionsInTorch) {
  auto lowerConvolution = [](Shape input, Shape weight, bool transposed,
                             bool standalone) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, input));
    Value *w = graph->addInput(TensorMeta(DType::Float32, weight));
    graph->setOutputs({convolution(*graph, x, w, nullptr,
                                   {{1, 1}, {1, 1}, {1, 1}, 1}, transposed)});
    return countExterns(lowerGraph(graph, Device{}, standalone));
  };
  // 2 * 4 * 4 * 4 * 2 * 9 = 2304 multiply-adds: a kernel in the JIT.
  EXPECT_EQ(lowerConvolution({2, 2, 4, 4}, {4, 2, 3, 3}, false, false), 0);
  // 8 * 8 * 32 * 32 * 9 multiply-adds over 64 positions: oneDNN's, unless
  // standalone.
  EXPECT_EQ(lowerConvolution({1, 32, 8, 8}, {32, 32, 3, 3}, false, false), 1);
  EXPECT_EQ(lowerConvolution({1, 32, 8, 8}, {32, 32, 3, 3}, false, true), 0);
  // 256 positions read as vectors: kiln's GEMM over the input's windows.
  EXPECT_EQ(lowerConvolution({1, 16, 16, 16}, {16, 16, 3, 3}, false, false), 0);
  EXPECT_EQ(lowerConvolution({1, 2, 4, 4}, {2, 2, 3, 3}, true, true), 1);
}

TEST(PoolingLowering, MaxPoolWithIndicesPaddingCeilModeDilation) {
  for (const PoolParameters &p : {PoolParameters{3, 3, 2, 2, 1, 1},
                                  PoolParameters{3, 2, 2, 2, 1, 0, 1, 1, true},
                                  PoolParameters{3, 3, 2, 1, 1, 1, 2, 2, true},
                                  PoolParameters{2, 2, 2, 2}}) {
    for (const Shape &input : {Shape{3, 2, 7, 13}, Shape{2, 13, 7}}) {
      SCOPED_TRACE(shapeToString(input) + " kernel " +
                   std::to_string(p.kernelH) + "x" + std::to_string(p.kernelW));
      auto graph = std::make_shared<Graph>();
      Value *x = graph->addInput(TensorMeta(DType::Float32, input));
      Node *pool = maxPool(*graph, x, p);
      // max_pool2d, the values alone, where a graph has it.
      Value *valuesOnly = op(
          *graph, "aten::max_pool2d",
          {x, Shape{p.kernelH, p.kernelW}, Shape{p.strideH, p.strideW},
           Shape{p.padH, p.padW}, Shape{p.dilationH, p.dilationW}, p.ceilMode});
      graph->setOutputs({pool->result(0), pool->result(1), valuesOnly});
      EXPECT_EQ(pool->result(1)->meta().dtype, DType::Int64);
      Dense xs = randomDense(input, 6);
      auto outputs = runStandalone(graph, {xs.values});
      auto [values, indices] = referenceMaxPool(xs, p);
      EXPECT_EQ(pool->result(0)->meta().sizes, values.sizes);
      expectClose(outputs[0], values.values, 0);
      expectClose(outputs[1], indices.values, 0);
      expectClose(outputs[2], values.values, 0);
    }
  }
}

TEST(PoolingLowering, MaxPoolNanWinsAndPaddingIsNeverPicked) {
  // What torch 2.13 gives: the last NaN of a window wins; a window whose
  // inside is all -inf picks its first position inside the input.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {1, 1, 4, 4}));
  Value *y = graph->addInput(TensorMeta(DType::Float32, {1, 1, 3, 3}));
  Node *nans = maxPool(*graph, x, {2, 2, 2, 2});
  Node *infinities = maxPool(*graph, y, {2, 2, 2, 2, 1, 1});
  graph->setOutputs({nans->result(0), nans->result(1), infinities->result(0),
                     infinities->result(1)});
  std::vector<double> ramp(16);
  for (int i = 0; i < 16; ++i)
    ramp[i] = i;
  ramp[0] = ramp[5] = kNan;
  auto outputs = runStandalone(graph, {ramp, std::vector<double>(9, -kInf)});
  expectClose(outputs[0], {kNan, 7, 13, 15}, 0);
  expectClose(outputs[1], {5, 7, 13, 15}, 0);
  expectClose(outputs[2], {-kInf, -kInf, -kInf, -kInf}, 0);
  expectClose(outputs[3], {0, 1, 3, 4}, 0);

  // The same rules against the reference on a padded, strided pool with
  // NaNs, ties and -inf blocks at the border.
  graph = std::make_shared<Graph>();
  x = graph->addInput(TensorMeta(DType::Float32, {2, 5, 6}));
  PoolParameters p{3, 3, 2, 2, 1, 1, 1, 1, true};
  Node *pool = maxPool(*graph, x, p);
  graph->setOutputs({pool->result(0), pool->result(1)});
  Dense xs = randomDense({2, 5, 6}, 7);
  xs.at({0, 0, 0}) = xs.at({0, 1, 1}) = xs.at({1, 4, 5}) = kNan;
  xs.at({0, 2, 3}) = xs.at({0, 3, 4}) = xs.at({0, 1, 5}) = 5;
  for (int64_t h : {3, 4})
    for (int64_t w : {0, 1})
      xs.at({0, h, w}) = xs.at({1, h, w}) = -kInf;
  outputs = runStandalone(graph, {xs.values});
  auto [values, indices] = referenceMaxPool(xs, p);
  expectClose(outputs[0], values.values, 0);
  expectClose(outputs[1], indices.values, 0);
}

TEST(PoolingLowering, AvgPoolPaddingCeilModeAndDivisors) {
  struct Case {
    PoolParameters p;
    bool countIncludePad;
    int64_t divisorOverride;
  };
  for (const Case &c :
       {Case{{3, 3, 2, 2, 1, 1}, true, 0},
        Case{{3, 3, 2, 2, 1, 1, 1, 1, true}, false, 0},
        Case{{2, 4, 3, 2, 1, 2, 1, 1, true}, true, 0},
        Case{{2, 4, 3, 2, 1, 2, 1, 1, true}, false, 0},
        Case{{3, 3, 2, 2, 1, 1}, true, 5}, Case{{1, 1, 2, 2}, true, 0}}) {
    for (const Shape &input : {Shape{3, 2, 7, 13}, Shape{2, 13, 7}}) {
      SCOPED_TRACE(shapeToString(input) + " kernel " +
                   std::to_string(c.p.kernelH) + "x" +
                   std::to_string(c.p.kernelW) +
                   (c.countIncludePad ? " counting padding" : "") +
                   (c.p.ceilMode ? " ceil" : ""));
      auto graph = std::make_shared<Graph>();
      Value *x = graph->addInput(TensorMeta(DType::Float32, input));
      Value *pooled =
          avgPool(*graph, x, c.p, c.countIncludePad, c.divisorOverride);
      graph->setOutputs({pooled});
      Dense xs = randomDense(input, 8);
      auto outputs = runStandalone(graph, {xs.values});
      Dense expected =
          referenceAvgPool(xs, c.p, c.countIncludePad, c.divisorOverride);
      EXPECT_EQ(pooled->meta().sizes, expected.sizes);
      expectClose(outputs[0], expected.values, 1e-6);
    }
  }
}

TEST(PoolingLowering, AdaptiveAvgPoolNonDivisibleSizes) {
  for (auto [outH, outW] : std::vector<std::pair<int64_t, int64_t>>{
           {3, 5}, {4, 4}, {7, 13}, {1, 1}, {10, 20}, {2, 13}}) {
    for (const Shape &input : {Shape{3, 2, 7, 13}, Shape{2, 7, 13}}) {
      SCOPED_TRACE(shapeToString(input) + " to " + std::to_string(outH) + "x" +
                   std::to_string(outW));
      auto graph = std::make_shared<Graph>();
      Value *x = graph->addInput(TensorMeta(DType::Float32, input));
      graph->setOutputs({adaptiveAvgPool(*graph, x, outH, outW)});
      Dense xs = randomDense(input, 9);
      auto outputs = runStandalone(graph, {xs.values});
      expectClose(outputs[0], referenceAdaptiveAvgPool(xs, outH, outW).values,
                  1e-6);
    }
  }
}

TEST(PoolingLowering, PoolsAreKernelsInTheJitToo) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3, 64, 64}));
  Node *pool = maxPool(*graph, x, {3, 3, 2, 2, 1, 1});
  graph->setOutputs({pool->result(0), pool->result(1),
                     avgPool(*graph, x, {2, 2, 2, 2}, true),
                     adaptiveAvgPool(*graph, x, 7, 7)});
  EXPECT_EQ(countExterns(lowerGraph(graph)), 0);
}

TEST(PoolingLowering, CheapInputsAreComputedAtEachWindowRead) {
  // max_pool2d(relu(x * 3 + 1)): the ReLU is computed at each tap of the
  // pool's one kernel, no temporary written and read back; an exp is
  // computed once, into a temporary the pool reads.
  for (bool costly : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3, 9, 11}));
    Value *scaled =
        op(*graph, "aten::add.Tensor",
           {op(*graph, "aten::mul.Tensor", {x, Argument(3.0)}), Argument(1.0)});
    Value *input = op(*graph, costly ? "aten::exp" : "aten::relu", {scaled});
    PoolParameters p{3, 3, 2, 2, 1, 1};
    Node *pool = maxPool(*graph, input, p);
    graph->setOutputs({pool->result(0)});
    loop::Program program = lowerGraph(graph);
    int kernels = 0;
    for (const loop::Step &step : program.steps)
      kernels += step.kind == loop::Step::Kind::Kernel;
    EXPECT_EQ(kernels, costly ? 2 : 1) << program.str();

    Dense xs = randomDense({2, 3, 9, 11}, 41);
    Dense ys = xs;
    for (double &value : ys.values)
      value = costly ? std::exp(value * 3 + 1) : std::max(value * 3 + 1, 0.0);
    Interpreter run(program);
    run.setInput(0, xs.values);
    run.run();
    expectClose(run.output(0), referenceMaxPool(ys, p).first.values, 1e-5);
  }
}

TEST(IndexingLowering, EmbeddingIndexSelectAndGatherWithRepeatedIndices) {
  auto graph = std::make_shared<Graph>();
  Value *table = graph->addInput(TensorMeta(DType::Float32, {5, 4}));
  Value *tokens = graph->addInput(TensorMeta(DType::Int64, {2, 3}));
  Value *picks = graph->addInput(TensorMeta(DType::Int64, {3}));
  Value *places = graph->addInput(TensorMeta(DType::Int64, {5, 2}));
  Value *rows = graph->addInput(TensorMeta(DType::Int64, {2, 4}));
  graph->setOutputs({
      graph->addOp("aten::embedding", {table, tokens})->result(0),
      graph->addOp("aten::index_select", {table, Argument(1), picks})
          ->result(0),
      graph->addOp("aten::gather", {table, Argument(1), places})->result(0),
      graph->addOp("aten::gather", {table, Argument(0), rows})->result(0),
  });
  Dense weights = randomDense({5, 4}, 10);
  std::vector<double> tokenValues{1, 3, 1, 4, 0, 1};
  std::vector<double> pickValues{2, 0, 2};
  std::vector<double> placeValues{0, 3, 3, 3, 1, 0, 2, 2, 0, 1};
  std::vector<double> rowValues{4, 4, 0, 1, 2, 2, 3, 0};
  auto outputs = runStandalone(
      graph, {weights.values, tokenValues, pickValues, placeValues, rowValues});
  std::vector<double> embedded, selected, gatheredColumns, gatheredRows;
  for (double token : tokenValues)
    for (int64_t j = 0; j < 4; ++j)
      embedded.push_back(weights.at({int64_t(token), j}));
  for (int64_t i = 0; i < 5; ++i)
    for (double pick : pickValues)
      selected.push_back(weights.at({i, int64_t(pick)}));
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 2; ++j)
      gatheredColumns.push_back(
          weights.at({i, int64_t(placeValues[i * 2 + j])}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      gatheredRows.push_back(weights.at({int64_t(rowValues[i * 4 + j]), j}));
  expectClose(outputs[0], embedded, 0);
  expectClose(outputs[1], selected, 0);
  expectClose(outputs[2], gatheredColumns, 0);
  expectClose(outputs[3], gatheredRows, 0);
}

TEST(IndexingLowering,
     OutOfRangeIndicesClampWithoutTorchAndAreCheckedInTheJit) {
  auto graph = std::make_shared<Graph>();
  Value *table = graph->addInput(TensorMeta(DType::Float32, {3, 2}));
  Value *places = graph->addInput(TensorMeta(DType::Int64, {3, 2}));
  graph->setOutputs(
      {graph->addOp("aten::gather", {table, Argument(1), places})->result(0)});
  // In the JIT it is a kernel whose positions, an input's, the runtime
  // checks before it runs (raising gather's RuntimeError for a bad one).
  loop::Program lowered = lowerGraph(graph);
  EXPECT_EQ(countExterns(lowered), 0);
  ASSERT_EQ(lowered.indexChecks.size(), 1u);
  EXPECT_EQ(lowered.indexChecks[0].report, loop::IndexCheck::Report::Gather);
  EXPECT_EQ(lowered.indexChecks[0].size, 2);
  EXPECT_EQ(lowered.indexChecks[0].dim, 1);
  // Without torch, a bad index reads the nearest row or column, never
  // outside the buffer.
  auto outputs =
      runStandalone(graph, {{1, 2, 3, 4, 5, 6}, {-1, 7, 1, 0, 2, -5}});
  expectClose(outputs[0], {1, 2, 4, 3, 6, 5}, 0);
}

TEST(ConvolutionLowering, CpuBackendRunsConvolutionsAndPools) {
  // conv -> relu -> max pool (values and indices), average and adaptive
  // pools of it, a depthwise strided dilated conv, and a gather: compiled
  // by the real pipeline for a program without torch.
  ConvolutionParameters first{{1, 1}, {1, 1}, {1, 1}, 1};
  ConvolutionParameters depthwise{{2, 2}, {2, 2}, {2, 2}, 4};
  PoolParameters maxWindow{3, 3, 2, 2, 1, 1, 1, 1, true};
  PoolParameters avgWindow{2, 3, 2, 2, 0, 1, 1, 1, true};
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3, 9, 11}));
  Value *w = graph->addInput(TensorMeta(DType::Float32, {4, 3, 3, 3}));
  Value *b = graph->addInput(TensorMeta(DType::Float32, {4}));
  Value *w2 = graph->addInput(TensorMeta(DType::Float32, {4, 1, 3, 3}));
  Value *places = graph->addInput(TensorMeta(DType::Int64, {2, 3, 9, 2}));
  Value *conv = convolution(*graph, x, w, b, first);
  Value *relu = graph->addOp("aten::relu", {conv})->result(0);
  Node *pool = maxPool(*graph, relu, maxWindow);
  graph->setOutputs({
      conv,
      pool->result(0),
      pool->result(1),
      avgPool(*graph, relu, avgWindow, false),
      adaptiveAvgPool(*graph, conv, 4, 5),
      convolution(*graph, relu, w2, nullptr, depthwise),
      graph->addOp("aten::gather", {x, Argument(3), places})->result(0),
  });
  backend::Target target;
  target.standalone = true;
  runtime::CompiledProgram program(backend::compileGraph(graph, target),
                                   runtime::CpuDevice::get());

  Dense xs = randomDense({2, 3, 9, 11}, 11), ws = randomDense({4, 3, 3, 3}, 12);
  Dense bs = randomDense({4}, 13), w2s = randomDense({4, 1, 3, 3}, 14);
  Dense placesDense({2, 3, 9, 2});
  for (size_t i = 0; i < placesDense.values.size(); ++i)
    placesDense.values[i] = double((i * 7) % 11);
  std::vector<float> xData(xs.values.begin(), xs.values.end());
  std::vector<float> wData(ws.values.begin(), ws.values.end());
  std::vector<float> bData(bs.values.begin(), bs.values.end());
  std::vector<float> w2Data(w2s.values.begin(), w2s.values.end());
  std::vector<int64_t> placeData(placesDense.values.begin(),
                                 placesDense.values.end());
  auto buffer = [](auto &data, DType dtype, const Shape &sizes) {
    return runtime::TensorBuffer{reinterpret_cast<char *>(data.data()), dtype,
                                 sizes, contiguousStrides(sizes)};
  };
  runtime::ProgramOutputs outputs = runtime::runProgram(
      program, {buffer(xData, DType::Float32, xs.sizes),
                buffer(wData, DType::Float32, ws.sizes),
                buffer(bData, DType::Float32, bs.sizes),
                buffer(w2Data, DType::Float32, w2s.sizes),
                buffer(placeData, DType::Int64, placesDense.sizes)});

  Dense convolved = referenceConvolution(xs, ws, &bs, first);
  Dense rectified = convolved;
  for (double &value : rectified.values)
    value = std::max(value, 0.0);
  auto [maxValues, maxIndices] = referenceMaxPool(rectified, maxWindow);
  Dense gathered(placesDense.sizes);
  forEachIndex(gathered.sizes, [&](const std::vector<int64_t> &index) {
    std::vector<int64_t> at = index;
    at[3] = int64_t(placesDense.at(index));
    gathered.at(index) = xs.at(at);
  });
  std::vector<Dense> expected{
      convolved,
      maxValues,
      maxIndices,
      referenceAvgPool(rectified, avgWindow, false),
      referenceAdaptiveAvgPool(convolved, 4, 5),
      referenceConvolution(rectified, w2s, nullptr, depthwise),
      gathered};
  ASSERT_EQ(outputs.tensors.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    const runtime::TensorBuffer &out = outputs.tensors[i];
    ASSERT_EQ(out.sizes, expected[i].sizes);
    std::vector<double> actual;
    forEachIndex(out.sizes, [&](const std::vector<int64_t> &index) {
      int64_t offset = 0;
      for (size_t d = 0; d < index.size(); ++d)
        offset += index[d] * out.strides[d];
      actual.push_back(
          out.dtype == DType::Int64
              ? double(reinterpret_cast<const int64_t *>(out.data)[offset])
              : double(reinterpret_cast<const float *>(out.data)[offset]));
    });
    expectClose(actual, expected[i].values, 1e-5);
  }
}

TEST(ConvolutionLowering, ExternNodeWithTorchMetadataLowersWhereItFits) {
  // The frontend keeps a registered op as an extern node carrying torch's
  // metadata where kiln's meta function disagreed; the lowering still
  // applies where that metadata fits the arguments.
  auto schema = std::make_shared<OpSchema>(parseSchema(
      "aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] "
      "stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] "
      "output_padding, SymInt groups) -> Tensor"));
  ConvolutionParameters p{{2, 2}, {1, 1}, {1, 1}, 1};
  for (bool fits : {true, false}) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {1, 2, 7, 7}));
    Value *w = graph->addInput(TensorMeta(DType::Float32, {3, 2, 3, 3}));
    Shape sizes{1, 3, 4, fits ? 4 : 5};
    Node *node =
        graph->addExtern(schema,
                         {x, w, Argument::none(), p.stride, p.padding,
                          p.dilation, false, Shape{0, 0}, Argument(p.groups)},
                         {TensorMeta(DType::Float32, sizes)});
    graph->setOutputs({node->result(0)});
    loop::Program program = lowerGraph(graph, Device{}, true);
    EXPECT_EQ(countExterns(program), fits ? 0 : 1);
    if (!fits)
      continue;
    Dense xs = randomDense({1, 2, 7, 7}, 15),
          ws = randomDense({3, 2, 3, 3}, 16);
    Interpreter run(program);
    run.evaluateBothBranches();
    run.setInput(0, xs.values);
    run.setInput(1, ws.values);
    run.run();
    expectClose(run.output(0), referenceConvolution(xs, ws, nullptr, p).values,
                2e-6);
  }
}

namespace {

// The extern steps of `program`.
std::vector<const loop::Step *> externSteps(const loop::Program &program) {
  std::vector<const loop::Step *> steps;
  for (const loop::Step &step : program.steps)
    if (step.kind == loop::Step::Kind::Extern)
      steps.push_back(&step);
  return steps;
}

bool isChannelsLast(const TensorMeta &meta) {
  return meta::suggestMemoryFormat(meta) == MemoryFormat::ChannelsLast;
}

// An interpreter's extern hook that runs `program`'s convolution steps as
// torch would, with the reference: the operands' elements whatever their
// layout, the result written in its buffer's.
std::function<bool(const loop::Step &, Interpreter &)>
convolutionsByReference(const loop::Program &program,
                        const ConvolutionParameters &p) {
  return [&program, p](const loop::Step &step, Interpreter &at) {
    auto operand = [&](size_t index) {
      const Value *value = step.node->arguments().at(index).toTensor();
      Dense dense(value->meta().sizes);
      dense.values = at.read(program.operandBuffer(step, value));
      return dense;
    };
    at.write(step.results.at(0),
             referenceConvolution(operand(0), operand(1), nullptr, p).values);
    return true;
  };
}

} // namespace

TEST(ConvolutionLowering, JitCallsTorchWithChannelsLastOperands) {
  // conv -> ReLU -> conv, the ReLU also added to the result: the first
  // call reads a channels-last copy of the input and gives a channels-last
  // result; the ReLU (two readers) is realized channels-last and is the
  // second call's operand as it is; each call reads a channels-last copy
  // of its weight; the output is contiguous, as eager's.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 8, 12, 12}));
  Value *w1 = graph->addInput(TensorMeta(DType::Float32, {16, 8, 3, 3}));
  Value *w2 = graph->addInput(TensorMeta(DType::Float32, {16, 16, 3, 3}));
  ConvolutionParameters p{{1, 1}, {1, 1}, {1, 1}, 1};
  Value *r = op(*graph, "aten::relu", {convolution(*graph, x, w1, nullptr, p)});
  Value *out = op(*graph, "aten::add.Tensor",
                  {convolution(*graph, r, w2, nullptr, p), r});
  graph->setOutputs({out});
  loop::Program program = lowerGraph(graph);
  std::vector<const loop::Step *> calls = externSteps(program);
  ASSERT_EQ(calls.size(), 2u) << program.str();
  for (const loop::Step *call : calls) {
    ASSERT_EQ(call->operandBuffers.size(), 2u) << program.str();
    for (const auto &[value, buffer] : call->operandBuffers) {
      EXPECT_EQ(program.buffers[buffer].kind, loop::BufferKind::Tensor);
      EXPECT_TRUE(isChannelsLast(program.buffers[buffer].meta))
          << program.str();
    }
    EXPECT_EQ(call->operandBuffers[1].first,
              call->node->arguments().at(1).toTensor());
    EXPECT_TRUE(isChannelsLast(program.buffers[call->results.at(0)].meta));
  }
  EXPECT_NE(calls[0]->operandBuffers[0].second, program.bufferOf.at(x));
  EXPECT_NE(calls[0]->operandBuffers[1].second, program.bufferOf.at(w1));
  EXPECT_NE(calls[1]->operandBuffers[1].second, program.bufferOf.at(w2));
  // The copies of the input and first weight, the first call, the ReLU,
  // the second weight's copy, the second call, the sum: no copy of the
  // ReLU to another layout.
  std::string kinds;
  for (const loop::Step &step : program.steps)
    kinds += step.kind == loop::Step::Kind::Kernel ? "K" : "E";
  EXPECT_EQ(kinds, "KKEKKEK") << program.str();
  EXPECT_TRUE(
      program.buffers[program.outputs.at(0).buffer].meta.isContiguous());

  Dense xs = randomDense({2, 8, 12, 12}, 21),
        w1s = randomDense({16, 8, 3, 3}, 22),
        w2s = randomDense({16, 16, 3, 3}, 23);
  Interpreter run(program);
  run.externHook = convolutionsByReference(program, p);
  run.setInput(0, xs.values);
  run.setInput(1, w1s.values);
  run.setInput(2, w2s.values);
  run.run();
  Dense relu = referenceConvolution(xs, w1s, nullptr, p);
  for (double &value : relu.values)
    value = std::max(value, 0.0);
  Dense expected = referenceConvolution(relu, w2s, nullptr, p);
  for (size_t i = 0; i < expected.values.size(); ++i)
    expected.values[i] += relu.values[i];
  expectClose(run.output(0), expected.values, 1e-5);
}

TEST(ConvolutionLowering, JitReadsFiltersOfOneTapOrChannelAsTheyAre) {
  // A contiguous filter of one input channel per group (a depthwise
  // convolution's) is channels-last too: the channels-last call reads the
  // weight's own buffer, with no copy kernel. A filter of 1x1 taps is
  // kiln's GEMM (rows the result's positions), reading the weight's buffer
  // as it is too.
  struct Case {
    Shape weight;
    ConvolutionParameters p;
  };
  for (const Case &c : {Case{{32, 8, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 1}},
                        Case{{8, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 8}}}) {
    bool oneTap = c.weight[2] == 1;
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 8, 24, 24}));
    Value *w = graph->addInput(TensorMeta(DType::Float32, c.weight));
    graph->setOutputs(
        {op(*graph, "aten::relu", {convolution(*graph, x, w, nullptr, c.p)})});
    loop::Program program = lowerGraph(graph);
    std::vector<const loop::Step *> calls = externSteps(program);
    if (oneTap) {
      EXPECT_TRUE(calls.empty()) << program.str();
      // The input's columns, the product, the ReLU written NCHW: no copy
      // of the weight.
      std::vector<const loop::Kernel *> products;
      for (const loop::Step &step : program.steps) {
        if (step.kind != loop::Step::Kind::Kernel)
          continue;
        const loop::Kernel &kernel = step.kernel;
        bool readsWeight = false;
        for (const loop::Loop &loop : kernel.loops)
          for (const loop::Reduction &reduction : loop.reductions)
            for (const loop::Expr *load : loop::loadsOf(reduction.value))
              readsWeight = readsWeight || load->id() == program.bufferOf.at(w);
        for (const loop::Loop &loop : kernel.loops)
          for (const loop::Store &store : loop.stores)
            for (const loop::Expr *load : loop::loadsOf(store.value))
              EXPECT_NE(load->id(), program.bufferOf.at(w)) << program.str();
        if (kernel.contraction) {
          EXPECT_TRUE(readsWeight) << program.str();
          products.push_back(&kernel);
        }
      }
      EXPECT_EQ(products.size(), 1u) << program.str();
    } else {
      ASSERT_EQ(calls.size(), 1u) << program.str();
      ASSERT_EQ(calls[0]->operandBuffers.size(), 2u) << program.str();
      EXPECT_EQ(calls[0]->operandBuffers[1].second, program.bufferOf.at(w))
          << program.str();
      EXPECT_TRUE(
          isChannelsLast(program.buffers[calls[0]->results.at(0)].meta));
    }

    Dense xs = randomDense({2, 8, 24, 24}, 31), ws = randomDense(c.weight, 32);
    Interpreter run(program);
    run.externHook = convolutionsByReference(program, c.p);
    run.setInput(0, xs.values);
    run.setInput(1, ws.values);
    run.run();
    Dense expected = referenceConvolution(xs, ws, nullptr, c.p);
    for (double &value : expected.values)
      value = std::max(value, 0.0);
    expectClose(run.output(0), expected.values, 1e-5);
  }
}

TEST(ConvolutionLowering,
     JitKeepsContiguousCallsWhereTheWeightOutweighsTheResult) {
  // 64 filters of 16x3x3 (9216 weights) over 2x2 positions (256 results):
  // torch's channels-last call would copy and reorder the weight; a
  // contiguous input is passed as it is, a channels-last one as a
  // contiguous copy.
  for (bool channelsLastInput : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Shape sizes{1, 16, 2, 2};
    Value *x = graph->addInput(
        channelsLastInput ? TensorMeta(DType::Float32, sizes,
                                       meta::stridesForFormat(
                                           sizes, MemoryFormat::ChannelsLast))
                          : TensorMeta(DType::Float32, sizes));
    Value *w = graph->addInput(TensorMeta(DType::Float32, {64, 16, 3, 3}));
    graph->setOutputs(
        {convolution(*graph, x, w, nullptr, {{1, 1}, {1, 1}, {1, 1}, 1})});
    loop::Program program = lowerGraph(graph);
    std::vector<const loop::Step *> calls = externSteps(program);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0]->operandBuffers.size(), channelsLastInput ? 1u : 0u);
    if (channelsLastInput) {
      EXPECT_TRUE(program.buffers[calls[0]->operandBuffers[0].second]
                      .meta.isContiguous());
    }
    EXPECT_TRUE(program.buffers[calls[0]->results.at(0)].meta.isContiguous());
  }
}

TEST(PoolingLowering, MaxPoolIndicesNobodyReadsAreNotComputed) {
  for (bool readIndices : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3, 9, 9}));
    Node *pool = maxPool(*graph, x, {3, 3, 2, 2, 1, 1});
    if (readIndices)
      graph->setOutputs({pool->result(0), pool->result(1)});
    else
      graph->setOutputs({pool->result(0)});
    loop::Program program = lowerGraph(graph);
    ASSERT_EQ(program.steps.size(), 1u);
    // The maximum's pass (its reduction, its store), and the indices'
    // where they are read.
    EXPECT_EQ(program.steps[0].kernel.loops.size(), readIndices ? 3u : 2u)
        << program.str();
  }
}

namespace {

// `dense`'s elements at `data`, laid out as `meta` says (its offset is in
// the address already).
void writeStrided(const Dense &dense, char *data, const TensorMeta &meta) {
  float *floats = reinterpret_cast<float *>(data);
  forEachIndex(dense.sizes, [&](const std::vector<int64_t> &index) {
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d)
      offset += index[d] * meta.strides[d];
    floats[offset] = static_cast<float>(dense.at(index));
  });
}

Dense readStrided(const char *data, const TensorMeta &meta) {
  const float *floats = reinterpret_cast<const float *>(data);
  Dense dense(meta.sizes);
  forEachIndex(meta.sizes, [&](const std::vector<int64_t> &index) {
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d)
      offset += index[d] * meta.strides[d];
    dense.at(index) = floats[offset];
  });
  return dense;
}

// Runs a compiled program's convolutions with the reference, each result
// and each allocation in memory of its own, which `release` fills with
// NaN: a kernel that read a buffer after its release would give NaN.
class ReferenceConvolutionHost : public runtime::ExecutionHost {
public:
  ReferenceConvolutionHost(const runtime::CompiledProgram &program,
                           ConvolutionParameters p)
      : ExecutionHost(program), p_(std::move(p)),
        memory_(program.program().buffers.size()) {}

  char *allocate(int64_t buffer) override { return reserve(buffer); }

  void runExtern(size_t step, std::vector<char *> &addresses) override {
    const loop::Program &program = program_.program();
    const loop::Step &call = program.steps[step];
    auto operand = [&](size_t index) {
      const Value *value = call.node->arguments().at(index).toTensor();
      int64_t buffer = program.operandBuffer(call, value);
      return readStrided(addresses[buffer], program.buffers[buffer].meta);
    };
    int64_t result = call.results.at(0);
    addresses[result] = reserve(result);
    writeStrided(referenceConvolution(operand(0), operand(1), nullptr, p_),
                 addresses[result], program.buffers[result].meta);
  }

  void release(int64_t buffer) override {
    released.push_back(buffer);
    std::fill(memory_[buffer].begin(), memory_[buffer].end(),
              std::numeric_limits<float>::quiet_NaN());
  }

  std::vector<int64_t> released;

private:
  char *reserve(int64_t buffer) {
    const TensorMeta &meta = program_.program().buffers[buffer].meta;
    memory_[buffer].assign(bufferBytes(meta) / sizeof(float) + 1, 0.0f);
    return reinterpret_cast<char *>(memory_[buffer].data());
  }

  ConvolutionParameters p_;
  std::vector<std::vector<float>> memory_;
};

} // namespace

TEST(ConvolutionLowering, ExternResultsAreReleasedAfterTheirLastUse) {
  // conv -> ReLU -> conv, plus the ReLU, then a third conv, and a
  // transpose of a fourth (contiguous: its weight outweighs its result) as
  // a second output. Every extern result and operand copy the outputs do
  // not keep is released once, after its last reader: the host poisons
  // what it is told to release, and the outputs stay right. The fourth
  // result, which the output views, is kept.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 8, 10, 10}));
  Value *w = graph->addInput(TensorMeta(DType::Float32, {8, 8, 3, 3}));
  Value *small = graph->addInput(TensorMeta(DType::Float32, {1, 32, 3, 3}));
  Value *wide = graph->addInput(TensorMeta(DType::Float32, {64, 32, 3, 3}));
  ConvolutionParameters p{{1, 1}, {1, 1}, {1, 1}, 1};
  Value *r = op(*graph, "aten::relu", {convolution(*graph, x, w, nullptr, p)});
  Value *sum = op(*graph, "aten::add.Tensor",
                  {convolution(*graph, r, w, nullptr, p), r});
  Value *third = convolution(*graph, sum, w, nullptr, p);
  graph->setOutputs({op(*graph, "aten::mul.Tensor", {third, sum}),
                     op(*graph, "aten::transpose.int",
                        {convolution(*graph, small, wide, nullptr, p),
                         Argument(int64_t(1)), Argument(int64_t(3))})});
  runtime::CompiledProgram compiled(backend::compileGraph(graph, {}),
                                    runtime::CpuDevice::get());
  const loop::Program &program = compiled.program();
  std::vector<const loop::Step *> calls = externSteps(program);
  ASSERT_EQ(calls.size(), 4u) << program.str();

  std::vector<Dense> inputs{
      randomDense({2, 8, 10, 10}, 31), randomDense({8, 8, 3, 3}, 32),
      randomDense({1, 32, 3, 3}, 33), randomDense({64, 32, 3, 3}, 34)};
  std::vector<std::vector<float>> data;
  std::vector<char *> inputAddresses;
  for (const Dense &input : inputs)
    data.emplace_back(input.values.begin(), input.values.end());
  for (std::vector<float> &values : data)
    inputAddresses.push_back(reinterpret_cast<char *>(values.data()));
  ReferenceConvolutionHost host(compiled, p);
  std::vector<char *> addresses;
  runtime::runProgram(compiled, inputAddresses.data(), inputAddresses.size(),
                      host, addresses);

  Dense relu = referenceConvolution(inputs[0], inputs[1], nullptr, p);
  for (double &value : relu.values)
    value = std::max(value, 0.0);
  Dense summed = referenceConvolution(relu, inputs[1], nullptr, p);
  for (size_t i = 0; i < summed.values.size(); ++i)
    summed.values[i] += relu.values[i];
  Dense product = referenceConvolution(summed, inputs[1], nullptr, p);
  for (size_t i = 0; i < product.values.size(); ++i)
    product.values[i] *= summed.values[i];
  Dense fourth = referenceConvolution(inputs[2], inputs[3], nullptr, p);
  Dense transposed({1, 3, 3, 64});
  forEachIndex(transposed.sizes, [&](const std::vector<int64_t> &i) {
    transposed.at(i) = fourth.at({i[0], i[3], i[2], i[1]});
  });
  std::vector<Dense> expected{product, transposed};
  std::unordered_set<int64_t> keptRoots;
  for (size_t o = 0; o < expected.size(); ++o) {
    int64_t buffer = program.outputs.at(o).buffer;
    keptRoots.insert(program.rootOf(buffer));
    expectClose(
        readStrided(addresses[buffer], program.buffers[buffer].meta).values,
        expected[o].values, 1e-4);
  }
  EXPECT_TRUE(keptRoots.count(calls[3]->results.at(0))) << program.str();
  // Each buffer a host holds that no output keeps: released once.
  std::vector<int64_t> expectedReleases;
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    loop::BufferKind kind = program.buffers[b].kind;
    if ((kind == loop::BufferKind::Tensor || kind == loop::BufferKind::View) &&
        !keptRoots.count(program.rootOf(static_cast<int64_t>(b))))
      expectedReleases.push_back(static_cast<int64_t>(b));
  }
  EXPECT_GE(expectedReleases.size(), 3u) << program.str();
  std::sort(host.released.begin(), host.released.end());
  EXPECT_EQ(host.released, expectedReleases) << program.str();
}

TEST(PoolingLowering, PoolsOverChannelsLastValuesWalkChannelsInnermost) {
  // conv (channels-last) -> ReLU -> max pool -> conv, and average pool ->
  // conv: each pool stores channels-last, its channels the innermost loop
  // (its taps' loads one vector), and the next conv reads it as it is. An
  // adaptive pool that is an output is stored contiguous, as eager's.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 16, 18, 18}));
  Value *w = graph->addInput(TensorMeta(DType::Float32, {16, 16, 3, 3}));
  ConvolutionParameters p{{1, 1}, {1, 1}, {1, 1}, 1};
  PoolParameters window{3, 3, 2, 2, 1, 1};
  Value *r = op(*graph, "aten::relu", {convolution(*graph, x, w, nullptr, p)});
  Value *maxima = maxPool(*graph, r, window)->result(0);
  Value *averages = avgPool(*graph, r, window, true);
  graph->setOutputs({convolution(*graph, maxima, w, nullptr, p),
                     convolution(*graph, averages, w, nullptr, p),
                     adaptiveAvgPool(*graph, r, 2, 3)});
  loop::Program program = lowerGraph(graph);
  fuseKernels(program);
  chooseLoopOrder(program);
  std::unordered_set<int64_t> outputs;
  for (const loop::ProgramOutput &output : program.outputs) {
    outputs.insert(output.buffer);
    EXPECT_TRUE(program.buffers[output.buffer].meta.isContiguous());
  }
  // The two pools share their loads: one kernel, two stores.
  int pools = 0;
  for (const loop::Step &step : program.steps) {
    if (step.kind != loop::Step::Kind::Kernel ||
        step.kernel.loops.at(0).ranges.size() != 2)
      continue;
    for (const loop::Loop &loop : step.kernel.loops)
      for (const loop::Store &store : loop.stores) {
        if (outputs.count(store.buffer))
          continue;
        ++pools;
        EXPECT_EQ(step.kernel.outerRanges.constants().back(), 16)
            << kernelToString(step.kernel, program);
        EXPECT_TRUE(isChannelsLast(program.buffers[store.buffer].meta))
            << kernelToString(step.kernel, program);
      }
  }
  EXPECT_EQ(pools, 2) << program.str();
  // The two pooled convolutions read the pools' buffers as they are.
  for (const loop::Step *call : externSteps(program))
    EXPECT_TRUE(call->operandBuffers.empty() ||
                program.buffers[call->operandBuffers[0].second].kind !=
                    loop::BufferKind::View);

  Dense xs = randomDense({2, 16, 18, 18}, 41),
        ws = randomDense({16, 16, 3, 3}, 42);
  Interpreter run(program);
  run.externHook = convolutionsByReference(program, p);
  run.setInput(0, xs.values);
  run.setInput(1, ws.values);
  run.run();
  Dense relu = referenceConvolution(xs, ws, nullptr, p);
  for (double &value : relu.values)
    value = std::max(value, 0.0);
  expectClose(
      run.output(0),
      referenceConvolution(referenceMaxPool(relu, window).first, ws, nullptr, p)
          .values,
      1e-5);
  expectClose(
      run.output(1),
      referenceConvolution(referenceAvgPool(relu, window, true), ws, nullptr, p)
          .values,
      1e-5);
  expectClose(run.output(2), referenceAdaptiveAvgPool(relu, 2, 3).values, 1e-5);
}
