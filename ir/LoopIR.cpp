// The loop IR: expression uniquing and simplification, affine analysis of
// index expressions, and the printer.
// Depends on ir/LoopIR.h.
#include "ir/LoopIR.h"

#include "ir/Error.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <sstream>
#include <unordered_set>

namespace kiln::loop {

std::string_view unaryOpName(UnaryOp op) {
  static const char *const names[] = {
      "neg",   "abs",   "exp",   "exp2",  "expm1",       "log",         "log2",
      "log10", "log1p", "sqrt",  "rsqrt", "sin",         "cos",         "tan",
      "asin",  "acos",  "atan",  "sinh",  "cosh",        "tanh",        "asinh",
      "acosh", "atanh", "erf",   "erfc",  "sigmoid",     "reciprocal",  "floor",
      "ceil",  "round", "trunc", "sign",  "logical_not", "bitwise_not", "isnan",
      "isinf", "lgamma"};
  return names[static_cast<int>(op)];
}

std::string_view binaryOpName(BinaryOp op) {
  static const char *const names[] = {
      "add",         "sub",         "mul",        "div",         "floordiv",
      "mod",         "fmod",        "pow",        "atan2",       "copysign",
      "max",         "min",         "eq",         "ne",          "lt",
      "le",          "gt",          "ge",         "logical_and", "logical_or",
      "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "shift_left",
      "shift_right"};
  return names[static_cast<int>(op)];
}

std::string_view reduceOpName(ReduceOp op) {
  static const char *const names[] = {"sum",    "prod",   "max", "min",
                                      "argmax", "argmin", "any", "all"};
  return names[static_cast<int>(op)];
}

bool Expr::isIntegerConstant(int64_t value) const {
  return kind_ == ExprKind::Constant && !isFloatingPoint(dtype_) &&
         integer_ == value;
}

namespace {

bool isComparison(BinaryOp op) {
  return op >= BinaryOp::Eq && op <= BinaryOp::LogicalXor;
}

bool isCommutative(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add:
  case BinaryOp::Mul:
  case BinaryOp::Max:
  case BinaryOp::Min:
  case BinaryOp::Eq:
  case BinaryOp::Ne:
  case BinaryOp::LogicalAnd:
  case BinaryOp::LogicalOr:
  case BinaryOp::LogicalXor:
  case BinaryOp::BitwiseAnd:
  case BinaryOp::BitwiseOr:
  case BinaryOp::BitwiseXor:
    return true;
  default:
    return false;
  }
}

uint64_t bitsOf(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

struct ExprHash {
  size_t operator()(const Expr *expr) const {
    size_t hash = static_cast<size_t>(expr->kind()) * 31 +
                  static_cast<size_t>(expr->dtype());
    hash = hash * 1000003 ^ std::hash<uint64_t>()(bitsOf(expr->real()));
    hash = hash * 1000003 ^ std::hash<int64_t>()(expr->integer());
    if (expr->kind() == ExprKind::Unary || expr->kind() == ExprKind::Binary)
      hash = hash * 31 +
             static_cast<size_t>(expr->kind() == ExprKind::Unary
                                     ? static_cast<int>(expr->unaryOp())
                                     : static_cast<int>(expr->binaryOp()));
    for (const Expr *operand : expr->operands())
      hash = hash * 1000003 ^ std::hash<const Expr *>()(operand);
    return hash;
  }
};

struct ExprEqual {
  bool operator()(const Expr *a, const Expr *b) const {
    if (a->kind() != b->kind() || a->dtype() != b->dtype() ||
        bitsOf(a->real()) != bitsOf(b->real()) ||
        a->integer() != b->integer() || a->operands() != b->operands())
      return false;
    if (a->kind() == ExprKind::Unary)
      return a->unaryOp() == b->unaryOp();
    if (a->kind() == ExprKind::Binary)
      return a->binaryOp() == b->binaryOp();
    return true;
  }
};

} // namespace

struct ExprContext::Impl {
  std::deque<Expr> nodes;
  std::unordered_set<const Expr *, ExprHash, ExprEqual> unique;
  bool readOnly = false;
};

ExprContext::ExprContext() : impl_(std::make_unique<Impl>()) {}

void ExprContext::setReadOnly(bool readOnly) { impl_->readOnly = readOnly; }
ExprContext::~ExprContext() = default;

const Expr *ExprContext::intern(Expr node) {
  auto found = impl_->unique.find(&node);
  if (found != impl_->unique.end())
    return *found;
  if (impl_->readOnly)
    throw Error("loop IR: a new expression while the program is read on "
                "several threads (kernel emission must not create any)");
  impl_->nodes.push_back(std::move(node));
  const Expr *stored = &impl_->nodes.back();
  impl_->unique.insert(stored);
  return stored;
}

const Expr *ExprContext::constant(double value, DType dtype) {
  if (isComplex(dtype))
    throw Error("loop IR: complex constants are not supported");
  Expr node;
  node.kind_ = ExprKind::Constant;
  node.dtype_ = dtype;
  if (dtype == DType::Bool) {
    node.integer_ = value != 0;
    node.real_ = static_cast<double>(node.integer_);
  } else if (isFloatingPoint(dtype)) {
    node.real_ = value;
  } else {
    node.integer_ = static_cast<int64_t>(value);
    node.real_ = static_cast<double>(node.integer_);
  }
  return intern(std::move(node));
}

const Expr *ExprContext::numbered(ExprKind kind, int64_t number) {
  Expr node;
  node.kind_ = kind;
  node.dtype_ = DType::Int64;
  node.integer_ = number;
  return intern(std::move(node));
}

const Expr *ExprContext::var(int64_t number) {
  return numbered(ExprKind::Var, number);
}

const Expr *ExprContext::symbol(int64_t number) {
  return numbered(ExprKind::Symbol, number);
}

const Expr *ExprContext::size(SymSize size) {
  const std::vector<SymSize> &operands = size->operands();
  switch (size->kind()) {
  case SizeKind::Constant:
    return integer(size->value());
  case SizeKind::Symbol:
    return symbol(size->value());
  case SizeKind::Add: {
    const Expr *sum = integer(0);
    for (SymSize term : operands)
      sum = add(sum, this->size(term));
    return sum;
  }
  case SizeKind::Mul: {
    const Expr *product = integer(1);
    for (SymSize factor : operands)
      product = mul(product, this->size(factor));
    return product;
  }
  case SizeKind::FloorDiv:
    return binary(BinaryOp::FloorDiv, this->size(operands[0]),
                  this->size(operands[1]));
  case SizeKind::Mod:
    return binary(BinaryOp::Mod, this->size(operands[0]),
                  this->size(operands[1]));
  case SizeKind::Max:
    return binary(BinaryOp::Max, this->size(operands[0]),
                  this->size(operands[1]));
  }
  throw Error("loop IR: unknown size expression " + size->str());
}

const Expr *ExprContext::load(int64_t buffer, DType dtype, const Expr *index) {
  if (index->dtype() != DType::Int64)
    throw Error("loop IR: a load's index must be int64");
  Expr node;
  node.kind_ = ExprKind::Load;
  node.dtype_ = dtype;
  node.integer_ = buffer;
  node.operands_ = {index};
  return intern(std::move(node));
}

const Expr *ExprContext::reductionValue(int64_t reduction, DType dtype) {
  Expr node;
  node.kind_ = ExprKind::ReductionValue;
  node.dtype_ = dtype;
  node.integer_ = reduction;
  return intern(std::move(node));
}

const Expr *ExprContext::unary(UnaryOp op, const Expr *operand) {
  Expr node;
  node.kind_ = ExprKind::Unary;
  node.op_ = static_cast<uint8_t>(op);
  bool boolResult =
      op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::LogicalNot;
  node.dtype_ = boolResult ? DType::Bool : operand->dtype();
  node.operands_ = {operand};
  if (op == UnaryOp::Neg && operand->isConstant() &&
      !isFloatingPoint(operand->dtype()) && operand->dtype() != DType::Bool)
    return constant(-static_cast<double>(operand->integer()), operand->dtype());
  return intern(std::move(node));
}

namespace {

// Folds integer arithmetic on two constants; nullopt where it does not
// apply (floats are left to the kernel so rounding matches the target).
std::optional<int64_t> foldInteger(BinaryOp op, int64_t a, int64_t b) {
  switch (op) {
  case BinaryOp::Add:
    return a + b;
  case BinaryOp::Sub:
    return a - b;
  case BinaryOp::Mul:
    return a * b;
  case BinaryOp::FloorDiv:
    if (b == 0)
      return std::nullopt;
    return floorDivide(a, b);
  case BinaryOp::Mod: {
    if (b == 0)
      return std::nullopt;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
  default:
    return std::nullopt;
  }
}

} // namespace

const Expr *ExprContext::binary(BinaryOp op, const Expr *lhs, const Expr *rhs) {
  if (lhs->dtype() != rhs->dtype())
    throw Error("loop IR: binary operands differ in dtype (" +
                std::string(dtypeName(lhs->dtype())) + " and " +
                std::string(dtypeName(rhs->dtype())) + ")");
  DType dtype = lhs->dtype();
  if (isCommutative(op) && lhs->isConstant() && !rhs->isConstant())
    std::swap(lhs, rhs);
  if (dtype == DType::Int64) {
    if (lhs->isConstant() && rhs->isConstant())
      if (auto folded = foldInteger(op, lhs->integer(), rhs->integer()))
        return integer(*folded);
    if ((op == BinaryOp::Add || op == BinaryOp::Sub) &&
        rhs->isIntegerConstant(0))
      return lhs;
    if (op == BinaryOp::Mul && rhs->isIntegerConstant(1))
      return lhs;
    if (op == BinaryOp::Mul && rhs->isIntegerConstant(0))
      return rhs;
    if ((op == BinaryOp::FloorDiv) && rhs->isIntegerConstant(1))
      return lhs;
    if (op == BinaryOp::Mod && rhs->isIntegerConstant(1))
      return integer(0);
    // (x + c1) + c2 -> x + (c1 + c2): keeps offsets in one place.
    if (op == BinaryOp::Add && rhs->isConstant() &&
        lhs->kind() == ExprKind::Binary && lhs->binaryOp() == BinaryOp::Add &&
        lhs->operand(1)->isConstant())
      return binary(BinaryOp::Add, lhs->operand(0),
                    integer(lhs->operand(1)->integer() + rhs->integer()));
  }
  Expr node;
  node.kind_ = ExprKind::Binary;
  node.op_ = static_cast<uint8_t>(op);
  node.dtype_ = isComparison(op) ? DType::Bool : dtype;
  node.operands_ = {lhs, rhs};
  return intern(std::move(node));
}

const Expr *ExprContext::where(const Expr *condition, const Expr *then,
                               const Expr *otherwise) {
  if (condition->dtype() != DType::Bool)
    throw Error("loop IR: where's condition must be bool");
  if (then->dtype() != otherwise->dtype())
    throw Error("loop IR: where's branches differ in dtype");
  if (condition->isConstant())
    return condition->integer() ? then : otherwise;
  if (then == otherwise)
    return then;
  Expr node;
  node.kind_ = ExprKind::Where;
  node.dtype_ = then->dtype();
  node.operands_ = {condition, then, otherwise};
  return intern(std::move(node));
}

const Expr *ExprContext::cast(const Expr *operand, DType dtype) {
  if (operand->dtype() == dtype)
    return operand;
  if (isComplex(dtype))
    throw Error("loop IR: complex casts are not supported");
  Expr node;
  node.kind_ = ExprKind::Cast;
  node.dtype_ = dtype;
  node.operands_ = {operand};
  return intern(std::move(node));
}

const Expr *ExprContext::mulAdd(const Expr *a, const Expr *b, const Expr *c) {
  if (!isFloatingPoint(a->dtype()) || b->dtype() != a->dtype() ||
      c->dtype() != a->dtype())
    throw Error("loop IR: mulAdd takes floating-point operands of one dtype");
  if (a->isConstant() && b->isConstant() && c->isConstant())
    return constant(std::fma(a->real(), b->real(), c->real()), a->dtype());
  Expr node;
  node.kind_ = ExprKind::MulAdd;
  node.dtype_ = a->dtype();
  node.operands_ = {a, b, c};
  return intern(std::move(node));
}

const Expr *ExprContext::add(const Expr *a, const Expr *b) {
  return binary(BinaryOp::Add, a, b);
}
const Expr *ExprContext::mul(const Expr *a, const Expr *b) {
  return binary(BinaryOp::Mul, a, b);
}
const Expr *ExprContext::floorDiv(const Expr *a, int64_t divisor) {
  return binary(BinaryOp::FloorDiv, a, integer(divisor));
}
const Expr *ExprContext::mod(const Expr *a, int64_t divisor) {
  return binary(BinaryOp::Mod, a, integer(divisor));
}

const Expr *ExprContext::replace(
    const Expr *expr,
    const std::unordered_map<const Expr *, const Expr *> &replacements) {
  std::unordered_map<const Expr *, const Expr *> memo;
  std::function<const Expr *(const Expr *)> rewrite =
      [&](const Expr *node) -> const Expr * {
    if (auto found = replacements.find(node); found != replacements.end())
      return found->second;
    if (node->operands().empty())
      return node;
    if (auto done = memo.find(node); done != memo.end())
      return done->second;
    std::vector<const Expr *> operands;
    bool changed = false;
    for (const Expr *operand : node->operands()) {
      operands.push_back(rewrite(operand));
      changed |= operands.back() != operand;
    }
    const Expr *result = node;
    if (changed) {
      switch (node->kind()) {
      case ExprKind::Load:
        result = load(node->id(), node->dtype(), operands[0]);
        break;
      case ExprKind::Unary:
        result = unary(node->unaryOp(), operands[0]);
        break;
      case ExprKind::Binary:
        result = binary(node->binaryOp(), operands[0], operands[1]);
        break;
      case ExprKind::Where:
        result = where(operands[0], operands[1], operands[2]);
        break;
      case ExprKind::Cast:
        result = cast(operands[0], node->dtype());
        break;
      case ExprKind::MulAdd:
        result = mulAdd(operands[0], operands[1], operands[2]);
        break;
      default:
        break;
      }
    }
    memo[node] = result;
    return result;
  };
  return rewrite(expr);
}

const Expr *ExprContext::substituteVars(const Expr *expr,
                                        const std::vector<const Expr *> &vars) {
  std::unordered_map<const Expr *, const Expr *> replacements;
  for (size_t number = 0; number < vars.size(); ++number)
    if (vars[number])
      replacements[var(static_cast<int64_t>(number))] = vars[number];
  return replace(expr, replacements);
}

int64_t floorDivide(int64_t value, int64_t divisor) {
  return value / divisor -
         ((value % divisor != 0) && ((value < 0) != (divisor < 0)));
}

namespace {

// affineCoefficient over a DAG: each node's coefficient computed once.
std::optional<int64_t> affineCoefficientOf(
    const Expr *index, int64_t var,
    std::unordered_map<const Expr *, std::optional<int64_t>> &memo) {
  if (auto done = memo.find(index); done != memo.end())
    return done->second;
  std::optional<int64_t> result;
  bool decided = false;
  switch (index->kind()) {
  case ExprKind::Var:
    result = index->id() == var ? 1 : 0;
    decided = true;
    break;
  case ExprKind::Constant:
    result = 0;
    decided = true;
    break;
  case ExprKind::Binary: {
    BinaryOp op = index->binaryOp();
    if (op == BinaryOp::Add || op == BinaryOp::Sub) {
      auto a = affineCoefficientOf(index->operand(0), var, memo);
      auto b = affineCoefficientOf(index->operand(1), var, memo);
      if (a && b)
        result = op == BinaryOp::Add ? *a + *b : *a - *b;
      decided = true;
      break;
    }
    if (op == BinaryOp::Mul) {
      for (int side = 0; side < 2 && !decided; ++side)
        if (index->operand(side)->isConstant()) {
          auto other = affineCoefficientOf(index->operand(1 - side), var, memo);
          if (other)
            result = *other * index->operand(side)->integer();
          decided = true;
        }
    }
    break;
  }
  default:
    break;
  }
  if (!decided && !dependsOnVar(index, var))
    result = 0;
  memo[index] = result;
  return result;
}

} // namespace

SymSize sizeOfExpr(const Expr *expr) {
  if (expr->dtype() != DType::Int64)
    return nullptr;
  switch (expr->kind()) {
  case ExprKind::Constant:
    return size::constant(expr->integer());
  case ExprKind::Symbol:
    return size::symbol(expr->id());
  case ExprKind::Binary: {
    SymSize a = sizeOfExpr(expr->operand(0));
    SymSize b = a ? sizeOfExpr(expr->operand(1)) : nullptr;
    if (!b)
      return nullptr;
    switch (expr->binaryOp()) {
    case BinaryOp::Add:
      return size::add(a, b);
    case BinaryOp::Sub:
      return size::sub(a, b);
    case BinaryOp::Mul:
      return size::mul(a, b);
    case BinaryOp::FloorDiv:
      return b->isConstant() && b->value() == 0 ? nullptr
                                                : size::floorDiv(a, b);
    case BinaryOp::Mod:
      return b->isConstant() && b->value() == 0 ? nullptr : size::mod(a, b);
    case BinaryOp::Max:
      return size::max(a, b);
    default:
      return nullptr;
    }
  }
  default:
    return nullptr;
  }
}

namespace {

std::optional<SymSize> symbolicCoefficientOf(
    const Expr *index, int64_t var,
    std::unordered_map<const Expr *, std::optional<SymSize>> &memo) {
  if (auto done = memo.find(index); done != memo.end())
    return done->second;
  std::optional<SymSize> result;
  if (!dependsOnVar(index, var)) {
    result = size::constant(0);
  } else if (index->kind() == ExprKind::Var) {
    result = size::constant(1);
  } else if (index->kind() == ExprKind::Binary) {
    BinaryOp op = index->binaryOp();
    if (op == BinaryOp::Add || op == BinaryOp::Sub) {
      auto a = symbolicCoefficientOf(index->operand(0), var, memo);
      auto b = a ? symbolicCoefficientOf(index->operand(1), var, memo)
                 : std::nullopt;
      if (a && b)
        result = op == BinaryOp::Add ? size::add(*a, *b) : size::sub(*a, *b);
    } else if (op == BinaryOp::Mul) {
      for (int side = 0; side < 2 && !result; ++side) {
        SymSize factor = sizeOfExpr(index->operand(side));
        if (!factor)
          continue;
        if (auto other =
                symbolicCoefficientOf(index->operand(1 - side), var, memo))
          result = size::mul(*other, factor);
      }
    }
  }
  memo[index] = result;
  return result;
}

} // namespace

std::optional<SymSize> symbolicCoefficient(const Expr *index, int64_t var) {
  std::unordered_map<const Expr *, std::optional<SymSize>> memo;
  return symbolicCoefficientOf(index, var, memo);
}

std::optional<int64_t> affineCoefficient(const Expr *index, int64_t var) {
  std::unordered_map<const Expr *, std::optional<int64_t>> memo;
  return affineCoefficientOf(index, var, memo);
}

bool readsDigitsFlat(const Expr *index, int64_t firstDigit,
                     const std::vector<int64_t> &digitExtents) {
  if (anyNode(index, [](const Expr *node) {
        return node->kind() == ExprKind::Load ||
               node->kind() == ExprKind::Symbol;
      }))
    return false;
  std::vector<int64_t> coefficients;
  for (size_t digit = 0; digit < digitExtents.size(); ++digit) {
    std::optional<int64_t> coefficient =
        affineCoefficient(index, firstDigit + static_cast<int64_t>(digit));
    if (!coefficient)
      return false;
    coefficients.push_back(*coefficient);
  }
  for (size_t digit = 0; digit + 1 < coefficients.size(); ++digit)
    if (digitExtents[digit] != 1 &&
        coefficients[digit] !=
            coefficients[digit + 1] * digitExtents[digit + 1])
      return false;
  return true;
}

bool loadsReadDigitsFlat(const Expr *value, int64_t firstDigit,
                         const std::vector<int64_t> &digitExtents) {
  int64_t end = firstDigit + static_cast<int64_t>(digitExtents.size());
  // A load whose index is not flat, or a digit read outside a load's index.
  return !anyNode(
      value,
      [&](const Expr *node) {
        if (node->kind() == ExprKind::Load)
          return !readsDigitsFlat(node->index(), firstDigit, digitExtents);
        return node->kind() == ExprKind::Var && node->id() >= firstDigit &&
               node->id() < end;
      },
      [](const Expr *node) { return node->kind() != ExprKind::Load; });
}

bool anyNode(const Expr *root, const std::function<bool(const Expr *)> &match,
             const std::function<bool(const Expr *)> &descend) {
  std::unordered_set<const Expr *> seen;
  std::vector<const Expr *> pending{root};
  while (!pending.empty()) {
    const Expr *node = pending.back();
    pending.pop_back();
    if (!seen.insert(node).second)
      continue;
    if (match(node))
      return true;
    if (!descend || descend(node))
      for (const Expr *operand : node->operands())
        pending.push_back(operand);
  }
  return false;
}

bool dependsOnVar(const Expr *expr, int64_t var) {
  return anyNode(expr, [&](const Expr *node) {
    return node->kind() == ExprKind::Var && node->id() == var;
  });
}

bool dependsOnSymbol(const Expr *expr) {
  return anyNode(
      expr, [](const Expr *node) { return node->kind() == ExprKind::Symbol; });
}

bool isCheapArithmetic(const Expr *expr) {
  auto costly = [](const Expr *node) {
    if (node->kind() == ExprKind::Unary)
      switch (node->unaryOp()) {
      case UnaryOp::Neg:
      case UnaryOp::Abs:
      case UnaryOp::Sign:
      case UnaryOp::Floor:
      case UnaryOp::Ceil:
      case UnaryOp::Round:
      case UnaryOp::Trunc:
      case UnaryOp::LogicalNot:
      case UnaryOp::IsNan:
      case UnaryOp::IsInf:
        return false;
      default:
        return true;
      }
    if (node->kind() == ExprKind::Binary)
      switch (node->binaryOp()) {
      case BinaryOp::Div:
      case BinaryOp::FloorDiv:
      case BinaryOp::Mod:
      case BinaryOp::Fmod:
      case BinaryOp::Pow:
      case BinaryOp::Atan2:
        return true;
      default:
        return false;
      }
    return false;
  };
  return !anyNode(expr, costly, [](const Expr *node) {
    return node->kind() != ExprKind::Load;
  });
}

int64_t operationCount(const Expr *expr,
                       std::unordered_set<const Expr *> &seen) {
  int64_t count = 0;
  std::vector<const Expr *> pending{expr};
  while (!pending.empty()) {
    const Expr *node = pending.back();
    pending.pop_back();
    if (node->operands().empty() || !seen.insert(node).second)
      continue;
    ++count;
    for (const Expr *operand : node->operands())
      pending.push_back(operand);
  }
  return count;
}

std::vector<const Expr *> loadsOf(const Expr *expr) {
  std::vector<const Expr *> loads;
  std::unordered_set<const Expr *> seen;
  std::function<void(const Expr *)> visit = [&](const Expr *node) {
    if (!seen.insert(node).second)
      return;
    if (node->kind() == ExprKind::Load)
      loads.push_back(node);
    for (const Expr *operand : node->operands())
      visit(operand);
  };
  visit(expr);
  return loads;
}

std::string exprToString(const Expr *expr) {
  std::ostringstream out;
  switch (expr->kind()) {
  case ExprKind::Constant:
    if (isFloatingPoint(expr->dtype()))
      out << expr->real();
    else
      out << expr->integer();
    if (expr->dtype() != DType::Int64)
      out << ":" << dtypeShortName(expr->dtype());
    break;
  case ExprKind::Var:
    out << "v" << expr->id();
    break;
  case ExprKind::Symbol:
    out << "s" << expr->id();
    break;
  case ExprKind::Load:
    out << "load(buf" << expr->id() << ", " << exprToString(expr->index())
        << ")";
    break;
  case ExprKind::ReductionValue:
    out << "red" << expr->id();
    break;
  case ExprKind::Unary:
    out << unaryOpName(expr->unaryOp()) << "(" << exprToString(expr->operand(0))
        << ")";
    break;
  case ExprKind::Binary:
    if (expr->dtype() == DType::Int64 && (expr->binaryOp() == BinaryOp::Add ||
                                          expr->binaryOp() == BinaryOp::Mul)) {
      out << "(" << exprToString(expr->operand(0))
          << (expr->binaryOp() == BinaryOp::Add ? " + " : "*")
          << exprToString(expr->operand(1)) << ")";
      break;
    }
    out << binaryOpName(expr->binaryOp()) << "("
        << exprToString(expr->operand(0)) << ", "
        << exprToString(expr->operand(1)) << ")";
    break;
  case ExprKind::Where:
    out << "where(" << exprToString(expr->operand(0)) << ", "
        << exprToString(expr->operand(1)) << ", "
        << exprToString(expr->operand(2)) << ")";
    break;
  case ExprKind::Cast:
    out << "cast<" << dtypeShortName(expr->dtype()) << ">("
        << exprToString(expr->operand(0)) << ")";
    break;
  case ExprKind::MulAdd:
    out << "muladd(" << exprToString(expr->operand(0)) << ", "
        << exprToString(expr->operand(1)) << ", "
        << exprToString(expr->operand(2)) << ")";
    break;
  }
  return out.str();
}

DType Reduction::dtype() const {
  switch (op) {
  case ReduceOp::ArgMax:
  case ReduceOp::ArgMin:
    return DType::Int64;
  case ReduceOp::Any:
  case ReduceOp::All:
    return DType::Bool;
  default:
    return value->dtype();
  }
}

void forEachExpr(const Loop &loop,
                 const std::function<void(const Expr *)> &visit) {
  for (const Reduction &reduction : loop.reductions)
    visit(reduction.value);
  for (const Store &store : loop.stores) {
    visit(store.index);
    visit(store.value);
  }
}

void rewriteExprs(Loop &loop,
                  const std::function<const Expr *(const Expr *)> &rewrite) {
  for (Reduction &reduction : loop.reductions)
    reduction.value = rewrite(reduction.value);
  for (Store &store : loop.stores) {
    store.index = rewrite(store.index);
    store.value = rewrite(store.value);
  }
}

void forEachExpr(const Kernel &kernel,
                 const std::function<void(const Expr *)> &visit) {
  for (const Loop &loop : kernel.loops)
    forEachExpr(loop, visit);
}

void rewriteExprs(Kernel &kernel,
                  const std::function<const Expr *(const Expr *)> &rewrite) {
  for (Loop &loop : kernel.loops)
    rewriteExprs(loop, rewrite);
}

int64_t Kernel::reductionCount() const {
  int64_t count = 0;
  for (const Loop &loop : loops)
    count += static_cast<int64_t>(loop.reductions.size());
  return count;
}

int64_t Program::rootOf(int64_t buffer) const {
  while (buffers.at(buffer).kind == BufferKind::View)
    buffer = buffers[buffer].base;
  return buffer;
}

int64_t Program::operandBuffer(const Step &step, const Value *value) const {
  for (const auto &[operand, buffer] : step.operandBuffers)
    if (operand == value)
      return buffer;
  auto found = bufferOf.find(value);
  return found == bufferOf.end() ? -1 : found->second;
}

std::unordered_set<int64_t> Program::namedRoots() const {
  std::unordered_set<int64_t> roots;
  for (const auto &[value, buffer] : bufferOf)
    roots.insert(rootOf(buffer));
  for (const ProgramOutput &output : outputs)
    if (output.buffer >= 0)
      roots.insert(rootOf(output.buffer));
  return roots;
}

int64_t Program::addBuffer(Buffer buffer) {
  if (buffer.name.empty())
    buffer.name = "buf" + std::to_string(buffers.size());
  buffers.push_back(std::move(buffer));
  return static_cast<int64_t>(buffers.size()) - 1;
}

Ranges::Ranges(std::initializer_list<int64_t> values) {
  for (int64_t value : values)
    push_back(size::constant(value));
}

Ranges::Ranges(const std::vector<int64_t> &values) {
  for (int64_t value : values)
    push_back(size::constant(value));
}

bool Ranges::isStatic() const {
  for (SymSize range : *this)
    if (!range->isConstant())
      return false;
  return true;
}

Shape Ranges::constants() const {
  Shape values;
  for (SymSize range : *this) {
    if (!range->isConstant())
      throw Error("loop IR: range " + range->str() +
                  " varies between calls where a constant is needed");
    values.push_back(range->value());
  }
  return values;
}

SymSize Ranges::numel() const { return size::product(*this); }

std::string rangesToString(const Ranges &ranges, int64_t firstVar) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranges.size(); ++i)
    out << (i ? ", " : "") << "v" << firstVar + static_cast<int64_t>(i) << " < "
        << ranges[i]->str();
  out << "]";
  return out.str();
}

