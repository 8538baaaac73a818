// Lowering from graph IR to loop IR, checked numerically by a small scalar
// reference interpreter of loop IR (below) against hand-computed values.
// Depends on passes/Lowering.h, passes/lowerings/Lowerer.h and gtest.
#include "passes/Lowering.h"

#include "ir/Error.h"
#include "ir/Graph.h"
#include "passes/lowerings/Lowerer.h"
#include "tests/cpp/TorchReference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace kiln;
using loop::BufferKind;
using loop::ExprKind;

namespace {

// --- A reference interpreter for loop IR --------------------------------

double roundTo(DType dtype, double value) {
  if (dtype == DType::Bool)
    return value != 0;
  if (isFloatingPoint(dtype))
    return dtype == DType::Float64 ? value : double(float(value));
  return std::isfinite(value) ? std::trunc(value) : 0;
}

class Interpreter {
public:
  explicit Interpreter(const loop::Program &program) : program_(program) {
    for (const loop::Buffer &buffer : program.buffers) {
      int64_t extent = buffer.meta.storageOffset + 1;
      for (int64_t d = 0; d < buffer.meta.dim(); ++d)
        extent += (buffer.meta.sizes[d] - 1) * buffer.meta.strides[d];
      storage_.emplace_back(std::max<int64_t>(extent, 1), 0.0);
    }
    for (size_t i = 0; i < program.buffers.size(); ++i)
      if (program.buffers[i].kind == BufferKind::Constant) {
        const ConstantData &data = *program.buffers[i].constant;
        const float *values =
            reinterpret_cast<const float *>(data.bytes.data());
        for (int64_t k = 0; k < data.meta.numel(); ++k)
          storage_[i][k] = values[k];
      }
  }

  /// Sets graph input `input` from its elements in row-major order.
  void setInput(int64_t input, const std::vector<double> &values) {
    for (size_t i = 0; i < program_.buffers.size(); ++i)
      if (program_.buffers[i].kind == BufferKind::Input &&
          program_.buffers[i].graphInput == input)
        write(static_cast<int64_t>(i), values);
  }

  /// Output `output`'s elements in row-major order.
  std::vector<double> output(size_t output) {
    return read(program_.outputs.at(output).buffer);
  }

  std::vector<double> read(int64_t buffer) {
    std::vector<double> values;
    forEachElement(buffer, [&](int64_t offset) {
      values.push_back(element(buffer, offset));
    });
    return values;
  }

  void write(int64_t buffer, const std::vector<double> &values) {
    size_t next = 0;
    forEachElement(buffer, [&](int64_t offset) {
      element(buffer, offset) = values.at(next++);
    });
  }

  void run() {
    for (const loop::Step &step : program_.steps) {
      if (step.kind == loop::Step::Kind::Extern)
        runExtern(step);
      else
        runKernel(step.kernel);
    }
  }

private:
  int64_t rootOf(int64_t buffer) const {
    const loop::Buffer &b = program_.buffers[buffer];
    return b.kind == BufferKind::View ? b.base : buffer;
  }
  double &element(int64_t buffer, int64_t offset) {
    const loop::Buffer &b = program_.buffers[buffer];
    int64_t base = b.kind == BufferKind::View ? b.meta.storageOffset : 0;
    std::vector<double> &memory = storage_.at(rootOf(buffer));
    int64_t at = base + offset;
    if (at < 0 || at >= static_cast<int64_t>(memory.size()))
      throw std::runtime_error("out of bounds: buf" + std::to_string(buffer) +
                               "[" + std::to_string(at) + "]");
    return memory[at];
  }
  void forEachElement(int64_t buffer,
                      const std::function<void(int64_t)> &visit) {
    const TensorMeta &meta = program_.buffers[buffer].meta;
    forEachPoint(meta.sizes, [&](const std::vector<int64_t> &point) {
      int64_t offset = 0;
      for (size_t d = 0; d < point.size(); ++d)
        offset += point[d] * meta.strides[d];
      visit(offset);
    });
  }
  static void
  forEachPoint(const Shape &ranges,
               const std::function<void(const std::vector<int64_t> &)> &visit) {
    for (int64_t size : ranges)
      if (size == 0)
        return;
    std::vector<int64_t> point(ranges.size(), 0);
    while (true) {
      visit(point);
      int64_t d = static_cast<int64_t>(ranges.size()) - 1;
      while (d >= 0 && ++point[d] == ranges[d])
        point[d--] = 0;
      if (d < 0)
        return;
    }
  }

