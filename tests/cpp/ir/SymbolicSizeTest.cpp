// Symbolic sizes: interning, the canonical text, the simplifications checked
// against Python's integer arithmetic, guards. Depends on ir/SymbolicSize.h.
#include "ir/SymbolicSize.h"
#include "ir/Error.h"

#include <gtest/gtest.h>

#include <cctype>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace kiln;

namespace {

using Wide = __int128;

SymSize c(int64_t value) { return size::constant(value); }
SymSize s(int64_t number) { return size::symbol(number); }

/// Python's `//` and `%`.
Wide pyDiv(Wide value, Wide divisor) {
  Wide quotient = value / divisor;
  if (value % divisor != 0 && ((value < 0) != (divisor < 0)))
    --quotient;
  return quotient;
}
Wide pyMod(Wide value, Wide divisor) {
  return value - pyDiv(value, divisor) * divisor;
}

/// Reads `text` as a Python expression over s0, s1, ... and evaluates it with
/// Python's integer arithmetic: the printed form must mean what it says.
/// nullopt for a division by zero.
class PythonReader {
public:
  PythonReader(const std::string &text, const std::vector<int64_t> &symbols)
      : text_(text), symbols_(symbols) {}

  std::optional<Wide> read() {
    std::optional<Wide> value = expr();
    skipSpaces();
    if (pos_ != text_.size())
      fail("trailing text");
    return value;
  }
  bool failed() const { return !error_.empty(); }
  const std::string &error() const { return error_; }

private:
  void fail(const std::string &what) {
    if (error_.empty())
      error_ = what + " at " + std::to_string(pos_) + " in '" + text_ + "'";
    pos_ = text_.size();
  }
  void skipSpaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ')
      ++pos_;
  }
  bool accept(const std::string &token) {
    skipSpaces();
    if (text_.compare(pos_, token.size(), token) != 0)
      return false;
    pos_ += token.size();
    return true;
  }
  Wide number() {
    skipSpaces();
    if (pos_ >= text_.size() ||
        !isdigit(static_cast<unsigned char>(text_[pos_]))) {
      fail("expected a number");
      return 0;
    }
    Wide value = 0;
    while (pos_ < text_.size() &&
           isdigit(static_cast<unsigned char>(text_[pos_])))
      value = value * 10 + (text_[pos_++] - '0');
    return value;
  }
  static std::optional<Wide> both(std::optional<Wide> a, std::optional<Wide> b,
                                  Wide (*op)(Wide, Wide)) {
    if (!a || !b)
      return std::nullopt;
    return op(*a, *b);
  }
  std::optional<Wide> expr() {
    std::optional<Wide> value = term();
    while (!failed()) {
      if (accept("+"))
        value = both(value, term(), [](Wide a, Wide b) { return a + b; });
      else if (accept("-"))
        value = both(value, term(), [](Wide a, Wide b) { return a - b; });
      else
        break;
    }
    return value;
  }
  std::optional<Wide> term() {
    std::optional<Wide> value = factor();
    while (!failed()) {
      if (accept("*")) {
        value = both(value, factor(), [](Wide a, Wide b) { return a * b; });
      } else if (accept("//") || accept("%")) {
        bool isDiv = text_[pos_ - 1] == '/';
        std::optional<Wide> divisor = factor();
        if (!value || !divisor || *divisor == 0)
          value = std::nullopt;
        else
          value = isDiv ? pyDiv(*value, *divisor) : pyMod(*value, *divisor);
      } else {
        break;
      }
    }
    return value;
  }
  std::optional<Wide> factor() {
    if (accept("-")) {
      std::optional<Wide> value = factor();
      return value ? std::optional<Wide>(-*value) : std::nullopt;
    }
    return primary();
  }
  std::optional<Wide> primary() {
    if (accept("(")) {
      std::optional<Wide> value = expr();
      if (!accept(")"))
        fail("expected ')'");
      return value;
    }
    if (accept("max(")) {
      std::optional<Wide> a = expr();
      if (!accept(","))
        fail("expected ','");
      std::optional<Wide> b = expr();
      if (!accept(")"))
        fail("expected ')'");
      return both(a, b, [](Wide x, Wide y) { return x > y ? x : y; });
    }
    if (accept("s")) {
      Wide number = this->number();
      if (number >= static_cast<Wide>(symbols_.size())) {
        fail("symbol without a value");
        return 0;
      }
      return symbols_[static_cast<size_t>(number)];
    }
    return number();
  }

  std::string text_;
  std::vector<int64_t> symbols_;
  size_t pos_ = 0;
  std::string error_;
};

/// Asserts that `expr` prints as text that Python would evaluate to
/// evaluate(expr) at `symbols` (where the evaluation succeeds).
void expectReadsAsPython(SymSize expr, const std::vector<int64_t> &symbols) {
  PythonReader reader(expr->str(), symbols);
  std::optional<Wide> read = reader.read();
  ASSERT_FALSE(reader.failed()) << reader.error();
  int64_t value;
  try {
    value = size::evaluate(expr, symbols);
  } catch (const Error &) {
    return;
  }
  ASSERT_TRUE(read.has_value()) << expr->str();
  EXPECT_TRUE(*read == value)
      << expr->str() << " reads as " << static_cast<int64_t>(*read)
      << ", evaluates to " << value;
}

} // namespace

