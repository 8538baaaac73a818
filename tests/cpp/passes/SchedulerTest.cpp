// The scheduler's decisions: what fuses into one kernel, what never fuses
// (across externs, different domains), loop order and coalescing, and the
// reuse of workspace memory.
// Depends on passes/Lowering.h, passes/Scheduler.h,
// tests/cpp/passes/LoopInterpreter.h and gtest.
#include "passes/Scheduler.h"

#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/ops/MetaUtils.h"
#include "passes/Lowering.h"
#include "tests/cpp/passes/LoopInterpreter.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace kiln;
using loop::BufferKind;
using loop::Step;

namespace {

Value *op(Graph &graph, std::string_view name,
          const std::vector<Argument> &arguments) {
  return graph.addOp(name, arguments)->result(0);
}

loop::Program schedule(std::shared_ptr<Graph> graph) {
  loop::Program program = lowerGraph(std::move(graph));
  fuseKernels(program, /*shareReductionPasses=*/true);
  chooseLoopOrder(program);
  planMemory(program);
  return program;
}

// Appends a step running `kernel` with `body` as its one loop.
void appendKernel(loop::Program &program, loop::Kernel kernel,
                  loop::Loop body) {
  kernel.loops.push_back(std::move(body));
  loop::Step step;
  step.kernel = std::move(kernel);
  program.steps.push_back(std::move(step));
}

std::vector<const loop::Kernel *> kernelsOf(const loop::Program &program) {
  std::vector<const loop::Kernel *> kernels;
  for (const Step &step : program.steps)
    if (step.kind == Step::Kind::Kernel)
      kernels.push_back(&step.kernel);
  return kernels;
}

std::string stepKinds(const loop::Program &program) {
  std::string kinds;
  for (const Step &step : program.steps)
    kinds += step.kind == Step::Kind::Kernel ? "K" : "E";
  return kinds;
}

} // namespace

TEST(Scheduler, PointwiseChainIsOneContiguousLoop) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {64, 32}));
  Value *y = graph->addInput(TensorMeta(DType::Float32, {64, 32}));
  Value *sum = op(*graph, "aten::add.Tensor", {x, y});
  Value *exp = op(*graph, "aten::exp", {sum});
  // `exp` has two readers: realized, then forwarded inside the one kernel.
  Value *product = op(*graph, "aten::mul.Tensor", {exp, exp});
  Value *out = op(*graph, "aten::tanh",
                  {op(*graph, "aten::sub.Tensor", {product, exp})});
  graph->setOutputs({out});
  loop::Program program = schedule(graph);
  auto kernels = kernelsOf(program);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0]->loops.size(), 1u);
  // Both dims walk memory in order: one loop of 64*32 points.
  EXPECT_EQ(kernels[0]->outerRanges.constants(),
            std::vector<int64_t>({64 * 32}));
  // The temporary is gone: only the output is stored.
  EXPECT_EQ(kernels[0]->loops[0].stores.size(), 1u);
  EXPECT_EQ(program.workspaceBytes, 0);
}

TEST(Scheduler, SoftmaxIsOneKernelWithThreeLoops) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {16, 100}));
  Value *soft = op(*graph, "aten::_softmax", {x, Argument(-1), false});
  graph->setOutputs({soft});
  loop::Program program = schedule(graph);
  auto kernels = kernelsOf(program);
  ASSERT_EQ(kernels.size(), 1u) << program.str();
  EXPECT_EQ(kernels[0]->outerRanges.constants(), std::vector<int64_t>({16}));
  // max, sum of exp, then the normalised store: per row, no temporaries.
  ASSERT_EQ(kernels[0]->loops.size(), 3u) << program.str();
  EXPECT_EQ(kernels[0]->reductionCount(), 2);
  EXPECT_EQ(program.workspaceBytes, 0);
}

// Several statistics of the same rows: mean, amax and sum read each row in
// one pass (sum is mean's sum), the variance, which reads the mean, in a
// second; four passes without the merge.
TEST(Scheduler, IndependentReductionsOfTheSameRowsShareOnePass) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {6, 40}));
  std::vector<int64_t> dim{1};
  Value *mean = op(*graph, "aten::mean.dim", {x, Argument(dim), true});
  Value *centered = op(*graph, "aten::sub.Tensor", {x, mean});
  Value *variance = op(*graph, "aten::mean.dim",
                       {op(*graph, "aten::mul.Tensor", {centered, centered}),
                        Argument(dim), false});
  Value *amax = op(*graph, "aten::amax", {x, Argument(dim), false});
  Value *sum = op(*graph, "aten::sum.dim_IntList", {x, Argument(dim), false});
  graph->setOutputs({mean, variance, amax, sum});
  loop::Program program = schedule(graph);
  auto kernels = kernelsOf(program);
  ASSERT_EQ(kernels.size(), 1u) << program.str();
  std::vector<size_t> reductionsByPass;
  for (const loop::Loop &loop : kernels[0]->loops)
    if (!loop.ranges.empty())
      reductionsByPass.push_back(loop.reductions.size());
  EXPECT_EQ(reductionsByPass, (std::vector<size_t>{2, 1})) << program.str();

  std::vector<double> values(6 * 40);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = double(int64_t(i * 37 % 101) - 50) / 8;
  kiln::testing::Interpreter run(program);
  run.setInput(0, values);
  run.run();
  for (int64_t row = 0; row < 6; ++row) {
    double total = 0, largest = -1e30, squares = 0;
    for (int64_t column = 0; column < 40; ++column) {
      total += values[row * 40 + column];
      largest = std::max(largest, values[row * 40 + column]);
    }
    for (int64_t column = 0; column < 40; ++column)
      squares += std::pow(values[row * 40 + column] - total / 40, 2);
    EXPECT_NEAR(run.output(0)[row], total / 40, 1e-5) << row;
    EXPECT_NEAR(run.output(1)[row], squares / 40, 1e-4) << row;
    EXPECT_EQ(run.output(2)[row], largest) << row;
    EXPECT_NEAR(run.output(3)[row], total, 1e-4) << row;
  }
}

