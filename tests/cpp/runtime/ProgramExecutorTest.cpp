// The runtime without Python: graphs built in C++, compiled by the pipeline
// and run by the executor from raw buffers, checked against values
// computed here. No Python interpreter is in this process.
// Depends on runtime/, backend/Pipeline.h, ir/, GoogleTest.
#include "runtime/ProgramExecutor.h"

#include "ir/Error.h"
#include "ir/Graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace kiln;
using runtime::CompiledProgram;
using runtime::TensorBuffer;

namespace {

Value *op(Graph &graph, std::string_view name,
          const std::vector<Argument> &arguments) {
  return graph.addOp(name, arguments)->result(0);
}

std::unique_ptr<CompiledProgram> compile(std::shared_ptr<Graph> graph) {
  return std::make_unique<CompiledProgram>(
      backend::compileGraph(std::move(graph), backend::Target{}),
      runtime::CpuDevice::get());
}

template <typename T>
TensorBuffer tensor(std::vector<T> &values, DType dtype, Shape sizes,
                    Shape strides) {
  return {reinterpret_cast<char *>(values.data()), dtype, std::move(sizes),
          std::move(strides)};
}

/// Element (i, j) of a 2-d float tensor.
float at(const TensorBuffer &buffer, int64_t i, int64_t j) {
  const float *data = reinterpret_cast<const float *>(buffer.data);
  return data[i * buffer.strides[0] + j * buffer.strides[1]];
}

/// 0, 1, 2, ... as floats.
std::vector<float> countingUp(int64_t count) {
  std::vector<float> values(count);
  for (int64_t k = 0; k < count; ++k)
    values[k] = static_cast<float>(k);
  return values;
}

/// Runs a program of two inputs: a contiguous float32 table of `sizes` and
/// a 1-d int64 vector of ids.
runtime::ProgramOutputs runWithIds(const CompiledProgram &program,
                                   std::vector<float> &table, Shape sizes,
                                   std::vector<int64_t> ids) {
  Shape strides = {sizes[1], 1};
  int64_t count = static_cast<int64_t>(ids.size());
  return runtime::runProgram(program,
                             {tensor(table, DType::Float32, sizes, strides),
                              tensor(ids, DType::Int64, {count}, {1})});
}

} // namespace

TEST(ProgramExecutor, RunsAFusedProgramOnATransposedInput) {
  // out = (x.t() * 2 + b).sum(1) and x.t() * 2 + b itself, with x
  // transposed in memory and b broadcast over rows.
  constexpr int64_t rows = 37, columns = 19;
  auto graph = std::make_shared<Graph>();
  Value *x =
      graph->addInput(TensorMeta(DType::Float32, {rows, columns}, {1, rows}));
  Value *b = graph->addInput(TensorMeta(DType::Float32, {columns}));
  Value *scaled = op(*graph, "aten::mul.Scalar", {x, Argument(2.0)});
  Value *shifted = op(*graph, "aten::add.Tensor", {scaled, b});
  Value *sum = op(*graph, "aten::sum.dim_IntList",
                  {shifted, std::vector<int64_t>{1}, false});
  graph->setOutputs({sum, shifted});
  auto program = compile(graph);

  std::vector<float> xData(rows * columns), bData(columns);
  for (int64_t k = 0; k < rows * columns; ++k)
    xData[k] = static_cast<float>(k % 11) - 5.0f;
  for (int64_t j = 0; j < columns; ++j)
    bData[j] = 0.25f * static_cast<float>(j);
  runtime::ProgramOutputs outputs = runtime::runProgram(
      *program, {tensor(xData, DType::Float32, {rows, columns}, {1, rows}),
                 tensor(bData, DType::Float32, {columns}, {1})});
  ASSERT_EQ(outputs.tensors.size(), 2u);
  const TensorBuffer &sumOut = outputs.tensors[0];
  const TensorBuffer &shiftedOut = outputs.tensors[1];
  EXPECT_EQ(sumOut.sizes, (Shape{rows}));
  EXPECT_EQ(shiftedOut.sizes, (Shape{rows, columns}));
  for (int64_t i = 0; i < rows; ++i) {
    double expected = 0;
    for (int64_t j = 0; j < columns; ++j) {
      float value = xData[i + j * rows] * 2.0f + bData[j];
      expected += value;
      EXPECT_EQ(at(shiftedOut, i, j), value) << i << ", " << j;
    }
    EXPECT_NEAR(reinterpret_cast<const float *>(sumOut.data)[i], expected,
                1e-4);
  }
}