TEST(SymbolicSize, ConstantsAndSymbols) {
  SymSize five = c(5);
  EXPECT_EQ(five->kind(), SizeKind::Constant);
  EXPECT_TRUE(five->isConstant());
  EXPECT_EQ(five->value(), 5);
  EXPECT_EQ(five->constant(), std::optional<int64_t>(5));
  EXPECT_EQ(five->str(), "5");
  EXPECT_EQ(c(-3)->str(), "-3");
  EXPECT_EQ(five, c(5));
  EXPECT_NE(five, c(6));

  SymSize s3 = s(3);
  EXPECT_EQ(s3->kind(), SizeKind::Symbol);
  EXPECT_FALSE(s3->isConstant());
  EXPECT_EQ(s3->constant(), std::nullopt);
  EXPECT_EQ(s3->value(), 3);
  EXPECT_EQ(s3->str(), "s3");
  EXPECT_EQ(s3, s(3));
  EXPECT_NE(s3, c(3));
  EXPECT_NE(s(0), c(0));
}

TEST(SymbolicSize, InternsStructurallyEqualExpressions) {
  using namespace size;
  // s0*64 + s1 and s1 + 64*s0.
  SymSize a = add(mul(s(0), c(64)), s(1));
  SymSize b = add(s(1), mul(c(64), s(0)));
  EXPECT_EQ(a, b);
  // (s0 + 1)*2 and 2*s0 + 2.
  EXPECT_EQ(mul(add(s(0), c(1)), c(2)), add(mul(c(2), s(0)), c(2)));
  // Sums and products are flattened and reassociated.
  EXPECT_EQ(add(add(s(0), s(1)), s(2)), add(s(2), add(s(1), s(0))));
  EXPECT_EQ(mul(mul(s(0), s(1)), s(2)), mul(s(2), mul(s(1), s(0))));
  EXPECT_EQ(product({s(0), c(2), s(1)}), mul(mul(c(2), s(1)), s(0)));
  // Distribution: (s0 + s1)*(s0 - s1) == s0*s0 - s1*s1.
  EXPECT_EQ(mul(add(s(0), s(1)), sub(s(0), s(1))),
            sub(mul(s(0), s(0)), mul(s(1), s(1))));
  // Cancellation.
  EXPECT_EQ(sub(add(s(0), s(1)), s(1)), s(0));
  EXPECT_EQ(add(s(0), neg(s(0))), c(0));
  EXPECT_EQ(neg(neg(s(0))), s(0));
  // Atoms intern through their canonical operands.
  EXPECT_EQ(floorDiv(add(s(1), c(3)), s(0)), floorDiv(add(c(3), s(1)), s(0)));
  EXPECT_EQ(mod(add(s(1), s(2)), s(0)), mod(add(s(2), s(1)), s(0)));
  EXPECT_EQ(max(s(0), add(s(1), c(1))), max(add(c(1), s(1)), s(0)));
  EXPECT_EQ(mul(floorDiv(s(0), s(1)), s(2)), mul(s(2), floorDiv(s(0), s(1))));
  // Different expressions are different pointers.
  EXPECT_NE(add(s(0), s(1)), mul(s(0), s(1)));
  EXPECT_NE(floorDiv(s(0), s(1)), floorDiv(s(1), s(0)));
  EXPECT_NE(floorDiv(s(0), s(1)), mod(s(0), s(1)));
}

TEST(SymbolicSize, FoldsConstants) {
  using namespace size;
  EXPECT_EQ(add(c(2), c(3)), c(5));
  EXPECT_EQ(sub(c(2), c(3)), c(-1));
  EXPECT_EQ(mul(c(-4), c(3)), c(-12));
  EXPECT_EQ(neg(c(7)), c(-7));
  EXPECT_EQ(product({}), c(1));
  EXPECT_EQ(product({c(2), c(3), c(4)}), c(24));
  EXPECT_EQ(floorDiv(c(7), c(2)), c(3));
  EXPECT_EQ(floorDiv(c(-7), c(2)), c(-4));
  EXPECT_EQ(floorDiv(c(7), c(-2)), c(-4));
  EXPECT_EQ(floorDiv(c(-7), c(-2)), c(3));
  EXPECT_EQ(floorDiv(c(-8), c(2)), c(-4));
  EXPECT_EQ(mod(c(7), c(2)), c(1));
  EXPECT_EQ(mod(c(-7), c(2)), c(1));
  EXPECT_EQ(mod(c(7), c(-2)), c(-1));
  EXPECT_EQ(mod(c(-7), c(-2)), c(-1));
  EXPECT_EQ(mod(c(-8), c(2)), c(0));
  EXPECT_EQ(max(c(3), c(-5)), c(3));
  EXPECT_EQ(max(c(-5), c(-3)), c(-3));
  // Identities with a symbol.
  EXPECT_EQ(add(s(0), c(0)), s(0));
  EXPECT_EQ(mul(s(0), c(1)), s(0));
  EXPECT_EQ(mul(s(0), c(0)), c(0));
  EXPECT_EQ(sub(s(0), s(0)), c(0));
  EXPECT_EQ(add(add(s(0), c(2)), c(3)), add(s(0), c(5)));
  EXPECT_EQ(mul(mul(s(0), c(2)), c(3)), mul(s(0), c(6)));
}

