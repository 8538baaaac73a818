// Tests of the CPU backend: hand-built loop-IR programs compiled to machine
// code and checked against results computed in C++.
// Depends on backend/cpu/CpuBackend.h, ir/LoopIR.h, GoogleTest.
#include "backend/cpu/CpuBackend.h"
#include "ir/Error.h"
#include "ir/Logging.h"
#include "tests/cpp/TorchReference.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/TargetParser/Host.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <regex>
#include <thread>

using namespace kiln;
using loop::BinaryOp;
using loop::Expr;
using loop::ReduceOp;
using loop::UnaryOp;

namespace {

/// A program under construction, with the buffers' memory.
struct TestProgram {
  loop::Program program;
  std::vector<std::vector<char>> memory;

  loop::ExprContext &exprs() { return *program.exprs; }

  int64_t buffer(DType dtype, int64_t elements) {
    loop::Buffer buffer;
    buffer.kind = loop::BufferKind::Tensor;
    buffer.meta = TensorMeta(dtype, {elements});
    memory.emplace_back(static_cast<size_t>(elements * itemSize(dtype)) + 1);
    return program.addBuffer(std::move(buffer));
  }
  template <typename T> T *data(int64_t buffer) {
    return reinterpret_cast<T *>(memory[buffer].data());
  }
  template <typename T>
  void fill(int64_t buffer, const std::vector<T> &values) {
    std::memcpy(memory[buffer].data(), values.data(),
                values.size() * sizeof(T));
  }
  const Expr *var(int64_t number) { return exprs().var(number); }
  const Expr *load(int64_t buffer, const Expr *index) {
    return exprs().load(buffer, program.buffers[buffer].dtype(), index);
  }
  void addKernel(loop::Kernel kernel) {
    loop::Step step;
    step.kind = loop::Step::Kind::Kernel;
    step.kernel = std::move(kernel);
    program.steps.push_back(std::move(step));
  }
  /// Compiles and runs every step.
  std::unique_ptr<backend::CpuProgram> run() {
    auto compiled = backend::CpuProgram::compile(program);
    runAgain(*compiled);
    return compiled;
  }
  void runAgain(const backend::CpuProgram &compiled) {
    std::vector<char *> pointers;
    for (auto &bytes : memory)
      pointers.push_back(bytes.data());
    for (size_t step = 0; step < program.steps.size(); ++step)
      compiled.runKernel(step, pointers.data());
  }
};

/// out[i] = f(in0[i], in1[i], ...) over `size` elements.
loop::Kernel pointwise(TestProgram &test, int64_t size, int64_t out,
                       const Expr *value) {
  loop::Kernel kernel;
  kernel.name = "pointwise";
  kernel.outerRanges = {size};
  loop::Loop body;
  body.stores.push_back({out, test.var(0), value});
  kernel.loops.push_back(body);
  return kernel;
}

/// `op` applied element by element to `a` and `b` (buffers of `dtype`) by a
/// compiled kernel.
template <typename T>
std::vector<T> applyBinary(BinaryOp op, DType dtype, const std::vector<T> &a,
                           const std::vector<T> &b) {
  int64_t size = static_cast<int64_t>(a.size());
  TestProgram test;
  int64_t x = test.buffer(dtype, size), y = test.buffer(dtype, size);
  int64_t out = test.buffer(dtype, size);
  test.addKernel(pointwise(test, size, out,
                           test.exprs().binary(op, test.load(x, test.var(0)),
                                               test.load(y, test.var(0)))));
  test.fill(x, a);
  test.fill(y, b);
  test.run();
  return std::vector<T>(test.data<T>(out), test.data<T>(out) + size);
}

float roundToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&value, &bits, 4);
  return value;
}

float bfloat16ToFloat(uint16_t half) {
  uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint16_t floatToBFloat16(float value) {
  float rounded = roundToBFloat16(value);
  uint32_t bits;
  std::memcpy(&bits, &rounded, 4);
  return static_cast<uint16_t>(bits >> 16);
}

std::vector<float> randomFloats(size_t count, float low, float high,
                                unsigned seed = 1) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float &value : values)
    value = distribution(generator);
  return values;
}

} // namespace

TEST(CpuPointwise, AddMulFloat32AtOddSizes) {
  for (int64_t size : {1, 7, 8, 33, 1000}) {
    TestProgram test;
    int64_t a = test.buffer(DType::Float32, size);
    int64_t b = test.buffer(DType::Float32, size);
    int64_t out = test.buffer(DType::Float32, size);
    auto &e = test.exprs();
    const Expr *x = test.load(a, test.var(0)), *y = test.load(b, test.var(0));
    test.addKernel(
        pointwise(test, size, out,
                  e.binary(BinaryOp::Add, e.binary(BinaryOp::Mul, x, y), x)));
    auto values = randomFloats(size, -3, 3),
         others = randomFloats(size, -3, 3, 2);
    test.fill(a, values);
    test.fill(b, others);
    test.run();
    for (int64_t i = 0; i < size; ++i)
      EXPECT_EQ(test.data<float>(out)[i], values[i] * others[i] + values[i])
          << "size " << size << " at " << i;
  }
}

// MulAdd rounds once where the host has fused multiply-add (as every x86
// host with AVX2 does), and folds constants with one rounding too.
TEST(CpuPointwise, MulAddRoundsOnceWhereTheHostFuses) {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  bool hostFuses = features.lookup("fma");
  for (int64_t size : {1, 8, 37}) {
    TestProgram test;
    int64_t a = test.buffer(DType::Float32, size);
    int64_t out = test.buffer(DType::Float32, size);
    auto &e = test.exprs();
    const Expr *x = test.load(a, test.var(0));
    // x * x - x * x rounded once is the rounding error of x * x, which
    // separate roundings make 0.
    test.addKernel(pointwise(
        test, size, out,
        e.mulAdd(x, x, e.unary(UnaryOp::Neg, e.binary(BinaryOp::Mul, x, x)))));
    auto values = randomFloats(size, 1, 2, 7);
    test.fill(a, values);
    test.run();
    int fused = 0;
    for (int64_t i = 0; i < size; ++i) {
      float v = values[i], square = v * v;
      float once = std::fma(v, v, -square);
      float actual = test.data<float>(out)[i];
      EXPECT_TRUE(actual == once || actual == 0.0f) << "at " << i;
      if (hostFuses) {
        EXPECT_EQ(actual, once) << "at " << i;
      }
      fused += once != 0.0f;
    }
    EXPECT_TRUE(size < 8 || fused > 0) << "no value with a rounding error";
  }
  loop::ExprContext e;
  const Expr *third = e.constant(1.0 / 3.0, DType::Float64);
  const Expr *folded = e.mulAdd(third, e.constant(3.0, DType::Float64),
                                e.constant(-1.0, DType::Float64));
  ASSERT_TRUE(folded->isConstant());
  EXPECT_EQ(folded->real(), std::fma(1.0 / 3.0, 3.0, -1.0));
  EXPECT_THROW(e.mulAdd(e.var(0), e.var(0), e.var(0)), Error);
}

TEST(CpuMath, Float32AndFloat64FunctionsMatchTheCLibrary) {
  struct Case {
    UnaryOp op;
    double (*reference)(double);
    float low, high;
  };
  const Case cases[] = {
      {UnaryOp::Exp, [](double x) { return std::exp(x); }, -20, 20},
      {UnaryOp::Tanh, [](double x) { return std::tanh(x); }, -5, 5},
      {UnaryOp::Erf, [](double x) { return std::erf(x); }, -3, 3},
      {UnaryOp::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -10,
       10},
      {UnaryOp::Log1p, [](double x) { return std::log1p(x); }, -0.9f, 10},
      {UnaryOp::Sin, [](double x) { return std::sin(x); }, -6, 6},
      {UnaryOp::Log, [](double x) { return std::log(x); }, 0.01f, 100},
      {UnaryOp::Sqrt, [](double x) { return std::sqrt(x); }, 0, 100},
      {UnaryOp::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.1f, 100},
      {UnaryOp::Expm1, [](double x) { return std::expm1(x); }, -3, 3},
  };
  const int64_t size = 37;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case &c : cases) {
      TestProgram test;
      int64_t in = test.buffer(dtype, size), out = test.buffer(dtype, size);
      test.addKernel(
          pointwise(test, size, out,
                    test.exprs().unary(c.op, test.load(in, test.var(0)))));
      auto values = randomFloats(size, c.low, c.high);
      if (dtype == DType::Float32) {
        test.fill(in, values);
      } else {
        test.fill(in, std::vector<double>(values.begin(), values.end()));
      }
      test.run();
      for (int64_t i = 0; i < size; ++i) {
        double expected = c.reference(values[i]);
        double actual = dtype == DType::Float32 ? test.data<float>(out)[i]
                                                : test.data<double>(out)[i];
        double ulp = dtype == DType::Float32 ? 1.2e-7 : 2.3e-16;
        EXPECT_NEAR(actual, expected, 4 * ulp * std::abs(expected) + 1e-30)
            << loop::unaryOpName(c.op) << " " << dtypeName(dtype) << " of "
            << values[i];
      }
    }
  }
}

