// Lowering from graph IR to loop IR, checked numerically by a small scalar
// reference interpreter of loop IR (LoopInterpreter.h) against hand-computed
// values.
// Depends on passes/Lowering.h, passes/lowerings/Lowerer.h,
// tests/cpp/passes/LoopInterpreter.h and gtest.
#include "passes/Lowering.h"

#include "ir/Error.h"
#include "ir/Graph.h"
#include "passes/lowerings/Lowerer.h"
#include "tests/cpp/passes/LoopInterpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace kiln;
using kiln::testing::Interpreter;
using loop::BufferKind;

namespace {

std::shared_ptr<Graph> newGraph() { return std::make_shared<Graph>(); }

Value *op(Graph &graph, std::string_view name,
          const std::vector<Argument> &arguments,
          const std::vector<std::pair<std::string, Argument>> &keywords = {}) {
  return graph.addOp(name, arguments, keywords)->result(0);
}

void expectNear(const std::vector<double> &actual,
                const std::vector<double> &expected, double tolerance = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tolerance) << "element " << i;
}

int countKernels(const loop::Program &program) {
  int count = 0;
  for (const loop::Step &step : program.steps)
    count += step.kind == loop::Step::Kind::Kernel;
  return count;
}

int countExterns(const loop::Program &program) {
  return static_cast<int>(program.steps.size()) - countKernels(program);
}

} // namespace

TEST(Lowering, AddBroadcastsAndPromotesIntToFloat) {
  auto graph = newGraph();
  Value *ints = graph->addInput(TensorMeta(DType::Int32, {2, 3}));
  Value *floats = graph->addInput(TensorMeta(DType::Float32, {3}));
  Value *sum =
      op(*graph, "aten::add.Tensor", {ints, floats}, {{"alpha", Argument(2)}});
  graph->setOutputs({sum});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countKernels(program), 1);
  EXPECT_EQ(program.buffers[program.outputs[0].buffer].kind,
            BufferKind::Tensor);
  EXPECT_EQ(program.buffers[program.outputs[0].buffer].dtype(), DType::Float32);
  Interpreter run(program);
  run.setInput(0, {1, 2, 3, 4, 5, 6});
  run.setInput(1, {0.5, 0.25, -1});
  run.run();
  expectNear(run.output(0), {2, 2.5, 1, 5, 5.5, 4});
}

TEST(Lowering, ReadsTransposedInputThroughItsStrides) {
  auto graph = newGraph();
  // A [3, 2] tensor stored column-major: element (i, j) at j*3 + i.
  Value *x = graph->addInput(TensorMeta(DType::Float32, {3, 2}, {1, 3}));
  Value *y = op(*graph, "aten::mul.Scalar", {x, Argument(10.0)});
  graph->setOutputs({y});
  loop::Program program = lowerGraph(graph);
  Interpreter run(program);
  // Storage order: column 0 then column 1.
  run.setInput(0, {1, 2, 3, 4, 5, 6});
  run.run();
  // The result keeps the input's layout; read it row-major.
  expectNear(run.output(0), {10, 20, 30, 40, 50, 60});
}

TEST(Lowering, ReshapeOfPermutedExpressionDelinearizes) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *doubled = op(*graph, "aten::mul.Scalar", {x, Argument(2.0)});
  Value *permuted =
      op(*graph, "aten::permute", {doubled, std::vector<int64_t>{1, 0}});
  Value *flat =
      op(*graph, "aten::reshape", {permuted, std::vector<int64_t>{6}});
  graph->setOutputs({flat});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countKernels(program), 1);
  Interpreter run(program);
  run.setInput(0, {1, 2, 3, 4, 5, 6});
  run.run();
  expectNear(run.output(0), {2, 8, 4, 10, 6, 12});
}

