// Simplifies floor divisions and modulos of index expressions with the
// ranges of the loop variables: a view's delinearised index such as
// mod(v0*65536 + v1*256 + v2, 256) with v2 < 256 becomes v2, so that loads
// and stores are affine again (contiguous vectors, no integer division).
// Depends on passes/Scheduler.h and ir/LoopIR.h.
#include "passes/Scheduler.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kiln {

using loop::BinaryOp;
using loop::Expr;
using loop::ExprKind;
using loop::floorDivide;

namespace {

struct Interval {
  int64_t low, high; // inclusive
};

class IndexSimplifier {
public:
  IndexSimplifier(loop::ExprContext &exprs, std::vector<int64_t> varRanges,
                  std::vector<SymSize> symbolicRanges)
      : exprs_(exprs), varRanges_(std::move(varRanges)),
        symbolicRanges_(std::move(symbolicRanges)) {}

  const Expr *simplify(const Expr *root) {
    // Post-order: inner divisions first, so outer ones see their results.
    std::vector<const Expr *> order;
    std::unordered_set<const Expr *> seen;
    std::function<void(const Expr *)> visit = [&](const Expr *node) {
      if (!seen.insert(node).second)
        return;
      for (const Expr *operand : node->operands())
        visit(operand);
      order.push_back(node);
    };
    visit(root);
    for (const Expr *node : order) {
      if (const Expr *simplified = divideBySize(node)) {
        replacements_[node] = simplified;
        continue;
      }
      if (node->dtype() != DType::Int64 ||
          !(isDivision(node, BinaryOp::FloorDiv) ||
            isDivision(node, BinaryOp::Mod)))
        continue;
      int64_t divisor = node->operand(1)->integer();
      const Expr *dividend = exprs_.replace(node->operand(0), replacements_);
      const Expr *simplified =
          divide(dividend, divisor, node->binaryOp() == BinaryOp::Mod);
      if (simplified && simplified != node)
        replacements_[node] = simplified;
    }
    // Then sums, outer ones after the sums inside them.
    for (const Expr *node : order) {
      if (node->kind() != ExprKind::Binary ||
          node->binaryOp() != BinaryOp::Add || node->dtype() != DType::Int64)
        continue;
      if (const Expr *combined = recombine(exprs_.replace(node, replacements_)))
        replacements_[node] = combined;
    }
    return replacements_.empty() ? root : exprs_.replace(root, replacements_);
  }

private:
  struct Term {
    const Expr *atom;
    int64_t coefficient;
  };

  // expr = sum of coefficient * atom + constant.
  void decompose(const Expr *expr, int64_t scale, std::vector<Term> &terms,
                 int64_t &constant) {
    if (expr->isConstant() && expr->dtype() == DType::Int64) {
      constant += scale * expr->integer();
      return;
    }
    if (expr->kind() == ExprKind::Binary && expr->dtype() == DType::Int64) {
      if (expr->binaryOp() == BinaryOp::Add) {
        decompose(expr->operand(0), scale, terms, constant);
        decompose(expr->operand(1), scale, terms, constant);
        return;
      }
      if (expr->binaryOp() == BinaryOp::Mul) {
        for (int side = 0; side < 2; ++side)
          if (expr->operand(side)->isConstant()) {
            decompose(expr->operand(1 - side),
                      scale * expr->operand(side)->integer(), terms, constant);
            return;
          }
      }
    }
    terms.push_back({expr, scale});
  }

  // A variable divided by its own range where that varies between calls
  // (a delinearised view index over a dim of size s0): v // s0 is 0 and
  // v mod s0 is v. nullptr for anything else.
  const Expr *divideBySize(const Expr *node) {
    if (node->kind() != ExprKind::Binary || node->dtype() != DType::Int64 ||
        (node->binaryOp() != BinaryOp::FloorDiv &&
         node->binaryOp() != BinaryOp::Mod) ||
        node->operand(1)->isConstant())
      return nullptr;
    const Expr *dividend = exprs_.replace(node->operand(0), replacements_);
    SymSize divisor = loop::sizeOfExpr(node->operand(1));
    if (!divisor || dividend->kind() != ExprKind::Var)
      return nullptr;
    size_t var = static_cast<size_t>(dividend->id());
    if (var >= symbolicRanges_.size() || symbolicRanges_[var] != divisor)
      return nullptr;
    return node->binaryOp() == BinaryOp::Mod ? dividend : exprs_.integer(0);
  }