// A reduction that reads what a loop between stores is not moved before it.
TEST(Scheduler, AReductionStaysAfterWhatItReads) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {4, 32}));
  Value *soft = op(*graph, "aten::_softmax", {x, Argument(-1), false});
  std::vector<int64_t> dim{1};
  Value *peak = op(*graph, "aten::amax", {soft, Argument(dim), false});
  graph->setOutputs({soft, peak});
  loop::Program program = schedule(graph);
  std::vector<double> values(4 * 32);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = double(int64_t(i * 13 % 29)) / 4;
  kiln::testing::Interpreter run(program);
  run.setInput(0, values);
  run.run();
  std::vector<double> soft0 = run.output(0);
  for (int64_t row = 0; row < 4; ++row) {
    double largest = 0;
    for (int64_t column = 0; column < 32; ++column)
      largest = std::max(largest, soft0[row * 32 + column]);
    EXPECT_NEAR(run.output(1)[row], largest, 1e-6) << program.str();
  }
}

TEST(Scheduler, LayerNormIsOneKernel) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {8, 64}));
  Value *weight = graph->addInput(TensorMeta(DType::Float32, {64}));
  Value *bias = graph->addInput(TensorMeta(DType::Float32, {64}));
  Node *norm =
      graph->addOp("aten::native_layer_norm",
                   {x, Argument(std::vector<int64_t>{64}), weight, bias, 1e-5});
  graph->setOutputs({norm->result(0)});
  loop::Program program = schedule(graph);
  EXPECT_EQ(kernelsOf(program).size(), 1u) << program.str();
}

TEST(Scheduler, ProductWithoutEpilogueWritesItsResult) {
  // A float32 product is a contraction kernel (a GEMM on the CPU); where
  // its result is an output as it is, or a view of one, the contraction
  // stores there itself instead of into a temporary that a kernel copies.
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 32, 64}));
  Value *w = graph->addInput(TensorMeta(DType::Float32, {64, 48}));
  Value *flat =
      op(*graph, "aten::view", {x, Argument(std::vector<int64_t>{64, 64})});
  Value *product = op(*graph, "aten::mm", {flat, w});
  Value *shaped = op(*graph, "aten::view",
                     {product, Argument(std::vector<int64_t>{2, 32, 48})});
  graph->setOutputs({product, shaped});
  loop::Program program = schedule(graph);
  ASSERT_EQ(stepKinds(program), "K") << program.str();
  const loop::Kernel &kernel = program.steps[0].kernel;
  EXPECT_TRUE(kernel.contraction);
  EXPECT_EQ(kernel.loops.back().stores.at(0).buffer,
            program.outputs.at(0).buffer)
      << program.str();
}

namespace {

/// A hand-built program of 8 x 8 float32 buffers around one contraction
/// kernel, temporary = a @ b, for fusion tests.
struct ProductProgram {
  loop::Program program;
  int64_t a = -1, b = -1, temporary = -1;
  const loop::Expr *at = nullptr; // (v0, v1) row-major

  ProductProgram() {
    a = buffer(BufferKind::Input);
    b = buffer(BufferKind::Input);
    temporary = buffer(BufferKind::Temporary);
    loop::ExprContext &e = *program.exprs;
    const loop::Expr *v0 = e.var(0), *v1 = e.var(1), *v2 = e.var(2);
    at = e.add(e.mul(v0, e.integer(8)), v1);
    Step product;
    product.kernel.name = "mm";
    product.kernel.outerRanges = {8, 8};
    product.kernel.contraction = true;
    loop::Loop sum;
    sum.ranges = {8};
    sum.reductions.push_back(
        {loop::ReduceOp::Sum,
         e.mul(e.load(a, DType::Float32, e.add(e.mul(v0, e.integer(8)), v2)),
               e.load(b, DType::Float32, e.add(e.mul(v2, e.integer(8)), v1)))});
    loop::Loop store;
    store.stores.push_back(
        {temporary, at, e.reductionValue(0, DType::Float32)});
    product.kernel.loops = {sum, store};
    program.steps.push_back(product);
  }
  int64_t buffer(BufferKind kind) {
    loop::Buffer b;
    b.kind = kind;
    b.meta = TensorMeta(DType::Float32, {8, 8});
    if (kind == BufferKind::Input)
      b.graphInput = program.buffers.size();
    return program.addBuffer(b);
  }
  /// A pointwise kernel over the product's points storing `value` at
  /// `result[at]`.
  void addPointwise(int64_t result, const loop::Expr *value) {
    Step step;
    step.kernel.name = "pointwise";
    step.kernel.outerRanges = {8, 8};
    loop::Loop loop;
    loop.stores.push_back({result, at, value});
    step.kernel.loops = {loop};
    program.steps.push_back(step);
  }
};

} // namespace