int64_t Program::hint(SymSize size) const {
  if (auto value = size->constant())
    return *value;
  return size::evaluate(size, symbolHints);
}

Shape Program::hints(const Ranges &ranges) const {
  Shape values;
  for (SymSize range : ranges)
    values.push_back(hint(range));
  return values;
}

namespace {

std::string_view bufferKindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::Input:
    return "input";
  case BufferKind::Constant:
    return "constant";
  case BufferKind::Temporary:
    return "temporary";
  case BufferKind::Tensor:
    return "tensor";
  case BufferKind::View:
    return "view";
  }
  return "?";
}

} // namespace

std::string kernelToString(const Kernel &kernel, const Program &) {
  std::ostringstream out;
  int64_t outer = static_cast<int64_t>(kernel.outerRanges.size());
  out << "kernel " << kernel.name << " "
      << rangesToString(kernel.outerRanges, 0);
  if (!kernel.origin.empty())
    out << "  # " << kernel.origin;
  out << "\n";
  int64_t reduction = 0;
  for (const Loop &loop : kernel.loops) {
    out << "  loop " << rangesToString(loop.ranges, outer) << "\n";
    for (const Reduction &r : loop.reductions)
      out << "    red" << reduction++ << " = " << reduceOpName(r.op) << "("
          << exprToString(r.value) << ")\n";
    for (const Store &store : loop.stores)
      out << "    buf" << store.buffer << "[" << exprToString(store.index)
          << "] = " << exprToString(store.value) << "\n";
  }
  return out.str();
}