TEST(SymbolicSize, PrintsCanonically) {
  using namespace size;
  EXPECT_EQ(mul(s(0), c(64))->str(), "s0*64");
  EXPECT_EQ(mul(c(64), s(0))->str(), "s0*64");
  EXPECT_EQ(add(s(1), mul(c(64), s(0)))->str(), "s0*64 + s1");
  EXPECT_EQ(add(mul(s(0), c(64)), c(1))->str(), "s0*64 + 1");
  EXPECT_EQ(mul(add(s(0), c(1)), c(2))->str(), "s0*2 + 2");
  // Terms ordered by their atoms, the constant last, whatever the order built.
  EXPECT_EQ(add(c(3), add(s(2), s(0)))->str(), "s0 + s2 + 3");
  EXPECT_EQ(add(add(s(0), c(3)), s(2))->str(), "s0 + s2 + 3");
  // Symbols in numeric order, not text order.
  EXPECT_EQ(add(s(10), s(2))->str(), "s2 + s10");
  EXPECT_EQ(mul(s(10), s(2))->str(), "s2*s10");
  EXPECT_EQ(max(s(10), s(2))->str(), "max(s2, s10)");
  // Negative terms with " - ".
  EXPECT_EQ(sub(s(0), s(1))->str(), "s0 - s1");
  EXPECT_EQ(sub(s(0), c(3))->str(), "s0 - 3");
  EXPECT_EQ(sub(s(0), mul(s(1), c(3)))->str(), "s0 - s1*3");
  EXPECT_EQ(sub(s(1), s(0))->str(), "-s0 + s1");
  EXPECT_EQ(neg(s(0))->str(), "-s0");
  EXPECT_EQ(mul(s(0), c(-3))->str(), "-s0*3");
  EXPECT_EQ(sub(c(1), s(0))->str(), "-s0 + 1");
  // Products of symbols.
  EXPECT_EQ(mul(s(1), s(0))->str(), "s0*s1");
  EXPECT_EQ(mul(s(0), s(0))->str(), "s0*s0");
  EXPECT_EQ(mul(mul(s(1), s(0)), c(4))->str(), "s0*s1*4");
  // Atoms.
  EXPECT_EQ(floorDiv(add(s(1), c(3)), c(4))->str(), "(s1 + 3)//4");
  EXPECT_EQ(floorDiv(s(0), s(1))->str(), "s0//s1");
  EXPECT_EQ(floorDiv(mul(s(0), s(1)), c(4))->str(), "(s0*s1)//4");
  EXPECT_EQ(mod(s(0), c(64))->str(), "s0 % 64");
  EXPECT_EQ(mod(add(s(0), c(1)), s(1))->str(), "(s0 + 1) % s1");
  EXPECT_EQ(max(s(1), s(0))->str(), "max(s0, s1)");
  EXPECT_EQ(max(s(0), c(4))->str(), "max(4, s0)");
  // An atom inside a product or a division keeps its meaning in Python.
  EXPECT_EQ(mul(floorDiv(s(0), c(2)), c(3))->str(), "(s0//2)*3");
  EXPECT_EQ(neg(floorDiv(s(0), c(2)))->str(), "-(s0//2)");
  EXPECT_EQ(mul(s(1), floorDiv(s(2), c(2)))->str(), "s1*(s2//2)");
  EXPECT_EQ(floorDiv(s(0), floorDiv(s(1), c(2)))->str(), "s0//(s1//2)");
  EXPECT_EQ(floorDiv(s(0), c(-2))->str(), "s0//(-2)");
  EXPECT_EQ(sub(s(1), mod(s(0), c(4)))->str(), "-(s0 % 4) + s1");
}

TEST(SymbolicSize, PrintedTextReadsAsPython) {
  using namespace size;
  std::vector<SymSize> exprs = {
      mul(floorDiv(s(0), c(2)), c(3)),
      neg(floorDiv(s(0), c(2))),
      mul(s(1), floorDiv(s(2), c(2))),
      floorDiv(s(0), floorDiv(s(1), c(2))),
      floorDiv(s(0), mod(s(1), c(3))),
      mod(s(0), floorDiv(s(1), c(2))),
      mod(s(0), c(-3)),
      floorDiv(s(0), c(-3)),
      floorDiv(sub(c(3), s(0)), c(2)),
      sub(s(1), mod(s(0), c(4))),
      neg(max(s(0), sub(c(10), s(1)))),
      mul(max(s(0), s(1)), c(-2)),
      sub(mul(s(0), c(64)), add(s(1), c(7))),
      floorDiv(mod(s(2), s(1)), s(0)),
      mod(floorDiv(s(2), s(1)), s(0)),
  };
  for (SymSize expr : exprs)
    for (int64_t a = 2; a < 9; ++a)
      for (int64_t b = 2; b < 9; ++b)
        expectReadsAsPython(expr, {a, b, a + b});
}

