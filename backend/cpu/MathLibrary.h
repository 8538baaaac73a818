// The math functions that generated CPU code calls: SLEEF's vector functions
// (loaded with dlopen when present) and the C library's scalar ones.
// Depends on the C++ standard library only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::backend {

/// A function the JIT resolves to an absolute address.
struct MathFunction {
  std::string symbol;
  uint64_t address = 0;
};

/// Names are the C library's double-precision names: "exp", "atan2", ...
class MathLibrary {
public:
  /// Loads SLEEF once (unless KILN_NO_SLEEF is set); `vectorBits` is the
  /// widest vector the host runs, which bounds the SLEEF variants used.
  static const MathLibrary &instance(int vectorBits);
  /// The C library's functions only: for code that runs where SLEEF may be
  /// missing (ahead-of-time export links libm and nothing else).
  static const MathLibrary &cLibraryOnly();

  /// SLEEF's function over `lanes` floats (doubles when `isDouble`), 1.0-ULP
  /// where SLEEF has it; nullopt when there is none.
  std::optional<MathFunction> vector(std::string_view name, bool isDouble,
                                     int lanes) const;
  /// The C library's function ("expf" for floats); nullopt when unknown.
  std::optional<MathFunction> scalar(std::string_view name,
                                     bool isDouble) const;
  bool hasSleef() const { return hasSleef_; }
  /// Every function above by symbol, for the JIT's symbol table.
  const std::map<std::string, uint64_t> &symbols() const { return symbols_; }

private:
  MathLibrary(int vectorBits, bool loadSleef);
  bool hasSleef_ = false;
  std::map<std::string, uint64_t> symbols_;
  std::map<std::string, std::string> vectorSymbolOf_; // "exp/d/4" -> symbol
  std::map<std::string, std::string> scalarSymbolOf_; // "exp/f" -> symbol
};

} // namespace kiln::backend