TEST(Lowering, SumMeanAmaxOverDimsWithKeepdim) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *sum =
      op(*graph, "aten::sum.dim_IntList", {x, std::vector<int64_t>{1}, true});
  Value *mean =
      op(*graph, "aten::mean.dim", {x, std::vector<int64_t>{0}, false});
  Value *amax = op(*graph, "aten::amax", {x, std::vector<int64_t>{-1}, true});
  Value *total = op(*graph, "aten::sum", {x});
  graph->setOutputs({sum, mean, amax, total});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countKernels(program), 4);
  Interpreter run(program);
  run.setInput(0, {1, 5, 3, -4, 0, 2});
  run.run();
  expectNear(run.output(0), {9, -2});
  expectNear(run.output(1), {-1.5, 2.5, 2.5});
  expectNear(run.output(2), {5, 2});
  expectNear(run.output(3), {7});
}

TEST(Lowering, IntegerSumAccumulatesInInt64) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Bool, {4}));
  Value *count = op(*graph, "aten::sum", {x});
  graph->setOutputs({count});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(program.buffers[program.outputs[0].buffer].dtype(), DType::Int64);
  Interpreter run(program);
  run.setInput(0, {1, 0, 1, 1});
  run.run();
  expectNear(run.output(0), {3});
}

TEST(Lowering, ArgmaxAndMaxDimShareAKernel) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *flat = op(*graph, "aten::argmax", {x});
  Value *rows = op(*graph, "aten::argmax", {x, Argument(1), false});
  Node *max = graph->addOp("aten::max.dim", {x, Argument(0), true});
  graph->setOutputs({flat, rows, max->result(0), max->result(1)});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countKernels(program), 3);
  Interpreter run(program);
  run.setInput(0, {1, 7, 3, 9, 0, 3});
  run.run();
  expectNear(run.output(0), {3});
  expectNear(run.output(1), {1, 0});
  expectNear(run.output(2), {9, 7, 3});
  expectNear(run.output(3), {1, 0, 0});
}

TEST(Lowering, VarianceWithCorrection) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 4}));
  Value *var = op(*graph, "aten::var.correction", {x, std::vector<int64_t>{1}},
                  {{"correction", Argument(2)}});
  Value *std =
      op(*graph, "aten::std.dim", {x, std::vector<int64_t>{1}, true, true});
  graph->setOutputs({var, std});
  loop::Program program = lowerGraph(graph);
  Interpreter run(program);
  run.setInput(0, {1, 2, 3, 4, 2, 2, 2, 10});
  run.run();
  // Row 0: mean 2.5, squares 5; row 1: mean 4, squares 48.
  expectNear(run.output(0), {2.5, 24});
  expectNear(run.output(1), {std::sqrt(5.0 / 3), 4});
}

TEST(Lowering, SoftmaxAndLogSoftmaxOfAMatrix) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *soft = op(*graph, "aten::_softmax", {x, Argument(-1), false});
  Value *logSoft = op(*graph, "aten::_log_softmax", {x, Argument(0), false});
  graph->setOutputs({soft, logSoft});
  loop::Program program = lowerGraph(graph);
  std::vector<double> values{1, 2, 3, 0, 0, 1000};
  Interpreter run(program);
  run.setInput(0, values);
  run.run();
  double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0);
  double total = e1 + e2 + e3;
  expectNear(run.output(0), {e1 / total, e2 / total, e3 / total, 0, 0, 1});
  std::vector<double> logExpected(6);
  for (int j = 0; j < 3; ++j) {
    double a = values[j], b = values[3 + j], m = std::max(a, b);
    double lse = m + std::log(std::exp(a - m) + std::exp(b - m));
    logExpected[j] = a - lse;
    logExpected[3 + j] = b - lse;
  }
  expectNear(run.output(1), logExpected, 1e-4);
}

TEST(Lowering, NativeLayerNormReturnsMeanAndRstd) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 2}));
  Value *weight = graph->addInput(TensorMeta(DType::Float32, {2}));
  Value *bias = graph->addInput(TensorMeta(DType::Float32, {2}));
  Node *norm =
      graph->addOp("aten::native_layer_norm",
                   {x, std::vector<int64_t>{2}, weight, bias, Argument(0.0)});
  graph->setOutputs({norm->result(0), norm->result(1), norm->result(2)});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(program.buffers[program.outputs[1].buffer].meta.sizes,
            (Shape{2, 1}));
  Interpreter run(program);
  run.setInput(0, {1, 3, 2, 6});
  run.setInput(1, {2, 1});
  run.setInput(2, {0, 10});
  run.run();
  // Row 0: mean 2, var 1; row 1: mean 4, var 4.
  expectNear(run.output(0), {-2, 11, -2, 11});
  expectNear(run.output(1), {2, 4});
  expectNear(run.output(2), {1, 0.5});
}