std::string Program::str() const {
  std::ostringstream out;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer &buffer = buffers[i];
    out << "buf" << i << " " << buffer.name << ": "
        << bufferKindName(buffer.kind) << " " << buffer.meta.str();
    if (buffer.kind == BufferKind::Input)
      out << " (input " << buffer.graphInput << ")";
    if (buffer.kind == BufferKind::View)
      out << " (of buf" << buffer.base << ")";
    if (buffer.kind == BufferKind::Temporary && buffer.workspaceOffset >= 0)
      out << " @" << buffer.workspaceOffset;
    out << "\n";
  }
  for (const Step &step : steps) {
    if (step.kind == Step::Kind::Kernel) {
      out << kernelToString(step.kernel, *this);
      continue;
    }
    out << "extern " << step.node->schema()->qualifiedName();
    for (const auto &[operand, buffer] : step.operandBuffers)
      out << " (%" << operand->name() << " from buf" << buffer << ")";
    out << " ->";
    for (int64_t result : step.results)
      out << " buf" << result;
    out << "\n";
  }
  out << "outputs:";
  for (const ProgramOutput &output : outputs)
    out << " "
        << (output.buffer >= 0 ? "buf" + std::to_string(output.buffer)
                               : std::string("constant"));
  out << "\n";
  return out.str();
}

} // namespace kiln::loop