TEST(Scheduler, ProductNeverStoresIntoAnOperand) {
  // A contraction over [8, 8] into a temporary, copied into `result`: into
  // a fresh tensor the contraction stores itself; into a view of its own
  // operand A the copy stays (a GEMM must not write what it reads).
  for (bool intoOperand : {false, true}) {
    ProductProgram test;
    loop::Program &program = test.program;
    int64_t result =
        test.buffer(intoOperand ? BufferKind::View : BufferKind::Tensor);
    if (intoOperand)
      program.buffers[result].base = test.a;
    test.addPointwise(
        result, program.exprs->load(test.temporary, DType::Float32, test.at));
    program.outputs.push_back({result, {}});
    fuseKernels(program);
    ASSERT_EQ(program.steps.size(), intoOperand ? 2u : 1u) << program.str();
    EXPECT_EQ(program.steps[0].kernel.loops.back().stores.at(0).buffer,
              intoOperand ? test.temporary : result);
  }
}

TEST(Scheduler, PointwiseAfterAProductIsItsEpilogue) {
  // relu(a @ b) + r: the pointwise kernel reading the product's temporary
  // at the points it was written becomes the contraction's stored value
  // (the GEMM computes it as it writes C), also a costly one (exp, which the
  // GEMM applies to its stored tile). Not where it reads the product
  // elsewhere (a transpose), reads the product twice, or reads what it
  // writes (C holds partial sums until the last k block). A
  // kernel between them that touches nothing of the product's runs before
  // it (Unrelated); one that writes what the product reads stays after it
  // (Clobbers), and the product keeps its temporary.
  enum Case {
    Fused,
    Transposed,
    ReadTwice,
    ReadsResult,
    Costly,
    Unrelated,
    Clobbers
  };
  for (Case c : {Fused, Transposed, ReadTwice, ReadsResult, Costly, Unrelated,
                 Clobbers}) {
    ProductProgram test;
    loop::Program &program = test.program;
    loop::ExprContext &e = *program.exprs;
    int64_t r = test.buffer(BufferKind::Input);
    int64_t result = c == ReadsResult ? r : test.buffer(BufferKind::Tensor);
    if (c == Clobbers) { // the kernel between writes a view of operand a
      program.buffers[result].kind = BufferKind::View;
      program.buffers[result].base = test.a;
    }
    const loop::Expr *swapped = e.add(e.mul(e.var(1), e.integer(8)), e.var(0));
    const loop::Expr *value = e.load(test.temporary, DType::Float32,
                                     c == Transposed ? swapped : test.at);
    if (c == Costly)
      value = e.unary(loop::UnaryOp::Exp, value);
    bool between = c == Unrelated || c == Clobbers;
    if (between) // the next kernel reads only r; a later one the product
      value = e.load(r, DType::Float32, test.at);
    value = e.add(
        e.binary(loop::BinaryOp::Max, value, e.constant(0, DType::Float32)),
        e.load(r, DType::Float32, test.at));
    test.addPointwise(result, value);
    int64_t again = -1;
    if (c == ReadTwice || between) {
      again = test.buffer(BufferKind::Tensor);
      test.addPointwise(again, e.load(test.temporary, DType::Float32, test.at));
      program.outputs.push_back({again, {}});
    }
    program.outputs.push_back({result, {}});
    fuseKernels(program);
    // (The two kernels after the product merge with each other.)
    size_t steps = c == Fused || c == Costly ? 1u : 2u;
    ASSERT_EQ(program.steps.size(), steps) << c << "\n" << program.str();
    size_t product = c == Unrelated ? 1 : 0;
    const loop::Kernel &contraction = program.steps[product].kernel;
    const loop::Store &stored = contraction.loops.back().stores[0];
    EXPECT_TRUE(contraction.contraction) << c << "\n" << program.str();
    if (c == Fused) {
      EXPECT_EQ(stored.buffer, result);
      EXPECT_EQ(loop::exprToString(stored.value),
                "add(max(red0, 0:f32), load(buf3, ((v0*8) + v1)))");
    } else if (c == Costly) {
      EXPECT_EQ(stored.buffer, result);
      EXPECT_EQ(loop::exprToString(stored.value),
                "add(max(exp(red0), 0:f32), load(buf3, ((v0*8) + v1)))");
    } else if (c == Unrelated) {
      EXPECT_FALSE(program.steps[0].kernel.contraction);
      EXPECT_EQ(stored.buffer, again) << program.str();
    } else {
      EXPECT_EQ(stored.buffer, test.temporary);
    }
  }
}

TEST(Scheduler, NeverFusesAcrossAnExtern) {
  auto graph = std::make_shared<Graph>();
  // A float64 product large enough to call torch's BLAS.
  Value *x = graph->addInput(TensorMeta(DType::Float64, {64, 32}));
  Value *w = graph->addInput(TensorMeta(DType::Float64, {32, 16}));
  Value *a = op(*graph, "aten::exp", {x});
  Value *d = op(*graph, "aten::sigmoid", {x});
  Value *b = op(*graph, "aten::mm", {a, w});
  Value *c = op(*graph, "aten::relu", {b});
  graph->setOutputs({c, d});
  loop::Program program = schedule(graph);
  // exp feeds the extern (a torch tensor), mm runs, relu after it; sigmoid
  // is an output in its own right and fuses with exp (same domain).
  ASSERT_EQ(stepKinds(program), "KEK") << program.str();
  EXPECT_EQ(program.buffers[program.steps[1].results.at(0)].kind,
            BufferKind::Tensor);
}