  static bool isDivision(const Expr *expr, BinaryOp op) {
    return expr->kind() == ExprKind::Binary && expr->binaryOp() == op &&
           expr->operand(1)->isConstant() && expr->operand(1)->integer() > 0;
  }

  // A sum in which c*k*floordiv(x, c) and k*mod(x, c) both appear, with x
  // put back in their place (x = c*floordiv(x, c) + mod(x, c) for any
  // integer x): a view's reshape of a reshape, such as
  // floordiv(v0, 8)*2048 + mod(v0, 8)*256 + v1, is v0*256 + v1 again.
  // Likewise c*k*mod(floordiv(x, c), d) and k*mod(x, c) are k*mod(x, c*d)
  // (x's digits below c and the next digit in base d): a delinearised index
  // over three dims, 1024*floordiv(v, 1024) + 32*mod(floordiv(v, 32), 32) +
  // mod(v, 32) (a group norm's group), is v. nullptr when there is no pair.
  const Expr *recombine(const Expr *sum) {
    std::vector<Term> terms;
    int64_t constant = 0;
    decompose(sum, 1, terms, constant);
    bool changed = false;
    for (bool found = true; found;) {
      found = false;
      for (size_t i = 0; i < terms.size() && !found; ++i) {
        const Expr *digit = terms[i].atom;
        if (!isDivision(digit, BinaryOp::Mod) ||
            !isDivision(digit->operand(0), BinaryOp::FloorDiv))
          continue;
        const Expr *x = digit->operand(0)->operand(0);
        int64_t low = digit->operand(0)->operand(1)->integer();
        int64_t base = digit->operand(1)->integer(), modulus;
        if (__builtin_mul_overflow(low, base, &modulus))
          continue;
        for (size_t j = 0; j < terms.size() && !found; ++j) {
          const Expr *below = terms[j].atom;
          if (!isDivision(below, BinaryOp::Mod) || below->operand(0) != x ||
              below->operand(1)->integer() != low ||
              terms[i].coefficient != terms[j].coefficient * low)
            continue;
          Term merged{exprs_.mod(x, modulus), terms[j].coefficient};
          terms.erase(terms.begin() + std::max(i, j));
          terms[std::min(i, j)] = merged;
          found = changed = true;
        }
      }
      for (size_t i = 0; i < terms.size() && !found; ++i) {
        const Expr *quotient = terms[i].atom;
        if (!isDivision(quotient, BinaryOp::FloorDiv))
          continue;
        int64_t divisor = quotient->operand(1)->integer();
        for (size_t j = 0; j < terms.size() && !found; ++j) {
          const Expr *remainder = terms[j].atom;
          if (!isDivision(remainder, BinaryOp::Mod) ||
              remainder->operand(0) != quotient->operand(0) ||
              remainder->operand(1)->integer() != divisor ||
              terms[i].coefficient != terms[j].coefficient * divisor)
            continue;
          std::vector<Term> whole;
          decompose(quotient->operand(0), terms[j].coefficient, whole,
                    constant);
          size_t at = std::min(i, j);
          terms.erase(terms.begin() + std::max(i, j));
          terms.erase(terms.begin() + at);
          terms.insert(terms.begin() + at, whole.begin(), whole.end());
          found = changed = true;
        }
      }
    }
    if (!changed)
      return nullptr;
    // Like atoms add up; those that cancel go.
    std::vector<Term> merged;
    for (const Term &term : terms) {
      auto same =
          std::find_if(merged.begin(), merged.end(),
                       [&](const Term &m) { return m.atom == term.atom; });
      if (same == merged.end())
        merged.push_back(term);
      else
        same->coefficient += term.coefficient;
    }
    merged.erase(
        std::remove_if(merged.begin(), merged.end(),
                       [](const Term &t) { return t.coefficient == 0; }),
        merged.end());
    return build(merged, constant);
  }