// exp of -inf (a causal mask) or of anything below about -104 is 0 with
// no subnormal number on the way: x86 takes a microcode assist for each
// subnormal result, which made a masked softmax 4x slower. The underflow
// flag says whether one was made; results that are subnormal stay exact.
TEST(CpuMath, Float32ExpOfVeryNegativeMakesNoSubnormal) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> zeros(64);
  for (size_t i = 0; i < zeros.size(); ++i)
    zeros[i] = i % 3 == 0 ? -inf : -104.5f - 10.0f * static_cast<float>(i);
  std::vector<float> subnormal = {-88.0f, -95.0f, -100.0f, -103.0f};
  for (const auto &[values, mayUnderflow] :
       {std::pair{zeros, false}, std::pair{subnormal, true}}) {
    int64_t size = static_cast<int64_t>(values.size());
    TestProgram test;
    int64_t in = test.buffer(DType::Float32, size);
    int64_t out = test.buffer(DType::Float32, size);
    test.addKernel(pointwise(
        test, size, out,
        test.exprs().unary(UnaryOp::Exp, test.load(in, test.var(0)))));
    test.fill(in, values);
    auto compiled = backend::CpuProgram::compile(test.program);
    std::feclearexcept(FE_ALL_EXCEPT);
    test.runAgain(*compiled); // small: runs on this thread
    bool underflowed = std::fetestexcept(FE_UNDERFLOW) != 0;
    EXPECT_EQ(underflowed, mayUnderflow);
    for (int64_t i = 0; i < size; ++i)
      EXPECT_EQ(test.data<float>(out)[i], std::exp(values[i])) << values[i];
  }
}

namespace {

// The test's program compiled, with its kernels' LLVM IR (before
// optimisation) in `ir`.
std::unique_ptr<backend::CpuProgram> compileWithIr(TestProgram &test,
                                                   std::string &ir) {
  startLogCapture({"llvm"});
  auto compiled = backend::CpuProgram::compile(test.program);
  for (const auto &[name, text] : stopLogCapture())
    ir += text;
  return compiled;
}

} // namespace

// exp of a value clamped from below to at least -86 (torch.clamp's
// maximum, or the select v < k ? k : v of GELU's exponent) is the
// normal-range exp, without the underflow and NaN handling of the general
// one (its underflow bound, -104, is absent from the kernel's IR); its
// results are those of the C library, NaN, inf and overflow included. A
// clamp lower than -86 keeps the general exp.
TEST(CpuMath, Float32ExpOfAClampedValueIsTheNormalRangeExp) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values = {-200.0f, -87.0f, -86.0f, -85.9f,  -60.0f,
                               -1.5f,   -0.0f,  1e-3f,  0.3466f, 10.0f,
                               88.0f,   88.37f, 88.5f,  88.7f,   88.73f,
                               89.5f,   200.0f, inf,    -inf,    nan};
  for (auto [bound, select] : {std::pair{-86.0f, false},
                               {-100.0f, false},
                               {-86.0f, true},
                               {-100.0f, true}}) {
    auto more = randomFloats(45, -90, 89);
    std::vector<float> inputs = values;
    inputs.insert(inputs.end(), more.begin(), more.end());
    int64_t size = static_cast<int64_t>(inputs.size());
    TestProgram test;
    int64_t in = test.buffer(DType::Float32, size);
    int64_t out = test.buffer(DType::Float32, size);
    auto &e = test.exprs();
    const Expr *x = test.load(in, test.var(0));
    const Expr *k = e.constant(bound, DType::Float32);
    const Expr *clamped = select ? e.where(e.binary(BinaryOp::Lt, x, k), k, x)
                                 : e.binary(BinaryOp::Max, x, k);
    test.addKernel(pointwise(test, size, out, e.unary(UnaryOp::Exp, clamped)));
    test.fill(in, inputs);
    std::string ir;
    auto compiled = compileWithIr(test, ir);
    EXPECT_EQ(ir.find("-1.040000e+02") == std::string::npos, bound >= -86.0f)
        << "clamped at " << bound << (select ? " by a select" : "");
    test.runAgain(*compiled);
    for (int64_t i = 0; i < size; ++i) {
      float x = std::isnan(inputs[i]) ? inputs[i] : std::max(inputs[i], bound);
      double expected = std::exp(static_cast<double>(x));
      float actual = test.data<float>(out)[i];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(actual)) << inputs[i];
      } else if (expected > std::numeric_limits<float>::max()) {
        EXPECT_EQ(actual, inf) << inputs[i];
      } else {
        // Below about -87.3 the results are subnormal: an ulp of 2^-149.
        EXPECT_NEAR(actual, expected, 2.4e-7 * expected + 0x1p-149)
            << inputs[i];
      }
    }
  }
}

// tanh's exp (of 2|x|, never below 0) is fused into e^{2|x|} - 1, |x|
// clamped to 9.1 (where tanh rounds to 1): neither exp's overflow clamp (89)
// nor the general exp's underflow bound is in its kernel, and the exponent
// is rounded to an integer by adding 1.5 * 2^23 + 128 in an fma whose bits,
// shifted, are the power of two: no rounding intrinsic, no conversion to
// an integer (the results are checked against float64 over all floats'
// sample in tests/py/backend/test_cpu_math.py).
namespace {

// A kernel of tanh over 64 floats.
void addTanhKernel(TestProgram &test) {
  int64_t in = test.buffer(DType::Float32, 64);
  int64_t out = test.buffer(DType::Float32, 64);
  test.addKernel(
      pointwise(test, 64, out,
                test.exprs().unary(UnaryOp::Tanh, test.load(in, test.var(0)))));
}

} // namespace

TEST(CpuMath, Float32TanhFusesItsExpAndRoundsByAnAddedConstant) {
  TestProgram test;
  addTanhKernel(test);
  std::string ir;
  compileWithIr(test, ir);
  EXPECT_NE(ir.find("0x4022333340000000"), std::string::npos); // 9.1f
  EXPECT_NE(ir.find("0x4168001000000000"), std::string::npos); // 1.5 2^23 + 128
  EXPECT_EQ(ir.find("8.900000e+01"), std::string::npos);
  EXPECT_EQ(ir.find("-1.040000e+02"), std::string::npos);
  EXPECT_EQ(ir.find("fptosi"), std::string::npos);
  EXPECT_EQ(ir.find("llvm.rint"), std::string::npos);
}

// Every inline float32 exp rounds its exponent by adding 1.5 * 2^23 (and a
// bias) in an fma and shifts the sum's bits into a power of two: no
// rounding intrinsic and no float-to-integer conversion, three vector
// instructions fewer (the values: the exp tests above, and
// tests/py/backend/test_cpu_math.py against float64).
TEST(CpuMath, Float32ExpsRoundTheirExponentWithoutAConversion) {
  for (int form = 0; form < 3; ++form) {
    TestProgram test;
    int64_t in = test.buffer(DType::Float32, 64);
    int64_t out = test.buffer(DType::Float32, 64);
    auto &e = test.exprs();
    const Expr *x = test.load(in, test.var(0));
    const Expr *value =
        form == 0 ? e.unary(UnaryOp::Exp, x)
        : form == 1
            ? e.unary(UnaryOp::Exp, e.binary(BinaryOp::Max, x,
                                             e.constant(-86.0, DType::Float32)))
            : e.unary(UnaryOp::Erf, x);
    test.addKernel(pointwise(test, 64, out, value));
    std::string ir;
    compileWithIr(test, ir);
    EXPECT_EQ(ir.find("fptosi"), std::string::npos) << form;
    EXPECT_EQ(ir.find("llvm.rint"), std::string::npos) << form;
  }
}

// Kernels are compiled for the small code model with position-independent
// code (CpuJit): a constant is read relative to the instruction pointer, as
// a memory operand where it fits, not loaded from an absolute address
// (movabs) into a register first: a GELU epilogue's 28 constants took a
// movabs and a broadcast each, for every row of a GEMM's tile.
TEST(CpuJit, KernelsReadConstantsRelativeToTheInstructionPointer) {
  TestProgram test;
  addTanhKernel(test);
  startLogCapture({"asm"});
  auto compiled = backend::CpuProgram::compile(test.program);
  std::string assembly;
  for (const auto &[name, text] : stopLogCapture())
    assembly += text;
  if (llvm::sys::getProcessTriple().find("x86_64") == std::string::npos)
    GTEST_SKIP() << "x86-64 assembly only";
  EXPECT_NE(assembly.find("(%rip)"), std::string::npos);
  EXPECT_EQ(assembly.find("movabs"), std::string::npos);
}