TEST(Scheduler, ReductionsOverDifferentDomainsStaySeparate) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {8, 16}));
  Value *rows = op(*graph, "aten::sum.dim_IntList",
                   {x, Argument(std::vector<int64_t>{1})});
  Value *columns = op(*graph, "aten::sum.dim_IntList",
                      {x, Argument(std::vector<int64_t>{0})});
  graph->setOutputs({rows, columns});
  loop::Program program = schedule(graph);
  EXPECT_EQ(kernelsOf(program).size(), 2u) << program.str();
}

TEST(Scheduler, EpilogueOfAReductionFusesIntoItsKernel) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {128, 32}));
  Value *mean = op(*graph, "aten::mean.dim",
                   {x, Argument(std::vector<int64_t>{1}), true});
  Value *centered = op(*graph, "aten::sub.Tensor", {x, mean});
  graph->setOutputs({centered});
  loop::Program program = schedule(graph);
  auto kernels = kernelsOf(program);
  ASSERT_EQ(kernels.size(), 1u) << program.str();
  EXPECT_EQ(program.workspaceBytes, 0);
}

TEST(Scheduler, TransposedStoreWalksTheOutputInOrder) {
  auto graph = std::make_shared<Graph>();
  // The output of exp keeps the input's (transposed) layout, so the
  // innermost loop must be the input's first dimension.
  Value *x = graph->addInput(TensorMeta(DType::Float32, {32, 8}, {1, 32}));
  graph->setOutputs({op(*graph, "aten::exp", {x})});
  loop::Program program = schedule(graph);
  auto kernels = kernelsOf(program);
  ASSERT_EQ(kernels.size(), 1u);
  const loop::Store &store = kernels[0]->loops[0].stores[0];
  int64_t last = static_cast<int64_t>(kernels[0]->outerRanges.size()) - 1;
  EXPECT_EQ(loop::affineCoefficient(store.index, last), 1) << program.str();
}

TEST(Scheduler, MemoryPlanningReusesDeadTemporaries) {
  loop::Program program;
  loop::ExprContext &e = *program.exprs;
  auto buffer = [&](BufferKind kind) {
    loop::Buffer b;
    b.kind = kind;
    b.meta = TensorMeta(DType::Float32, {256});
    if (kind == BufferKind::Input)
      b.graphInput = 0;
    return program.addBuffer(b);
  };
  int64_t input = buffer(BufferKind::Input);
  int64_t first = buffer(BufferKind::Temporary);
  int64_t second = buffer(BufferKind::Temporary);
  int64_t third = buffer(BufferKind::Temporary);
  int64_t output = buffer(BufferKind::Tensor);
  auto copyKernel = [&](int64_t from, int64_t to) {
    Step step;
    step.kernel.name = "copy";
    step.kernel.outerRanges = {256};
    loop::Loop loop;
    loop.stores.push_back(
        {to, e.var(0), e.load(from, DType::Float32, e.var(0))});
    step.kernel.loops.push_back(loop);
    program.steps.push_back(step);
  };
  copyKernel(input, first);
  copyKernel(first, second);
  copyKernel(second, third); // `first` is dead: `third` takes its bytes
  copyKernel(third, output);
  planMemory(program);
  EXPECT_EQ(program.buffers[third].workspaceOffset,
            program.buffers[first].workspaceOffset);
  EXPECT_NE(program.buffers[second].workspaceOffset,
            program.buffers[first].workspaceOffset);
  EXPECT_EQ(program.workspaceBytes, 2 * 1024);
}

TEST(Scheduler, IndexSimplificationUsesVariableRanges) {
  loop::Program program;
  loop::ExprContext &e = *program.exprs;
  const loop::Expr *v0 = e.var(0), *v1 = e.var(1), *v2 = e.var(2);
  // v0*65536 + v1*256 + v2 with v0 < 16, v1 < 256, v2 < 256.
  const loop::Expr *linear =
      e.add(e.add(e.mul(v0, e.integer(65536)), e.mul(v1, e.integer(256))), v2);
  loop::Kernel kernel;
  kernel.outerRanges = {16, 256, 256};
  loop::Loop body;
  int64_t out = 0;
  auto store = [&](const loop::Expr *index) {
    body.stores.push_back({out, index, e.cast(index, DType::Float32)});
  };
  store(e.mod(linear, 256));                      // v2
  store(e.floorDiv(linear, 256));                 // v0*256 + v1
  store(e.mod(e.floorDiv(linear, 256), 256));     // v1
  store(e.floorDiv(linear, 524288));              // v0 // 8
  store(e.mod(e.add(linear, e.integer(3)), 256)); // not simplifiable
  appendKernel(program, kernel, body);
  simplifyIndices(program);
  const auto &stores = program.steps[0].kernel.loops[0].stores;
  EXPECT_EQ(stores[0].index, v2);
  EXPECT_EQ(loop::affineCoefficient(stores[1].index, 0), 256);
  EXPECT_EQ(loop::affineCoefficient(stores[1].index, 1), 1);
  EXPECT_EQ(stores[2].index, v1);
  EXPECT_EQ(stores[3].index, e.floorDiv(v0, 8));
  EXPECT_FALSE(loop::affineCoefficient(stores[4].index, 2).has_value());
}

