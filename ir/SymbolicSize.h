// Symbolic sizes: integer expressions over size symbols s0, s1, ... (a
// dimension that varies between calls), kept in one canonical form so that
// equal expressions are the same pointer. Depends on nothing in kiln.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class SizeKind : uint8_t {
  Constant, // value()
  Symbol,   // s<value()>
  Add,      // a sum of terms, constant last
  Mul,      // a product of factors, constant first
  FloorDiv, // operand 0 // operand 1 (Python's floor division)
  Mod,      // operand 0 % operand 1 (Python's modulo)
  Max,      // the larger of two
};

/// An immutable, interned size expression. Expressions live for the whole
/// process (there are few: sizes of a program's tensors), so a TensorMeta
/// may hold them in any graph and on any thread.
///
/// Canonical form: sums and products are flattened and multiplication is
/// distributed over addition, so an expression is a polynomial over atoms
/// (symbols, and divisions, moduli and maxima that do not simplify); its
/// terms and factors are ordered by their text. Symbols stand for sizes of
/// at least 2 (0 and 1 are specialised), which the simplifications use.
class SizeExpr {
public:
  SizeKind kind() const { return kind_; }
  /// Constant: the value; Symbol: the symbol's number.
  int64_t value() const { return value_; }
  const std::vector<const SizeExpr *> &operands() const { return operands_; }
  bool isConstant() const { return kind_ == SizeKind::Constant; }
  std::optional<int64_t> constant() const {
    if (kind_ == SizeKind::Constant)
      return value_;
    return std::nullopt;
  }
  /// "s0*64 + 1", "(s1 + 3)//4".
  const std::string &str() const { return text_; }

private:
  friend struct SizeInterner;
  SizeKind kind_ = SizeKind::Constant;
  int64_t value_ = 0;
  std::vector<const SizeExpr *> operands_;
  std::string text_;
};

using SymSize = const SizeExpr *;

namespace size {

SymSize constant(int64_t value);
SymSize symbol(int64_t number);
SymSize add(SymSize a, SymSize b);
SymSize sub(SymSize a, SymSize b);
SymSize mul(SymSize a, SymSize b);
SymSize neg(SymSize a);
/// Python's `//` and `%`; a constant divisor must be nonzero.
SymSize floorDiv(SymSize a, SymSize b);
SymSize mod(SymSize a, SymSize b);
SymSize max(SymSize a, SymSize b);
SymSize product(const std::vector<SymSize> &factors);

/// The value for the given symbol values (symbol k is `symbols[k]`).
/// Throws kiln::Error for a symbol without a value or a division by zero.
int64_t evaluate(SymSize expr, const std::vector<int64_t> &symbols);
/// Replaces each symbol k by `replacements[k]` (symbols past its end stay).
SymSize substitute(SymSize expr, const std::vector<SymSize> &replacements);
/// Whether `expr` mentions a symbol.
bool isSymbolic(SymSize expr);
/// The numbers of the symbols `expr` mentions, ascending, each once.
std::vector<int64_t> symbolsOf(SymSize expr);
/// `expr` as a polynomial: its terms (a term of a sum, or the whole
/// expression), each as (constant coefficient, the rest: null when the
/// term is a constant).
std::vector<std::pair<int64_t, SymSize>> termsOf(SymSize expr);

} // namespace size

/// A relation between sizes that a compiled graph relies on (a guard):
/// checked on every call, printed as `s0 == s1`, `s0 % 64 == 0`.
struct SizeRelation {
  enum class Op : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
  Op op = Op::Eq;
  SymSize lhs = nullptr;
  SymSize rhs = nullptr;

  bool holds(const std::vector<int64_t> &symbols) const;
  std::string str() const;
  bool operator==(const SizeRelation &other) const {
    return op == other.op && lhs == other.lhs && rhs == other.rhs;
  }
};

std::string_view relationOpText(SizeRelation::Op op);

} // namespace kiln