  std::optional<Interval> rangeOf(const Expr *expr) {
    if (expr->dtype() != DType::Int64)
      return std::nullopt;
    switch (expr->kind()) {
    case ExprKind::Constant:
      return Interval{expr->integer(), expr->integer()};
    case ExprKind::Var: {
      size_t var = static_cast<size_t>(expr->id());
      if (var >= varRanges_.size() || varRanges_[var] < 1)
        return std::nullopt;
      return Interval{0, varRanges_[var] - 1};
    }
    case ExprKind::Binary: {
      std::optional<Interval> a = rangeOf(expr->operand(0));
      if (expr->binaryOp() == BinaryOp::Mod && expr->operand(1)->isConstant() &&
          expr->operand(1)->integer() > 0)
        return Interval{0, expr->operand(1)->integer() - 1};
      std::optional<Interval> b = rangeOf(expr->operand(1));
      if (!a || !b)
        return std::nullopt;
      switch (expr->binaryOp()) {
      case BinaryOp::Add:
        return Interval{a->low + b->low, a->high + b->high};
      case BinaryOp::Sub:
        return Interval{a->low - b->high, a->high - b->low};
      // A clamped position (a concatenation's or a padding's index).
      case BinaryOp::Max:
        return Interval{std::max(a->low, b->low), std::max(a->high, b->high)};
      case BinaryOp::Min:
        return Interval{std::min(a->low, b->low), std::min(a->high, b->high)};
      case BinaryOp::Mul: {
        int64_t corners[] = {a->low * b->low, a->low * b->high,
                             a->high * b->low, a->high * b->high};
        return Interval{*std::min_element(corners, corners + 4),
                        *std::max_element(corners, corners + 4)};
      }
      case BinaryOp::FloorDiv:
        if (b->low != b->high || b->low <= 0)
          return std::nullopt;
        return Interval{floorDivide(a->low, b->low),
                        floorDivide(a->high, b->low)};
      default:
        return std::nullopt;
      }
    }
    default:
      return std::nullopt;
    }
  }

  const Expr *build(const std::vector<Term> &terms, int64_t constant) {
    const Expr *sum = exprs_.integer(constant);
    for (const Term &term : terms)
      sum = exprs_.add(sum,
                       exprs_.mul(term.atom, exprs_.integer(term.coefficient)));
    return sum;
  }

  // floordiv(dividend, divisor) or mod(dividend, divisor), simplified, or
  // nullptr when nothing is known.
  const Expr *divide(const Expr *dividend, int64_t divisor, bool modulo) {
    std::vector<Term> terms;
    int64_t constant = 0;
    decompose(dividend, 1, terms, constant);
    std::vector<Term> multiples, rest;
    for (const Term &term : terms)
      (term.coefficient % divisor == 0 ? multiples : rest).push_back(term);
    // The constant's multiple of the divisor moves to the quotient.
    int64_t constantQuotient = floorDivide(constant, divisor);
    int64_t remainder = constant - constantQuotient * divisor;
    std::optional<Interval> range = sumRange(rest, remainder);
    bool bounded = range && floorDivide(range->low, divisor) ==
                                floorDivide(range->high, divisor);
    int64_t restQuotient = bounded ? floorDivide(range->low, divisor) : 0;
    // floor(dividend / divisor) = quotient + constantQuotient + floor(rest).
    std::vector<Term> quotient;
    for (const Term &term : multiples)
      quotient.push_back({term.atom, term.coefficient / divisor});
    if (bounded) {
      if (modulo) // the rest stays within one multiple of the divisor
        return build(rest, remainder - restQuotient * divisor);
      return build(quotient, constantQuotient + restQuotient);
    }
    // Large terms with a common factor g of the divisor over small ones in
    // [0, g): floor((g A + small) / c) = floor(A / (c / g)), and
    // (g A + small) mod c = g (A mod (c / g)) + small.
    std::sort(rest.begin(), rest.end(), [](const Term &a, const Term &b) {
      return std::abs(a.coefficient) > std::abs(b.coefficient);
    });
    for (size_t split = 1; split < rest.size(); ++split) {
      int64_t factor = divisor;
      for (size_t index = 0; index < split; ++index)
        factor = std::gcd(factor, std::abs(rest[index].coefficient));
      if (factor <= 1)
        continue;
      std::vector<Term> large(rest.begin(), rest.begin() + split);
      std::vector<Term> small(rest.begin() + split, rest.end());
      std::optional<Interval> smallRange = sumRange(small, remainder);
      if (!smallRange || smallRange->low < 0 || smallRange->high >= factor)
        continue;
      for (Term &term : large)
        term.coefficient /= factor;
      const Expr *reduced = build(large, 0);
      if (modulo)
        return exprs_.add(exprs_.mul(exprs_.mod(reduced, divisor / factor),
                                     exprs_.integer(factor)),
                          build(small, remainder));
      return exprs_.add(build(quotient, constantQuotient),
                        exprs_.floorDiv(reduced, divisor / factor));
    }
    if (multiples.empty() && constantQuotient == 0)
      return nullptr;
    // floor((c A + rest) / c) = A + floor(rest / c) for any integer A.
    if (modulo)
      return exprs_.mod(build(rest, remainder), divisor);
    return exprs_.add(build(quotient, constantQuotient),
                      exprs_.floorDiv(build(rest, remainder), divisor));
  }

