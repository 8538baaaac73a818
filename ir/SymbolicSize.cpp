// Symbolic sizes: interning, the polynomial normal form and evaluation.
// Depends on ir/Error.h only.
#include "ir/SymbolicSize.h"

#include "ir/Error.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace kiln {

/// Interns size expressions for the whole process (see SizeExpr).
struct SizeInterner {
  std::mutex mutex;
  std::unordered_map<std::string, std::unique_ptr<SizeExpr>> nodes;

  static SizeInterner &get() {
    static SizeInterner *interner = new SizeInterner(); // never destroyed
    return *interner;
  }

  SymSize intern(SizeKind kind, int64_t value,
                 std::vector<const SizeExpr *> operands, std::string text) {
    // The text is the identity: operands are canonical, so two nodes print
    // the same exactly when they are the same expression.
    std::string key = std::to_string(static_cast<int>(kind)) + "|" + text;
    std::lock_guard<std::mutex> lock(mutex);
    auto found = nodes.find(key);
    if (found != nodes.end())
      return found->second.get();
    auto node = std::make_unique<SizeExpr>();
    node->kind_ = kind;
    node->value_ = value;
    node->operands_ = std::move(operands);
    node->text_ = std::move(text);
    SymSize result = node.get();
    nodes.emplace(std::move(key), std::move(node));
    return result;
  }
};

namespace size {
namespace {

int64_t floorDivide(int64_t value, int64_t divisor) {
  int64_t quotient = value / divisor;
  if ((value % divisor != 0) && ((value < 0) != (divisor < 0)))
    --quotient;
  return quotient;
}

int64_t pythonMod(int64_t value, int64_t divisor) {
  return value - floorDivide(value, divisor) * divisor;
}

/// Compares texts with runs of digits compared as numbers, so that s2 comes
/// before s10; texts that read the same number differently, by their bytes.
int compareNatural(const std::string &a, const std::string &b) {
  auto isDigit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (isDigit(a[i]) && isDigit(b[j])) {
      size_t endA = i, endB = j;
      while (endA < a.size() && isDigit(a[endA]))
        ++endA;
      while (endB < b.size() && isDigit(b[endB]))
        ++endB;
      size_t startA = i, startB = j;
      while (startA + 1 < endA && a[startA] == '0')
        ++startA;
      while (startB + 1 < endB && b[startB] == '0')
        ++startB;
      if (endA - startA != endB - startB)
        return endA - startA < endB - startB ? -1 : 1;
      if (int order =
              a.compare(startA, endA - startA, b, startB, endB - startB))
        return order;
      i = endA;
      j = endB;
      continue;
    }
    if (a[i] != b[j])
      return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j])
                 ? -1
                 : 1;
    ++i;
    ++j;
  }
  if (i != a.size() || j != b.size())
    return i == a.size() ? -1 : 1;
  return a.compare(b);
}

/// The order of atoms in a product, of monomials in a sum and of the
/// operands of max: by text, symbols by number. The text and kind are the
/// node's identity, so this is a total order.
bool byText(SymSize a, SymSize b) {
  if (int order = compareNatural(a->str(), b->str()))
    return order < 0;
  return a->kind() < b->kind();
}

/// Atoms (symbols and the nodes that are not sums or products), sorted by
/// byText, with repeats: a monomial.
using Monomial = std::vector<SymSize>;
struct MonomialOrder {
  bool operator()(const Monomial &a, const Monomial &b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        byText);
  }
};
/// A polynomial: coefficient per monomial (the empty one is the constant).
using Polynomial = std::map<Monomial, int64_t, MonomialOrder>;

/// Parentheses where an operand would otherwise read differently: the text
/// reads as Python. A division or modulo is wrapped too: `3*s0//2`, `-s0//2`
/// and `s0//s1//2` would mean (3*s0)//2, (-s0)//2 and (s0//s1)//2.
std::string wrapped(SymSize expr) {
  if (expr->kind() == SizeKind::Add || expr->kind() == SizeKind::Mul ||
      expr->kind() == SizeKind::FloorDiv || expr->kind() == SizeKind::Mod ||
      (expr->isConstant() && expr->value() < 0))
    return "(" + expr->str() + ")";
  return expr->str();
}