// A float32 division by a constant, in a kernel with another divider
// operation (a square root beside it), is a product by the reciprocal with
// one correction (ExprEmitter::quotientByConstant): no fdiv in the kernel,
// and the quotient equal to the division's bit for bit wherever the
// dividend exceeds 2^-100 and the quotient is normal (one ulp at most
// below); zeros keep their sign, infinities and NaN go through. A lone one
// stays a division (CpuSchedule's constantQuotientsAsProducts).
TEST(CpuMath, Float32DivisionByAConstantIsACorrectedProduct) {
  std::vector<float> values;
  std::mt19937 random(7);
  for (uint32_t exponent = 0; exponent < 256; ++exponent)
    for (int sample = 0; sample < 24; ++sample) {
      uint32_t bits = exponent << 23 | (random() & 0x7fffffu);
      if (sample % 2)
        bits |= 0x80000000u;
      float value;
      std::memcpy(&value, &bits, sizeof value);
      values.push_back(value);
    }
  const size_t size = values.size();
  for (float divisor : {3.0f, 0.1f, -1.7f, 27.712812f, 1e-5f}) {
    for (bool alone : {true, false}) {
      TestProgram test;
      int64_t in = test.buffer(DType::Float32, static_cast<int64_t>(size));
      int64_t out = test.buffer(DType::Float32, static_cast<int64_t>(size));
      auto &e = test.exprs();
      loop::Kernel kernel =
          pointwise(test, static_cast<int64_t>(size), out,
                    e.binary(BinaryOp::Div, test.load(in, test.var(0)),
                             e.constant(divisor, DType::Float32)));
      if (!alone) {
        int64_t root = test.buffer(DType::Float32, static_cast<int64_t>(size));
        kernel.loops[0].stores.push_back(
            {root, test.var(0),
             e.unary(UnaryOp::Sqrt, test.load(in, test.var(0)))});
      }
      test.addKernel(kernel);
      std::string ir;
      compileWithIr(test, ir);
      EXPECT_EQ(ir.find("fdiv") == std::string::npos, !alone) << divisor;
      if (alone)
        continue;
      test.fill(in, values);
      test.run();
      for (size_t i = 0; i < size; ++i) {
        float expected = values[i] / divisor, actual = test.data<float>(out)[i];
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(actual)) << values[i] << " / " << divisor;
          continue;
        }
        int32_t expectedBits, actualBits;
        std::memcpy(&expectedBits, &expected, sizeof expected);
        std::memcpy(&actualBits, &actual, sizeof actual);
        if (std::fabs(values[i]) > 0x1p-100f &&
            std::fabs(expected) >= std::numeric_limits<float>::min())
          EXPECT_EQ(actualBits, expectedBits)
              << values[i] << " / " << divisor << ": " << actual;
        else
          EXPECT_LE(std::abs(actualBits - expectedBits), 1)
              << values[i] << " / " << divisor << ": " << actual;
      }
    }
  }
}

// log1p is log(u) - ((u - 1) - x) / u, u = 1 + x, on the math library's
// log (no log1p call in the kernel: SLEEF's, with a log beside it for huge
// x, took 2.5x the time): its special values are the C library's bit for
// bit, tiny x give x, and values near -1, around 1 and huge ones are within
// 2 ulp.
TEST(CpuMath, Log1pIsALogWithACorrection) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> values = {0.0,   -0.0,   -1.0,   inf,      -inf,
                                nan,   -1.5,   3.4e38, 1e-45,    -1e-45,
                                1e-30, -1e-30, 1e-8,   -1e-7,    -0.999999,
                                -0.5,  0.5,    1.0,    33554432, 1e20};
  for (double x : randomFloats(60, -1, 3))
    values.push_back(x);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    int64_t size = static_cast<int64_t>(values.size());
    TestProgram test;
    int64_t in = test.buffer(dtype, size), out = test.buffer(dtype, size);
    test.addKernel(pointwise(
        test, size, out,
        test.exprs().unary(UnaryOp::Log1p, test.load(in, test.var(0)))));
    if (dtype == DType::Float32)
      test.fill(in, std::vector<float>(values.begin(), values.end()));
    else
      test.fill(in, values);
    std::string ir;
    auto compiled = compileWithIr(test, ir);
    EXPECT_EQ(ir.find("log1p"), std::string::npos) << ir;
    test.runAgain(*compiled);
    for (int64_t i = 0; i < size; ++i) {
      bool single = dtype == DType::Float32;
      double x = single ? double(float(values[i])) : values[i];
      double expected = single ? double(std::log1p(float(x))) : std::log1p(x);
      double actual =
          single ? test.data<float>(out)[i] : test.data<double>(out)[i];
      if (std::isnan(expected) || std::isinf(expected) || expected == 0 ||
          std::abs(x) < 1e-20) {
        EXPECT_TRUE((std::isnan(expected) && std::isnan(actual)) ||
                    (actual == (std::abs(x) < 1e-20 ? x : expected) &&
                     std::signbit(actual) == std::signbit(expected)))
            << dtypeName(dtype) << " log1p of " << x << ": " << actual;
        continue;
      }
      double ulp = single ? 0x1p-23 : 0x1p-52;
      EXPECT_NEAR(actual, expected, 2 * ulp * std::abs(expected))
          << dtypeName(dtype) << " log1p of " << x;
    }
  }
}

namespace {

// fmod of `count` pairs compiled, against C's bit for bit (the sign of
// zeros too): ordinary quotients, then specials and huge quotients mixed
// in, then quotients within an ulp of an integer (T's a / b can round onto
// it).
template <typename T> void expectFmodAsTheCLibrary(DType dtype) {
  const T inf = std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T tiny = std::numeric_limits<T>::denorm_min();
  const T huge = std::numeric_limits<T>::max();
  const T wholeLimit = T(1) / std::numeric_limits<T>::epsilon(); // 2^23, 2^52
  std::vector<T> special = {
      0,          T(-0.0),    inf,     -inf,           nan,
      tiny,       -tiny,      huge,    -huge,          1,
      -1,         T(0.1),     T(0.3),  2 * wholeLimit, 2 * wholeLimit + 2,
      wholeLimit, T(4.4e-39), T(-7.5), T(1e30),        T(-2.5e-30)};
  std::mt19937 generator(7);
  std::uniform_int_distribution<size_t> pick(0, special.size() - 1);
  std::uniform_real_distribution<T> exponent(-40, 40), mantissa(-1, 1);
  std::uniform_int_distribution<int> multiple(1, 1000000);
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<T> a(1003), b(1003);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = mantissa(generator) * std::exp2(exponent(generator) / 4);
      b[i] = mantissa(generator) * std::exp2(exponent(generator) / 4) + T(1e-3);
      if (kind == 1 && i % 5 == 0)
        a[i] = special[pick(generator)];
      if (kind == 1 && i % 7 == 0)
        b[i] = special[pick(generator)];
      if (kind == 2)
        a[i] =
            std::nextafter(T(multiple(generator)) * b[i], i % 2 ? inf : -inf);
    }
    std::vector<T> actual = applyBinary(BinaryOp::Fmod, dtype, a, b);
    for (size_t i = 0; i < a.size(); ++i) {
      T expected = std::fmod(a[i], b[i]);
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(actual[i])) << a[i] << " fmod " << b[i];
      else
        EXPECT_TRUE(actual[i] == expected &&
                    std::signbit(actual[i]) == std::signbit(expected))
            << dtypeName(dtype) << " " << a[i] << " fmod " << b[i] << ": "
            << actual[i] << " against " << expected;
    }
  }
}

} // namespace

// A float remainder is a - trunc(a / b) b computed exactly
// (ExprEmitter::emitFloatFmod: float32 in float64, float64 with one fma and
// a correction), not LLVM's frem (a C library call per lane), where that is
// exact; other lanes (larger quotients, infinities, NaN, zero divisors)
// branch to frem. Bit for bit C's fmod, over a vector loop and its tail.
TEST(CpuMath, FloatRemaindersAreExactWithoutALibraryCall) {
  expectFmodAsTheCLibrary<float>(DType::Float32);
  expectFmodAsTheCLibrary<double>(DType::Float64);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    TestProgram test;
    int64_t x = test.buffer(dtype, 64), y = test.buffer(dtype, 64);
    int64_t out = test.buffer(dtype, 64);
    test.addKernel(
        pointwise(test, 64, out,
                  test.exprs().binary(BinaryOp::Fmod, test.load(x, test.var(0)),
                                      test.load(y, test.var(0)))));
    std::string ir;
    compileWithIr(test, ir);
    EXPECT_TRUE(std::regex_search(ir, std::regex("fdiv <[0-9]+ x double>")))
        << ir;
    EXPECT_NE(ir.find("fmod_lanes"), std::string::npos);
  }
}