  // The range of sum of terms + constant, when every atom's is known.
  std::optional<Interval> sumRange(const std::vector<Term> &terms,
                                   int64_t constant) {
    Interval range{constant, constant};
    for (const Term &term : terms) {
      std::optional<Interval> atom = rangeOf(term.atom);
      if (!atom)
        return std::nullopt;
      int64_t a = atom->low * term.coefficient,
              b = atom->high * term.coefficient;
      range.low += std::min(a, b);
      range.high += std::max(a, b);
    }
    return range;
  }

  loop::ExprContext &exprs_;
  std::vector<int64_t> varRanges_;
  std::vector<SymSize> symbolicRanges_; // every variable's, as expressions
  std::unordered_map<const Expr *, const Expr *> replacements_;
};

// The factors of a monomial (a symbol, or a product of atoms), and its
// constant coefficient.
std::pair<int64_t, std::vector<SymSize>> factorsOf(SymSize monomial) {
  std::vector<SymSize> factors;
  int64_t coefficient = 1;
  auto take = [&](SymSize factor) {
    if (factor->isConstant())
      coefficient *= factor->value();
    else
      factors.push_back(factor);
  };
  if (monomial->kind() == SizeKind::Mul)
    for (SymSize factor : monomial->operands())
      take(factor);
  else
    take(monomial);
  return {coefficient, factors};
}

// `value` / `divisor` where every term of `value` is a multiple of the
// monomial `divisor` (s2 of s1*s2 + 3*s2); nullptr otherwise.
SymSize exactQuotient(SymSize value, SymSize divisor) {
  if (divisor->kind() != SizeKind::Symbol && divisor->kind() != SizeKind::Mul)
    return nullptr;
  auto [divisorCoefficient, divisorFactors] = factorsOf(divisor);
  if (divisorCoefficient <= 0)
    return nullptr;
  SymSize quotient = size::constant(0);
  for (auto [coefficient, monomial] : size::termsOf(value)) {
    if (coefficient == 0)
      continue;
    if (!monomial || coefficient % divisorCoefficient != 0)
      return nullptr;
    std::vector<SymSize> factors = factorsOf(monomial).second;
    for (SymSize factor : divisorFactors) {
      auto found = std::find(factors.begin(), factors.end(), factor);
      if (found == factors.end())
        return nullptr;
      factors.erase(found);
    }
    factors.push_back(size::constant(coefficient / divisorCoefficient));
    quotient = size::add(quotient, size::product(factors));
  }
  return quotient;
}

// Index expressions over sizes that vary, in one canonical form: a sum of
// atoms (variables, loads, divisions that do not simplify) times size
// expressions, plus a size expression, ordered by the atoms' text. A view's
// delinearised index and the index a store was written with then agree as
// pointers where they agree as sums (fusion matches loads to stores by
// pointer), and floor(x / D) * D*k + (x mod D) * k becomes x * k again.
class SymbolicIndex {
public:
  SymbolicIndex(loop::ExprContext &exprs, std::vector<SymSize> ranges)
      : exprs_(exprs), ranges_(std::move(ranges)) {}