TEST(ProgramExecutor, ConstantsTemporariesAndViewOutputs) {
  // exp(x + c) feeds a row maximum (a temporary between kernels when not
  // fused) and the output is the transpose of the result.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {3, 4}));
  auto constant = std::make_shared<ConstantData>();
  constant->meta = TensorMeta(DType::Float32, {4});
  std::vector<float> c = {0.5f, -1.0f, 2.0f, 0.0f};
  constant->bytes.resize(c.size() * sizeof(float));
  std::memcpy(constant->bytes.data(), c.data(), constant->bytes.size());
  Value *cValue = graph->addConstant(constant, "c");
  Value *e =
      op(*graph, "aten::exp", {op(*graph, "aten::add.Tensor", {x, cValue})});
  Value *centered =
      op(*graph, "aten::sub.Tensor",
         {e, op(*graph, "aten::amax", {e, std::vector<int64_t>{1}, true})});
  Value *transposed = op(*graph, "aten::t", {centered});
  graph->setOutputs({transposed});
  auto program = compile(graph);

  std::vector<float> xData(12);
  for (int k = 0; k < 12; ++k)
    xData[k] = 0.1f * static_cast<float>(k) - 0.4f;
  auto outputs = runtime::runProgram(
      *program, {tensor(xData, DType::Float32, {3, 4}, {4, 1})});
  const TensorBuffer &out = outputs.tensors[0];
  EXPECT_EQ(out.sizes, (Shape{4, 3}));
  EXPECT_EQ(out.strides, (Shape{1, 4})); // a view, as eager's t() is
  for (int64_t i = 0; i < 3; ++i) {
    float row[4], largest = -INFINITY;
    for (int64_t j = 0; j < 4; ++j) {
      row[j] = std::exp(xData[i * 4 + j] + c[j]);
      largest = std::max(largest, row[j]);
    }
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_NEAR(at(out, j, i), row[j] - largest, 1e-5);
  }
}

TEST(ProgramExecutor, EmptyAndSizeOneInputs) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {0, 5}));
  Value *y = graph->addInput(TensorMeta(DType::Float32, {1, 1}));
  Value *sum =
      op(*graph, "aten::sum.dim_IntList", {x, std::vector<int64_t>{0}, false});
  Value *out = op(*graph, "aten::add.Tensor", {sum, y}); // [1, 5]
  graph->setOutputs({out});
  auto program = compile(graph);
  std::vector<float> empty(1), one = {3.5f};
  auto outputs = runtime::runProgram(
      *program, {tensor(empty, DType::Float32, {0, 5}, {5, 1}),
                 tensor(one, DType::Float32, {1, 1}, {1, 1})});
  const TensorBuffer &result = outputs.tensors[0];
  EXPECT_EQ(result.sizes, (Shape{1, 5}));
  for (int64_t j = 0; j < 5; ++j)
    EXPECT_EQ(at(result, 0, j), 3.5f);
}

TEST(ProgramExecutor, WrongInputsAreClearErrors) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  graph->setOutputs({op(*graph, "aten::neg", {x})});
  auto program = compile(graph);
  std::vector<float> data(6);
  std::vector<double> doubles(6);
  try {
    runtime::runProgram(*program,
                        {tensor(doubles, DType::Float64, {2, 3}, {3, 1})});
    FAIL() << "a float64 input ran";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("input 0"), std::string::npos);
  }
  EXPECT_THROW(runtime::runProgram(
                   *program, {tensor(data, DType::Float32, {3, 2}, {2, 1})}),
               Error);
  EXPECT_THROW(runtime::runProgram(
                   *program, {tensor(data, DType::Float32, {2, 3}, {1, 2})}),
               Error);
  EXPECT_THROW(runtime::runProgram(*program, {}), Error);
}

