// SLEEF's vector math (dlopen of libsleef.so.3 at first use) and the C
// library's scalar math, as symbol addresses for the JIT.
// Depends on backend/cpu/MathLibrary.h.
#include "backend/cpu/MathLibrary.h"

#include <cmath>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

namespace kiln::backend {
namespace {

using FloatUnary = float (*)(float);
using DoubleUnary = double (*)(double);
using FloatBinary = float (*)(float, float);
using DoubleBinary = double (*)(double, double);

struct ScalarEntry {
  const char *name;
  uint64_t floatAddress;
  uint64_t doubleAddress;
};

template <typename Function> uint64_t addressOf(Function function) {
  return reinterpret_cast<uint64_t>(function);
}

#define KILN_UNARY(name)                                                       \
  {#name, addressOf(static_cast<FloatUnary>(::name##f)),                       \
   addressOf(static_cast<DoubleUnary>(::name))}
#define KILN_BINARY(name)                                                      \
  {#name, addressOf(static_cast<FloatBinary>(::name##f)),                      \
   addressOf(static_cast<DoubleBinary>(::name))}

const ScalarEntry kScalarFunctions[] = {
    KILN_UNARY(exp),    KILN_UNARY(exp2),  KILN_UNARY(expm1),
    KILN_UNARY(log),    KILN_UNARY(log2),  KILN_UNARY(log10),
    KILN_UNARY(log1p),  KILN_UNARY(sin),   KILN_UNARY(cos),
    KILN_UNARY(tan),    KILN_UNARY(asin),  KILN_UNARY(acos),
    KILN_UNARY(atan),   KILN_UNARY(sinh),  KILN_UNARY(cosh),
    KILN_UNARY(tanh),   KILN_UNARY(asinh), KILN_UNARY(acosh),
    KILN_UNARY(atanh),  KILN_UNARY(erf),   KILN_UNARY(erfc),
    KILN_UNARY(lgamma), KILN_BINARY(pow),  KILN_BINARY(atan2),
    KILN_BINARY(fmod),
};

#undef KILN_UNARY
#undef KILN_BINARY

std::string key(std::string_view name, bool isDouble, int lanes) {
  return std::string(name) + (isDouble ? "/d/" : "/f/") + std::to_string(lanes);
}

} // namespace

const MathLibrary &MathLibrary::instance(int vectorBits) {
  static std::mutex mutex;
  // Lives as long as the process (the JIT's symbols point into it), and
  // stays reachable at exit so leak checkers see it as owned.
  static auto *libraries = new std::map<int, const MathLibrary *>();
  std::lock_guard<std::mutex> lock(mutex);
  const MathLibrary *&library = (*libraries)[vectorBits];
  if (!library)
    library = new MathLibrary(vectorBits, true);
  return *library;
}

const MathLibrary &MathLibrary::cLibraryOnly() {
  static const MathLibrary *library = new MathLibrary(128, false);
  return *library;
}

MathLibrary::MathLibrary(int vectorBits, bool loadSleef) {
  for (const ScalarEntry &entry : kScalarFunctions) {
    std::string floatSymbol = std::string(entry.name) + "f";
    symbols_[floatSymbol] = entry.floatAddress;
    symbols_[entry.name] = entry.doubleAddress;
    scalarSymbolOf_[key(entry.name, false, 1)] = floatSymbol;
    scalarSymbolOf_[key(entry.name, true, 1)] = entry.name;
  }
  if (!loadSleef || std::getenv("KILN_NO_SLEEF"))
    return;
  void *sleef = dlopen("libsleef.so.3", RTLD_NOW | RTLD_LOCAL);
  if (!sleef)
    return;
  hasSleef_ = true;
  // The names without an ISA suffix dispatch on the CPU at run time, except
  // the 512-bit ones, which need AVX-512F: only those up to `vectorBits`.
  for (const ScalarEntry &entry : kScalarFunctions) {
    for (int bits = 128; bits <= vectorBits; bits *= 2) {
      for (bool isDouble : {false, true}) {
        int lanes = bits / (isDouble ? 64 : 32);
        for (const char *accuracy : {"_u10", "_u15", "_u35"}) {
          std::string symbol = std::string("Sleef_") + entry.name +
                               (isDouble ? "d" : "f") + std::to_string(lanes) +
                               accuracy;
          if (void *address = dlsym(sleef, symbol.c_str())) {
            symbols_[symbol] = reinterpret_cast<uint64_t>(address);
            vectorSymbolOf_[key(entry.name, isDouble, lanes)] = symbol;
            break;
          }
        }
      }
    }
  }
}

std::optional<MathFunction>
MathLibrary::vector(std::string_view name, bool isDouble, int lanes) const {
  auto found = vectorSymbolOf_.find(key(name, isDouble, lanes));
  if (found == vectorSymbolOf_.end())
    return std::nullopt;
  return MathFunction{found->second, symbols_.at(found->second)};
}

std::optional<MathFunction> MathLibrary::scalar(std::string_view name,
                                                bool isDouble) const {
  auto found = scalarSymbolOf_.find(key(name, isDouble, 1));
  if (found == scalarSymbolOf_.end())
    return std::nullopt;
  return MathFunction{found->second, symbols_.at(found->second)};
}

} // namespace kiln::backend