TEST(SymbolicSize, SimplifiesFloorDivision) {
  using namespace size;
  SymSize s0 = s(0);
  SymSize s1 = s(1);
  // (4*s0 + 8)//4 == s0 + 2.
  EXPECT_EQ(floorDiv(add(mul(c(4), s0), c(8)), c(4)), add(s0, c(2)));
  // (4*s0 + 3)//4 == s0 + 3//4 == s0.
  EXPECT_EQ(floorDiv(add(mul(c(4), s0), c(3)), c(4)), s0);
  // (4*s0 + 7)//4 == s0 + 1.
  EXPECT_EQ(floorDiv(add(mul(c(4), s0), c(7)), c(4)), add(s0, c(1)));
  // (4*s0 - 1)//4 == s0 - 1.
  EXPECT_EQ(floorDiv(sub(mul(c(4), s0), c(1)), c(4)), sub(s0, c(1)));
  // (8*s0 + s1)//4 == 2*s0 + s1//4.
  EXPECT_EQ(floorDiv(add(mul(c(8), s0), s1), c(4)),
            add(mul(c(2), s0), floorDiv(s1, c(4))));
  // (s0//2)//3 == s0//6.
  EXPECT_EQ(floorDiv(floorDiv(s0, c(2)), c(3)), floorDiv(s0, c(6)));
  EXPECT_EQ(floorDiv(s0, c(6))->kind(), SizeKind::FloorDiv);
  // x//1 == x.
  EXPECT_EQ(floorDiv(s0, c(1)), s0);
  EXPECT_EQ(floorDiv(add(s0, s1), c(1)), add(s0, s1));
  // x//x == 1.
  EXPECT_EQ(floorDiv(s0, s0), c(1));
  EXPECT_EQ(floorDiv(mul(s0, s1), mul(s1, s0)), c(1));
  // What does not simplify stays a division.
  EXPECT_EQ(floorDiv(add(mul(c(2), s0), c(1)), c(4))->kind(),
            SizeKind::FloorDiv);
  EXPECT_EQ(floorDiv(s0, s1)->kind(), SizeKind::FloorDiv);

  // Each simplification against Python's // over many sizes, including
  // those where the quotient rule splits off a remainder.
  struct Case {
    SymSize expr;
    Wide (*python)(Wide, Wide);
  };
  std::vector<Case> cases = {
      {floorDiv(add(mul(c(4), s0), c(8)), c(4)),
       [](Wide x, Wide) { return pyDiv(4 * x + 8, 4); }},
      {floorDiv(add(mul(c(4), s0), c(3)), c(4)),
       [](Wide x, Wide) { return pyDiv(4 * x + 3, 4); }},
      {floorDiv(add(mul(c(4), s0), c(-3)), c(4)),
       [](Wide x, Wide) { return pyDiv(4 * x - 3, 4); }},
      {floorDiv(add(mul(c(6), s0), add(s1, c(5))), c(3)),
       [](Wide x, Wide y) { return pyDiv(6 * x + y + 5, 3); }},
      {floorDiv(sub(mul(c(6), s0), s1), c(3)),
       [](Wide x, Wide y) { return pyDiv(6 * x - y, 3); }},
      {floorDiv(add(mul(c(-6), s0), mul(c(5), s1)), c(3)),
       [](Wide x, Wide y) { return pyDiv(-6 * x + 5 * y, 3); }},
      {floorDiv(floorDiv(s0, c(2)), c(3)),
       [](Wide x, Wide) { return pyDiv(pyDiv(x, 2), 3); }},
      {floorDiv(floorDiv(sub(c(5), mul(s0, s1)), c(4)), c(3)),
       [](Wide x, Wide y) { return pyDiv(pyDiv(5 - x * y, 4), 3); }},
      {floorDiv(add(mul(c(12), floorDiv(s0, c(5))), s1), c(4)),
       [](Wide x, Wide y) { return pyDiv(12 * pyDiv(x, 5) + y, 4); }},
      {floorDiv(sub(s0, s1), c(-3)),
       [](Wide x, Wide y) { return pyDiv(x - y, -3); }},
      {floorDiv(s0, s0), [](Wide x, Wide) { return pyDiv(x, x); }},
      {floorDiv(sub(c(30), mul(s0, s1)), s1),
       [](Wide x, Wide y) { return pyDiv(30 - x * y, y); }},
  };
  for (const Case &testCase : cases)
    for (int64_t x = 2; x < 40; ++x)
      for (int64_t y = 2; y < 12; ++y)
        EXPECT_TRUE(size::evaluate(testCase.expr, {x, y}) ==
                    testCase.python(x, y))
            << testCase.expr->str() << " at s0=" << x << ", s1=" << y;
}

TEST(SymbolicSize, SimplifiesModulo) {
  using namespace size;
  SymSize s0 = s(0);
  SymSize s1 = s(1);
  EXPECT_EQ(mod(add(mul(c(4), s0), c(3)), c(4)), c(3));
  EXPECT_EQ(mod(mul(s0, c(8)), c(4)), c(0));
  EXPECT_EQ(mod(s0, s0), c(0));
  EXPECT_EQ(mod(s0, c(1)), c(0));
  EXPECT_EQ(mod(s0, c(-1)), c(0));
  // (4*s0 + 5) % 4 == (1) % 4 == 1; (4*s0 + s1 + 5) % 4 == (s1 + 1) % 4.
  EXPECT_EQ(mod(add(mul(c(4), s0), c(5)), c(4)), c(1));
  EXPECT_EQ(mod(add(add(mul(c(4), s0), s1), c(5)), c(4)),
            mod(add(s1, c(1)), c(4)));
  // -s0 % 4 == 3*s0 % 4.
  EXPECT_EQ(mod(neg(s0), c(4)), mod(mul(c(3), s0), c(4)));
  EXPECT_EQ(mod(s0, c(4))->kind(), SizeKind::Mod);
  EXPECT_EQ(mod(s0, s1)->kind(), SizeKind::Mod);

  struct Case {
    SymSize expr;
    Wide (*python)(Wide, Wide);
  };
  std::vector<Case> cases = {
      {mod(add(mul(c(4), s0), c(3)), c(4)),
       [](Wide x, Wide) { return pyMod(4 * x + 3, 4); }},
      {mod(add(mul(c(4), s0), c(-3)), c(4)),
       [](Wide x, Wide) { return pyMod(4 * x - 3, 4); }},
      {mod(sub(mul(c(7), s0), mul(c(9), s1)), c(4)),
       [](Wide x, Wide y) { return pyMod(7 * x - 9 * y, 4); }},
      {mod(neg(s0), c(4)), [](Wide x, Wide) { return pyMod(-x, 4); }},
      {mod(sub(s0, s1), c(-3)),
       [](Wide x, Wide y) { return pyMod(x - y, -3); }},
      {mod(sub(c(5), s0), s1), [](Wide x, Wide y) { return pyMod(5 - x, y); }},
      {mod(s0, s0), [](Wide x, Wide) { return pyMod(x, x); }},
  };
  for (const Case &testCase : cases)
    for (int64_t x = 2; x < 40; ++x)
      for (int64_t y = 2; y < 12; ++y)
        EXPECT_TRUE(size::evaluate(testCase.expr, {x, y}) ==
                    testCase.python(x, y))
            << testCase.expr->str() << " at s0=" << x << ", s1=" << y;
}