namespace {

/// A host that runs aten::mm itself, as an embedder without torch would.
class MatmulHost : public runtime::ExecutionHost {
public:
  explicit MatmulHost(const CompiledProgram &program)
      : ExecutionHost(program) {}
  char *allocate(int64_t buffer) override {
    memory_.emplace_back(program_.program().buffers[buffer].meta.numel() + 16,
                         0.0);
    return reinterpret_cast<char *>(memory_.back().data());
  }
  void runExtern(size_t step, std::vector<char *> &addresses) override {
    const loop::Program &program = program_.program();
    const loop::Step &external = program.steps[step];
    ASSERT_EQ(external.node->schema()->qualifiedName(), "aten::mm");
    std::vector<Value *> operands = external.node->operands();
    const loop::Buffer &a = program.buffers[program.bufferOf.at(operands[0])];
    const loop::Buffer &b = program.buffers[program.bufferOf.at(operands[1])];
    const double *aData = reinterpret_cast<const double *>(
        addresses[program.bufferOf.at(operands[0])]);
    const double *bData = reinterpret_cast<const double *>(
        addresses[program.bufferOf.at(operands[1])]);
    int64_t m = a.meta.sizes[0], k = a.meta.sizes[1], n = b.meta.sizes[1];
    memory_.emplace_back(m * n, 0.0);
    double *out = memory_.back().data();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          out[i * n + j] +=
              aData[i * a.meta.strides[0] + p * a.meta.strides[1]] *
              bData[p * b.meta.strides[0] + j * b.meta.strides[1]];
    addresses[external.results[0]] = reinterpret_cast<char *>(out);
    ++externCalls;
  }
  int externCalls = 0;

private:
  std::vector<std::vector<double>> memory_;
};

} // namespace

TEST(ProgramExecutor, ExternStepsRunThroughTheHost) {
  constexpr int64_t m = 3, k = 48, n = 96; // float64, large: an extern
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float64, {m, k}));
  Value *y = graph->addInput(TensorMeta(DType::Float64, {k, n}));
  Value *shifted = op(*graph, "aten::add.Scalar", {x, Argument(1.0)});
  Value *product = op(*graph, "aten::mm", {shifted, y});
  graph->setOutputs({op(*graph, "aten::relu", {product})});
  auto program = compile(graph);
  bool hasExtern = false;
  for (const loop::Step &step : program->program().steps)
    hasExtern |= step.kind == loop::Step::Kind::Extern;
  ASSERT_TRUE(hasExtern) << program->program().str();

  std::vector<double> xData(m * k), yData(k * n);
  for (int64_t i = 0; i < m * k; ++i)
    xData[i] = static_cast<double>(i % 5) - 2.0;
  for (int64_t i = 0; i < k * n; ++i)
    yData[i] = static_cast<double>(i % 3) - 1.0;
  // Without a host, a program with an extern says what it needs.
  EXPECT_THROW(runtime::runProgram(
                   *program, {tensor(xData, DType::Float64, {m, k}, {k, 1}),
                              tensor(yData, DType::Float64, {k, n}, {n, 1})}),
               Unsupported);

  MatmulHost host(*program);
  char *inputs[] = {reinterpret_cast<char *>(xData.data()),
                    reinterpret_cast<char *>(yData.data())};
  std::vector<char *> addresses;
  runtime::runProgram(*program, inputs, 2, host, addresses);
  EXPECT_EQ(host.externCalls, 1);
  const loop::Buffer &outBuffer =
      program->program().buffers[program->program().outputs[0].buffer];
  const double *out = reinterpret_cast<const double *>(
      addresses[program->program().outputs[0].buffer]);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double expected = 0;
      for (int64_t p = 0; p < k; ++p)
        expected += (xData[i * k + p] + 1.0) * yData[p * n + j];
      EXPECT_NEAR(
          out[i * outBuffer.meta.strides[0] + j * outBuffer.meta.strides[1]],
          std::max(expected, 0.0), 1e-3);
    }
}