TEST(Scheduler, IndexSimplificationRecombinesQuotientAndRemainder) {
  loop::Program program;
  loop::ExprContext &e = *program.exprs;
  const loop::Expr *v0 = e.var(0), *v1 = e.var(1);
  // A [16, 256] buffer read through a [2, 8, 256] view of it:
  // floordiv(v0, 8)*2048 + mod(v0, 8)*256 + v1 is v0*256 + v1.
  auto viewed = [&](int64_t scale) {
    return e.add(e.add(e.mul(e.floorDiv(v0, 8), e.integer(2048 * scale)),
                       e.mul(e.mod(v0, 8), e.integer(256 * scale))),
                 v1);
  };
  loop::Kernel kernel;
  kernel.outerRanges = {16, 256};
  loop::Loop body;
  auto store = [&](const loop::Expr *index) {
    body.stores.push_back({0, index, e.cast(index, DType::Float32)});
  };
  store(viewed(1));
  // Coefficients that do not pair up stay as they are.
  store(e.add(e.add(e.mul(e.floorDiv(v0, 8), e.integer(1000)),
                    e.mul(e.mod(v0, 8), e.integer(256))),
              v1));
  appendKernel(program, kernel, body);
  simplifyIndices(program);
  const auto &stores = program.steps[0].kernel.loops[0].stores;
  EXPECT_EQ(stores[0].index, e.add(e.mul(v0, e.integer(256)), v1));
  EXPECT_FALSE(loop::affineCoefficient(stores[1].index, 0).has_value());
}

TEST(Scheduler, IndexSimplificationRecombinesNestedDigits) {
  loop::Program program;
  loop::ExprContext &e = *program.exprs;
  const loop::Expr *v0 = e.var(0), *v1 = e.var(1);
  // A group norm's group of 8 channels of 32x32 pixels, delinearised over
  // [8, 32, 32] and read from a contiguous [64, 8192] buffer:
  // v0*8192 + floordiv(v1, 1024)*1024 + mod(floordiv(v1, 32), 32)*32 +
  // mod(v1, 32) is v0*8192 + v1 (the digits below 1024 are mod(v1, 1024)).
  auto digits = [&](int64_t low, int64_t base, int64_t top) {
    const loop::Expr *sum =
        e.add(e.mul(v0, e.integer(8192)),
              e.mul(e.floorDiv(v1, low * base), e.integer(low * base)));
    sum = e.add(sum, e.mul(e.mod(e.floorDiv(v1, low), base), e.integer(top)));
    return e.add(sum, e.mod(v1, low));
  };
  loop::Kernel kernel;
  kernel.outerRanges = {64, 8192};
  loop::Loop body;
  auto store = [&](const loop::Expr *index) {
    body.stores.push_back({0, index, e.cast(index, DType::Float32)});
  };
  store(digits(32, 32, 32));
  // A digit's coefficient that is not its place value stays as it is.
  store(digits(32, 32, 64));
  appendKernel(program, kernel, body);
  simplifyIndices(program);
  const auto &stores = program.steps[0].kernel.loops[0].stores;
  EXPECT_EQ(loop::affineCoefficient(stores[0].index, 0), 8192);
  EXPECT_EQ(loop::affineCoefficient(stores[0].index, 1), 1);
  EXPECT_FALSE(loop::affineCoefficient(stores[1].index, 1).has_value());
}

// The CPU backend emits kernels on several threads, each reading the
// program: while it does, the program's ExprContext finds the nodes it
// holds and refuses to create one (a race on its tables otherwise).
TEST(Scheduler, ReadOnlyExpressionsAreFoundNotCreated) {
  loop::ExprContext e;
  const loop::Expr *sum = e.add(e.mul(e.var(0), e.integer(64)), e.var(1));
  e.setReadOnly(true);
  EXPECT_EQ(e.add(e.mul(e.var(0), e.integer(64)), e.var(1)), sum);
  EXPECT_THROW(e.integer(12345), Error);
  EXPECT_THROW(e.substituteVars(sum, {e.var(2), e.var(1)}), Error);
  e.setReadOnly(false);
  EXPECT_EQ(e.integer(12345)->integer(), 12345);
}

TEST(Scheduler, IndexSimplificationBoundsClampedPositions) {
  // A vision transformer's tokens: the class token, then 36 patches read
  // from a [8 * 36, 256] product through its NCHW view and a flatten, at
  // the clamped position c = max(min(v1 - 1, 35), 0) (v0 < 8, v1 < 37,
  // v2 < 256): x = v0*9216 + v2*36 + c, the patch (h, w) =
  // (mod(floordiv(x, 6), 6), mod(x, 6)). The clamp bounds c to [0, 35], so
  // floordiv(x, 9216) is v0 and 6h + w is c.
  loop::Program program;
  loop::ExprContext &e = *program.exprs;
  const loop::Expr *v0 = e.var(0), *v1 = e.var(1), *v2 = e.var(2);
  using loop::BinaryOp;
  const loop::Expr *c = e.binary(
      BinaryOp::Max,
      e.binary(BinaryOp::Min, e.binary(BinaryOp::Sub, v1, e.integer(1)),
               e.integer(35)),
      e.integer(0));
  const loop::Expr *x =
      e.add(e.add(e.mul(v0, e.integer(9216)), e.mul(v2, e.integer(36))), c);
  loop::Kernel kernel;
  kernel.outerRanges = {8, 37, 256};
  loop::Loop body;
  auto store = [&](const loop::Expr *index) {
    body.stores.push_back({0, index, e.cast(index, DType::Float32)});
  };
  store(e.floorDiv(x, 9216));
  store(e.add(e.mul(e.mod(e.floorDiv(x, 6), 6), e.integer(6)), e.mod(x, 6)));
  // floordiv(6a + r, 6) is a + floordiv(r, 6) whatever r's range.
  store(e.floorDiv(e.add(e.mul(v0, e.integer(12)), v1), 6));
  appendKernel(program, kernel, body);
  simplifyIndices(program);
  const auto &stores = program.steps[0].kernel.loops[0].stores;
  EXPECT_EQ(stores[0].index, v0);
  EXPECT_EQ(stores[1].index, c);
  EXPECT_EQ(loop::affineCoefficient(stores[2].index, 0), 2);
}