TEST(Lowering, GeluBothApproximations) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {3}));
  Value *exact = op(*graph, "aten::gelu", {x});
  Value *tanh = op(*graph, "aten::gelu", {x}, {{"approximate", "tanh"}});
  graph->setOutputs({exact, tanh});
  loop::Program program = lowerGraph(graph);
  Interpreter run(program);
  std::vector<double> values{-1, 0.5, 2};
  run.setInput(0, values);
  run.run();
  std::vector<double> exactExpected, tanhExpected;
  for (double v : values) {
    exactExpected.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    tanhExpected.push_back(
        0.5 * v *
        (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  expectNear(run.output(0), exactExpected);
  expectNear(run.output(1), tanhExpected);
}

TEST(Lowering, WhereAndMaskedFill) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 2}));
  Value *mask = graph->addInput(TensorMeta(DType::Bool, {2}));
  Value *chosen =
      op(*graph, "aten::where.ScalarOther", {mask, x, Argument(-1)});
  Value *filled =
      op(*graph, "aten::masked_fill.Scalar", {x, mask, Argument(7.5)});
  graph->setOutputs({chosen, filled});
  loop::Program program = lowerGraph(graph);
  Interpreter run(program);
  run.setInput(0, {1, 2, 3, 4});
  run.setInput(1, {1, 0});
  run.run();
  expectNear(run.output(0), {1, -1, 3, -1});
  expectNear(run.output(1), {7.5, 2, 7.5, 4});
}

TEST(Lowering, CatAlongColumns) {
  auto graph = newGraph();
  Value *a = graph->addInput(TensorMeta(DType::Float32, {2, 1}));
  Value *b = graph->addInput(TensorMeta(DType::Int64, {2, 2}));
  Value *joined =
      op(*graph, "aten::cat", {std::vector<Value *>{a, b}, Argument(1)});
  graph->setOutputs({joined});
  loop::Program program = lowerGraph(graph);
  Interpreter run(program);
  run.setInput(0, {1, 2});
  run.setInput(1, {3, 4, 5, 6});
  run.run();
  expectNear(run.output(0), {1, 3, 4, 2, 5, 6});
}

TEST(Lowering, OutputThatIsAViewOfAnInputAliasesIt) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *t = op(*graph, "aten::t", {x});
  graph->setOutputs({t, x});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countKernels(program), 0);
  const loop::Buffer &view = program.buffers[program.outputs[0].buffer];
  EXPECT_EQ(view.kind, BufferKind::View);
  EXPECT_EQ(view.base, program.outputs[1].buffer);
  EXPECT_EQ(view.meta.strides, (Shape{1, 3}));
}

TEST(Lowering, OutputsYAndItsTransposeShareABuffer) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *y = op(*graph, "aten::exp", {x});
  Value *t = op(*graph, "aten::t", {y});
  graph->setOutputs({y, t, y});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countKernels(program), 1);
  int64_t base = program.outputs[0].buffer;
  EXPECT_EQ(program.buffers[base].kind, BufferKind::Tensor);
  EXPECT_EQ(program.outputs[2].buffer, base);
  const loop::Buffer &view = program.buffers[program.outputs[1].buffer];
  EXPECT_EQ(view.kind, BufferKind::View);
  EXPECT_EQ(view.base, base);
  Interpreter run(program);
  run.setInput(0, {0, 1, 2, 3, 4, 5});
  run.run();
  expectNear(run.output(1),
             {1, std::exp(3.0), std::exp(1.0), std::exp(4.0), std::exp(2.0),
              std::exp(5.0)},
             1e-4);
}