TEST(Pipeline, CleansUpDeadCodeBeforeLowering) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {4}));
  op(*graph, "aten::exp", {x}); // read by nothing
  graph->setOutputs({op(*graph, "aten::neg", {x})});
  ASSERT_EQ(graph->nodes().size(), 3u);
  auto compiled = backend::compileGraph(graph, backend::Target{});
  EXPECT_EQ(graph->nodes().size(), 2u);
  int kernels = 0;
  for (const loop::Step &step : compiled->program.steps)
    kernels += step.kind == loop::Step::Kind::Kernel;
  EXPECT_EQ(kernels, 1);
  EXPECT_EQ(compiled->target.name(), "cpu");
}

namespace {

/// A contiguous layout of `sizes` whose dims `symbolicDims` are symbols
/// (dim d of those is symbol symbols[d]); `hints` are the example's sizes.
TensorMeta symbolicMeta(Shape hints,
                        const std::vector<std::pair<int64_t, int64_t>> &dims,
                        bool transposed = false) {
  auto layout = std::make_shared<SymbolicLayout>();
  for (int64_t size : hints)
    layout->sizes.push_back(size::constant(size));
  for (auto [dim, symbol] : dims)
    layout->sizes[dim] = size::symbol(symbol);
  layout->strides.resize(hints.size());
  SymSize running = size::constant(1);
  // Row-major, or (transposed 2-d) column-major.
  for (size_t k = 0; k < hints.size(); ++k) {
    size_t d = transposed ? k : hints.size() - 1 - k;
    layout->strides[d] = running;
    running = size::mul(running, layout->sizes[d]);
  }
  std::vector<int64_t> values;
  for (auto [dim, symbol] : dims) {
    if (values.size() <= static_cast<size_t>(symbol))
      values.resize(symbol + 1);
    values[symbol] = hints[dim];
  }
  TensorMeta meta(DType::Float32, hints);
  meta.symbolic = std::move(layout);
  meta.strides = meta.specialized(values).strides;
  return meta;
}

} // namespace

TEST(ProgramExecutor, CompilesOnceForSizesThatVaryAndRunsAtEach) {
  // y = x * 2 and out[j] = sum_i softmax(x, -1)[i, j] * x[i, j], for x of
  // [s0, 4]: one compile; the kernels read s0 from the call.
  for (bool transposed : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(symbolicMeta({5, 4}, {{0, 0}}, transposed), "x");
    graph->addSymbol({0, 0, 5});
    Node *scaled = graph->addOp("aten::mul.Scalar", {x, Argument(2.0)});
    scaled->result()->setSymbolicLayout(
        symbolicMeta({5, 4}, {{0, 0}}).symbolic);
    Node *softmax = graph->addOp("aten::_softmax",
                                 {x, Argument(int64_t{-1}), Argument(false)});
    softmax->result()->setSymbolicLayout(
        symbolicMeta({5, 4}, {{0, 0}}).symbolic);
    Node *weighted = graph->addOp("aten::mul.Tensor", {softmax->result(), x});
    weighted->result()->setSymbolicLayout(
        symbolicMeta({5, 4}, {{0, 0}}).symbolic);
    Value *sum = op(*graph, "aten::sum.dim_IntList",
                    {weighted->result(), std::vector<int64_t>{0}, false});
    graph->setOutputs({sum, scaled->result()});
    auto program = compile(graph);
    ASSERT_TRUE(program->program().isSymbolic());
    for (const loop::Step &step : program->program().steps)
      EXPECT_EQ(step.kind, loop::Step::Kind::Kernel);
    for (int64_t rows : {3, 7, 40, 2}) {
      std::vector<float> values(rows * 4);
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = std::sin(0.37f * static_cast<float>(i)) * 3;
      Shape strides = transposed ? Shape{1, rows} : Shape{4, 1};
      auto outputs = runtime::runProgram(
          *program, {tensor(values, DType::Float32, {rows, 4}, strides)});
      ASSERT_EQ(outputs.tensors.size(), 2u);
      EXPECT_EQ(outputs.tensors[1].sizes, (Shape{rows, 4}));
      auto element = [&](int64_t i, int64_t j) {
        return values[i * strides[0] + j * strides[1]];
      };
      const float *out =
          reinterpret_cast<const float *>(outputs.tensors[0].data);
      for (int64_t j = 0; j < 4; ++j) {
        double expected = 0;
        for (int64_t i = 0; i < rows; ++i) {
          double largest = -INFINITY, total = 0;
          for (int64_t k = 0; k < 4; ++k)
            largest = std::max<double>(largest, element(i, k));
          for (int64_t k = 0; k < 4; ++k)
            total += std::exp(element(i, k) - largest);
          expected += std::exp(element(i, j) - largest) / total * element(i, j);
        }
        EXPECT_NEAR(out[j], expected, 1e-4) << "rows " << rows << " j " << j;
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < 4; ++j)
          EXPECT_EQ(at(outputs.tensors[1], i, j), 2 * element(i, j));
    }
    // A call whose input disagrees with the program's layout is refused.
    std::vector<float> wrong(12);
    EXPECT_THROW(
        runtime::runProgram(*program,
                            {tensor(wrong, DType::Float32, {3, 4},
                                    transposed ? Shape{4, 1} : Shape{1, 3})}),
        Error);
  }
}