  const Expr *canonical(const Expr *index) {
    if (auto done = memo_.find(index); done != memo_.end())
      return done->second;
    Sum sum;
    decompose(index, size::constant(1), sum);
    recombine(sum);
    const Expr *result = build(sum);
    memo_[index] = result;
    return result;
  }

private:
  struct Sum {
    std::vector<std::pair<const Expr *, SymSize>> terms; // atom, coefficient
    SymSize constant = size::constant(0);
    void add(const Expr *atom, SymSize coefficient) {
      for (auto &term : terms)
        if (term.first == atom) {
          term.second = size::add(term.second, coefficient);
          return;
        }
      terms.emplace_back(atom, coefficient);
    }
  };

  void decompose(const Expr *expr, SymSize scale, Sum &sum) {
    if (SymSize value = loop::sizeOfExpr(expr)) {
      sum.constant = size::add(sum.constant, size::mul(scale, value));
      return;
    }
    if (expr->kind() == ExprKind::Binary && expr->dtype() == DType::Int64) {
      BinaryOp op = expr->binaryOp();
      if (op == BinaryOp::Add || op == BinaryOp::Sub) {
        decompose(expr->operand(0), scale, sum);
        decompose(expr->operand(1),
                  op == BinaryOp::Add ? scale : size::neg(scale), sum);
        return;
      }
      if (op == BinaryOp::Mul)
        for (int side = 0; side < 2; ++side)
          if (SymSize factor = loop::sizeOfExpr(expr->operand(side))) {
            decompose(expr->operand(1 - side), size::mul(scale, factor), sum);
            return;
          }
      if (op == BinaryOp::FloorDiv || op == BinaryOp::Mod)
        if (SymSize divisor = loop::sizeOfExpr(expr->operand(1)))
          if (!divisor->isConstant() && divide(expr->operand(0), divisor,
                                               op == BinaryOp::Mod, scale, sum))
            return;
    }
    sum.add(atomOf(expr), scale);
  }

  // An atom with its index operands canonical (a division's dividend).
  const Expr *atomOf(const Expr *expr) {
    if (expr->kind() != ExprKind::Binary || expr->dtype() != DType::Int64 ||
        (expr->binaryOp() != BinaryOp::FloorDiv &&
         expr->binaryOp() != BinaryOp::Mod))
      return expr;
    return exprs_.binary(expr->binaryOp(), canonical(expr->operand(0)),
                         expr->operand(1));
  }

  // x // D (or x mod D) for a divisor that varies: the terms of x whose
  // coefficients D divides go to the quotient; what is left must lie in
  // [0, D) (a variable whose range is D, or nothing). False where it does
  // not.
  bool divide(const Expr *dividend, SymSize divisor, bool modulo, SymSize scale,
              Sum &sum) {
    Sum inner;
    decompose(dividend, size::constant(1), inner);
    recombine(inner);
    Sum quotient, rest;
    for (auto [atom, coefficient] : inner.terms) {
      if (SymSize part = exactQuotient(coefficient, divisor))
        quotient.add(atom, part);
      else
        rest.add(atom, coefficient);
    }
    SymSize constantQuotient = exactQuotient(inner.constant, divisor);
    if (!constantQuotient && !inner.constant->isConstant())
      return false;
    if (!constantQuotient) {
      if (inner.constant->value() != 0)
        return false;
      constantQuotient = size::constant(0);
    }
    bool bounded =
        rest.terms.empty() ||
        (rest.terms.size() == 1 && rest.terms[0].second->constant() == 1 &&
         rest.terms[0].first->kind() == ExprKind::Var &&
         static_cast<size_t>(rest.terms[0].first->id()) < ranges_.size() &&
         ranges_[rest.terms[0].first->id()] == divisor);
    if (!bounded)
      return false;
    const Sum &part = modulo ? rest : quotient;
    for (auto [atom, coefficient] : part.terms)
      sum.add(atom, size::mul(scale, coefficient));
    if (!modulo)
      sum.constant =
          size::add(sum.constant, size::mul(scale, constantQuotient));
    return true;
  }