// Two values that read each other in turn (x = x + y; y = y * x) make each
// step's expression a DAG whose paths double with every step: walks that
// visit every path (dead-store elimination's reduction marking did) took
// exponential time; shared nodes are visited once now.
TEST(Scheduler, InterleavedChainsPlanInLinearTime) {
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {16, 8}));
  Value *y = graph->addInput(TensorMeta(DType::Float32, {16, 8}));
  for (int step = 0; step < 120; ++step) {
    x = op(*graph, "aten::add.Tensor", {x, y});
    y = op(*graph, "aten::mul.Tensor", {y, x});
  }
  graph->setOutputs({x, y});
  loop::Program program = schedule(graph);
  EXPECT_FALSE(kernelsOf(program).empty());
}

// Fusion stops growing a kernel at a bounded number of operations: a long
// chain becomes several kernels (each with a bounded body, so the machine
// code of each is quick to make), and a short one stays one kernel.
TEST(Scheduler, LongChainsSplitIntoBoundedKernels) {
  auto chain = [](int length) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {16, 8}));
    for (int step = 0; step < length; ++step)
      x = op(*graph, "aten::mul.Tensor",
             {op(*graph, "aten::add.Tensor", {x, 1.0 + step}), 0.5});
    graph->setOutputs({x});
    return graph;
  };
  EXPECT_EQ(kernelsOf(schedule(chain(20))).size(), 1u);
  loop::Program program = schedule(chain(2000));
  size_t kernels = kernelsOf(program).size();
  EXPECT_GT(kernels, 4u);
  EXPECT_LT(kernels, 64u);
  // Each kernel stores its result for the next: all but the last are
  // temporaries, each read by one later kernel.
  for (const loop::Kernel *kernel : kernelsOf(program)) {
    ASSERT_EQ(kernel->loops.size(), 1u);
    EXPECT_EQ(kernel->loops[0].stores.size(), 1u);
  }
}

TEST(Scheduler, RangesThatVaryStaySymbolicThroughTheScheduler) {
  // A kernel over [s0, 4] storing x[v0, v1] contiguously, and v0 mod s0,
  // v0 // s0 (a view's delinearised index over a dim of size s0).
  loop::Program program;
  program.symbolHints = {6};
  loop::ExprContext &e = *program.exprs;
  SymSize rows = size::symbol(0);
  loop::Buffer in, out;
  in.kind = BufferKind::Input;
  in.graphInput = 0;
  in.meta = TensorMeta(DType::Float32, {6, 4});
  out.kind = BufferKind::Tensor;
  out.meta = in.meta;
  int64_t a = program.addBuffer(in), b = program.addBuffer(out);
  const loop::Expr *v0 = e.var(0), *v1 = e.var(1), *s0 = e.symbol(0);
  const loop::Expr *wrapped =
      e.binary(loop::BinaryOp::Mod, v0, s0); // v0 < s0: v0 itself
  const loop::Expr *quotient = e.binary(loop::BinaryOp::FloorDiv, v0, s0);
  Step step;
  step.kernel.name = "rows";
  step.kernel.outerRanges = loop::Ranges{rows, size::constant(4)};
  loop::Loop loop;
  const loop::Expr *index =
      e.add(e.add(e.mul(wrapped, e.integer(4)), v1), quotient);
  loop.stores.push_back({b, e.add(e.mul(v0, e.integer(4)), v1),
                         e.load(a, DType::Float32, index)});
  step.kernel.loops.push_back(loop);
  program.steps.push_back(step);
  simplifyIndices(program);
  const loop::Store &store = program.steps[0].kernel.loops[0].stores[0];
  EXPECT_EQ(loop::exprToString(store.value->index()),
            loop::exprToString(store.index));
  EXPECT_FALSE(loop::dependsOnSymbol(store.value->index()));
  // Contiguous over [s0, 4]: one loop of s0*4 points.
  chooseLoopOrder(program);
  const loop::Kernel &kernel = program.steps[0].kernel;
  ASSERT_EQ(kernel.outerRanges.size(), 1u);
  EXPECT_EQ(kernel.outerRanges[0], size::mul(rows, size::constant(4)));
  EXPECT_EQ(program.hint(kernel.outerRanges[0]), 24);
  EXPECT_FALSE(kernel.outerRanges.isStatic());
  EXPECT_THROW(kernel.outerRanges.constants(), Error);
  EXPECT_EQ(loop::rangesToString(kernel.outerRanges, 0),
            "[v0 < " + kernel.outerRanges[0]->str() + "]");
}

namespace {

/// The program of `graph` through the scheduler's passes up to loop order,
/// operand layouts included (`withLayouts`).
loop::Program scheduleWithOperandLayouts(std::shared_ptr<Graph> graph,
                                         bool withLayouts = true) {
  loop::Program program = lowerGraph(std::move(graph));
  simplifyIndices(program);
  if (withLayouts)
    chooseOperandLayouts(program);
  fuseKernels(program);
  chooseLoopOrder(program);
  simplifyIndices(program);
  return program;
}

/// The one kernel that stores into a temporary a contraction reads.
const loop::Kernel *operandWriter(const loop::Program &program,
                                  int64_t &buffer) {
  for (const Step &step : program.steps)
    if (step.kind == Step::Kind::Kernel && !step.kernel.contraction)
      for (const loop::Store &store : step.kernel.loops.back().stores)
        if (program.buffers[store.buffer].kind == BufferKind::Temporary) {
          buffer = store.buffer;
          return &step.kernel;
        }
  return nullptr;
}

} // namespace