TEST(CpuTypes, Float16AndBFloat16RoundAfterEveryOperation) {
  const int64_t size = 19;
  auto values = randomFloats(size, -100, 100),
       others = randomFloats(size, -1, 1, 3);
  {
    TestProgram test;
    int64_t a = test.buffer(DType::Float16, size),
            b = test.buffer(DType::Float16, size);
    int64_t out = test.buffer(DType::Float16, size);
    auto &e = test.exprs();
    const Expr *x = test.load(a, test.var(0)), *y = test.load(b, test.var(0));
    test.addKernel(
        pointwise(test, size, out,
                  e.binary(BinaryOp::Mul, e.binary(BinaryOp::Add, x, y), y)));
    std::vector<_Float16> halfA(size), halfB(size);
    for (int64_t i = 0; i < size; ++i) {
      halfA[i] = static_cast<_Float16>(values[i]);
      halfB[i] = static_cast<_Float16>(others[i]);
    }
    test.fill(a, halfA);
    test.fill(b, halfB);
    test.run();
    for (int64_t i = 0; i < size; ++i) {
      _Float16 sum = static_cast<_Float16>(float(halfA[i]) + float(halfB[i]));
      _Float16 expected = static_cast<_Float16>(float(sum) * float(halfB[i]));
      EXPECT_EQ(float(test.data<_Float16>(out)[i]), float(expected)) << i;
    }
  }
  {
    TestProgram test;
    int64_t a = test.buffer(DType::BFloat16, size),
            b = test.buffer(DType::BFloat16, size);
    int64_t out = test.buffer(DType::BFloat16, size);
    auto &e = test.exprs();
    const Expr *x = test.load(a, test.var(0)), *y = test.load(b, test.var(0));
    test.addKernel(
        pointwise(test, size, out,
                  e.binary(BinaryOp::Mul, e.binary(BinaryOp::Add, x, y), y)));
    std::vector<uint16_t> bitsA(size), bitsB(size);
    for (int64_t i = 0; i < size; ++i) {
      bitsA[i] = floatToBFloat16(values[i]);
      bitsB[i] = floatToBFloat16(others[i]);
    }
    test.fill(a, bitsA);
    test.fill(b, bitsB);
    test.run();
    for (int64_t i = 0; i < size; ++i) {
      float x0 = bfloat16ToFloat(bitsA[i]), y0 = bfloat16ToFloat(bitsB[i]);
      float expected = roundToBFloat16(roundToBFloat16(x0 + y0) * y0);
      EXPECT_EQ(bfloat16ToFloat(test.data<uint16_t>(out)[i]), expected) << i;
    }
  }
}

TEST(CpuIntegers, PythonDivisionSignsAndDivisionByZero) {
  const std::vector<int32_t> a = {
      7, -7, 7, -7, 0, 5, std::numeric_limits<int32_t>::min(), 9, -3};
  const std::vector<int32_t> b = {2, 2, -2, -2, 3, 0, -1, 0, 1};
  for (BinaryOp op :
       {BinaryOp::FloorDiv, BinaryOp::Mod, BinaryOp::Div, BinaryOp::Fmod}) {
    std::vector<int32_t> result = applyBinary(op, DType::Int32, a, b);
    for (size_t i = 0; i < a.size(); ++i) {
      if (b[i] == 0)
        continue; // any value, as long as nothing traps
      int64_t quotient = static_cast<int64_t>(a[i]) / b[i];
      int64_t remainder = static_cast<int64_t>(a[i]) % b[i];
      bool adjust = remainder != 0 && ((remainder < 0) != (b[i] < 0));
      int64_t expected = op == BinaryOp::Div    ? quotient
                         : op == BinaryOp::Fmod ? remainder
                         : op == BinaryOp::FloorDiv
                             ? quotient - adjust
                             : remainder + (adjust ? b[i] : 0);
      EXPECT_EQ(result[i], static_cast<int32_t>(expected))
          << loop::binaryOpName(op) << " " << a[i] << ", " << b[i];
    }
  }
}

TEST(CpuFloats, FloorDivModAndNanPropagatingMaxMin) {
  // 1 // 0.1 is 9 (floor(1 / 0.1) would be 10: the division rounds up).
  const std::vector<float> a = {7.5f,  -7.5f, 7.5f, -7.5f, NAN,   1.0f, 3.0f,
                                -0.0f, 2.0f,  1.0f, 1.0f,  -1.0f, 0.0f, 5.0f};
  const std::vector<float> b = {2.0f,  2.0f, -2.0f, -2.0f,    1.0f,
                                NAN,   3.0f, 1.0f,  INFINITY, 0.1f,
                                -0.1f, 0.1f, -3.0f, 0.0f};
  for (BinaryOp op :
       {BinaryOp::FloorDiv, BinaryOp::Mod, BinaryOp::Max, BinaryOp::Min}) {
    std::vector<float> result = applyBinary(op, DType::Float32, a, b);
    for (size_t i = 0; i < a.size(); ++i) {
      float expected;
      if (op == BinaryOp::FloorDiv) {
        expected = kiln::testing::torchFloorDivide(a[i], b[i]);
      } else if (op == BinaryOp::Mod) {
        expected = std::fmod(a[i], b[i]);
        if (expected != 0 && ((b[i] < 0) != (expected < 0)))
          expected += b[i];
      } else if (std::isnan(a[i]) || std::isnan(b[i])) {
        expected = NAN;
      } else {
        expected =
            op == BinaryOp::Max ? std::max(a[i], b[i]) : std::min(a[i], b[i]);
      }
      float actual = result[i];
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(actual)) << loop::binaryOpName(op) << " " << i;
      else
        EXPECT_EQ(actual, expected) << loop::binaryOpName(op) << " " << i;
    }
  }
}

// eager's static_cast on x86 (cvttss2si): int64 converts at 64 bits, int8 at
// 32 bits keeping the low byte; NaN and out-of-range values give the
// converted width's minimum (so int8 0). Vectors of them too (eight rounds
// of the values), as a plain conversion and a select: LLVM 19 made its
// saturating conversion of a vector one scalar conversion a lane (8x
// eager's time).
TEST(CpuCasts, FloatToIntegerAndBoolAsEagerOnX86) {
  const std::vector<float> distinct = {1.7f, -1.7f,  NAN,   1e20f,   -1e20f,
                                       0.0f, 300.0f, -0.5f, INFINITY};
  std::vector<float> values;
  for (int round = 0; round < 8; ++round)
    values.insert(values.end(), distinct.begin(), distinct.end());
  int64_t size = static_cast<int64_t>(values.size());
  TestProgram test;
  int64_t in = test.buffer(DType::Float32, size);
  int64_t asInt = test.buffer(DType::Int64, size),
          asInt8 = test.buffer(DType::Int8, size);
  int64_t asBool = test.buffer(DType::Bool, size),
          back = test.buffer(DType::Float32, size);
  auto &e = test.exprs();
  const Expr *x = test.load(in, test.var(0));
  loop::Kernel kernel = pointwise(test, size, asInt, e.cast(x, DType::Int64));
  kernel.loops[0].stores.push_back(
      {asInt8, test.var(0), e.cast(x, DType::Int8)});
  kernel.loops[0].stores.push_back(
      {asBool, test.var(0), e.cast(x, DType::Bool)});
  kernel.loops[0].stores.push_back(
      {back, test.var(0), e.cast(e.cast(x, DType::Bool), DType::Float32)});
  test.addKernel(kernel);
  test.fill(in, values);
  std::string ir;
  auto compiled = compileWithIr(test, ir);
  EXPECT_EQ(ir.find("fptosi.sat"), std::string::npos);
  test.runAgain(*compiled);
  const int64_t indefinite = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> expectedInt = {
      1, -1, indefinite, indefinite, indefinite, 0, 300, 0, indefinite};
  const std::vector<int8_t> expectedInt8 = {1, -1, 0, 0, 0, 0, 44, 0, 0};
  for (int64_t i = 0; i < size; ++i) {
    EXPECT_EQ(test.data<int64_t>(asInt)[i], expectedInt[i % 9]) << i;
    EXPECT_EQ(test.data<int8_t>(asInt8)[i], expectedInt8[i % 9]) << i;
    bool truth = values[i] != 0 || std::isnan(values[i]);
    EXPECT_EQ(test.data<uint8_t>(asBool)[i], truth ? 1 : 0) << i;
    EXPECT_EQ(test.data<float>(back)[i], truth ? 1.0f : 0.0f) << i;
  }
}