TEST(ProgramExecutor, EmbeddingOfInputIdsChecksTheirRange) {
  // embedding(table, ids) * 2 with the ids an input: one kernel (no call
  // into torch), which reads rows at the ids; the runtime checks the ids
  // before that kernel and raises IndexOutOfRange, as torch raises
  // IndexError, for one outside [0, rows), negative ones included.
  constexpr int64_t rows = 6, width = 3, count = 4;
  auto graph = std::make_shared<Graph>();
  Value *table = graph->addInput(TensorMeta(DType::Float32, {rows, width}));
  Value *ids = graph->addInput(TensorMeta(DType::Int64, {count}));
  Value *picked = op(*graph, "aten::embedding",
                     {table, ids, Argument(int64_t(-1)), false, false});
  graph->setOutputs({op(*graph, "aten::mul.Scalar", {picked, Argument(2.0)})});
  auto program = compile(graph);
  EXPECT_EQ(program->describe(), "native: 1 kernel(s), 0 extern(s)");

  std::vector<float> tableData = countingUp(rows * width);
  auto run = [&](std::vector<int64_t> idData) {
    return runWithIds(*program, tableData, {rows, width}, idData);
  };
  std::vector<int64_t> good = {5, 0, 2, 5};
  runtime::ProgramOutputs outputs = run(good);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < width; ++j)
      EXPECT_EQ(at(outputs.tensors.at(0), i, j),
                2.0f * tableData[good[i] * width + j]);
  EXPECT_THROW(run({0, 1, rows, 2}), IndexOutOfRange);
  EXPECT_THROW(run({0, -1, 1, 2}), IndexOutOfRange);
}