TEST(Scheduler, TransposedMatrixOperandIsWrittenInItsSourcesOrder) {
  // bmm(q, exp(k)^T): the operand exp(k)^T is computed into a temporary
  // for the GEMM. Laid out as its logical [2, 64, 32] row-major, writing it
  // would read k down its columns; laid out as k is ([2, 64, 32] with
  // strides [2048, 1, 64]), the writer walks k and the temporary in order,
  // and the GEMM reads B transposed.
  for (bool withLayouts : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Value *q = graph->addInput(TensorMeta(DType::Float32, {2, 16, 64}));
    Value *k = graph->addInput(TensorMeta(DType::Float32, {2, 32, 64}));
    Value *keys = op(*graph, "aten::transpose.int",
                     {op(*graph, "aten::exp", {k}), int64_t(1), int64_t(2)});
    graph->setOutputs({op(*graph, "aten::bmm", {q, keys})});
    loop::Program program = scheduleWithOperandLayouts(graph, withLayouts);
    int64_t operand = -1;
    const loop::Kernel *writer = operandWriter(program, operand);
    ASSERT_NE(writer, nullptr) << program.str();
    EXPECT_EQ(program.buffers[operand].meta.strides,
              withLayouts ? Shape({2048, 1, 64}) : Shape({2048, 32, 1}))
        << program.str();
    // The writer's innermost variable walks both k and the operand in
    // order only with the chosen layout.
    const loop::Store &store = writer->loops.back().stores.at(0);
    int64_t last = static_cast<int64_t>(writer->outerRanges.size()) - 1;
    const loop::Expr *load = loop::loadsOf(store.value).at(0);
    EXPECT_EQ(loop::affineCoefficient(store.index, last), 1) << program.str();
    EXPECT_EQ(loop::affineCoefficient(load->index(), last) == 1, withLayouts)
        << program.str();
    // The contraction reads the operand where the writer put it.
    for (const Step &step : program.steps)
      if (step.kernel.contraction)
        for (const loop::Expr *read :
             loop::loadsOf(step.kernel.loops[0].reductions[0].value))
          if (read->id() == operand) {
            // B[b][p][j] = operand[b][p][j]: p (the sum's variable) steps
            // by the operand's stride of dimension 1.
            EXPECT_EQ(loop::affineCoefficient(read->index(), 3),
                      program.buffers[operand].meta.strides[1]);
          }
  }
}

TEST(Scheduler, OperandLayoutKeepsWhatItsWriterReadsInOrder) {
  // softmax(scores) @ v: the probabilities' writer reads the scores along
  // their rows, and the rows' maximum and sum (constant along a row):
  // nothing reads better in another order, so the layout stays.
  auto graph = std::make_shared<Graph>();
  Value *scores = graph->addInput(TensorMeta(DType::Float32, {2, 32, 32}));
  Value *v = graph->addInput(TensorMeta(DType::Float32, {2, 32, 64}));
  Value *probabilities =
      op(*graph, "aten::_softmax", {scores, int64_t(-1), false});
  graph->setOutputs({op(*graph, "aten::bmm", {probabilities, v})});
  loop::Program program = scheduleWithOperandLayouts(graph);
  int64_t operand = -1;
  ASSERT_NE(operandWriter(program, operand), nullptr) << program.str();
  EXPECT_EQ(program.buffers[operand].meta.strides, Shape({1024, 32, 1}))
      << program.str();
}

TEST(Scheduler, OperandLayoutLeavesTemporariesOthersRead) {
  // exp(k) is read by the product (transposed) and by an add: its layout
  // is the add's concern too, so it stays row-major.
  auto graph = std::make_shared<Graph>();
  Value *q = graph->addInput(TensorMeta(DType::Float32, {2, 16, 64}));
  Value *k = graph->addInput(TensorMeta(DType::Float32, {2, 32, 64}));
  Value *keys = op(*graph, "aten::exp", {k});
  Value *product = op(
      *graph, "aten::bmm",
      {q, op(*graph, "aten::transpose.int", {keys, int64_t(1), int64_t(2)})});
  graph->setOutputs({product, op(*graph, "aten::add.Tensor", {keys, k})});
  loop::Program program = scheduleWithOperandLayouts(graph);
  for (const loop::Buffer &buffer : program.buffers)
    EXPECT_TRUE(buffer.meta.isContiguous()) << program.str();
}

TEST(Scheduler, OperandRowsFourKibibytesApartArePadded) {
  // gelu(x) @ w2 and gelu(x @ w1) @ w2: the activation is computed into a
  // temporary for the second GEMM, by a kernel of its own or by the first
  // GEMM as its epilogue. Rows of 1024 floats would all fall into one set
  // of L1's; a line of padding per row lets the GEMM read them in place.
  for (bool afterAProduct : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(
        TensorMeta(DType::Float32, {64, afterAProduct ? 256 : 1024}));
    Value *w1 = graph->addInput(TensorMeta(DType::Float32, {256, 1024}));
    Value *w2 = graph->addInput(TensorMeta(DType::Float32, {1024, 32}));
    Value *hidden = op(*graph, "aten::gelu",
                       {afterAProduct ? op(*graph, "aten::mm", {x, w1}) : x});
    graph->setOutputs({op(*graph, "aten::mm", {hidden, w2})});
    loop::Program program = scheduleWithOperandLayouts(graph);
    int64_t operand = -1;
    if (afterAProduct) {
      ASSERT_EQ(program.steps.size(), 2u) << program.str();
      operand = program.steps[0].kernel.loops.back().stores.at(0).buffer;
      EXPECT_TRUE(program.steps[0].kernel.contraction);
    } else {
      ASSERT_NE(operandWriter(program, operand), nullptr) << program.str();
    }
    EXPECT_EQ(program.buffers[operand].meta.strides, Shape({1024 + 16, 1}))
        << program.str();
    EXPECT_EQ(program.buffers[operand].meta.sizes, Shape({64, 1024}));
  }
}