TEST(CpuIntegers, BoolLogicShiftsPowerAndComparisons) {
  const std::vector<int64_t> a = {3, -8, 5, 2, 0, -1, 7, 1};
  const std::vector<int64_t> b = {2, 1, 70, 10, 0, 3, -1, 63};
  int64_t size = static_cast<int64_t>(a.size());
  TestProgram test;
  int64_t x = test.buffer(DType::Int64, size),
          y = test.buffer(DType::Int64, size);
  int64_t shiftLeft = test.buffer(DType::Int64, size),
          shiftRight = test.buffer(DType::Int64, size);
  int64_t power = test.buffer(DType::Int64, size),
          less = test.buffer(DType::Bool, size);
  auto &e = test.exprs();
  const Expr *lhs = test.load(x, test.var(0)), *rhs = test.load(y, test.var(0));
  loop::Kernel kernel =
      pointwise(test, size, shiftLeft, e.binary(BinaryOp::ShiftLeft, lhs, rhs));
  kernel.loops[0].stores.push_back(
      {shiftRight, test.var(0), e.binary(BinaryOp::ShiftRight, lhs, rhs)});
  kernel.loops[0].stores.push_back(
      {power, test.var(0), e.binary(BinaryOp::Pow, lhs, rhs)});
  kernel.loops[0].stores.push_back(
      {less, test.var(0),
       e.binary(
           BinaryOp::LogicalAnd, e.binary(BinaryOp::Lt, lhs, rhs),
           e.unary(UnaryOp::LogicalNot, e.binary(BinaryOp::Eq, lhs, rhs)))});
  test.addKernel(kernel);
  test.fill(x, a);
  test.fill(y, b);
  test.run();
  for (int64_t i = 0; i < size; ++i) {
    int64_t expectedLeft =
        b[i] >= 0 && b[i] < 64
            ? static_cast<int64_t>(static_cast<uint64_t>(a[i]) << b[i])
            : 0;
    int64_t expectedRight = a[i] >> std::min<int64_t>(b[i] < 0 ? 63 : b[i], 63);
    uint64_t expectedPower = 1;
    if (b[i] >= 0)
      for (int64_t k = 0; k < b[i]; ++k)
        expectedPower *= static_cast<uint64_t>(a[i]);
    else
      expectedPower = a[i] == 1    ? 1
                      : a[i] == -1 ? static_cast<uint64_t>((b[i] & 1) ? -1 : 1)
                                   : 0;
    EXPECT_EQ(test.data<int64_t>(shiftLeft)[i], expectedLeft) << i;
    EXPECT_EQ(test.data<int64_t>(shiftRight)[i], expectedRight) << i;
    EXPECT_EQ(test.data<int64_t>(power)[i], static_cast<int64_t>(expectedPower))
        << i;
    EXPECT_EQ(test.data<uint8_t>(less)[i], a[i] < b[i] ? 1 : 0) << i;
  }
}

TEST(CpuLoads, TransposedBroadcastAndGatheredLoads) {
  // out[i, j] = in[j, i] + row[j] + in.flat[(i*C + j) / 2 % (R*C)]
  for (int64_t rows : {1, 5, 17}) {
    for (int64_t columns : {1, 9, 40}) {
      TestProgram test;
      int64_t in = test.buffer(DType::Float32, rows * columns);
      int64_t row = test.buffer(DType::Float32, columns);
      int64_t out = test.buffer(DType::Float32, rows * columns);
      auto &e = test.exprs();
      const Expr *i = test.var(0), *j = test.var(1);
      const Expr *flat = e.add(e.mul(i, e.integer(columns)), j);
      const Expr *transposed = e.add(e.mul(j, e.integer(rows)), i);
      const Expr *gathered = e.mod(e.floorDiv(flat, 2), rows * columns);
      loop::Kernel kernel;
      kernel.name = "transpose";
      kernel.outerRanges = {rows, columns};
      loop::Loop body;
      body.stores.push_back(
          {out, flat,
           e.binary(BinaryOp::Add,
                    e.binary(BinaryOp::Add, test.load(in, transposed),
                             test.load(row, j)),
                    test.load(in, gathered))});
      kernel.loops.push_back(body);
      test.addKernel(kernel);
      auto values = randomFloats(rows * columns, -1, 1),
           rowValues = randomFloats(columns, -1, 1, 5);
      test.fill(in, values);
      test.fill(row, rowValues);
      test.run();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < columns; ++c)
          EXPECT_EQ(test.data<float>(out)[r * columns + c],
                    values[c * rows + r] + rowValues[c] +
                        values[(r * columns + c) / 2])
              << rows << "x" << columns << " at " << r << "," << c;
    }
  }
}

namespace {

/// out[r, j] = in[r, column(j)] over rows x width (in: rows x columns random
/// floats), compiled and run: the kernel's IR before optimisation, the
/// input and the output.
struct ColumnRead {
  std::string ir;
  std::vector<float> in, out;
};
ColumnRead
readColumns(int64_t rows, int64_t columns, int64_t width,
            const std::function<const Expr *(loop::ExprContext &, const Expr *)>
                &column) {
  TestProgram test;
  int64_t in = test.buffer(DType::Float32, rows * columns);
  int64_t out = test.buffer(DType::Float32, rows * width);
  auto &e = test.exprs();
  const Expr *i = test.var(0), *j = test.var(1);
  loop::Kernel kernel;
  kernel.name = "columns";
  kernel.outerRanges = {rows, width};
  loop::Loop body;
  body.stores.push_back(
      {out, e.add(e.mul(i, e.integer(width)), j),
       test.load(in, e.add(e.mul(i, e.integer(columns)), column(e, j)))});
  kernel.loops.push_back(body);
  test.addKernel(kernel);
  ColumnRead read;
  read.in = randomFloats(rows * columns, -1, 1);
  test.fill(in, read.in);
  auto compiled = compileWithIr(test, read.ir);
  test.runAgain(*compiled);
  read.out.assign(test.data<float>(out), test.data<float>(out) + rows * width);
  return read;
}

} // namespace

// A pad's or a padded window's column: in[r, clamp(j + shift, 0, C - 1)],
// contiguous along the vector but at the edges, is a masked contiguous
// load with the edge elements in the lanes outside (no gather), where the
// host has AVX; the values are the clamped index's.
TEST(CpuLoads, ClampedColumnsAreMaskedContiguousLoads) {
  const int64_t rows = 3;
  for (int64_t columns : {1, 7, 40, 130}) {
    for (int64_t shift : {-2, 0, 3}) {
      int64_t width = columns + 5;
      ColumnRead read = readColumns(
          rows, columns, width, [&](loop::ExprContext &e, const Expr *j) {
            return e.binary(BinaryOp::Min,
                            e.binary(BinaryOp::Max, e.add(j, e.integer(shift)),
                                     e.integer(0)),
                            e.integer(columns - 1));
          });
      if (backend::hostTarget().vectorBits >= 256 && width >= 16) {
        EXPECT_NE(read.ir.find("llvm.masked.load"), std::string::npos);
        EXPECT_EQ(read.ir.find("llvm.masked.gather"), std::string::npos);
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < width; ++c) {
          int64_t source = std::clamp<int64_t>(c + shift, 0, columns - 1);
          EXPECT_EQ(read.out[r * width + c], read.in[r * columns + source])
              << columns << " shift " << shift << " at " << r << "," << c;
        }
    }
  }
}

// A roll's column, in[r, mod(j + shift, C)], wraps at most once along a
// vector where C has at least its lanes: two masked contiguous loads, no
// gather, where the host has AVX; the values are the wrapped index's, for
// shifts that make t negative too (mod rounds toward minus infinity).
TEST(CpuLoads, WrappedColumnsAreTwoMaskedContiguousLoads) {
  const int64_t rows = 3;
  for (int64_t columns : {7, 16, 40, 130}) {
    for (int64_t shift : {-3, 0, 5, 1000}) {
      int64_t width = columns + 5;
      ColumnRead read = readColumns(
          rows, columns, width, [&](loop::ExprContext &e, const Expr *j) {
            return e.binary(BinaryOp::Mod, e.add(j, e.integer(shift)),
                            e.integer(columns));
          });
      // (An unrolled vector wider than C, 64 lanes at most, keeps a gather.)
      if (backend::hostTarget().vectorBits >= 256 && columns >= 64) {
        EXPECT_NE(read.ir.find("llvm.masked.load"), std::string::npos);
        EXPECT_EQ(read.ir.find("llvm.masked.gather"), std::string::npos);
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < width; ++c) {
          int64_t source = ((c + shift) % columns + columns) % columns;
          EXPECT_EQ(read.out[r * width + c], read.in[r * columns + source])
              << columns << " shift " << shift << " at " << r << "," << c;
        }
    }
  }
}