  double eval(const loop::Expr *expr) {
    using loop::BinaryOp;
    using loop::UnaryOp;
    switch (expr->kind()) {
    case ExprKind::Constant:
      return isFloatingPoint(expr->dtype()) ? expr->real()
                                            : double(expr->integer());
    case ExprKind::Var:
      return double(vars_.at(expr->id()));
    case ExprKind::Load:
      return element(expr->id(), int64_t(eval(expr->index())));
    case ExprKind::ReductionValue:
      return reductionValues_.at(expr->id());
    case ExprKind::Cast:
      return roundTo(expr->dtype(), eval(expr->operand(0)));
    case ExprKind::Where:
      return eval(expr->operand(0)) != 0 ? eval(expr->operand(1))
                                         : eval(expr->operand(2));
    case ExprKind::MulAdd:
      return roundTo(expr->dtype(),
                     std::fma(eval(expr->operand(0)), eval(expr->operand(1)),
                              eval(expr->operand(2))));
    case ExprKind::Unary: {
      double x = eval(expr->operand(0));
      double r;
      switch (expr->unaryOp()) {
      case UnaryOp::Neg:
        r = -x;
        break;
      case UnaryOp::Abs:
        r = std::fabs(x);
        break;
      case UnaryOp::Exp:
        r = std::exp(x);
        break;
      case UnaryOp::Expm1:
        r = std::expm1(x);
        break;
      case UnaryOp::Log:
        r = std::log(x);
        break;
      case UnaryOp::Log1p:
        r = std::log1p(x);
        break;
      case UnaryOp::Sqrt:
        r = std::sqrt(x);
        break;
      case UnaryOp::Reciprocal:
        r = 1.0 / x;
        break;
      case UnaryOp::Rsqrt:
        r = 1 / std::sqrt(x);
        break;
      case UnaryOp::Tanh:
        r = std::tanh(x);
        break;
      case UnaryOp::Erf:
        r = std::erf(x);
        break;
      case UnaryOp::Sigmoid:
        r = 1 / (1 + std::exp(-x));
        break;
      case UnaryOp::Floor:
        r = std::floor(x);
        break;
      case UnaryOp::Trunc:
        r = std::trunc(x);
        break;
      case UnaryOp::LogicalNot:
        r = x == 0;
        break;
      case UnaryOp::IsNan:
        r = std::isnan(x);
        break;
      case UnaryOp::IsInf:
        r = std::isinf(x);
        break;
      default:
        throw std::runtime_error("interpreter: unary op " +
                                 std::string(unaryOpName(expr->unaryOp())));
      }
      return roundTo(expr->dtype(), r);
    }
    case ExprKind::Binary: {
      double a = eval(expr->operand(0)), b = eval(expr->operand(1));
      bool integral = !isFloatingPoint(expr->operand(0)->dtype());
      double r;
      switch (expr->binaryOp()) {
      case BinaryOp::Add:
        r = a + b;
        break;
      case BinaryOp::Sub:
        r = a - b;
        break;
      case BinaryOp::Mul:
        r = a * b;
        break;
      case BinaryOp::Div:
        r = integral ? std::trunc(a / b) : a / b;
        break;
      case BinaryOp::FloorDiv:
        r = integral ? std::floor(a / b)
                     : kiln::testing::torchFloorDivide(a, b);
        break;
      case BinaryOp::Mod:
        r = a - b * std::floor(a / b);
        break;
      case BinaryOp::Pow:
        r = std::pow(a, b);
        break;
      case BinaryOp::Max:
        r = std::isnan(a) || a > b ? a : b;
        break;
      case BinaryOp::Min:
        r = std::isnan(a) || a < b ? a : b;
        break;
      case BinaryOp::Eq:
        r = a == b;
        break;
      case BinaryOp::Ne:
        r = a != b;
        break;
      case BinaryOp::Lt:
        r = a < b;
        break;
      case BinaryOp::Le:
        r = a <= b;
        break;
      case BinaryOp::Gt:
        r = a > b;
        break;
      case BinaryOp::Ge:
        r = a >= b;
        break;
      case BinaryOp::LogicalAnd:
        r = a != 0 && b != 0;
        break;
      case BinaryOp::LogicalOr:
        r = a != 0 || b != 0;
        break;
      default:
        throw std::runtime_error("interpreter: binary op " +
                                 std::string(binaryOpName(expr->binaryOp())));
      }
      return roundTo(expr->dtype(), r);
    }
    }
    return 0;
  }