TEST(ProgramExecutor,
     LossTargetsPassTheIgnoredValueAndGatherRaisesTorchsError) {
  // nll_loss_forward(self, targets, None, mean, ignore_index=-100): one
  // kernel; targets outside [0, classes) raise IndexOutOfRange with torch's
  // "Target 9 is out of bounds." unless they are the ignored value.
  constexpr int64_t rows = 3, classes = 4;
  auto graph = std::make_shared<Graph>();
  Value *self = graph->addInput(TensorMeta(DType::Float32, {rows, classes}));
  Value *targets = graph->addInput(TensorMeta(DType::Int64, {rows}));
  Node *loss = graph->addOp("aten::nll_loss_forward",
                            {self, targets, Argument(), Argument(int64_t(1)),
                             Argument(int64_t(-100))});
  graph->setOutputs({loss->result(0)});
  auto program = compile(graph);
  EXPECT_EQ(program->describe(), "native: 1 kernel(s), 0 extern(s)");
  std::vector<float> values = countingUp(rows * classes);
  auto run = [&](std::vector<int64_t> targets) {
    return runWithIds(*program, values, {rows, classes}, targets);
  };
  // -(1 + 11) / 2: the ignored row counts in neither sum.
  runtime::ProgramOutputs outputs = run({1, -100, 3});
  EXPECT_EQ(*reinterpret_cast<const float *>(outputs.tensors.at(0).data),
            -6.0f);
  try {
    run({1, 9, 3});
    ADD_FAILURE() << "no error";
  } catch (const IndexOutOfRange &error) {
    EXPECT_STREQ(error.what(), "Target 9 is out of bounds.");
  }
  EXPECT_THROW(run({-1, 0, 0}), IndexOutOfRange);

  // gather raises torch's RuntimeError (not an IndexError), naming the
  // dim.
  auto gatherGraph = std::make_shared<Graph>();
  Value *input =
      gatherGraph->addInput(TensorMeta(DType::Float32, {rows, classes}));
  Value *index = gatherGraph->addInput(TensorMeta(DType::Int64, {rows, 2}));
  gatherGraph->setOutputs(
      {op(*gatherGraph, "aten::gather", {input, Argument(int64_t(1)), index})});
  auto gathers = compile(gatherGraph);
  EXPECT_EQ(gathers->describe(), "native: 1 kernel(s), 0 extern(s)");
  std::vector<int64_t> bad = {0, 1, 4, 0, 2, 3};
  try {
    runtime::runProgram(
        *gathers,
        {tensor(values, DType::Float32, {rows, classes}, {classes, 1}),
         tensor(bad, DType::Int64, {rows, 2}, {2, 1})});
    ADD_FAILURE() << "no error";
  } catch (const IndexOutOfRange &error) {
    EXPECT_FALSE(error.indexError()) << "torch raises a RuntimeError here";
    EXPECT_STREQ(error.what(),
                 "index 4 is out of bounds for dimension 1 with size 4");
  }
}

TEST(ProgramExecutor, ComputedIdsAreCheckedAfterTheKernelThatComputesThem) {
  // embedding(table, ids - 2) * 2: the ids are computed, so the lowering
  // realizes them and the runtime checks them; the kernel that reads them
  // must stay apart from the one that writes them (the check runs between
  // the two).
  constexpr int64_t rows = 5, width = 2, count = 3;
  auto graph = std::make_shared<Graph>();
  Value *table = graph->addInput(TensorMeta(DType::Float32, {rows, width}));
  Value *ids = graph->addInput(TensorMeta(DType::Int64, {count}));
  Value *shifted = op(*graph, "aten::sub.Scalar",
                      {ids, Argument(int64_t(2)), Argument(int64_t(1))});
  Value *picked = op(*graph, "aten::embedding",
                     {table, shifted, Argument(int64_t(-1)), false, false});
  graph->setOutputs({op(*graph, "aten::mul.Scalar", {picked, Argument(2.0)})});
  auto program = compile(graph);
  EXPECT_EQ(program->describe(), "native: 2 kernel(s), 0 extern(s)");
  std::vector<float> tableData = countingUp(rows * width);
  auto run = [&](std::vector<int64_t> idData) {
    return runWithIds(*program, tableData, {rows, width}, idData);
  };
  runtime::ProgramOutputs outputs = run({2, 6, 4});
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < width; ++j)
      EXPECT_EQ(at(outputs.tensors.at(0), i, j),
                2.0f *
                    tableData[(std::vector<int64_t>{0, 4, 2}[i]) * width + j]);
  EXPECT_THROW(run({2, 7, 4}), IndexOutOfRange);
  EXPECT_THROW(run({1, 2, 4}), IndexOutOfRange);
}