SymSize monomialExpr(int64_t coefficient, const Monomial &atoms) {
  if (atoms.empty())
    return constant(coefficient);
  if (atoms.size() == 1 && coefficient == 1)
    return atoms[0];
  // Printed with the coefficient last, its sign in front: "s0*s1*64",
  // "-s0*3" (which Python reads as (-s0)*3, the same).
  std::vector<SymSize> factors;
  std::string text = coefficient < 0 ? "-" : "";
  if (coefficient != 1)
    factors.push_back(constant(coefficient));
  for (size_t i = 0; i < atoms.size(); ++i) {
    factors.push_back(atoms[i]);
    text += (i ? "*" : "") + wrapped(atoms[i]);
  }
  if (coefficient != 1 && coefficient != -1) {
    // The magnitude, without overflow for the most negative coefficient.
    uint64_t magnitude = coefficient < 0
                             ? 0 - static_cast<uint64_t>(coefficient)
                             : static_cast<uint64_t>(coefficient);
    text += "*" + std::to_string(magnitude);
  }
  return SizeInterner::get().intern(SizeKind::Mul, 0, std::move(factors),
                                    std::move(text));
}

/// The sum of the polynomial's terms: ordered by their monomials (the
/// polynomial's order, so the coefficients do not move a term), the
/// constant last.
SymSize fromPolynomial(const Polynomial &polynomial) {
  std::vector<SymSize> terms;
  int64_t constantTerm = 0;
  for (const auto &[atoms, coefficient] : polynomial) {
    if (coefficient == 0)
      continue;
    if (atoms.empty())
      constantTerm = coefficient;
    else
      terms.push_back(monomialExpr(coefficient, atoms));
  }
  if (terms.empty())
    return constant(constantTerm);
  if (constantTerm != 0)
    terms.push_back(constant(constantTerm));
  if (terms.size() == 1)
    return terms[0];
  std::string text;
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string &term = terms[i]->str();
    if (i == 0)
      text = term;
    else if (!term.empty() && term[0] == '-')
      text += " - " + term.substr(1);
    else
      text += " + " + term;
  }
  return SizeInterner::get().intern(SizeKind::Add, 0, std::move(terms),
                                    std::move(text));
}

Polynomial toPolynomial(SymSize expr) {
  Polynomial result;
  switch (expr->kind()) {
  case SizeKind::Constant:
    if (expr->value() != 0)
      result[{}] = expr->value();
    return result;
  case SizeKind::Add:
    for (SymSize term : expr->operands())
      for (const auto &[atoms, coefficient] : toPolynomial(term))
        result[atoms] += coefficient;
    return result;
  case SizeKind::Mul: {
    int64_t coefficient = 1;
    Monomial atoms;
    for (SymSize factor : expr->operands()) {
      if (factor->isConstant())
        coefficient *= factor->value();
      else
        atoms.push_back(factor);
    }
    std::sort(atoms.begin(), atoms.end(), byText);
    result[atoms] = coefficient;
    return result;
  }
  default:
    result[{expr}] = 1;
    return result;
  }
}

Polynomial multiply(const Polynomial &a, const Polynomial &b) {
  Polynomial result;
  for (const auto &[atomsA, coefficientA] : a)
    for (const auto &[atomsB, coefficientB] : b) {
      Monomial atoms = atomsA;
      atoms.insert(atoms.end(), atomsB.begin(), atomsB.end());
      std::sort(atoms.begin(), atoms.end(), byText);
      result[atoms] += coefficientA * coefficientB;
    }
  return result;
}

SymSize binaryAtom(SizeKind kind, SymSize a, SymSize b,
                   const std::string &text) {
  return SizeInterner::get().intern(kind, 0, {a, b}, text);
}

} // namespace

SymSize constant(int64_t value) {
  return SizeInterner::get().intern(SizeKind::Constant, value, {},
                                    std::to_string(value));
}

SymSize symbol(int64_t number) {
  if (number < 0)
    throw Error("symbolic size: symbol number " + std::to_string(number) +
                " is negative");
  return SizeInterner::get().intern(SizeKind::Symbol, number, {},
                                    "s" + std::to_string(number));
}