  void runKernel(const loop::Kernel &kernel) {
    int64_t outer = static_cast<int64_t>(kernel.outerRanges.size());
    forEachPoint(kernel.outerRanges, [&](const std::vector<int64_t> &point) {
      reductionValues_.clear();
      for (const loop::Loop &loop : kernel.loops) {
        std::vector<double> accumulators, best;
        std::vector<int64_t> positions;
        for (const loop::Reduction &reduction : loop.reductions) {
          double initial = 0;
          switch (reduction.op) {
          case loop::ReduceOp::Prod:
          case loop::ReduceOp::All:
            initial = 1;
            break;
          case loop::ReduceOp::Max:
          case loop::ReduceOp::ArgMax:
            initial = -INFINITY;
            break;
          case loop::ReduceOp::Min:
          case loop::ReduceOp::ArgMin:
            initial = INFINITY;
            break;
          default:
            break;
          }
          accumulators.push_back(initial);
          positions.push_back(-1);
        }
        auto setVars = [&](const std::vector<int64_t> &inner) {
          vars_.assign(point.begin(), point.end());
          vars_.insert(vars_.end(), inner.begin(), inner.end());
        };
        int64_t position = 0;
        forEachPoint(loop.ranges, [&](const std::vector<int64_t> &inner) {
          setVars(inner);
          for (size_t r = 0; r < loop.reductions.size(); ++r) {
            double x = eval(loop.reductions[r].value);
            double &acc = accumulators[r];
            switch (loop.reductions[r].op) {
            case loop::ReduceOp::Sum:
              acc += x;
              break;
            case loop::ReduceOp::Prod:
              acc *= x;
              break;
            case loop::ReduceOp::Max:
              acc = std::isnan(acc) || acc >= x ? acc : x;
              break;
            case loop::ReduceOp::Min:
              acc = std::isnan(acc) || acc <= x ? acc : x;
              break;
            case loop::ReduceOp::Any:
              acc = acc != 0 || x != 0;
              break;
            case loop::ReduceOp::All:
              acc = acc != 0 && x != 0;
              break;
            case loop::ReduceOp::ArgMax:
              if (positions[r] < 0 ||
                  (!std::isnan(acc) && (x > acc || std::isnan(x))))
                acc = x, positions[r] = position;
              break;
            case loop::ReduceOp::ArgMin:
              if (positions[r] < 0 ||
                  (!std::isnan(acc) && (x < acc || std::isnan(x))))
                acc = x, positions[r] = position;
              break;
            }
          }
          ++position;
        });
        for (size_t r = 0; r < loop.reductions.size(); ++r) {
          bool isArg = loop.reductions[r].op == loop::ReduceOp::ArgMax ||
                       loop.reductions[r].op == loop::ReduceOp::ArgMin;
          reductionValues_.push_back(isArg ? double(positions[r])
                                           : accumulators[r]);
        }
        forEachPoint(loop.ranges, [&](const std::vector<int64_t> &inner) {
          setVars(inner);
          for (const loop::Store &store : loop.stores)
            element(store.buffer, int64_t(eval(store.index))) =
                eval(store.value);
        });
      }
      (void)outer;
    });
  }

  // The externs the tests use: mm and add_.
  void runExtern(const loop::Step &step) {
    const Node &node = *step.node;
    std::string name = node.schema()->qualifiedName();
    auto operand = [&](size_t index) {
      return program_.bufferOf.at(node.arguments().at(index).toTensor());
    };
    if (name == "aten::mm") {
      int64_t a = operand(0), b = operand(1);
      const Shape &as = program_.buffers[a].meta.sizes;
      const Shape &bs = program_.buffers[b].meta.sizes;
      std::vector<double> x = read(a), y = read(b), z(as[0] * bs[1], 0);
      for (int64_t i = 0; i < as[0]; ++i)
        for (int64_t j = 0; j < bs[1]; ++j)
          for (int64_t k = 0; k < as[1]; ++k)
            z[i * bs[1] + j] += x[i * as[1] + k] * y[k * bs[1] + j];
      write(step.results.at(0), z);
    } else if (name == "aten::add_.Tensor") {
      int64_t self = operand(0), other = operand(1);
      std::vector<double> x = read(self), y = read(other);
      for (size_t i = 0; i < x.size(); ++i)
        x[i] += y[i];
      write(self, x);
      write(step.results.at(0), x);
    } else {
      throw std::runtime_error("interpreter: extern " + name);
    }
  }

  const loop::Program &program_;
  std::vector<std::vector<double>> storage_;
  std::vector<int64_t> vars_;
  std::vector<double> reductionValues_;
};

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
  // A product too large for a kernel calls torch, which needs x + 1 in a
  // tensor of its own.
  constexpr int64_t m = 2, k = 64, n = 128;
  auto graph = newGraph();
  Value *x = graph->addInput(TensorMeta(DType::Float32, {m, k}));
  Value *y = graph->addInput(TensorMeta(DType::Float32, {k, n}));
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

TEST(Lowering, NonCpuGraphIsUnsupported) {
  auto graph = newGraph();
  Value *x = graph->addInput(
      TensorMeta(DType::Float32, {2}, Device{DeviceType::CUDA, 0}));
  graph->setOutputs({op(*graph, "aten::neg", {x})});
  EXPECT_THROW(lowerGraph(graph), Unsupported);
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
