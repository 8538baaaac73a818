// Tests of contraction kernels: matrix products lowered for a program that
// runs without torch are recognised as GEMMs (their operands' strides and
// offsets read from the loop IR) and compiled through the CPU backend, with
// results checked against products computed here in double.
// Depends on backend/cpu/CpuContraction.h, backend/Pipeline.h, runtime/.
#include "backend/cpu/CpuContraction.h"
#include "backend/Pipeline.h"
#include "backend/cpu/CpuSchedule.h"
#include "backend/cpu/MathLibrary.h"
#include "backend/cpu/ThreadPool.h"
#include "ir/Graph.h"
#include "runtime/ProgramExecutor.h"

#include <gtest/gtest.h>
#include <llvm/IR/Module.h>

#include <random>

using namespace kiln;

namespace {

std::vector<float> randomValues(size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> values(count);
  for (float &value : values)
    value = uniform(generator);
  return values;
}

// The contraction kernels of `graph` planned for a program without torch.
std::vector<backend::MatchedContraction>
matchedContractions(std::shared_ptr<Graph> graph) {
  backend::Target target;
  target.standalone = true;
  loop::Program program = backend::planProgram(graph, target);
  std::vector<backend::MatchedContraction> matched;
  for (const loop::Step &step : program.steps)
    if (step.kind == loop::Step::Kind::Kernel && step.kernel.contraction) {
      auto match = backend::matchContraction(program, step.kernel);
      EXPECT_TRUE(match.has_value())
          << loop::kernelToString(step.kernel, program);
      if (match)
        matched.push_back(*match);
    }
  return matched;
}

runtime::TensorBuffer bufferOf(std::vector<float> &values, const Shape &sizes,
                               const Shape &strides) {
  return {reinterpret_cast<char *>(values.data()), DType::Float32, sizes,
          strides};
}

} // namespace

// x [b, m, k] @ w[n, k]^T + bias, as a Linear layer on a batch: B is read
// transposed, the bias broadcast along rows.
TEST(CpuContraction, LinearLayerIsAGemmWithATransposedWeight) {
  const int64_t batch = 3, m = 37, k = 65, n = 70;
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {batch * m, k}));
  Value *w = graph->addInput(TensorMeta(DType::Float32, {n, k}));
  Value *bias = graph->addInput(TensorMeta(DType::Float32, {n}));
  Value *wt = graph->addOp("aten::t", {w}, {})->result(0);
  Value *y = graph->addOp("aten::addmm", {bias, x, wt}, {})->result(0);
  graph->setOutputs({y});

  auto matched = matchedContractions(graph);
  ASSERT_EQ(matched.size(), 1u);
  const backend::GemmSpec &spec = matched[0].spec;
  EXPECT_EQ(spec.m, batch * m);
  EXPECT_EQ(spec.n, n);
  EXPECT_EQ(spec.k, k);
  EXPECT_EQ(spec.aRow, k);
  EXPECT_EQ(spec.aCol, 1);
  EXPECT_EQ(spec.bRow, 1); // w[j][p] as B[p][j]
  EXPECT_EQ(spec.bCol, k);

  backend::Target target;
  target.standalone = true;
  runtime::CompiledProgram program(backend::compileGraph(graph, target),
                                   runtime::CpuDevice::get());
  std::vector<float> xs = randomValues(batch * m * k, 1);
  std::vector<float> ws = randomValues(n * k, 2);
  std::vector<float> bs = randomValues(n, 3);
  runtime::ProgramOutputs outputs = runtime::runProgram(
      program, {bufferOf(xs, {batch * m, k}, {k, 1}),
                bufferOf(ws, {n, k}, {k, 1}), bufferOf(bs, {n}, {1})});
  const runtime::TensorBuffer &out = outputs.tensors.at(0);
  const float *result = reinterpret_cast<const float *>(out.data);
  for (int64_t i = 0; i < batch * m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double expected = bs[j];
      for (int64_t p = 0; p < k; ++p)
        expected += double(xs[i * k + p]) * ws[j * k + p];
      ASSERT_NEAR(result[i * out.strides[0] + j * out.strides[1]], expected,
                  1e-4)
          << i << ", " << j;
    }
}