// Columns a few elements apart, in[r, k * j + shift] (x[..., ::2]) and a
// stride-k window's clamped to the row (max(k * j + shift, 0), and min of
// that with C - 1: an NCHW pool's), load the span their lanes cover and
// shuffle out every k-th element, no gather, where the host has AVX; the
// span never passes the last lane's element (the row ends at the buffer's
// end for the last row).
TEST(CpuLoads, StridedColumnsAreSpansShuffled) {
  const int64_t rows = 3;
  for (int64_t stride : {2, 3, 4}) {
    for (int64_t columns : {9, 40, 131}) {
      for (int clamp = 0; clamp < 3; ++clamp) {
        int64_t shift = clamp == 0 ? 0 : -1;
        // The last lane's position is the row's last element at most, but
        // for min's clamp, which it passes.
        int64_t width = clamp == 0   ? (columns - 1) / stride + 1
                        : clamp == 1 ? columns / stride + 1
                                     : (columns + 1) / stride + 1;
        ColumnRead read = readColumns(
            rows, columns, width, [&](loop::ExprContext &e, const Expr *j) {
              const Expr *t =
                  e.add(e.mul(j, e.integer(stride)), e.integer(shift));
              if (clamp == 0)
                return t;
              t = e.binary(BinaryOp::Max, t, e.integer(0));
              return clamp == 1
                         ? t
                         : e.binary(BinaryOp::Min, t, e.integer(columns - 1));
            });
        if (backend::hostTarget().vectorBits >= 256 && width >= 16) {
          EXPECT_EQ(read.ir.find("llvm.masked.gather"), std::string::npos)
              << "stride " << stride << " columns " << columns;
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < width; ++c) {
            int64_t source = std::min<int64_t>(
                std::max<int64_t>(c * stride + shift, 0), columns - 1);
            EXPECT_EQ(read.out[r * width + c], read.in[r * columns + source])
                << "stride " << stride << " columns " << columns << " clamp "
                << clamp << " at " << r << "," << c;
          }
      }
    }
  }
}

// A padded 3x3 window's sum and maximum over each point of a rows x
// columns float32 plane (an NCHW pool's), vectorised along the columns: the
// columns past the whole vectors take vectors of half and a quarter of the
// lanes before any scalar point (28 columns: 16 + 8 + 4 on AVX-512, 8 x 3
// + 4 on AVX2), and the 9 taps are emitted one after another, their sum
// without the blocks and compensation of long sums (no fsub in the IR).
// The values are the window's, padding excluded, over rows of 28, 7, 13
// and 40 columns, NaN included.
TEST(CpuWindows, RowsPastWholeVectorsTakeNarrowerOnesAndTapsAreUnrolled) {
  const int64_t rows = 5;
  for (int64_t columns : {28, 7, 13, 40}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      TestProgram test;
      int64_t in = test.buffer(DType::Float32, rows * columns);
      int64_t out = test.buffer(DType::Float32, rows * columns);
      auto &e = test.exprs();
      const Expr *i = test.var(0), *j = test.var(1);
      const Expr *r = e.add(e.add(i, test.var(2)), e.integer(-1));
      const Expr *c = e.add(e.add(j, test.var(3)), e.integer(-1));
      auto inside = [&](const Expr *t, int64_t extent) {
        return e.binary(BinaryOp::LogicalAnd,
                        e.binary(BinaryOp::Ge, t, e.integer(0)),
                        e.binary(BinaryOp::Lt, t, e.integer(extent)));
      };
      auto clamp = [&](const Expr *t, int64_t extent) {
        return e.binary(BinaryOp::Min, e.binary(BinaryOp::Max, t, e.integer(0)),
                        e.integer(extent - 1));
      };
      const Expr *tap =
          test.load(in, e.add(e.mul(clamp(r, rows), e.integer(columns)),
                              clamp(c, columns)));
      const Expr *identity = e.constant(
          op == ReduceOp::Sum ? 0.0 : -std::numeric_limits<double>::infinity(),
          DType::Float32);
      loop::Kernel kernel;
      kernel.name = "window";
      kernel.outerRanges = {rows, columns};
      loop::Loop window;
      window.ranges = {3, 3};
      window.reductions.push_back(
          {op, e.where(e.binary(BinaryOp::LogicalAnd, inside(r, rows),
                                inside(c, columns)),
                       tap, identity)});
      loop::Loop store;
      store.stores.push_back({out, e.add(e.mul(i, e.integer(columns)), j),
                              e.reductionValue(0, DType::Float32)});
      kernel.loops = {window, store};
      test.addKernel(kernel);
      std::vector<float> values = randomFloats(rows * columns, -1, 1);
      values[columns + 2] = NAN;
      test.fill(in, values);
      std::string ir;
      auto compiled = compileWithIr(test, ir);
      test.runAgain(*compiled);
      std::string label = std::to_string(columns) + " columns, " +
                          (op == ReduceOp::Sum ? "sum" : "max");
      if (backend::hostTarget().vectorBits >= 256 && columns == 28) {
        EXPECT_NE(ir.find("<4 x float>"), std::string::npos) << label;
      }
      EXPECT_EQ(ir.find("fsub"), std::string::npos) << label;
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t column = 0; column < columns; ++column) {
          float expected = op == ReduceOp::Sum
                               ? 0.0f
                               : -std::numeric_limits<float>::infinity();
          bool nan = false;
          for (int64_t dr = -1; dr <= 1; ++dr)
            for (int64_t dc = -1; dc <= 1; ++dc) {
              int64_t y = row + dr, x = column + dc;
              if (y < 0 || y >= rows || x < 0 || x >= columns)
                continue;
              float value = values[y * columns + x];
              nan = nan || std::isnan(value);
              expected = op == ReduceOp::Sum ? expected + value
                                             : std::max(expected, value);
            }
          float actual = test.data<float>(out)[row * columns + column];
          if (nan) {
            EXPECT_TRUE(std::isnan(actual))
                << label << " at " << row << "," << column;
          } else {
            EXPECT_NEAR(actual, expected, 1e-6f)
                << label << " at " << row << "," << column;
          }
        }
    }
  }
}

// A flip's column, in[r, C - 1 - j], is one contiguous load with its lanes
// reversed (no gather), on every host.
TEST(CpuLoads, ReversedColumnsAreContiguousLoadsReversed) {
  const int64_t rows = 3;
  for (int64_t columns : {1, 7, 40, 130}) {
    ColumnRead read = readColumns(
        rows, columns, columns, [&](loop::ExprContext &e, const Expr *j) {
          return e.add(e.mul(j, e.integer(-1)), e.integer(columns - 1));
        });
    if (columns >= 40) {
      EXPECT_EQ(read.ir.find("llvm.masked.gather"), std::string::npos);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < columns; ++c)
        EXPECT_EQ(read.out[r * columns + c],
                  read.in[r * columns + columns - 1 - c])
            << columns << " at " << r << "," << c;
  }
}

// A transpose's reads, in[b, v, u] for out[b, u, v] (NCHW to NHWC), are
// lanes x lanes tiles of contiguous loads transposed in registers, no
// gather (CpuSchedule's planTranspose), with a contiguous read beside them
// and the rows and columns past the last whole tile taken row by row: the
// values are the transpose's, in float32 and float64, and from int8 cast
// to float32, over extents below, at and between whole tiles.
TEST(CpuLoads, TransposedReadsAreTilesTransposedInRegisters) {
  const int64_t batch = 2;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int8})
    for (int64_t rows : {5, 16, 33, 64})
      for (int64_t columns : {16, 31, 48, 130}) {
        TestProgram test;
        int64_t plane = rows * columns;
        int64_t in = test.buffer(dtype, batch * plane);
        int64_t beside = test.buffer(DType::Float32, plane);
        DType outType = dtype == DType::Float64 ? dtype : DType::Float32;
        int64_t out = test.buffer(outType, batch * plane);
        auto &e = test.exprs();
        const Expr *b = test.var(0), *u = test.var(1), *v = test.var(2);
        const Expr *read =
            e.cast(test.load(in, e.add(e.mul(b, e.integer(plane)),
                                       e.add(e.mul(v, e.integer(rows)), u))),
                   outType);
        const Expr *besideRead = e.cast(
            test.load(beside, e.add(e.mul(u, e.integer(columns)), v)), outType);
        loop::Kernel kernel;
        kernel.name = "transpose";
        kernel.outerRanges = {batch, rows, columns};
        loop::Loop body;
        body.stores.push_back(
            {out,
             e.add(e.mul(b, e.integer(plane)),
                   e.add(e.mul(u, e.integer(columns)), v)),
             e.add(e.mul(read, e.constant(2.0, outType)), besideRead)});
        kernel.loops.push_back(body);
        test.addKernel(kernel);
        std::vector<float> values = randomFloats(batch * plane, -100, 100);
        std::vector<float> besides = randomFloats(plane, -1, 1);
        std::vector<double> inputs(values.begin(), values.end());
        if (dtype == DType::Float32) {
          test.fill(in, values);
        } else if (dtype == DType::Float64) {
          test.fill(in, inputs);
        } else {
          std::vector<int8_t> bytes;
          for (double &value : inputs)
            bytes.push_back(static_cast<int8_t>(value = std::trunc(value)));
          test.fill(in, bytes);
        }
        test.fill(beside, besides);
        std::string ir;
        auto compiled = compileWithIr(test, ir);
        test.runAgain(*compiled);
        int lanes = backend::hostTarget().vectorBits /
                    (8 * (dtype == DType::Float64 ? 8 : 4));
        // Rows and columns past the last whole tile are read row by row
        // (a gather per vector).
        if (rows >= lanes && columns >= lanes) {
          EXPECT_NE(ir.find("shufflevector"), std::string::npos);
        }
        if (rows % lanes == 0 && columns % lanes == 0) {
          EXPECT_EQ(ir.find("llvm.masked.gather"), std::string::npos)
              << dtypeName(dtype) << " " << rows << "x" << columns;
        }
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < columns; ++c) {
              double source = inputs[n * plane + c * rows + r];
              double expected =
                  outType == DType::Float64
                      ? source * 2 + besides[r * columns + c]
                      : static_cast<double>(static_cast<float>(source) * 2.0f +
                                            besides[r * columns + c]);
              int64_t at = n * plane + r * columns + c;
              double actual = outType == DType::Float64
                                  ? test.data<double>(out)[at]
                                  : test.data<float>(out)[at];
              ASSERT_EQ(actual, expected)
                  << dtypeName(dtype) << " " << rows << "x" << columns << " at "
                  << n << "," << r << "," << c;
            }
      }
}

