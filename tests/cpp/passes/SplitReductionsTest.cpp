// Split reductions: kernels of few points whose first loop reduces many
// elements become partials and their combination, and compute what the
// unsplit program computes (checked with the loop-IR interpreter).
// Depends on passes/Scheduler.h, passes/Lowering.h,
// tests/cpp/passes/LoopInterpreter.h and gtest.
#include "passes/Scheduler.h"

#include "ir/Graph.h"
#include "passes/Lowering.h"
#include "tests/cpp/passes/LoopInterpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace kiln;
using kiln::testing::Interpreter;
using loop::Step;

namespace {

Value *op(Graph &graph, std::string_view name,
          const std::vector<Argument> &arguments) {
  return graph.addOp(name, arguments)->result(0);
}

loop::Program planned(Shape sizes,
                      const std::function<Value *(Graph &, Value *)> &body) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, sizes));
  graph->setOutputs({body(*graph, x)});
  loop::Program program = lowerGraph(std::move(graph));
  simplifyIndices(program);
  fuseKernels(program);
  chooseLoopOrder(program);
  simplifyIndices(program);
  fuseKernels(program);
  return program;
}

size_t kernelCount(const loop::Program &program) {
  size_t count = 0;
  for (const Step &step : program.steps)
    count += step.kind == Step::Kind::Kernel;
  return count;
}

// Runs `program` on x = sin(i) * 3 + (i % 7) (i row-major), returns output 0.
std::vector<double> run(const loop::Program &program, int64_t elements) {
  std::vector<double> x(elements);
  for (int64_t i = 0; i < elements; ++i)
    x[i] = std::sin(double(i)) * 3 + double(i % 7);
  Interpreter interpreter(program);
  interpreter.setInput(0, x);
  interpreter.run();
  return interpreter.output(0);
}

// Kernels of fewer than 8 points reducing 128 elements or more, split for
// about 16 (chunk, point) points of at least 64 elements each.
int64_t splitSmall(loop::Program &program) {
  return splitReductions(program, [](const loop::Kernel &kernel) -> int64_t {
    if (kernel.loops.empty() || !kernel.loops.front().ranges.isStatic() ||
        !kernel.outerRanges.isStatic())
      return 1;
    int64_t points = numelOf(kernel.outerRanges.constants());
    int64_t work = numelOf(kernel.loops.front().ranges.constants());
    if (points == 0 || points >= 8 || work < 128)
      return 1;
    return reductionChunks(kernel, (16 + points - 1) / points, 64);
  });
}

// Splits a copy of `build`'s program, checks the kernel count grew by the
// splits expected, and that both programs give the same values.
void expectSameAfterSplit(Shape sizes,
                          const std::function<Value *(Graph &, Value *)> &body,
                          int64_t splits) {
  loop::Program whole = planned(sizes, body);
  loop::Program parts = planned(sizes, body);
  ASSERT_EQ(splitSmall(parts), splits) << whole.str();
  EXPECT_EQ(kernelCount(parts), kernelCount(whole) + splits);
  planMemory(whole);
  planMemory(parts);
  int64_t elements = 1;
  for (int64_t size : sizes)
    elements *= size;
  std::vector<double> expected = run(whole, elements);
  std::vector<double> actual = run(parts, elements);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-4 * (1 + std::fabs(expected[i])))
        << "element " << i << "\n"
        << parts.str();
}

} // namespace

TEST(SplitReductions, AFullSumBecomesPartialsAndTheirSum) {
  expectSameAfterSplit(
      {40, 30}, [](Graph &g, Value *x) { return op(g, "aten::sum", {x}); }, 1);
  loop::Program program = planned(
      {40, 30}, [](Graph &g, Value *x) { return op(g, "aten::sum", {x}); });
  splitSmall(program);
  // 16 chunks of the 1200 elements: the partials kernel has 16 points.
  const loop::Kernel &partials = program.steps[0].kernel;
  EXPECT_EQ(partials.outerRanges.constants(), Shape({16}));
  EXPECT_EQ(program.steps[1].kernel.loops[0].ranges.constants(), Shape({16}));
}

TEST(SplitReductions, MeanMaxAndFewRowsKeepTheirEpilogues) {
  // mean divides after the combination; three rows of 400 get 5 chunks.
  expectSameAfterSplit(
      {3, 400},
      [](Graph &g, Value *x) {
        return op(g, "aten::mean.dim", {x, std::vector<int64_t>{1}, false});
      },
      1);
  expectSameAfterSplit(
      {3, 400},
      [](Graph &g, Value *x) {
        Value *m = op(g, "aten::amax", {x, std::vector<int64_t>{1}, true});
        return op(g, "aten::mul.Scalar", {m, Argument(2.0)});
      },
      1);
  // A softmax over few long rows: its first loop (the max) splits, the sum
  // and the stores stay in the combining kernel.
  expectSameAfterSplit(
      {2, 512},
      [](Graph &g, Value *x) {
        return op(g, "aten::_softmax", {x, Argument(-1), Argument(false)});
      },
      1);
  // A sum over a strided dim (a column sum of few columns).
  expectSameAfterSplit(
      {600, 3},
      [](Graph &g, Value *x) {
        return op(g, "aten::sum.dim_IntList",
                  {x, std::vector<int64_t>{0}, false});
      },
      1);
}

TEST(SplitReductions, ManyPointsShortRowsAndArgMaxStayWhole) {
  // Many points: every block already has a point.
  expectSameAfterSplit(
      {64, 400},
      [](Graph &g, Value *x) {
        return op(g, "aten::sum.dim_IntList",
                  {x, std::vector<int64_t>{1}, false});
      },
      0);
  // Too few elements for two chunks of 64.
  expectSameAfterSplit(
      {2, 60}, [](Graph &g, Value *x) { return op(g, "aten::sum", {x}); }, 0);
  // ArgMax's partials would need positions.
  expectSameAfterSplit(
      {2, 1000},
      [](Graph &g, Value *x) {
        return op(g, "aten::argmax", {x, Argument(int64_t(1)), false});
      },
      0);
}