// bmm of a slice: the operands start past their buffers' first element.
// A convolution (padding 1, then a bias and a ReLU) over an NCHW input:
// one GEMM over the input's windows, its B the input read where it is
// (GemmSpec::windowedB: k digits (channel, tap row, tap column), column
// digits (row, column) of the result, each padding a range), the bias and
// ReLU its epilogue; its result as a convolution computed here.
TEST(CpuContraction, AConvolutionIsAGemmOverItsInputsWindows) {
  const int64_t batch = 2, channels = 5, height = 9, width = 11, filters = 13;
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(
      TensorMeta(DType::Float32, {batch, channels, height, width}));
  Value *w =
      graph->addInput(TensorMeta(DType::Float32, {filters, channels, 3, 3}));
  Value *bias = graph->addInput(TensorMeta(DType::Float32, {filters}));
  Value *y = graph
                 ->addOp("aten::convolution",
                         {x, w, bias, Shape{1, 1}, Shape{1, 1}, Shape{1, 1},
                          false, Shape{0, 0}, Argument(int64_t(1))})
                 ->result(0);
  graph->setOutputs({graph->addOp("aten::relu", {y}, {})->result(0)});

  auto matched = matchedContractions(graph);
  ASSERT_EQ(matched.size(), 1u);
  const backend::GemmSpec &spec = matched[0].spec;
  EXPECT_EQ(spec.batch, batch);
  EXPECT_EQ(spec.m, filters);
  EXPECT_EQ(spec.n, height * width);
  EXPECT_EQ(spec.k, channels * 9);
  ASSERT_TRUE(spec.windowedB.has_value());
  EXPECT_EQ(spec.windowedB->depthExtents,
            (std::vector<int64_t>{channels, 3, 3}));
  EXPECT_EQ(spec.windowedB->columnExtents,
            (std::vector<int64_t>{height, width}));
  EXPECT_EQ(spec.windowedB->depthStrides,
            (std::vector<int64_t>{height * width, width, 1}));
  EXPECT_EQ(spec.windowedB->columnStrides, (std::vector<int64_t>{width, 1}));
  EXPECT_EQ(spec.windowedB->ranges.size(), 2u);
  EXPECT_EQ(matched[0].bOffset, -width - 1);
  EXPECT_NE(matched[0].epilogue, nullptr);

  backend::Target target;
  target.standalone = true;
  runtime::CompiledProgram program(backend::compileGraph(graph, target),
                                   runtime::CpuDevice::get());
  std::vector<float> xs = randomValues(batch * channels * height * width, 6);
  std::vector<float> ws = randomValues(filters * channels * 9, 7);
  std::vector<float> bs = randomValues(filters, 8);
  runtime::ProgramOutputs outputs = runtime::runProgram(
      program,
      {bufferOf(xs, {batch, channels, height, width},
                {channels * height * width, height * width, width, 1}),
       bufferOf(ws, {filters, channels, 3, 3}, {channels * 9, 9, 3, 1}),
       bufferOf(bs, {filters}, {1})});
  const runtime::TensorBuffer &out = outputs.tensors.at(0);
  ASSERT_EQ(out.strides,
            (Shape{filters * height * width, height * width, width, 1}));
  const float *result = reinterpret_cast<const float *>(out.data);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t o = 0; o < filters; ++o)
      for (int64_t i = 0; i < height; ++i)
        for (int64_t j = 0; j < width; ++j) {
          double sum = bs[o];
          for (int64_t c = 0; c < channels; ++c)
            for (int64_t di = 0; di < 3; ++di)
              for (int64_t dj = 0; dj < 3; ++dj) {
                int64_t row = i + di - 1, column = j + dj - 1;
                if (row >= 0 && row < height && column >= 0 && column < width)
                  sum +=
                      double(ws[((o * channels + c) * 3 + di) * 3 + dj]) *
                      xs[((n * channels + c) * height + row) * width + column];
              }
          EXPECT_NEAR(result[((n * filters + o) * height + i) * width + j],
                      std::max(sum, 0.0), 1e-4)
              << n << ' ' << o << ' ' << i << ' ' << j;
        }
}