TEST(Lowering, SmallMatrixProductIsAKernel) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 2}));
  Value *y = graph->addInput(TensorMeta(DType::Float32, {2, 2}));
  Value *shifted = op(*graph, "aten::add.Scalar", {x, Argument(1)});
  Value *product = op(*graph, "aten::mm", {shifted, y});
  Value *out = op(*graph, "aten::relu", {product});
  graph->setOutputs({out});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countExterns(program), 0);
  Interpreter run(program);
  run.setInput(0, {0, 1, 2, -5});
  run.setInput(1, {1, 0, 0, -1});
  run.run();
  // (x + 1) = [[1, 2], [3, -4]]; times diag(1, -1); relu.
  expectNear(run.output(0), {1, 0, 3, 4});
}

TEST(Lowering, ExternReadsARealizedVirtualValue) {
  // A float64 product too large for a kernel calls torch (float32 ones
  // are kiln's GEMMs), which needs x + 1 in a tensor of its own.
  constexpr int64_t m = 2, k = 64, n = 128;
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float64, {m, k}));
  Value *y = graph->addInput(TensorMeta(DType::Float64, {k, n}));
  Value *shifted = op(*graph, "aten::add.Scalar", {x, Argument(1)});
  Value *product = op(*graph, "aten::mm", {shifted, y});
  Value *out = op(*graph, "aten::relu", {product});
  graph->setOutputs({out});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countExterns(program), 1);
  EXPECT_EQ(program.buffers[program.bufferOf.at(shifted)].kind,
            BufferKind::Tensor);
  std::vector<double> a(m * k), b(k * n), expected(m * n, 0);
  for (int64_t i = 0; i < m * k; ++i)
    a[i] = static_cast<double>(i % 7) - 3;
  for (int64_t i = 0; i < k * n; ++i)
    b[i] = static_cast<double>(i % 5) - 2;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p)
        expected[i * n + j] += (a[i * k + p] + 1) * b[p * n + j];
      expected[i * n + j] = std::max(expected[i * n + j], 0.0);
    }
  Interpreter run(program);
  run.setInput(0, a);
  run.setInput(1, b);
  run.run();
  expectNear(run.output(0), expected);
}

TEST(Lowering, MutatingExternIsSeenByLaterReads) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {3}));
  Value *y = graph->addInput(TensorMeta(DType::Float32, {3}));
  Value *before = op(*graph, "aten::mul.Scalar", {x, Argument(2.0)});
  auto schema = std::make_shared<OpSchema>(
      parseSchema("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar "
                  "alpha=1) -> Tensor(a!)"));
  Node *mutation = graph->addExtern(schema, {x, y, Argument(1)}, {x->meta()});
  Value *after = op(*graph, "aten::mul.Scalar", {x, Argument(2.0)});
  Value *sum = op(*graph, "aten::add.Tensor", {before, after});
  graph->setOutputs({sum, mutation->result(0)});
  loop::Program program = lowerGraph(graph);
  // `before` is computed ahead of the mutation.
  ASSERT_GE(program.steps.size(), 2u);
  EXPECT_EQ(program.steps[0].kind, loop::Step::Kind::Kernel);
  EXPECT_EQ(program.steps[1].kind, loop::Step::Kind::Extern);
  Interpreter run(program);
  run.setInput(0, {1, 2, 3});
  run.setInput(1, {10, 10, 10});
  run.run();
  expectNear(run.output(0), {2 + 22, 4 + 24, 6 + 26});
  expectNear(run.output(1), {11, 12, 13});
}

TEST(Lowering, MultiUserValueIsRealizedAsTemporary) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {4}));
  Value *e = op(*graph, "aten::exp", {x});
  Value *a = op(*graph, "aten::sin", {e});
  Value *b = op(*graph, "aten::cos", {e});
  Value *cast = op(*graph, "aten::_to_copy", {x}, {{"dtype", DType::Float64}});
  Value *c = op(*graph, "aten::add.Tensor", {cast, cast});
  Value *d = op(*graph, "aten::mul.Tensor", {cast, a});
  graph->setOutputs({a, b, c, d});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(program.buffers[program.bufferOf.at(e)].kind,
            BufferKind::Temporary);
  EXPECT_FALSE(program.bufferOf.count(cast)); // cheap: recomputed
  EXPECT_EQ(countKernels(program), 5);
}