TEST(SymbolicSize, Max) {
  using namespace size;
  EXPECT_EQ(max(s(0), s(0)), s(0));
  EXPECT_EQ(max(s(0), s(1)), max(s(1), s(0)));
  SymSize m = max(s(0), sub(c(10), s(1)));
  EXPECT_EQ(m->kind(), SizeKind::Max);
  EXPECT_EQ(size::evaluate(m, {3, 4}), 6);
  EXPECT_EQ(size::evaluate(m, {8, 4}), 8);
  EXPECT_EQ(size::evaluate(m, {2, 20}), 2);
  EXPECT_EQ(size::evaluate(add(m, c(1)), {3, 4}), 7);
}

TEST(SymbolicSize, EvaluatesWithPythonSemantics) {
  using namespace size;
  EXPECT_EQ(evaluate(c(-4), {}), -4);
  EXPECT_EQ(evaluate(s(1), {2, 9}), 9);
  EXPECT_EQ(evaluate(add(mul(s(0), c(64)), s(1)), {3, 5}), 197);
  EXPECT_EQ(evaluate(mul(mul(s(0), s(1)), s(0)), {3, 5}), 45);
  // A negative dividend: (3 - s0)//2 and % 2 at s0 = 10 are -7//2, -7 % 2.
  EXPECT_EQ(evaluate(floorDiv(sub(c(3), s(0)), c(2)), {10}), -4);
  EXPECT_EQ(evaluate(mod(sub(c(3), s(0)), c(2)), {10}), 1);
  // A negative divisor: 7//(s0 - s1) and % at s0 - s1 == -2.
  EXPECT_EQ(evaluate(floorDiv(c(7), sub(s(0), s(1))), {2, 4}), -4);
  EXPECT_EQ(evaluate(mod(c(7), sub(s(0), s(1))), {2, 4}), -1);
  EXPECT_EQ(evaluate(floorDiv(c(-7), sub(s(0), s(1))), {2, 4}), 3);
  EXPECT_EQ(evaluate(mod(c(-7), sub(s(0), s(1))), {2, 4}), -1);
  // Exact division of negatives does not round.
  EXPECT_EQ(evaluate(floorDiv(sub(c(2), s(0)), s(1)), {10, 4}), -2);
  EXPECT_EQ(evaluate(mod(sub(c(2), s(0)), s(1)), {10, 4}), 0);
  // Extra values are ignored.
  EXPECT_EQ(evaluate(s(0), {5, 6, 7}), 5);
}

TEST(SymbolicSize, Substitutes) {
  using namespace size;
  SymSize expr = add(mul(s(0), c(64)), floorDiv(s(1), c(4)));
  // Constants for every symbol: a constant.
  EXPECT_EQ(substitute(expr, {c(2), c(9)}), c(130));
  // One symbol; the rest stay (null, or past the end).
  EXPECT_EQ(substitute(expr, {c(2)}), add(c(128), floorDiv(s(1), c(4))));
  EXPECT_EQ(substitute(expr, {nullptr, c(9)}), add(mul(s(0), c(64)), c(2)));
  EXPECT_EQ(substitute(expr, {}), expr);
  // Expressions for symbols, re-simplified: s1 -> 4*s2 + 3.
  EXPECT_EQ(substitute(expr, {nullptr, add(mul(c(4), s(2)), c(3))}),
            add(mul(s(0), c(64)), s(2)));
  // Renaming.
  EXPECT_EQ(substitute(sub(s(0), s(1)), {s(1), s(0)}), sub(s(1), s(0)));
  EXPECT_EQ(substitute(max(s(0), s(1)), {s(1)}), s(1));
  EXPECT_EQ(substitute(mod(s(0), s(1)), {s(1)}), c(0));
  // A divisor that becomes zero.
  EXPECT_THROW(substitute(floorDiv(s(0), sub(s(1), s(2))), {nullptr, s(2)}),
               Error);
}

TEST(SymbolicSize, SymbolsOf) {
  using namespace size;
  EXPECT_TRUE(symbolsOf(c(3)).empty());
  EXPECT_FALSE(isSymbolic(c(3)));
  EXPECT_TRUE(isSymbolic(s(0)));
  EXPECT_EQ(symbolsOf(s(4)), std::vector<int64_t>({4}));
  SymSize expr =
      add(mul(s(3), s(1)), max(floorDiv(s(10), s(1)), mod(s(2), c(4))));
  EXPECT_EQ(symbolsOf(expr), std::vector<int64_t>({1, 2, 3, 10}));
  EXPECT_TRUE(isSymbolic(expr));
  EXPECT_FALSE(isSymbolic(sub(s(0), s(0))));
}

TEST(SymbolicSize, TermsOf) {
  using namespace size;
  using Terms = std::vector<std::pair<int64_t, SymSize>>;
  EXPECT_EQ(termsOf(c(5)), Terms({{5, nullptr}}));
  EXPECT_EQ(termsOf(c(0)), Terms({{0, nullptr}}));
  EXPECT_EQ(termsOf(s(0)), Terms({{1, s(0)}}));
  EXPECT_EQ(termsOf(mul(s(0), c(-3))), Terms({{-3, s(0)}}));
  SymSize d = floorDiv(s(2), c(4));
  SymSize expr = add(add(mul(c(64), s(0)), mul(mul(s(1), s(0)), c(2))),
                     add(c(7), sub(d, s(1))));
  // In printed order, the constant last.
  EXPECT_EQ(expr->str(), "s0*64 + s0*s1*2 - s1 + s2//4 + 7");
  EXPECT_EQ(termsOf(expr), Terms({{64, s(0)},
                                  {2, mul(s(0), s(1))},
                                  {-1, s(1)},
                                  {1, d},
                                  {7, nullptr}}));
  // The terms add up to the expression.
  SymSize sum = c(0);
  for (const auto &[coefficient, rest] : termsOf(expr))
    sum = add(sum, rest ? mul(c(coefficient), rest) : c(coefficient));
  EXPECT_EQ(sum, expr);
}