namespace {

/// One reduction over the columns of a rows x columns float32 matrix,
/// stored per row.
struct RowReduction {
  TestProgram test;
  int64_t in, out;
  /// `squares`: of the elements' squares.
  RowReduction(int64_t rows, int64_t columns, ReduceOp op, DType outDType,
               bool squares = false) {
    in = test.buffer(DType::Float32, rows * columns);
    out = test.buffer(outDType, rows);
    auto &e = test.exprs();
    loop::Kernel kernel;
    kernel.name = "row_reduction";
    kernel.outerRanges = {rows};
    loop::Loop reduce;
    reduce.ranges = {columns};
    const Expr *x = test.load(
        in, e.add(e.mul(test.var(0), e.integer(columns)), test.var(1)));
    reduce.reductions.push_back({op, squares ? e.mul(x, x) : x});
    loop::Loop store;
    store.stores.push_back({out, test.var(0), e.reductionValue(0, outDType)});
    kernel.loops = {reduce, store};
    test.addKernel(kernel);
  }
};

} // namespace

// A kernel whose loop computes between its loads (CpuSchedule's
// planPrefetch) prefetches every line of each contiguous vector load a
// page further on; a row sum, which only adds what it loads, prefetches
// nothing. Its values are those of the same kernel without the prefetches.
TEST(CpuKernel, LoopsThatComputeBetweenTheirLoadsPrefetchAPageAhead) {
  if (backend::hostTarget().prefetchBytes != 4096)
    GTEST_SKIP() << "the host does not prefetch 4 KiB ahead";
  int64_t rows = 3, columns = 1000;
  for (bool squares : {false, true}) {
    RowReduction reduction(rows, columns, ReduceOp::Sum, DType::Float32,
                           squares);
    std::string ir;
    auto compiled = compileWithIr(reduction.test, ir);
    EXPECT_EQ(ir.find("@llvm.prefetch") != std::string::npos, squares) << ir;
    if (squares) {
      EXPECT_NE(ir.find("i64 4096"), std::string::npos) << ir;
    }
    std::vector<float> values(rows * columns);
    for (int64_t i = 0; i < rows * columns; ++i)
      values[i] = static_cast<float>(i % 7) - 3.0f;
    reduction.test.fill(reduction.in, values);
    reduction.test.runAgain(*compiled);
    for (int64_t row = 0; row < rows; ++row) {
      double expected = 0;
      for (int64_t column = 0; column < columns; ++column) {
        double value = values[row * columns + column];
        expected += squares ? value * value : value;
      }
      EXPECT_EQ(reduction.test.data<float>(reduction.out)[row], expected)
          << row;
    }
  }
}

TEST(CpuReductions, RowSumMaxAndEmptyRows) {
  for (int64_t columns : {0, 1, 7, 33, 1000}) {
    const int64_t rows = 3;
    auto values = randomFloats(rows * columns, -1, 1);
    RowReduction sum(rows, columns, ReduceOp::Sum, DType::Float32);
    RowReduction maximum(rows, columns, ReduceOp::Max, DType::Float32);
    if (columns > 0)
      values[columns + columns / 2] = NAN; // row 1
    for (RowReduction *reduction : {&sum, &maximum}) {
      reduction->test.fill(reduction->in, values);
      reduction->test.run();
    }
    for (int64_t r = 0; r < rows; ++r) {
      double expectedSum = 0;
      float expectedMax = -INFINITY;
      for (int64_t c = 0; c < columns; ++c) {
        expectedSum += values[r * columns + c];
        expectedMax =
            std::isnan(values[r * columns + c]) || std::isnan(expectedMax)
                ? NAN
                : std::max(expectedMax, values[r * columns + c]);
      }
      float actualSum = sum.test.data<float>(sum.out)[r];
      float actualMax = maximum.test.data<float>(maximum.out)[r];
      if (std::isnan(expectedSum))
        EXPECT_TRUE(std::isnan(actualSum));
      else
        EXPECT_NEAR(actualSum, expectedSum, 1e-5 * columns + 1e-6)
            << columns << " row " << r;
      if (std::isnan(expectedMax))
        EXPECT_TRUE(std::isnan(actualMax)) << columns << " row " << r;
      else
        EXPECT_EQ(actualMax, expectedMax) << columns << " row " << r;
    }
  }
}

TEST(CpuReductions, ArgMaxArgMinTiesAndNan) {
  const int64_t columns = 21;
  std::vector<float> values(3 * columns, 0.0f);
  values[4] = 5;
  values[15] = 5;
  values[2] = -3;
  values[19] = -3; // ties
  values[columns + 3] = 9;
  values[columns + 10] = NAN;
  values[columns + 12] = NAN;
  values[2 * columns + 20] = 1;
  values[2 * columns + 0] = -1;
  RowReduction argmax(3, columns, ReduceOp::ArgMax, DType::Int64);
  RowReduction argmin(3, columns, ReduceOp::ArgMin, DType::Int64);
  for (RowReduction *reduction : {&argmax, &argmin}) {
    reduction->test.fill(reduction->in, values);
    reduction->test.run();
  }
  EXPECT_EQ(argmax.test.data<int64_t>(argmax.out)[0], 4);
  EXPECT_EQ(argmax.test.data<int64_t>(argmax.out)[1], 10);
  EXPECT_EQ(argmax.test.data<int64_t>(argmax.out)[2], 20);
  EXPECT_EQ(argmin.test.data<int64_t>(argmin.out)[0], 2);
  EXPECT_EQ(argmin.test.data<int64_t>(argmin.out)[1], 10);
  EXPECT_EQ(argmin.test.data<int64_t>(argmin.out)[2], 0);
  RowReduction empty(2, 0, ReduceOp::ArgMax, DType::Int64);
  empty.test.data<int64_t>(empty.out)[0] = 77;
  empty.test.run();
  EXPECT_EQ(empty.test.data<int64_t>(empty.out)[0], 0);
}

TEST(CpuReductions, ColumnSumVectorisesTheOuterVariable) {
  for (int64_t columns : {1, 7, 33}) {
    const int64_t rows = 50;
    TestProgram test;
    int64_t in = test.buffer(DType::Float32, rows * columns);
    int64_t out = test.buffer(DType::Float32, columns);
    auto &e = test.exprs();
    loop::Kernel kernel;
    kernel.name = "column_sum";
    kernel.outerRanges = {columns};
    loop::Loop reduce;
    reduce.ranges = {rows};
    reduce.reductions.push_back(
        {ReduceOp::Sum,
         test.load(
             in, e.add(e.mul(test.var(1), e.integer(columns)), test.var(0)))});
    reduce.reductions.push_back(
        {ReduceOp::Min,
         test.load(
             in, e.add(e.mul(test.var(1), e.integer(columns)), test.var(0)))});
    loop::Loop store;
    store.stores.push_back(
        {out, test.var(0),
         e.binary(BinaryOp::Add, e.reductionValue(0, DType::Float32),
                  e.reductionValue(1, DType::Float32))});
    kernel.loops = {reduce, store};
    test.addKernel(kernel);
    auto values = randomFloats(rows * columns, 0, 1);
    test.fill(in, values);
    test.run();
    for (int64_t c = 0; c < columns; ++c) {
      float sum = 0, minimum = INFINITY;
      for (int64_t r = 0; r < rows; ++r) {
        sum += values[r * columns + c];
        minimum = std::min(minimum, values[r * columns + c]);
      }
      EXPECT_NEAR(test.data<float>(out)[c], sum + minimum, 1e-4) << c;
    }
  }
}