TEST(Lowering, PrintsAStableProgram) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}), "x");
  Value *y = op(*graph, "aten::neg", {x});
  Value *s =
      op(*graph, "aten::sum.dim_IntList", {y, std::vector<int64_t>{1}, false});
  graph->setOutputs({s, Argument(3)});
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(program.str(),
            "buf0 x: input f32[2, 3] (input 0)\n"
            "buf1 reduction1: tensor f32[2]\n"
            "kernel kernel_sum_0 [v0 < 2]  # aten::sum.dim_IntList\n"
            "  loop [v1 < 3]\n"
            "    red0 = sum(neg(load(buf0, ((v0*3) + v1))))\n"
            "  loop []\n"
            "    buf1[v0] = red0\n"
            "outputs: buf1 constant\n");
}

TEST(Lowering, NodesOnAnotherDeviceRunAsExterns) {
  // Lowered for the CPU: the GPU tensor's node is a torch call, the CPU
  // tensor's a kernel.
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2}));
  Value *y = graph->addInput(
      TensorMeta(DType::Float32, {2}, Device{DeviceType::CUDA, 0}));
  graph->setOutputs(
      {op(*graph, "aten::neg", {x}), op(*graph, "aten::neg", {y})});
  loop::Program program = lowerGraph(graph);
  int kernels = 0, externs = 0;
  for (const loop::Step &step : program.steps)
    (step.kind == loop::Step::Kind::Kernel ? kernels : externs) += 1;
  EXPECT_EQ(kernels, 1);
  EXPECT_EQ(externs, 1);
}

TEST(Lowering, TableNamesOnlyRegisteredOps) {
  const OpRegistry &registry = OpRegistry::global();
  for (const auto &[name, function] : lowering::loweringTable())
    EXPECT_NE(registry.find(name), nullptr) << name;
}

TEST(Lowering, RepresentativeCallsLowerOrBecomeExterns) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *i = graph->addInput(TensorMeta(DType::Int64, {2, 3}));
  std::vector<Value *> outputs;
  const OpRegistry &registry = OpRegistry::global();
  int tried = 0;
  for (const OpInfo *info : registry.all()) {
    const OpSchema &schema = *info->schema;
    // A call with the tensors first and defaults for the rest, where the
    // schema allows one.
    std::vector<Argument> positional;
    bool possible = true;
    for (const SchemaArgument &argument : schema.arguments) {
      if (argument.defaultValue || argument.kwargOnly)
        break;
      if (argument.type.base == SchemaType::Base::Tensor &&
          !argument.type.isList)
        positional.push_back(
            argument.name == "indices" || argument.name == "index" ? i : x);
      else
        possible = false;
    }
    if (!possible || schema.isMutable())
      continue;
    try {
      Node *node = graph->addOp(schema.qualifiedName(), positional);
      for (const auto &result : node->results())
        outputs.push_back(result.get());
      ++tried;
    } catch (const Error &) {
      // The meta function refuses this call (wrong dtype or shape).
    }
  }
  std::vector<Argument> results(outputs.begin(), outputs.end());
  graph->setOutputs(results);
  EXPECT_GT(tried, 50);
  loop::Program program;
  EXPECT_NO_THROW(program = lowerGraph(graph));
  EXPECT_EQ(program.outputs.size(), outputs.size());
}