TEST(CpuContraction, BatchedProductOfSlicesKeepsOffsets) {
  const int64_t batch = 2, m = 9, k = 33, n = 17;
  auto graph = std::make_shared<Graph>();
  Value *a = graph->addInput(TensorMeta(DType::Float32, {batch, m + 1, k}));
  Value *b = graph->addInput(TensorMeta(DType::Float32, {batch, k, n}));
  Value *rows =
      graph
          ->addOp("aten::narrow",
                  {a, Argument(int64_t(1)), Argument(int64_t(1)), Argument(m)},
                  {})
          ->result(0);
  Value *product = graph->addOp("aten::bmm", {rows, b}, {})->result(0);
  graph->setOutputs({product});
  auto matched = matchedContractions(graph);
  ASSERT_EQ(matched.size(), 1u);
  EXPECT_EQ(matched[0].spec.batch, batch);
  EXPECT_EQ(matched[0].spec.aBatch, (m + 1) * k);
  EXPECT_EQ(matched[0].aOffset, k);

  backend::Target target;
  target.standalone = true;
  runtime::CompiledProgram program(backend::compileGraph(graph, target),
                                   runtime::CpuDevice::get());
  std::vector<float> as = randomValues(batch * (m + 1) * k, 4);
  std::vector<float> bs = randomValues(batch * k * n, 5);
  runtime::ProgramOutputs outputs = runtime::runProgram(
      program, {bufferOf(as, {batch, m + 1, k}, {(m + 1) * k, k, 1}),
                bufferOf(bs, {batch, k, n}, {k * n, n, 1})});
  const runtime::TensorBuffer &out = outputs.tensors.at(0);
  const float *result = reinterpret_cast<const float *>(out.data);
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double expected = 0;
        for (int64_t p = 0; p < k; ++p)
          expected += double(as[s * (m + 1) * k + (i + 1) * k + p]) *
                      bs[s * k * n + p * n + j];
        ASSERT_NEAR(result[s * out.strides[0] + i * out.strides[1] +
                           j * out.strides[2]],
                    expected, 1e-4);
      }
}

// A GEMM's tiles are units of equal work, which threads take in chunks of
// equal counts (equalChunks), another kernel's range (the product's column
// sums here) in a few chunks of a fixed size each.
TEST(CpuContraction, AGemmsTilesAreUnitsOfEqualWork) {
  auto graph = std::make_shared<Graph>();
  Value *a = graph->addInput(TensorMeta(DType::Float32, {300, 200}));
  Value *b = graph->addInput(TensorMeta(DType::Float32, {200, 500}));
  Value *product = graph->addOp("aten::mm", {a, b}, {})->result(0);
  Value *sums = graph
                    ->addOp("aten::sum.dim_IntList",
                            {product, Argument(std::vector<int64_t>{0})}, {})
                    ->result(0);
  graph->setOutputs({sums});
  backend::Target target;
  target.standalone = true;
  loop::Program planned = backend::planProgram(graph, target);
  const backend::HostTarget &host = backend::hostTarget();
  backend::CpuSchedule schedule = backend::scheduleForCpu(planned, host);
  llvm::LLVMContext context;
  llvm::Module module("chunks", context);
  int gemms = 0, others = 0;
  for (size_t index = 0; index < planned.steps.size(); ++index) {
    const loop::Step &step = planned.steps[index];
    if (step.kind != loop::Step::Kind::Kernel)
      continue;
    backend::EmittedKernel emitted = backend::emitCpuStep(
        module, planned, step.kernel, schedule.kernel(index),
        "step" + std::to_string(index), host,
        backend::MathLibrary::instance(host.vectorBits), 4, 2);
    EXPECT_EQ(emitted.equalUnits, step.kernel.contraction);
    ++(step.kernel.contraction ? gemms : others);
  }
  EXPECT_EQ(gemms, 1);
  EXPECT_GE(others, 1);
}

// Threads take units of equal work in chunks of equal counts, a multiple
// of the threads and at most four a thread, where such a count divides the
// units; else one at a time.
TEST(CpuContraction, EqualUnitsGoInChunksOfEqualCounts) {
  EXPECT_EQ(backend::equalChunks(64, 2), 8);   // 8 tiles a chunk
  EXPECT_EQ(backend::equalChunks(64, 16), 64); // one tile a chunk
  EXPECT_EQ(backend::equalChunks(22, 2), 2);   // 11 a thread, not 12 and 10
  EXPECT_EQ(backend::equalChunks(240, 16), 48);
  EXPECT_EQ(backend::equalChunks(88, 16), 88); // no such count: one at a time
  EXPECT_EQ(backend::equalChunks(6, 2), 6);
  EXPECT_EQ(backend::equalChunks(7, 3), 7);
  for (int64_t units = 1; units < 300; ++units)
    for (int threads : {1, 2, 3, 8, 16}) {
      int64_t chunks = backend::equalChunks(units, threads);
      ASSERT_GE(chunks, 1);
      ASSERT_LE(chunks, units);
      EXPECT_EQ(units % chunks, 0) << units << " on " << threads;
      if (chunks != units) {
        EXPECT_EQ(chunks % threads, 0) << units << " on " << threads;
      }
    }
}