TEST(CpuReductions, SoftmaxShapedKernel) {
  for (int64_t columns : {1, 10, 100}) {
    const int64_t rows = 4;
    TestProgram test;
    int64_t in = test.buffer(DType::Float32, rows * columns);
    int64_t out = test.buffer(DType::Float32, rows * columns);
    auto &e = test.exprs();
    const Expr *index =
        e.add(e.mul(test.var(0), e.integer(columns)), test.var(1));
    const Expr *x = test.load(in, index);
    const Expr *maximum = e.reductionValue(0, DType::Float32);
    const Expr *shifted =
        e.unary(UnaryOp::Exp, e.binary(BinaryOp::Sub, x, maximum));
    loop::Kernel kernel;
    kernel.name = "softmax";
    kernel.outerRanges = {rows};
    loop::Loop maxLoop, sumLoop, storeLoop;
    maxLoop.ranges = sumLoop.ranges = storeLoop.ranges = {columns};
    maxLoop.reductions.push_back({ReduceOp::Max, x});
    sumLoop.reductions.push_back({ReduceOp::Sum, shifted});
    storeLoop.stores.push_back({out, index,
                                e.binary(BinaryOp::Div, shifted,
                                         e.reductionValue(1, DType::Float32))});
    kernel.loops = {maxLoop, sumLoop, storeLoop};
    test.addKernel(kernel);
    auto values = randomFloats(rows * columns, -5, 5);
    test.fill(in, values);
    test.run();
    for (int64_t r = 0; r < rows; ++r) {
      double maxValue = -INFINITY, total = 0;
      for (int64_t c = 0; c < columns; ++c)
        maxValue = std::max<double>(maxValue, values[r * columns + c]);
      for (int64_t c = 0; c < columns; ++c)
        total += std::exp(values[r * columns + c] - maxValue);
      for (int64_t c = 0; c < columns; ++c)
        EXPECT_NEAR(test.data<float>(out)[r * columns + c],
                    std::exp(values[r * columns + c] - maxValue) / total, 1e-6)
            << columns << " at " << r << "," << c;
    }
  }
}

TEST(CpuReductions, LongSumStaysAccurate) {
  const int64_t size = 1 << 20;
  TestProgram test;
  int64_t in = test.buffer(DType::Float32, size);
  int64_t out = test.buffer(DType::Float32, 1);
  loop::Kernel kernel;
  kernel.name = "total";
  loop::Loop reduce;
  reduce.ranges = {size};
  reduce.reductions.push_back({ReduceOp::Sum, test.load(in, test.var(0))});
  loop::Loop store;
  store.stores.push_back({out, test.exprs().integer(0),
                          test.exprs().reductionValue(0, DType::Float32)});
  kernel.loops = {reduce, store};
  test.addKernel(kernel);
  auto values = randomFloats(size, 0, 1);
  test.fill(in, values);
  test.run();
  double expected = 0;
  for (float value : values)
    expected += value;
  EXPECT_NEAR(test.data<float>(out)[0], expected, 1e-6 * expected);
}

namespace {

// out = tanh(a) * b + 1 over `size` float32 elements.
void buildLargePointwise(TestProgram &test, int64_t size, int64_t &a,
                         int64_t &b, int64_t &out) {
  a = test.buffer(DType::Float32, size);
  b = test.buffer(DType::Float32, size);
  out = test.buffer(DType::Float32, size);
  auto &e = test.exprs();
  test.addKernel(pointwise(
      test, size, out,
      e.binary(BinaryOp::Add,
               e.binary(BinaryOp::Mul,
                        e.unary(UnaryOp::Tanh, test.load(a, test.var(0))),
                        test.load(b, test.var(0))),
               e.constant(1.0, DType::Float32))));
}

} // namespace

TEST(CpuThreads, LargePointwiseOnFourThreadsMatchesOneThread) {
  const int64_t size = 1000003;
  TestProgram test;
  int64_t a, b, out;
  buildLargePointwise(test, size, a, b, out);
  test.fill(a, randomFloats(size, -3, 3));
  test.fill(b, randomFloats(size, -3, 3, 7));
  int previous = backend::numThreads();
  backend::setNumThreads(1);
  auto compiled = test.run();
  std::vector<float> single(test.data<float>(out),
                            test.data<float>(out) + size);
  auto time = [&] {
    auto start = std::chrono::steady_clock::now();
    for (int repeat = 0; repeat < 10; ++repeat)
      test.runAgain(*compiled);
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
               .count() /
           10;
  };
  double singleMilliseconds = time();
  backend::setNumThreads(4);
  std::memset(test.data<float>(out), 0, size * sizeof(float));
  test.runAgain(*compiled);
  EXPECT_EQ(
      std::memcmp(single.data(), test.data<float>(out), size * sizeof(float)),
      0);
  double threadedMilliseconds = time();
  std::printf("[ timing ] 1M-element tanh(a)*b+1: %.3f ms on 1 thread, %.3f ms "
              "on 4 threads (%.0f / %.0f Melem/s)\n",
              singleMilliseconds, threadedMilliseconds,
              size / singleMilliseconds / 1e3,
              size / threadedMilliseconds / 1e3);
  backend::setNumThreads(previous);
}

TEST(CpuThreads, TwoThreadsRunKernelsConcurrently) {
  const int64_t size = 200000;
  TestProgram first, second;
  int64_t a1, b1, out1, a2, b2, out2;
  buildLargePointwise(first, size, a1, b1, out1);
  buildLargePointwise(second, size, a2, b2, out2);
  auto values = randomFloats(size, -2, 2);
  for (TestProgram *test : {&first, &second}) {
    test->fill(0, values);
    test->fill(1, values);
  }
  auto firstCompiled = backend::CpuProgram::compile(first.program);
  auto secondCompiled = backend::CpuProgram::compile(second.program);
  std::thread other([&] {
    for (int repeat = 0; repeat < 50; ++repeat)
      second.runAgain(*secondCompiled);
  });
  for (int repeat = 0; repeat < 50; ++repeat)
    first.runAgain(*firstCompiled);
  other.join();
  for (int64_t i = 0; i < size; i += 997) {
    float expected = std::tanh(values[i]) * values[i] + 1;
    EXPECT_NEAR(first.data<float>(out1)[i], expected, 1e-5);
    EXPECT_NEAR(second.data<float>(out2)[i], expected, 1e-5);
  }
}

TEST(CpuProgramLifetime, ManyProgramsCompileRunAndFree) {
  for (int round = 0; round < 30; ++round) {
    TestProgram test;
    int64_t a, b, out;
    buildLargePointwise(test, 100, a, b, out);
    test.fill(a, randomFloats(100, -1, 1, round));
    test.fill(b, randomFloats(100, -1, 1, round + 1));
    auto compiled = test.run();
    EXPECT_NEAR(test.data<float>(out)[5],
                std::tanh(test.data<float>(a)[5]) * test.data<float>(b)[5] + 1,
                1e-6);
  }
}

TEST(CpuCompileTime, TenKernelProgramIsReported) {
  TestProgram test;
  const int64_t size = 1000;
  std::vector<int64_t> buffers;
  for (int index = 0; index <= 10; ++index)
    buffers.push_back(test.buffer(DType::Float32, size));
  auto &e = test.exprs();
  const UnaryOp ops[] = {UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid,
                         UnaryOp::Erf, UnaryOp::Log1p};
  for (int index = 0; index < 10; ++index) {
    const Expr *x = test.load(buffers[index], test.var(0));
    test.addKernel(pointwise(test, size, buffers[index + 1],
                             e.binary(BinaryOp::Mul, e.unary(ops[index % 5], x),
                                      e.constant(0.5, DType::Float32))));
  }
  // The first compile also creates the process's JIT: time later ones.
  backend::CpuProgram::compile(test.program);
  std::vector<double> milliseconds;
  for (int repeat = 0; repeat < 5; ++repeat)
    milliseconds.push_back(
        backend::CpuProgram::compile(test.program)->compileMilliseconds());
  std::sort(milliseconds.begin(), milliseconds.end());
  std::printf(
      "[ timing ] 10-kernel program compiled in %.1f ms (median of 5)\n",
      milliseconds[2]);
  EXPECT_GT(milliseconds[0], 0.0);
}

TEST(CpuErrors, ComplexBuffersAreUnsupported) {
  TestProgram test;
  int64_t in = test.buffer(DType::Complex64, 4),
          out = test.buffer(DType::Complex64, 4);
  test.addKernel(pointwise(test, 4, out, test.load(in, test.var(0))));
  EXPECT_THROW(backend::CpuProgram::compile(test.program), Unsupported);
}