SymSize add(SymSize a, SymSize b) {
  if (a->isConstant() && b->isConstant())
    return constant(a->value() + b->value());
  Polynomial sum = toPolynomial(a);
  for (const auto &[atoms, coefficient] : toPolynomial(b))
    sum[atoms] += coefficient;
  return fromPolynomial(sum);
}

SymSize mul(SymSize a, SymSize b) {
  if (a->isConstant() && b->isConstant())
    return constant(a->value() * b->value());
  return fromPolynomial(multiply(toPolynomial(a), toPolynomial(b)));
}

SymSize neg(SymSize a) { return mul(a, constant(-1)); }
SymSize sub(SymSize a, SymSize b) { return add(a, neg(b)); }

SymSize product(const std::vector<SymSize> &factors) {
  SymSize result = constant(1);
  for (SymSize factor : factors)
    result = mul(result, factor);
  return result;
}

SymSize floorDiv(SymSize a, SymSize b) {
  if (std::optional<int64_t> divisor = b->constant()) {
    if (*divisor == 0)
      throw Error("symbolic size: division by zero");
    if (*divisor == 1)
      return a;
    if (a->isConstant())
      return constant(floorDivide(a->value(), *divisor));
    if (*divisor > 0) {
      // (c*q + r) // c == q + r // c for integers q and r.
      Polynomial quotient, remainder;
      for (const auto &[atoms, coefficient] : toPolynomial(a)) {
        if (coefficient % *divisor == 0)
          quotient[atoms] = coefficient / *divisor;
        else
          remainder[atoms] = coefficient;
      }
      if (!quotient.empty()) {
        return add(fromPolynomial(quotient),
                   floorDiv(fromPolynomial(remainder), b));
      }
      // (x // c1) // c2 == x // (c1 * c2) for positive c1, c2.
      if (a->kind() == SizeKind::FloorDiv && a->operands()[1]->isConstant() &&
          a->operands()[1]->value() > 0)
        return floorDiv(a->operands()[0],
                        constant(a->operands()[1]->value() * *divisor));
    }
  } else if (a == b) {
    // Exact wherever a is nonzero, and a symbol is at least 2; where a
    // (s0 - s1, say) is zero, the division by zero is dropped, as x - x
    // drops the divisions in x.
    return constant(1);
  }
  return binaryAtom(SizeKind::FloorDiv, a, b, wrapped(a) + "//" + wrapped(b));
}

SymSize mod(SymSize a, SymSize b) {
  if (std::optional<int64_t> divisor = b->constant()) {
    if (*divisor == 0)
      throw Error("symbolic size: modulo by zero");
    if (*divisor == 1 || *divisor == -1)
      return constant(0);
    if (a->isConstant())
      return constant(pythonMod(a->value(), *divisor));
    if (*divisor > 0) {
      // (c*q + r) % c == r % c.
      Polynomial remainder;
      bool dropped = false;
      for (const auto &[atoms, coefficient] : toPolynomial(a)) {
        int64_t kept = pythonMod(coefficient, *divisor);
        dropped = dropped || kept != coefficient;
        if (kept != 0)
          remainder[atoms] = kept;
      }
      if (dropped)
        return mod(fromPolynomial(remainder), b);
    }
  } else if (a == b) {
    return constant(0); // as x // x above
  }
  return binaryAtom(SizeKind::Mod, a, b, wrapped(a) + " % " + wrapped(b));
}

SymSize max(SymSize a, SymSize b) {
  if (a->isConstant() && b->isConstant())
    return constant(std::max(a->value(), b->value()));
  if (a == b)
    return a;
  if (byText(b, a))
    std::swap(a, b);
  return binaryAtom(SizeKind::Max, a, b,
                    "max(" + a->str() + ", " + b->str() + ")");
}