namespace {

// The ReLU of an input of `sizes` and `strides` (channels-last where none
// are given), returned contiguous.
std::shared_ptr<Graph> channelsLastReluCopied(const Shape &sizes,
                                              Shape strides = {}) {
  if (strides.empty())
    strides = meta::stridesForFormat(sizes, MemoryFormat::ChannelsLast);
  auto graph = std::make_shared<Graph>();
  Value *x = graph->addInput(TensorMeta(DType::Float32, sizes, strides));
  graph->setOutputs(
      {graph
           ->addOp("aten::clone", {op(*graph, "aten::relu", {x})},
                   {{"memory_format", Argument(MemoryFormat::Contiguous)}})
           ->result(0)});
  return graph;
}

} // namespace

TEST(Scheduler, TransposedReadsAreTiled) {
  // x.permute(2, 1, 0).contiguous() of a contiguous 512x4x32: the
  // innermost loop (512 points) writes contiguously and reads one line per
  // element; it is cut in tiles of 16, and the loop contiguous in the read
  // (32, two loops out) walks between a tile and its points. Values are
  // unchanged.
  Shape sizes{32, 4, 512};
  loop::Program program = schedule(channelsLastReluCopied(sizes, {1, 32, 128}));
  ASSERT_EQ(kernelsOf(program).size(), 1u);
  EXPECT_EQ(kernelsOf(program)[0]->outerRanges.constants(),
            (Shape{4, 32, 32, 16}))
      << program.str();
  std::vector<double> values(numelOf(sizes));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = double(int64_t(i % 97) - 48);
  kiln::testing::Interpreter run(program);
  run.setInput(0, values);
  run.run();
  std::vector<double> expected = values;
  for (double &value : expected)
    value = std::max(value, 0.0);
  EXPECT_EQ(run.output(0), expected);

  // 8x8 positions: one sweep's lines stay in L1; not tiled.
  loop::Program untiled = schedule(channelsLastReluCopied({2, 64, 8, 8}));
  EXPECT_EQ(kernelsOf(untiled)[0]->outerRanges.constants(), (Shape{2, 64, 64}));
  // Nor where the read's contiguous loop is the one just outside the
  // innermost (channels-last to contiguous: channels, then positions): the
  // CPU backend reads that in tiles transposed in registers.
  loop::Program adjacent = schedule(channelsLastReluCopied({2, 64, 56, 56}));
  EXPECT_EQ(kernelsOf(adjacent)[0]->outerRanges.constants(),
            (Shape{2, 64, 3136}));
  // Nor for a GPU target.
  loop::Program gpu = lowerGraph(channelsLastReluCopied(sizes, {1, 32, 128}));
  fuseKernels(gpu);
  chooseLoopOrder(gpu, /*tileTransposes=*/false);
  EXPECT_EQ(kernelsOf(gpu)[0]->outerRanges.constants(), (Shape{32, 4, 512}));
}

TEST(Scheduler, PointwiseKernelsWriteOverDeadExternResults) {
  // conv -> ReLU -> conv: the ReLU, written channels-last for the second
  // call, is written over the first call's result, which nothing reads
  // after it; not where the first result is read again (added at the end).
  // The weight both share is copied channels-last once, for both calls.
  for (bool readAgain : {false, true}) {
    auto graph = std::make_shared<Graph>();
    Value *x = graph->addInput(TensorMeta(DType::Float32, {2, 8, 12, 12}));
    Value *w = graph->addInput(TensorMeta(DType::Float32, {8, 8, 3, 3}));
    auto convolution = [&](Value *input) {
      return op(*graph, "aten::convolution",
                {input, w, Argument::none(), Shape{1, 1}, Shape{1, 1},
                 Shape{1, 1}, false, Shape{0, 0}, Argument(int64_t(1))});
    };
    Value *y = convolution(x);
    Value *z = convolution(op(*graph, "aten::relu", {y}));
    graph->setOutputs({readAgain ? op(*graph, "aten::add.Tensor", {z, y}) : z});
    loop::Program program = lowerGraph(graph);
    fuseKernels(program);
    chooseLoopOrder(program);
    writeOverDeadExternResults(program);
    std::vector<const Step *> calls;
    for (const Step &step : program.steps)
      if (step.kind == Step::Kind::Extern)
        calls.push_back(&step);
    ASSERT_EQ(calls.size(), 2u);
    ASSERT_EQ(calls[1]->operandBuffers.size(), 2u) << program.str();
    EXPECT_EQ(calls[1]->operandBuffers[1].second,
              calls[0]->operandBuffers.at(1).second)
        << program.str();
    const loop::Buffer &operand =
        program.buffers[calls[1]->operandBuffers[0].second];
    if (readAgain) {
      EXPECT_EQ(operand.kind, BufferKind::Tensor) << program.str();
    } else {
      EXPECT_EQ(operand.kind, BufferKind::View) << program.str();
      EXPECT_EQ(operand.base, calls[0]->results.at(0));
    }
  }
}