TEST(SymbolicSize, Relations) {
  using namespace size;
  SizeRelation equal{SizeRelation::Op::Eq, s(0), s(1)};
  EXPECT_EQ(equal.str(), "s0 == s1");
  EXPECT_TRUE(equal.holds({3, 3}));
  EXPECT_FALSE(equal.holds({3, 4}));

  SizeRelation aligned{SizeRelation::Op::Eq, mod(s(0), c(64)), c(0)};
  EXPECT_EQ(aligned.str(), "s0 % 64 == 0");
  EXPECT_TRUE(aligned.holds({128}));
  EXPECT_FALSE(aligned.holds({100}));

  SizeRelation sum{SizeRelation::Op::Le, add(s(0), c(1)), mul(s(1), c(2))};
  EXPECT_EQ(sum.str(), "s0 + 1 <= s1*2");
  EXPECT_TRUE(sum.holds({3, 2}));
  EXPECT_FALSE(sum.holds({4, 2}));

  struct OpCase {
    SizeRelation::Op op;
    const char *text;
    bool less, same, greater; // at 2 vs 3, 3 vs 3, 4 vs 3
  };
  for (const OpCase &opCase :
       std::vector<OpCase>{{SizeRelation::Op::Eq, "==", false, true, false},
                           {SizeRelation::Op::Ne, "!=", true, false, true},
                           {SizeRelation::Op::Lt, "<", true, false, false},
                           {SizeRelation::Op::Le, "<=", true, true, false},
                           {SizeRelation::Op::Gt, ">", false, false, true},
                           {SizeRelation::Op::Ge, ">=", false, true, true}}) {
    SizeRelation relation{opCase.op, s(0), c(3)};
    EXPECT_EQ(relationOpText(opCase.op), opCase.text);
    EXPECT_EQ(relation.str(), std::string("s0 ") + opCase.text + " 3");
    EXPECT_EQ(relation.holds({2}), opCase.less) << opCase.text;
    EXPECT_EQ(relation.holds({3}), opCase.same) << opCase.text;
    EXPECT_EQ(relation.holds({4}), opCase.greater) << opCase.text;
  }

  EXPECT_EQ(equal, (SizeRelation{SizeRelation::Op::Eq, s(0), s(1)}));
  EXPECT_FALSE(equal == (SizeRelation{SizeRelation::Op::Ne, s(0), s(1)}));
  EXPECT_FALSE(equal == (SizeRelation{SizeRelation::Op::Eq, s(1), s(0)}));
  EXPECT_THROW(equal.holds({3}), Error);
}

TEST(SymbolicSize, Errors) {
  using namespace size;
  EXPECT_THROW(evaluate(s(2), {4, 5}), Error);
  EXPECT_THROW(evaluate(add(s(0), s(1)), {}), Error);
  EXPECT_THROW(floorDiv(s(0), c(0)), Error);
  EXPECT_THROW(mod(s(0), c(0)), Error);
  EXPECT_THROW(floorDiv(c(4), c(0)), Error);
  EXPECT_THROW(floorDiv(s(0), sub(s(1), s(1))), Error);
  EXPECT_THROW(symbol(-1), Error);
  // A symbolic divisor that is zero for these sizes.
  EXPECT_THROW(evaluate(floorDiv(s(0), sub(s(1), s(2))), {5, 3, 3}), Error);
  EXPECT_THROW(evaluate(mod(s(0), sub(s(1), s(2))), {5, 3, 3}), Error);
  try {
    evaluate(s(7), {});
    FAIL() << "no error";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("s7"), std::string::npos)
        << error.what();
  }
}

TEST(SymbolicSize, InternsAcrossThreads) {
  using namespace size;
  auto buildAll = [](std::vector<SymSize> &out) {
    for (int64_t i = 0; i < 200; ++i)
      out.push_back(add(mul(s(i % 7), c(i)),
                        floorDiv(add(s((i + 1) % 5), c(i)), c(i % 9 + 2))));
  };
  std::vector<std::vector<SymSize>> results(4);
  std::vector<std::thread> threads;
  for (auto &result : results)
    threads.emplace_back(buildAll, std::ref(result));
  for (auto &thread : threads)
    thread.join();
  std::vector<SymSize> expected;
  buildAll(expected);
  for (const auto &result : results)
    EXPECT_EQ(result, expected);
}

namespace {

/// A random expression as a tree of builder calls, evaluated directly with
/// Python's integer arithmetic as the reference.
struct Tree {
  enum Op { Const, Sym, Add, Sub, Mul, Neg, Div, Mod, Max, Product } op;
  int64_t value = 0;
  std::vector<Tree> kids;
};

class TreeGenerator {
public:
  explicit TreeGenerator(uint32_t seed) : random_(seed) {}