TEST(Lowering, RearrangingAndCreationOpsMatchHandComputedValues) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *negated = op(*graph, "aten::neg", {x});
  std::vector<Argument> outputs{
      op(*graph, "aten::tril", {x}),
      op(*graph, "aten::constant_pad_nd",
         {x, std::vector<int64_t>{1, 0}, Argument(9)}),
      op(*graph, "aten::flip", {x, std::vector<int64_t>{1}}),
      op(*graph, "aten::roll",
         {x, std::vector<int64_t>{1}, std::vector<int64_t>{1}}),
      op(*graph, "aten::repeat", {x, std::vector<int64_t>{1, 2}}),
      op(*graph, "aten::stack",
         {std::vector<Value *>{x, negated}, Argument(2)}),
      op(*graph, "aten::slice.Tensor",
         {negated, Argument(1), Argument(1), Argument::none(), Argument(1)}),
      op(*graph, "aten::select.int", {negated, Argument(0), Argument(-1)}),
      op(*graph, "aten::arange.start_step",
         {Argument(1), Argument(7), Argument(2)}),
      op(*graph, "aten::div.Scalar_mode", {x, Argument(2)},
         {{"rounding_mode", "floor"}}),
      op(*graph, "aten::clamp", {x, Argument(-1), Argument(2)}),
  };
  graph->setOutputs(outputs);
  loop::Program program = lowerGraph(graph);
  EXPECT_EQ(countExterns(program), 0);
  Interpreter run(program);
  run.setInput(0, {1, -2, 3, -4, 5, 6});
  run.run();
  expectNear(run.output(0), {1, 0, 0, -4, 5, 0});
  expectNear(run.output(1), {9, 1, -2, 3, 9, -4, 5, 6});
  expectNear(run.output(2), {3, -2, 1, 6, 5, -4});
  expectNear(run.output(3), {3, 1, -2, 6, -4, 5});
  expectNear(run.output(4), {1, -2, 3, 1, -2, 3, -4, 5, 6, -4, 5, 6});
  expectNear(run.output(5), {1, -1, -2, 2, 3, -3, -4, 4, 5, -5, 6, -6});
  expectNear(run.output(6), {2, -3, -5, -6});
  expectNear(run.output(7), {4, -5, -6});
  expectNear(run.output(8), {1, 3, 5});
  expectNear(run.output(9), {0, -1, 1, -2, 2, 3});
  expectNear(run.output(10), {1, -1, 2, -1, 2, 2});
}

TEST(Lowering, LogsumexpNormsAndVarMean) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 3}));
  Value *lse =
      op(*graph, "aten::logsumexp", {x, std::vector<int64_t>{1}, false});
  Value *norm = op(*graph, "aten::linalg_vector_norm", {x});
  Node *varMean =
      graph->addOp("aten::var_mean.correction", {x, std::vector<int64_t>{0}});
  graph->setOutputs({lse, norm, varMean->result(0), varMean->result(1)});
  loop::Program program = lowerGraph(graph);
  Interpreter run(program);
  std::vector<double> values{1, -2, 3, -4, 5, 6};
  run.setInput(0, values);
  run.run();
  auto logsumexp = [](double a, double b, double c) {
    return std::log(std::exp(a) + std::exp(b) + std::exp(c));
  };
  expectNear(run.output(0), {logsumexp(1, -2, 3), logsumexp(-4, 5, 6)}, 1e-4);
  expectNear(run.output(1), {std::sqrt(91.0)});
  expectNear(run.output(2), {12.5, 24.5, 4.5});
  expectNear(run.output(3), {-1.5, 1.5, 4.5});
}

TEST(Lowering, GroupNormAndBatchNormInference) {
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {1, 2, 2}));
  Value *scale = graph->addInput(TensorMeta(DType::Float32, {2}));
  Value *shift = graph->addInput(TensorMeta(DType::Float32, {2}));
  Node *group = graph->addOp("aten::native_group_norm",
                             {x, scale, shift, Argument(1), Argument(2),
                              Argument(2), Argument(1), Argument(0.0)});
  Node *batch = graph->addOp(
      "aten::_native_batch_norm_legit_no_training",
      {x, scale, shift, shift, scale, Argument(0.1), Argument(0.0)});
  graph->setOutputs({group->result(0), group->result(1), batch->result(0)});
  loop::Program program = lowerGraph(graph);
  Interpreter run(program);
  run.setInput(0, {1, 3, 5, 7});
  run.setInput(1, {1, 4});
  run.setInput(2, {0, 1});
  run.run();
  // One group over all four: mean 4, var 5.
  double r = 1 / std::sqrt(5.0);
  expectNear(run.output(0), {-3 * r, -1 * r, 4 * r + 1, 12 * r + 1});
  expectNear(run.output(1), {4});
  // Channel c: (x - shift[c]) / sqrt(scale[c]) * scale[c] + shift[c].
  expectNear(run.output(2),
             {1, 3, (5 - 1) / 2.0 * 4 + 1, (7 - 1) / 2.0 * 4 + 1});
}
