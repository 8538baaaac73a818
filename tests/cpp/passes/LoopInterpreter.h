// A scalar reference interpreter of loop IR for the lowering tests: runs a
// program's kernels point by point in double precision (rounding to each
// expression's dtype), and the few externs the tests use.
// Depends on ir/LoopIR.h, tests/cpp/TorchReference.h.
#pragma once

#include "ir/LoopIR.h"
#include "tests/cpp/TorchReference.h"

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::testing {

using loop::BufferKind;
using loop::ExprKind;

inline double roundTo(DType dtype, double value) {
  if (dtype == DType::Bool)
    return value != 0;
  if (isFloatingPoint(dtype))
    return dtype == DType::Float64 ? value : double(float(value));
  return std::isfinite(value) ? std::trunc(value) : 0;
}

class Interpreter {
public:
  /// `symbols`: the size symbols' values of a program whose sizes vary
  /// (its example call's where none are given).
  explicit Interpreter(const loop::Program &program,
                       std::vector<int64_t> symbols = {})
      : program_(program),
        symbols_(symbols.empty() ? program.symbolHints : std::move(symbols)) {
    for (const loop::Buffer &buffer : program.buffers)
      metas_.push_back(buffer.meta.isSymbolic()
                           ? buffer.meta.specialized(symbols_)
                           : buffer.meta);
    for (const TensorMeta &meta : metas_) {
      int64_t extent = meta.storageOffset + 1;
      for (int64_t d = 0; d < meta.dim(); ++d)
        extent += (meta.sizes[d] - 1) * meta.strides[d];
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

  /// Runs the extern steps this returns true for (before the built-in
  /// ones): a test's reference for an op torch would run.
  std::function<bool(const loop::Step &, Interpreter &)> externHook;

  /// Evaluates both sides of every `where`, as vector code may: a load
  /// outside its buffer then throws even on the side not taken.
  void evaluateBothBranches() { bothBranches_ = true; }

  void run() {
    for (const loop::Step &step : program_.steps) {
      if (step.kind == loop::Step::Kind::Extern)
        runExtern(step);
      else
        runKernel(step.kernel);
    }
  }

private:
  Shape values(const loop::Ranges &ranges) const {
    Shape result;
    for (SymSize range : ranges)
      result.push_back(size::evaluate(range, symbols_));
    return result;
  }
  int64_t rootOf(int64_t buffer) const {
    const loop::Buffer &b = program_.buffers[buffer];
    return b.kind == BufferKind::View ? b.base : buffer;
  }
  double &element(int64_t buffer, int64_t offset) {
    const loop::Buffer &b = program_.buffers[buffer];
    int64_t base =
        b.kind == BufferKind::View ? metas_[buffer].storageOffset : 0;
    std::vector<double> &memory = storage_.at(rootOf(buffer));
    int64_t at = base + offset;
    if (at < 0 || at >= static_cast<int64_t>(memory.size()))
      throw std::runtime_error("out of bounds: buf" + std::to_string(buffer) +
                               "[" + std::to_string(at) + "]");
    return memory[at];
  }
  void forEachElement(int64_t buffer,
                      const std::function<void(int64_t)> &visit) {
    const TensorMeta &meta = metas_[buffer];
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
    case ExprKind::Symbol:
      return double(symbols_.at(expr->id()));
    case ExprKind::Load:
      return element(expr->id(), int64_t(eval(expr->index())));
    case ExprKind::ReductionValue:
      return reductionValues_.at(expr->id());
    case ExprKind::Cast:
      return roundTo(expr->dtype(), eval(expr->operand(0)));
    case ExprKind::Where: {
      if (bothBranches_) {
        double condition = eval(expr->operand(0));
        double then = eval(expr->operand(1));
        double otherwise = eval(expr->operand(2));
        return condition != 0 ? then : otherwise;
      }
      return eval(expr->operand(0)) != 0 ? eval(expr->operand(1))
                                         : eval(expr->operand(2));
    }
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
        r = integral ? std::floor(a / b) : torchFloorDivide(a, b);
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
    forEachPoint(
        values(kernel.outerRanges), [&](const std::vector<int64_t> &point) {
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
            forEachPoint(
                values(loop.ranges), [&](const std::vector<int64_t> &inner) {
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
            forEachPoint(values(loop.ranges),
                         [&](const std::vector<int64_t> &inner) {
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
    if (externHook && externHook(step, *this))
      return;
    const Node &node = *step.node;
    std::string name = node.schema()->qualifiedName();
    auto operand = [&](size_t index) {
      return program_.operandBuffer(step,
                                    node.arguments().at(index).toTensor());
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
  std::vector<int64_t> symbols_;
  std::vector<TensorMeta> metas_; // every buffer's layout at symbols_
  std::vector<std::vector<double>> storage_;
  std::vector<int64_t> vars_;
  std::vector<double> reductionValues_;
  bool bothBranches_ = false;
};

} // namespace kiln::testing