  // q*D*k + r*k, with q = x // D and r = x mod D: x*k.
  void recombine(Sum &sum) {
    for (bool found = true; found;) {
      found = false;
      for (size_t i = 0; i < sum.terms.size() && !found; ++i) {
        const Expr *quotient = sum.terms[i].first;
        if (quotient->kind() != ExprKind::Binary ||
            quotient->binaryOp() != BinaryOp::FloorDiv)
          continue;
        SymSize divisor = loop::sizeOfExpr(quotient->operand(1));
        if (!divisor)
          continue;
        for (size_t j = 0; j < sum.terms.size() && !found; ++j) {
          const Expr *remainder = sum.terms[j].first;
          if (remainder->kind() != ExprKind::Binary ||
              remainder->binaryOp() != BinaryOp::Mod ||
              remainder->operand(0) != quotient->operand(0) ||
              remainder->operand(1) != quotient->operand(1) ||
              sum.terms[i].second != size::mul(sum.terms[j].second, divisor))
            continue;
          SymSize scale = sum.terms[j].second;
          const Expr *whole = quotient->operand(0);
          sum.terms.erase(sum.terms.begin() + std::max(i, j));
          sum.terms.erase(sum.terms.begin() + std::min(i, j));
          decompose(whole, scale, sum);
          found = true;
        }
      }
    }
  }

  const Expr *build(Sum &sum) {
    std::vector<std::pair<std::string, const Expr *>> terms;
    for (auto [atom, coefficient] : sum.terms)
      if (coefficient->constant() != 0)
        terms.emplace_back(loop::exprToString(atom),
                           exprs_.mul(atom, exprs_.size(coefficient)));
    std::sort(terms.begin(), terms.end(),
              [](const auto &a, const auto &b) { return a.first < b.first; });
    const Expr *result = exprs_.size(sum.constant);
    for (const auto &term : terms)
      result = exprs_.add(result, term.second);
    return result;
  }

  loop::ExprContext &exprs_;
  std::vector<SymSize> ranges_;
  std::unordered_map<const Expr *, const Expr *> memo_;
};

// Every load's and store's index that reads a size symbol, in
// SymbolicIndex's canonical form.
void canonicalizeSymbolicIndices(loop::ExprContext &exprs, loop::Loop &loop,
                                 SymbolicIndex &indices) {
  std::unordered_map<const Expr *, const Expr *> replacements;
  auto visit = [&](const Expr *expr) {
    for (const Expr *load : loop::loadsOf(expr))
      if (loop::dependsOnSymbol(load->index()))
        if (const Expr *index = indices.canonical(load->index());
            index != load->index())
          replacements[load] = exprs.load(load->id(), load->dtype(), index);
  };
  loop::forEachExpr(loop, visit);
  if (!replacements.empty())
    loop::rewriteExprs(loop, [&](const Expr *expr) {
      return exprs.replace(expr, replacements);
    });
  for (loop::Store &store : loop.stores)
    if (loop::dependsOnSymbol(store.index))
      store.index = indices.canonical(store.index);
}

} // namespace

void simplifyIndices(loop::Program &program) {
  for (loop::Step &step : program.steps) {
    if (step.kind != loop::Step::Kind::Kernel)
      continue;
    loop::Kernel &kernel = step.kernel;
    for (loop::Loop &loop : kernel.loops) {
      // A range that varies between calls bounds nothing here (0: unknown).
      std::vector<int64_t> ranges;
      std::vector<SymSize> symbolic;
      for (const loop::Ranges *part : {&kernel.outerRanges, &loop.ranges})
        for (SymSize range : *part) {
          ranges.push_back(range->constant().value_or(0));
          symbolic.push_back(range);
        }
      IndexSimplifier simplifier(*program.exprs, std::move(ranges), symbolic);
      loop::rewriteExprs(
          loop, [&](const Expr *expr) { return simplifier.simplify(expr); });
      if (program.isSymbolic()) {
        SymbolicIndex indices(*program.exprs, std::move(symbolic));
        canonicalizeSymbolicIndices(*program.exprs, loop, indices);
      }
    }
  }
}

} // namespace kiln