  Tree expr(int depth) {
    if (depth == 0 || chance(25))
      return leaf();
    switch (pick(10)) {
    case 0:
    case 1:
      return {Tree::Add, 0, {expr(depth - 1), expr(depth - 1)}};
    case 2:
      return {Tree::Sub, 0, {expr(depth - 1), expr(depth - 1)}};
    case 3:
      return {Tree::Mul, 0, {expr(depth - 1), expr(depth - 1)}};
    case 4:
      return {Tree::Neg, 0, {expr(depth - 1)}};
    case 5:
    case 6:
      return {Tree::Div, 0, {dividend(depth - 1), divisor(depth - 1)}};
    case 7:
      return {Tree::Mod, 0, {dividend(depth - 1), divisor(depth - 1)}};
    case 8:
      return {Tree::Max, 0, {expr(depth - 1), expr(depth - 1)}};
    default: {
      Tree product{Tree::Product, 0, {}};
      for (int i = 0, n = pick(4); i < n; ++i)
        product.kids.push_back(expr(depth - 1));
      return product;
    }
    }
  }

private:
  bool chance(int percent) { return pick(100) < percent; }
  int pick(int n) {
    return std::uniform_int_distribution<int>(0, n - 1)(random_);
  }
  Tree constant(int64_t lo, int64_t hi) {
    return {Tree::Const,
            std::uniform_int_distribution<int64_t>(lo, hi)(random_),
            {}};
  }
  Tree leaf() {
    if (chance(60))
      return {Tree::Sym, pick(3), {}};
    return constant(-9, 9);
  }
  Tree divisor(int depth) {
    int kind = pick(10);
    if (kind < 6)
      return constant(1, 9);
    if (kind < 8)
      return constant(-9, -1);
    return expr(depth);
  }
  // Often c*q + r with the divisor's multiples, so the quotient rule splits.
  Tree dividend(int depth) {
    if (!chance(50))
      return expr(depth);
    Tree multiple{Tree::Mul, 0, {constant(-12, 12), expr(depth)}};
    if (chance(30))
      return multiple;
    return {Tree::Add, 0, {multiple, expr(depth)}};
  }

  std::mt19937 random_;
};

constexpr Wide kTooBig = Wide(1) << 40;

/// Python's value of `tree` (nullopt: a division by zero). Sets `tooBig`
/// where a value, or a term of the expanded polynomial, could leave int64.
std::optional<Wide> pythonValue(const Tree &tree,
                                const std::vector<int64_t> &symbols,
                                Wide &bound, bool &tooBig) {
  auto check = [&](Wide value) {
    if (value > kTooBig || value < -kTooBig)
      tooBig = true;
  };
  std::vector<std::optional<Wide>> values;
  std::vector<Wide> bounds;
  for (const Tree &kid : tree.kids) {
    Wide kidBound = 0;
    values.push_back(pythonValue(kid, symbols, kidBound, tooBig));
    bounds.push_back(kidBound);
    if (tooBig)
      return std::nullopt;
  }
  bool defined = true;
  for (const auto &value : values)
    defined = defined && value.has_value();
  std::optional<Wide> result;
  switch (tree.op) {
  case Tree::Const:
    bound = tree.value < 0 ? -tree.value : tree.value;
    return tree.value;
  case Tree::Sym:
    bound = symbols[tree.value];
    return symbols[tree.value];
  case Tree::Add:
  case Tree::Sub:
    bound = bounds[0] + bounds[1];
    if (defined)
      result = tree.op == Tree::Add ? *values[0] + *values[1]
                                    : *values[0] - *values[1];
    break;
  case Tree::Mul:
    bound = bounds[0] * bounds[1];
    if (defined)
      result = *values[0] * *values[1];
    break;
  case Tree::Product:
    bound = 1;
    for (Wide kidBound : bounds) {
      bound *= kidBound;
      check(bound);
    }
    if (defined) {
      result = 1;
      for (const auto &value : values)
        *result *= *value;
    }
    break;
  case Tree::Neg:
    bound = bounds[0];
    if (defined)
      result = -*values[0];
    break;
  case Tree::Div:
  case Tree::Mod:
    bound = bounds[0] > bounds[1] ? bounds[0] : bounds[1];
    if (defined && *values[1] != 0)
      result = tree.op == Tree::Div ? pyDiv(*values[0], *values[1])
                                    : pyMod(*values[0], *values[1]);
    break;
  case Tree::Max:
    bound = bounds[0] > bounds[1] ? bounds[0] : bounds[1];
    if (defined)
      result = *values[0] > *values[1] ? *values[0] : *values[1];
    break;
  }
  check(bound);
  if (result)
    check(*result);
  return result;
}

/// The tree through the builders; `commuted` swaps the operands of the
/// commutative ones and reverses products.
SymSize build(const Tree &tree, bool commuted) {
  using namespace size;
  auto kid = [&](size_t i) { return build(tree.kids[i], commuted); };
  switch (tree.op) {
  case Tree::Const:
    return constant(tree.value);
  case Tree::Sym:
    return symbol(tree.value);
  case Tree::Add:
    return commuted ? add(kid(1), kid(0)) : add(kid(0), kid(1));
  case Tree::Sub:
    return commuted ? add(neg(kid(1)), kid(0)) : sub(kid(0), kid(1));
  case Tree::Mul:
    return commuted ? mul(kid(1), kid(0)) : mul(kid(0), kid(1));
  case Tree::Neg:
    return commuted ? mul(constant(-1), kid(0)) : neg(kid(0));
  case Tree::Div:
    return floorDiv(kid(0), kid(1));
  case Tree::Mod:
    return mod(kid(0), kid(1));
  case Tree::Max:
    return commuted ? max(kid(1), kid(0)) : max(kid(0), kid(1));
  case Tree::Product: {
    std::vector<SymSize> factors;
    for (size_t i = 0; i < tree.kids.size(); ++i)
      factors.push_back(kid(commuted ? tree.kids.size() - 1 - i : i));
    return product(factors);
  }
  }
  return nullptr;
}

std::string describe(const Tree &tree) {
  static const char *names[] = {"",    "s",        "add", "sub", "mul",
                                "neg", "floorDiv", "mod", "max", "product"};
  if (tree.op == Tree::Const)
    return std::to_string(tree.value);
  if (tree.op == Tree::Sym)
    return "s" + std::to_string(tree.value);
  std::string text = std::string(names[tree.op]) + "(";
  for (size_t i = 0; i < tree.kids.size(); ++i)
    text += (i ? ", " : "") + describe(tree.kids[i]);
  return text + ")";
}

} // namespace