int64_t evaluate(SymSize expr, const std::vector<int64_t> &symbols) {
  switch (expr->kind()) {
  case SizeKind::Constant:
    return expr->value();
  case SizeKind::Symbol:
    if (expr->value() < 0 ||
        expr->value() >= static_cast<int64_t>(symbols.size()))
      throw Error("symbolic size " + expr->str() + " has no value");
    return symbols[expr->value()];
  case SizeKind::Add: {
    int64_t sum = 0;
    for (SymSize term : expr->operands())
      sum += evaluate(term, symbols);
    return sum;
  }
  case SizeKind::Mul: {
    int64_t result = 1;
    for (SymSize factor : expr->operands())
      result *= evaluate(factor, symbols);
    return result;
  }
  case SizeKind::FloorDiv:
  case SizeKind::Mod: {
    int64_t divisor = evaluate(expr->operands()[1], symbols);
    if (divisor == 0)
      throw Error("symbolic size " + expr->str() + ": division by zero");
    int64_t value = evaluate(expr->operands()[0], symbols);
    return expr->kind() == SizeKind::FloorDiv ? floorDivide(value, divisor)
                                              : pythonMod(value, divisor);
  }
  case SizeKind::Max:
    return std::max(evaluate(expr->operands()[0], symbols),
                    evaluate(expr->operands()[1], symbols));
  }
  throw Error("symbolic size: unknown kind");
}

SymSize substitute(SymSize expr, const std::vector<SymSize> &replacements) {
  switch (expr->kind()) {
  case SizeKind::Constant:
    return expr;
  case SizeKind::Symbol:
    if (expr->value() < static_cast<int64_t>(replacements.size()) &&
        replacements[expr->value()])
      return replacements[expr->value()];
    return expr;
  case SizeKind::Add: {
    SymSize sum = constant(0);
    for (SymSize term : expr->operands())
      sum = add(sum, substitute(term, replacements));
    return sum;
  }
  case SizeKind::Mul: {
    SymSize result = constant(1);
    for (SymSize factor : expr->operands())
      result = mul(result, substitute(factor, replacements));
    return result;
  }
  case SizeKind::FloorDiv:
    return floorDiv(substitute(expr->operands()[0], replacements),
                    substitute(expr->operands()[1], replacements));
  case SizeKind::Mod:
    return mod(substitute(expr->operands()[0], replacements),
               substitute(expr->operands()[1], replacements));
  case SizeKind::Max:
    return max(substitute(expr->operands()[0], replacements),
               substitute(expr->operands()[1], replacements));
  }
  return expr;
}

bool isSymbolic(SymSize expr) { return !symbolsOf(expr).empty(); }

std::vector<int64_t> symbolsOf(SymSize expr) {
  std::vector<int64_t> result;
  std::vector<SymSize> pending{expr};
  while (!pending.empty()) {
    SymSize next = pending.back();
    pending.pop_back();
    if (next->kind() == SizeKind::Symbol)
      result.push_back(next->value());
    for (SymSize operand : next->operands())
      pending.push_back(operand);
  }
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

std::vector<std::pair<int64_t, SymSize>> termsOf(SymSize expr) {
  // In the printed order: the constant (the empty monomial, first in the
  // polynomial) last.
  std::vector<std::pair<int64_t, SymSize>> terms;
  std::optional<int64_t> constantTerm;
  for (const auto &[atoms, coefficient] : toPolynomial(expr)) {
    if (atoms.empty())
      constantTerm = coefficient;
    else
      terms.emplace_back(coefficient, monomialExpr(1, atoms));
  }
  if (constantTerm || terms.empty())
    terms.emplace_back(constantTerm.value_or(0), nullptr);
  return terms;
}

} // namespace size

std::string_view relationOpText(SizeRelation::Op op) {
  switch (op) {
  case SizeRelation::Op::Eq:
    return "==";
  case SizeRelation::Op::Ne:
    return "!=";
  case SizeRelation::Op::Lt:
    return "<";
  case SizeRelation::Op::Le:
    return "<=";
  case SizeRelation::Op::Gt:
    return ">";
  case SizeRelation::Op::Ge:
    return ">=";
  }
  return "?";
}

bool SizeRelation::holds(const std::vector<int64_t> &symbols) const {
  int64_t a = size::evaluate(lhs, symbols);
  int64_t b = size::evaluate(rhs, symbols);
  switch (op) {
  case Op::Eq:
    return a == b;
  case Op::Ne:
    return a != b;
  case Op::Lt:
    return a < b;
  case Op::Le:
    return a <= b;
  case Op::Gt:
    return a > b;
  case Op::Ge:
    return a >= b;
  }
  return false;
}

std::string SizeRelation::str() const {
  return lhs->str() + " " + std::string(relationOpText(op)) + " " + rhs->str();
}

} // namespace kiln