// The most important property: every simplification is exact. Random
// expressions through the builders evaluate to what Python computes for the
// same expression, wherever Python's value is defined.
TEST(SymbolicSize, RandomExpressionsEvaluateLikePython) {
  TreeGenerator generator(20240611);
  std::mt19937 random(7);
  std::uniform_int_distribution<int64_t> sizeDist(2, 30);
  int compared = 0, checkedExpressions = 0;
  for (int round = 0; round < 4000; ++round) {
    Tree tree = generator.expr(4);
    std::vector<std::vector<int64_t>> valueSets;
    for (int i = 0; i < 12; ++i)
      valueSets.push_back(
          {sizeDist(random), sizeDist(random), sizeDist(random)});
    valueSets.push_back({2, 2, 2});
    valueSets.push_back({3, 2, 5});

    SymSize expr = nullptr;
    bool builderThrew = false;
    try {
      expr = build(tree, false);
    } catch (const Error &) {
      builderThrew = true;
    }
    bool tooBig = false;
    for (const auto &symbols : valueSets) {
      Wide bound = 0;
      std::optional<Wide> python = pythonValue(tree, symbols, bound, tooBig);
      if (tooBig)
        break;
      if (builderThrew) {
        // Only a divisor that is zero for every size may fail to build.
        EXPECT_FALSE(python.has_value())
            << describe(tree) << " failed to build but is "
            << static_cast<int64_t>(*python);
        continue;
      }
      if (!python)
        continue; // simplification may drop a division by zero (x - x)
      int64_t value = 0;
      try {
        value = size::evaluate(expr, symbols);
      } catch (const Error &error) {
        ADD_FAILURE() << describe(tree) << " -> " << expr->str()
                      << " throws: " << error.what();
        continue;
      }
      ++compared;
      EXPECT_TRUE(*python == value)
          << describe(tree) << " -> " << expr->str() << " at s = ("
          << symbols[0] << ", " << symbols[1] << ", " << symbols[2]
          << "): Python " << static_cast<int64_t>(*python) << ", evaluate "
          << value;
      expectReadsAsPython(expr, symbols);
    }
    if (!builderThrew && !tooBig)
      ++checkedExpressions;
    if (::testing::Test::HasFailure())
      break; // one expression's report is enough
  }
  EXPECT_GT(checkedExpressions, 2500);
  EXPECT_GT(compared, 20000);
}

// The canonical form: building the same expression another way gives the
// same pointer, rebuilding a canonical expression changes nothing, and
// substitution agrees with evaluation.
TEST(SymbolicSize, RandomExpressionsAreCanonical) {
  using namespace size;
  TreeGenerator generator(99);
  std::mt19937 random(3);
  std::uniform_int_distribution<int64_t> sizeDist(2, 12);
  int checked = 0;
  for (int round = 0; round < 3000; ++round) {
    Tree tree = generator.expr(3);
    SymSize expr;
    try {
      expr = build(tree, false);
    } catch (const Error &) {
      EXPECT_THROW(build(tree, true), Error) << describe(tree);
      continue;
    }
    ++checked;
    EXPECT_EQ(build(tree, true), expr) << describe(tree) << ": " << expr->str()
                                       << " vs " << build(tree, true)->str();
    EXPECT_EQ(substitute(expr, {}), expr) << expr->str();
    EXPECT_EQ(substitute(expr, {s(0), s(1), s(2)}), expr) << expr->str();

    std::vector<int64_t> symbols = {sizeDist(random), sizeDist(random),
                                    sizeDist(random)};
    bool tooBig = false;
    Wide bound = 0;
    pythonValue(tree, symbols, bound, tooBig);
    pythonValue(tree, {symbols[1] + 2, 2 * symbols[2], symbols[2]}, bound,
                tooBig);
    if (tooBig)
      continue; // int64 arithmetic could overflow
    std::optional<int64_t> value;
    try {
      value = evaluate(expr, symbols);
    } catch (const Error &) {
    }
    // Constants for the symbols: the constant evaluate gives.
    std::vector<SymSize> constants = {c(symbols[0]), c(symbols[1]),
                                      c(symbols[2])};
    std::optional<SymSize> folded;
    try {
      folded = substitute(expr, constants);
    } catch (const Error &) {
    }
    EXPECT_EQ(folded.has_value(), value.has_value()) << expr->str();
    if (folded && value) {
      EXPECT_EQ(*folded, c(*value)) << expr->str();
    }

    // Expressions for the symbols: s0 -> s1 + 2, s1 -> 2*s2.
    std::vector<int64_t> renamedSymbols = {symbols[1] + 2, 2 * symbols[2],
                                           symbols[2]};
    std::optional<int64_t> expected;
    try {
      expected = evaluate(expr, renamedSymbols);
    } catch (const Error &) {
    }
    if (expected) {
      SymSize renamed =
          substitute(expr, {add(s(1), c(2)), mul(c(2), s(2)), nullptr});
      EXPECT_EQ(evaluate(renamed, symbols), *expected)
          << expr->str() << " -> " << renamed->str();
    }

    // The symbols mentioned are those the tree mentions, less the ones that
    // cancel: never more.
    for (int64_t number : symbolsOf(expr))
      EXPECT_NE(describe(tree).find("s" + std::to_string(number)),
                std::string::npos);
    if (::testing::Test::HasFailure())
      break;
  }
  EXPECT_GT(checked, 2000);
}
