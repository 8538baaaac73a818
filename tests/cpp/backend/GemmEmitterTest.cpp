// Tests of kiln's float32 GEMM: products emitted by emitGemm, optimised and
// JIT-compiled as the CPU backend does, checked against a double-precision
// reference over shapes with every kind of edge, strided and transposed
// operands, batches, bias epilogues and each vector width.
// Depends on backend/cpu/{GemmEmitter,CpuJit,CpuBackend}.h, LLVM, GoogleTest.
#include "backend/cpu/GemmEmitter.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/CpuJit.h"

#include <llvm/IR/Instructions.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace kiln;
using backend::GemmSpec;
using backend::HostTarget;

namespace {

using GemmFunction = void (*)(char *const *, int64_t, int64_t);

struct CompiledGemm {
  std::shared_ptr<backend::JitCode> code;
  GemmFunction function = nullptr;
  int64_t parallelRange = 0;
  // Where spec.packedBSlot is set: the packing of B ahead.
  GemmFunction packB = nullptr;
  int64_t packRange = 0, packedBBytes = 0;
};

/// Emits, verifies, optimises (as the CPU backend's compileModule does) and
/// JIT-compiles one GEMM.
CompiledGemm compileGemm(const GemmSpec &spec, const HostTarget &host,
                         const backend::GemmEpilogue &epilogue = {}) {
  static int count = 0;
  std::string name = "gemm_test_" + std::to_string(count++);
  backend::CpuJit &jit = backend::CpuJit::instance();
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>(name, *context);
  jit.prepare(*module);
  backend::EmittedGemm emitted =
      backend::emitGemm(*module, spec, host, name, epilogue);
  std::string problems;
  llvm::raw_string_ostream stream(problems);
  EXPECT_FALSE(llvm::verifyModule(*module, &stream)) << problems;
  std::unique_ptr<llvm::TargetMachine> machine = jit.newTargetMachine();
  backend::optimiseCpuModule(*module, *machine);
  CompiledGemm compiled;
  compiled.code = jit.addModule(std::move(module), std::move(context));
  compiled.function = reinterpret_cast<GemmFunction>(jit.lookup(name));
  compiled.parallelRange = emitted.parallelRange;
  if (emitted.packB) {
    compiled.packB =
        reinterpret_cast<GemmFunction>(jit.lookup(name + "_pack_b"));
    compiled.packRange = emitted.packRange;
    compiled.packedBBytes = emitted.packedBBytes;
  }
  return compiled;
}

/// Elements an operand with these extents and strides spans (at least one).
int64_t spanOf(std::initializer_list<std::pair<int64_t, int64_t>> extents) {
  int64_t last = 0;
  for (auto [extent, stride] : extents) {
    if (extent == 0)
      return 1;
    last += (extent - 1) * stride;
  }
  return last + 1;
}

/// Floats that end where an inaccessible page begins: the JIT-compiled code
/// is not under AddressSanitizer, so a read or write past the end must
/// fault instead.
class GuardedFloats {
public:
  GuardedFloats() = default;
  GuardedFloats(const GuardedFloats &) = delete;
  GuardedFloats &operator=(const GuardedFloats &) = delete;
  ~GuardedFloats() {
    if (mapping_)
      munmap(mapping_, mappedBytes_);
  }

  void resize(size_t count) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t bytes = (count * sizeof(float) + page - 1) / page * page;
    mappedBytes_ = bytes + page;
    mapping_ = mmap(nullptr, mappedBytes_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mapping_, MAP_FAILED);
    ASSERT_EQ(mprotect(static_cast<char *>(mapping_) + bytes, page, PROT_NONE),
              0);
    data_ = reinterpret_cast<float *>(static_cast<char *>(mapping_) + bytes) -
            count;
    size_ = count;
  }
  float *data() { return data_; }
  float *begin() { return data_; }
  float *end() { return data_ + size_; }
  size_t size() const { return size_; }
  float operator[](size_t index) const { return data_[index]; }
  float &operator[](size_t index) { return data_[index]; }

private:
  void *mapping_ = nullptr;
  size_t mappedBytes_ = 0;
  float *data_ = nullptr;
  size_t size_ = 0;
};

/// A GEMM's operands in memory, filled with random values; C holds a
/// sentinel where the GEMM must not write and NaN where it must.
struct Operands {
  GuardedFloats a, b, c, bias;
  static constexpr float kSentinel = 12345.0f;

  Operands(const GemmSpec &spec, uint32_t seed, bool nanBias) {
    std::mt19937 random(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto fill = [&](GuardedFloats &values, int64_t count) {
      values.resize(count);
      for (float &value : values)
        value = uniform(random);
    };
    fill(a, spanOf({{spec.batch, spec.aBatch},
                    {spec.m, spec.aRow},
                    {spec.k, spec.aCol}}));
    if (spec.windowedB)
      fill(b, std::max<int64_t>(spec.batch * spec.bBatch, 1));
    else
      fill(b, spanOf({{spec.batch, spec.bBatch},
                      {spec.k, spec.bRow},
                      {spec.n, spec.bCol}}));
    fill(bias, spanOf({{spec.batch, spec.biasBatch},
                       {spec.m, spec.biasRow},
                       {spec.n, spec.biasCol}}));
    if (nanBias)
      std::fill(bias.begin(), bias.end(),
                std::numeric_limits<float>::quiet_NaN());
    // A tail past C's last element catches writes beyond it.
    c.resize(spanOf({{spec.batch, spec.cBatch},
                     {spec.m, spec.cRow},
                     {spec.n, spec.cCol}}) +
             64);
    resetC(spec);
  }

  int64_t cOffset(const GemmSpec &spec, int64_t batch, int64_t i,
                  int64_t j) const {
    return batch * spec.cBatch + i * spec.cRow + j * spec.cCol;
  }

  void resetC(const GemmSpec &spec) {
    std::fill(c.begin(), c.end(), kSentinel);
    for (int64_t batch = 0; batch < spec.batch; ++batch)
      for (int64_t i = 0; i < spec.m; ++i)
        for (int64_t j = 0; j < spec.n; ++j)
          c[cOffset(spec, batch, i, j)] =
              std::numeric_limits<float>::quiet_NaN();
  }

  /// Where B is windows: the offset of the windows' origin from the
  /// source's first element (a convolution's padding before it).
  int64_t bOrigin = 0;

  std::vector<char *> buffers() {
    return {reinterpret_cast<char *>(a.data()),
            reinterpret_cast<char *>(b.data()) + 4 * bOrigin,
            reinterpret_cast<char *>(c.data()),
            reinterpret_cast<char *>(bias.data())};
  }
};

/// A[b][i][:] . B[b][:][j] in double precision; `magnitude` gets the sum of
/// its terms' magnitudes (what rounding errors scale with).
/// B[batch][p][j]: strided, or windows (0 outside their ranges).
double elementOfB(const GemmSpec &spec, const Operands &operands, int64_t batch,
                  int64_t p, int64_t j) {
  if (!spec.windowedB)
    return operands.b[batch * spec.bBatch + p * spec.bRow + j * spec.bCol];
  const backend::WindowedOperand &window = *spec.windowedB;
  auto digits = [](int64_t flat, const std::vector<int64_t> &extents) {
    std::vector<int64_t> result(extents.size());
    for (size_t d = extents.size(); d-- > 0;) {
      result[d] = flat % extents[d];
      flat /= extents[d];
    }
    return result;
  };
  auto dot = [](const std::vector<int64_t> &x, const std::vector<int64_t> &y) {
    int64_t sum = 0;
    for (size_t d = 0; d < x.size(); ++d)
      sum += x[d] * y[d];
    return sum;
  };
  std::vector<int64_t> depth = digits(p, window.depthExtents);
  std::vector<int64_t> column = digits(j, window.columnExtents);
  for (const backend::WindowedOperand::Range &range : window.ranges) {
    int64_t at =
        dot(depth, range.depth) + dot(column, range.column) + range.offset;
    if (at < 0 || at >= range.limit)
      return 0.0;
  }
  return operands
      .b[batch * spec.bBatch + operands.bOrigin +
         dot(depth, window.depthStrides) + dot(column, window.columnStrides)];
}

double referenceSum(const GemmSpec &spec, const Operands &operands,
                    int64_t batch, int64_t i, int64_t j, double &magnitude) {
  double sum = 0;
  magnitude = 0;
  for (int64_t p = 0; p < spec.k; ++p) {
    double product =
        double(
            operands.a[batch * spec.aBatch + i * spec.aRow + p * spec.aCol]) *
        elementOfB(spec, operands, batch, p, j);
    sum += product;
    magnitude += std::abs(product);
  }
  return sum;
}

/// Checks C against a double-precision reference: each element within
/// 3e-5 of the magnitude of what it sums (float32 accumulation over up to
/// 1000 products stays well inside), and C untouched elsewhere.
void expectProduct(const GemmSpec &spec, const Operands &operands,
                   const std::string &mode) {
  std::vector<bool> written(operands.c.size(), false);
  int failures = 0;
  for (int64_t batch = 0; batch < spec.batch; ++batch)
    for (int64_t i = 0; i < spec.m; ++i)
      for (int64_t j = 0; j < spec.n; ++j) {
        double magnitude;
        double expected =
            spec.alpha * referenceSum(spec, operands, batch, i, j, magnitude);
        magnitude *= std::abs(spec.alpha);
        if (spec.hasBias && spec.beta != 0.0) {
          double bias =
              spec.beta * operands.bias[batch * spec.biasBatch +
                                        i * spec.biasRow + j * spec.biasCol];
          expected += bias;
          magnitude += std::abs(bias);
        }
        int64_t offset = operands.cOffset(spec, batch, i, j);
        written[offset] = true;
        double actual = operands.c[offset];
        if (!(std::abs(actual - expected) <= 3e-5 * magnitude + 1e-6) &&
            failures++ < 5) {
          ADD_FAILURE() << mode << ": C[" << batch << "][" << i << "][" << j
                        << "] = " << actual << ", expected " << expected;
        }
      }
  for (size_t offset = 0; offset < operands.c.size(); ++offset)
    if (!written[offset] && operands.c[offset] != Operands::kSentinel &&
        failures++ < 5) {
      ADD_FAILURE() << mode << ": wrote C outside the product, at element "
                    << offset;
    }
  EXPECT_EQ(failures, 0) << mode << ": " << failures << " wrong elements";
}

std::string describe(const GemmSpec &spec, const HostTarget &host) {
  return std::to_string(spec.batch) + "x" + std::to_string(spec.m) + "x" +
         std::to_string(spec.n) + "x" + std::to_string(spec.k) + " (" +
         std::to_string(host.vectorBits) + "-bit " + host.cpuName + ")";
}

/// Compiles `spec` and checks it run as one call over all tiles, as uneven
/// chunks in reverse order, and as chunks on two threads at once.
void checkGemm(const GemmSpec &spec, const HostTarget &host,
               bool nanBias = false, int64_t bOrigin = 0) {
  SCOPED_TRACE(describe(spec, host));
  CompiledGemm gemm = compileGemm(spec, host);
  ASSERT_NE(gemm.function, nullptr);
  int64_t range = gemm.parallelRange;
  if (spec.m > 0 && spec.n > 0 && spec.batch > 0) {
    EXPECT_GE(range, spec.batch);
  }
  Operands operands(spec, 7, nanBias);
  operands.bOrigin = bOrigin;
  std::vector<char *> buffers = operands.buffers();

  gemm.function(buffers.data(), 0, range);
  expectProduct(spec, operands, "one call");

  // Chunks of 1, 2, 3, ... tiles, the last chunk first.
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t begin = 0, size = 1; begin < range; begin += size++)
    chunks.emplace_back(begin, std::min(range, begin + size));
  operands.resetC(spec);
  for (auto chunk = chunks.rbegin(); chunk != chunks.rend(); ++chunk)
    gemm.function(buffers.data(), chunk->first, chunk->second);
  expectProduct(spec, operands, "reversed chunks");

  // Two threads taking alternate chunks: tiles must not share any state.
  operands.resetC(spec);
  auto runEvery = [&](size_t first) {
    for (size_t index = first; index < chunks.size(); index += 2)
      gemm.function(buffers.data(), chunks[index].first, chunks[index].second);
  };
  std::thread helper(runEvery, 1);
  runEvery(0);
  helper.join();
  expectProduct(spec, operands, "two threads");
}

/// Row-major A (m x k), B (k x n) and C (m x n).
GemmSpec rowMajor(int64_t m, int64_t n, int64_t k) {
  GemmSpec spec;
  spec.m = m;
  spec.n = n;
  spec.k = k;
  spec.aRow = k;
  spec.aCol = 1;
  spec.bRow = n;
  spec.bCol = 1;
  spec.cRow = n;
  spec.cCol = 1;
  return spec;
}

HostTarget withVectorBits(int bits) {
  HostTarget host = backend::hostTarget();
  host.vectorBits = bits;
  return host;
}

// The multiply-adds (llvm.fmuladd calls) in the IR of `spec`'s GEMM for
// `host`: the micro-kernels' unrolled bodies.
int countMultiplyAdds(const GemmSpec &spec, const HostTarget &host) {
  llvm::LLVMContext context;
  llvm::Module module("count", context);
  backend::EmittedGemm emitted = backend::emitGemm(module, spec, host, "gemm");
  int multiplyAdds = 0;
  for (const llvm::BasicBlock &block : *emitted.function)
    for (const llvm::Instruction &instruction : block)
      if (const auto *call = llvm::dyn_cast<llvm::CallInst>(&instruction))
        multiplyAdds += call->getCalledFunction() &&
                        call->getCalledFunction()->getIntrinsicID() ==
                            llvm::Intrinsic::fmuladd;
  return multiplyAdds;
}

bool hostHasAvx512() {
  const std::string &features = backend::hostTarget().features;
  return features.find("+avx512f") != std::string::npos;
}

} // namespace

// Shapes from {0, 1, 7, 63, 65, 1000}: partial micro-tiles in m and n,
// k below, at and beyond a vector and spanning several k blocks, empty
// products, and multiples of the micro-tile (no edge code at all); rows of
// A 4 KiB apart (k = 1024) are packed rather than read in place.
TEST(GemmEmitter, ShapesWithEveryEdge) {
  const int64_t shapes[][3] = {
      {0, 7, 7},      {7, 0, 7},     {7, 7, 0},      {0, 0, 0},
      {1, 1, 1},      {1, 1, 7},     {1, 7, 1},      {7, 1, 1},
      {7, 7, 7},      {63, 65, 1},   {65, 63, 7},    {63, 63, 63},
      {65, 65, 65},   {1, 65, 63},   {65, 1, 65},    {48, 64, 8},
      {48, 64, 1000}, {1000, 7, 1},  {7, 1000, 63},  {63, 7, 1000},
      {1, 1, 1000},   {1000, 65, 7}, {65, 1000, 65}, {65, 40, 1024}};
  for (const auto &shape : shapes)
    checkGemm(rowMajor(shape[0], shape[1], shape[2]), backend::hostTarget());
}

// On a pool of at most four threads AVX-512's micro-tile is 6 x 64 over k
// blocks of 128 (more threads keep 12 x 32): one micro-kernel of 6 rows x 4
// vectors x 4 steps of multiply-adds, and the products of every edge shape
// right.
TEST(GemmEmitter, FewThreadsTakeSixByFourVectorMicroTiles) {
  HostTarget host = withVectorBits(512);
  for (int threads : {1, 2, 4, 8}) {
    GemmSpec spec = rowMajor(60, 64, 256);
    spec.threads = threads;
    EXPECT_EQ(countMultiplyAdds(spec, host),
              threads <= 4 ? 6 * 4 * 4 : 12 * 2 * 4)
        << threads;
  }
  if (!hostHasAvx512())
    return;
  const int64_t shapes[][3] = {{1, 1, 1},      {7, 65, 129}, {63, 63, 63},
                               {65, 130, 300}, {6, 64, 128}, {13, 1000, 7},
                               {200, 688, 256}};
  for (const auto &shape : shapes) {
    GemmSpec spec = rowMajor(shape[0], shape[1], shape[2]);
    spec.threads = 2;
    checkGemm(spec, backend::hostTarget());
    spec.bRow = 1; // a Linear layer's weight
    spec.bCol = shape[2];
    spec.hasBias = true;
    spec.biasCol = 1;
    checkGemm(spec, backend::hostTarget());
  }
}

TEST(GemmEmitter, TransposedOperands) {
  const int64_t m = 65, n = 70, k = 600;
  GemmSpec transposedA = rowMajor(m, n, k);
  transposedA.aRow = 1;
  transposedA.aCol = m;
  checkGemm(transposedA, backend::hostTarget());
  // A Linear layer's weight W[n][k] as B.
  GemmSpec linear = rowMajor(m, n, k);
  linear.bRow = 1;
  linear.bCol = k;
  checkGemm(linear, backend::hostTarget());
  GemmSpec both = linear;
  both.aRow = 1;
  both.aCol = m;
  checkGemm(both, backend::hostTarget());
}

TEST(GemmEmitter, StridedAndBroadcastOperands) {
  // Slices of wider rows, C with a gap after each row.
  GemmSpec sliced = rowMajor(63, 65, 70);
  sliced.aRow = 70 + 5;
  sliced.bRow = 65 + 3;
  sliced.cRow = 65 + 7;
  checkGemm(sliced, backend::hostTarget());
  // Every other element of A and every third of B, and C column-major
  // with its rows two apart: no unit stride anywhere.
  GemmSpec strided = rowMajor(20, 19, 33);
  strided.aRow = 2 * 33 + 1;
  strided.aCol = 2;
  strided.bRow = 3 * 19;
  strided.bCol = 3;
  strided.cRow = 2;
  strided.cCol = 2 * 20 + 1;
  checkGemm(strided, backend::hostTarget());
  // Stride 0: every row of A the same, every k step of B the same.
  GemmSpec broadcast = rowMajor(13, 17, 9);
  broadcast.aRow = 0;
  broadcast.bRow = 0;
  checkGemm(broadcast, backend::hostTarget());
}

TEST(GemmEmitter, Batches) {
  GemmSpec batched = rowMajor(31, 40, 50);
  batched.batch = 3;
  batched.aBatch = 31 * 50;
  batched.bBatch = 50 * 40;
  batched.cBatch = 31 * 40;
  checkGemm(batched, backend::hostTarget());
  // B shared by every batch (stride 0) as a transposed weight, a bias per
  // batch and row.
  GemmSpec shared = batched;
  shared.bBatch = 0;
  shared.bRow = 1;
  shared.bCol = 50;
  shared.hasBias = true;
  shared.biasBatch = 31;
  shared.biasRow = 1;
  shared.biasCol = 0;
  checkGemm(shared, backend::hostTarget());
  // Batches laid out between rows: C[i][b][j].
  GemmSpec interleaved = rowMajor(9, 33, 300);
  interleaved.batch = 2;
  interleaved.aBatch = 9 * 300;
  interleaved.bBatch = 300 * 33;
  interleaved.cBatch = 33;
  interleaved.cRow = 2 * 33;
  checkGemm(interleaved, backend::hostTarget());
}

TEST(GemmEmitter, BiasEpilogues) {
  // A Linear layer's bias[j], with k over several blocks.
  GemmSpec rowBias = rowMajor(65, 70, 600);
  rowBias.hasBias = true;
  rowBias.biasCol = 1;
  checkGemm(rowBias, backend::hostTarget());
  // addmm with a full matrix, alpha and beta.
  GemmSpec full = rowMajor(63, 65, 7);
  full.hasBias = true;
  full.biasRow = 65;
  full.biasCol = 1;
  full.alpha = 0.5;
  full.beta = 2.0;
  checkGemm(full, backend::hostTarget());
  // A bias per row, a strided bias (gathered), alpha without a bias.
  GemmSpec column = rowMajor(40, 48, 20);
  column.hasBias = true;
  column.biasRow = 1;
  column.biasCol = 0;
  column.beta = -1.0;
  checkGemm(column, backend::hostTarget());
  GemmSpec gathered = rowMajor(13, 40, 1000);
  gathered.hasBias = true;
  gathered.biasRow = 1;
  gathered.biasCol = 13;
  gathered.alpha = -1.5;
  checkGemm(gathered, backend::hostTarget());
  GemmSpec scaled = rowMajor(20, 33, 65);
  scaled.alpha = -1.5;
  checkGemm(scaled, backend::hostTarget());
  // beta == 0 ignores bias, NaN and all, as torch does.
  GemmSpec ignored = rowMajor(65, 63, 65);
  ignored.hasBias = true;
  ignored.biasRow = 63;
  ignored.biasCol = 1;
  ignored.beta = 0.0;
  ignored.alpha = 3.0;
  checkGemm(ignored, backend::hostTarget(), /*nanBias=*/true);
  // k == 0: C is beta * bias.
  GemmSpec empty = rowMajor(7, 65, 0);
  empty.hasBias = true;
  empty.biasCol = 1;
  empty.beta = 0.25;
  checkGemm(empty, backend::hostTarget());
}

// The products the epilogue tests run: column and row edges, k in several
// blocks (300 and 1000 deep), and a transposed A and a batch `depth` deep.
namespace {

std::vector<GemmSpec> epilogueSpecs(int64_t depth) {
  std::vector<GemmSpec> specs = {rowMajor(37, 70, 600), rowMajor(5, 100, 300),
                                 rowMajor(64, 64, 1000)};
  GemmSpec transposed = rowMajor(65, 40, depth);
  transposed.aRow = 1;
  transposed.aCol = 65;
  specs.push_back(transposed);
  GemmSpec batched = rowMajor(13, 33, depth);
  batched.batch = 3;
  batched.aBatch = 13 * depth;
  batched.bBatch = depth * 33;
  batched.cBatch = 13 * 33;
  specs.push_back(batched);
  return specs;
}

} // namespace

// An epilogue computes C from the finished sum at each element's batch,
// row and column (here 2 * sum + extra[column] + row + 1000 * batch, extra
// read from the buffers argument's slot 4), stored after the last k block:
// over edges, k blocks, transposed A and chunks run in any order.
TEST(GemmEmitter, EpiloguesSeeEachElementsIndices) {
  backend::GemmEpilogue epilogue =
      [](llvm::IRBuilder<> &builder, llvm::Value *buffers, llvm::Value *sum,
         llvm::Value *batch, llvm::Value *row, llvm::Value *column,
         int lanes) -> llvm::Value * {
    llvm::Type *type = sum->getType();
    auto asFloat = [&](llvm::Value *index) {
      llvm::Value *value = builder.CreateSIToFP(index, builder.getFloatTy());
      return lanes == 1 ? value : builder.CreateVectorSplat(lanes, value);
    };
    llvm::Value *extra = builder.CreateLoad(
        builder.getPtrTy(),
        builder.CreateConstGEP1_64(builder.getPtrTy(), buffers, 4));
    llvm::Value *extras = builder.CreateLoad(
        type, builder.CreateGEP(builder.getFloatTy(), extra, column));
    llvm::Value *value =
        builder.CreateFMul(sum, llvm::ConstantFP::get(type, 2.0));
    value = builder.CreateFAdd(value, extras);
    value = builder.CreateFAdd(value, asFloat(row));
    llvm::Value *thousand =
        builder.CreateFMul(asFloat(batch), llvm::ConstantFP::get(type, 1000.0));
    return builder.CreateFAdd(value, thousand);
  };
  for (GemmSpec spec : epilogueSpecs(257)) {
    spec.targetTiles = 7;
    SCOPED_TRACE(describe(spec, backend::hostTarget()));
    CompiledGemm gemm = compileGemm(spec, backend::hostTarget(), epilogue);
    Operands operands(spec, 11, false);
    std::vector<float> extra(spec.n + 64);
    for (size_t j = 0; j < extra.size(); ++j)
      extra[j] = 0.25f * static_cast<float>(j);
    std::vector<char *> buffers = operands.buffers();
    buffers.push_back(reinterpret_cast<char *>(extra.data()));
    for (int64_t tile = gemm.parallelRange; tile-- > 0;)
      gemm.function(buffers.data(), tile, tile + 1);
    int failures = 0;
    for (int64_t batch = 0; batch < spec.batch; ++batch)
      for (int64_t i = 0; i < spec.m; ++i)
        for (int64_t j = 0; j < spec.n; ++j) {
          double magnitude;
          double expected =
              2 * referenceSum(spec, operands, batch, i, j, magnitude) +
              extra[j] + i + 1000.0 * batch;
          double actual = operands.c[operands.cOffset(spec, batch, i, j)];
          if (!(std::abs(actual - expected) <=
                6e-5 * magnitude + 1e-6 * std::abs(expected)) &&
              failures++ < 5)
            ADD_FAILURE() << "C[" << batch << "][" << i << "][" << j
                          << "] = " << actual << ", expected " << expected;
        }
    EXPECT_EQ(failures, 0);
  }
}

// A costly epilogue (GemmSpec::costlyEpilogue) runs once an element, after
// the last k block, over the stored tile: here it counts the elements it
// sees in a float at slot 4 (a cheap epilogue runs in every k block, so
// with k in several blocks, k above 256, it would count each element more
// than once), and those it sees one at a time at slot 5: only the last
// n % lanes columns of a row (the matrix's last column panel of 30 columns
// of 32 took its elements one by one), every element where C is
// transposed. It gives exp(sum / 8) + row, over column and row edges, k
// blocks, strips of columns, a transposed A, a transposed C (element by
// element) and a batch.
TEST(GemmEmitter, CostlyEpiloguesRunOnceAnElementAfterTheLastKBlock) {
  backend::GemmEpilogue epilogue =
      [](llvm::IRBuilder<> &builder, llvm::Value *buffers, llvm::Value *sum,
         llvm::Value *, llvm::Value *row, llvm::Value *,
         int lanes) -> llvm::Value * {
    llvm::Type *type = sum->getType();
    auto add = [&](int slot) {
      llvm::Value *counter = builder.CreateLoad(
          builder.getPtrTy(),
          builder.CreateConstGEP1_64(builder.getPtrTy(), buffers, slot));
      llvm::Value *count = builder.CreateLoad(builder.getFloatTy(), counter);
      builder.CreateStore(
          builder.CreateFAdd(count, llvm::ConstantFP::get(builder.getFloatTy(),
                                                          double(lanes))),
          counter);
    };
    add(4);
    if (lanes == 1)
      add(5);
    llvm::Value *rowValue = builder.CreateSIToFP(row, builder.getFloatTy());
    if (lanes > 1)
      rowValue = builder.CreateVectorSplat(lanes, rowValue);
    llvm::Value *scaled =
        builder.CreateFMul(sum, llvm::ConstantFP::get(type, 0.125));
    llvm::Value *exponential =
        builder.CreateIntrinsic(llvm::Intrinsic::exp, {type}, {scaled});
    return builder.CreateFAdd(exponential, rowValue);
  };
  std::vector<GemmSpec> specs = epilogueSpecs(700);
  specs.push_back(rowMajor(9, 62, 40));
  specs.push_back(rowMajor(20, 700, 300));
  GemmSpec columnsOfC = rowMajor(30, 20, 600);
  columnsOfC.cRow = 1;
  columnsOfC.cCol = 30;
  specs.push_back(columnsOfC);
  const int lanes = std::max(backend::hostTarget().vectorBits, 128) / 32;
  for (GemmSpec spec : specs) {
    spec.targetTiles = 5;
    spec.costlyEpilogue = true;
    SCOPED_TRACE(describe(spec, backend::hostTarget()));
    CompiledGemm gemm = compileGemm(spec, backend::hostTarget(), epilogue);
    Operands operands(spec, 5, false);
    float count = 0, single = 0;
    std::vector<char *> buffers = operands.buffers();
    buffers.push_back(reinterpret_cast<char *>(&count));
    buffers.push_back(reinterpret_cast<char *>(&single));
    for (int64_t tile = gemm.parallelRange; tile-- > 0;)
      gemm.function(buffers.data(), tile, tile + 1);
    EXPECT_EQ(count, static_cast<float>(spec.batch * spec.m * spec.n));
    int64_t elementColumns = spec.cCol == 1 ? spec.n % lanes : spec.n;
    EXPECT_EQ(single, static_cast<float>(spec.batch * spec.m * elementColumns));
    int failures = 0;
    for (int64_t batch = 0; batch < spec.batch; ++batch)
      for (int64_t i = 0; i < spec.m; ++i)
        for (int64_t j = 0; j < spec.n; ++j) {
          double magnitude;
          double sum = referenceSum(spec, operands, batch, i, j, magnitude);
          double expected = std::exp(sum / 8) + i;
          double actual = operands.c[operands.cOffset(spec, batch, i, j)];
          if (!(std::abs(actual - expected) <=
                2e-5 * magnitude * std::exp(sum / 8) +
                    1e-5 * std::abs(expected)) &&
              failures++ < 5)
            ADD_FAILURE() << "C[" << batch << "][" << i << "][" << j
                          << "] = " << actual << ", expected " << expected;
        }
    EXPECT_EQ(failures, 0);
  }
}

TEST(GemmEmitter, EveryVectorWidth) {
  std::vector<HostTarget> hosts = {withVectorBits(128), withVectorBits(256)};
  if (hostHasAvx512())
    hosts.push_back(withVectorBits(512));
  // The x86-64 baseline: SSE2 and no FMA (multiply-adds split).
  HostTarget baseline;
  baseline.vectorBits = 128;
  baseline.cpuName = "x86-64";
  hosts.push_back(baseline);
  for (const HostTarget &host : hosts) {
    GemmSpec plain = rowMajor(65, 63, 300);
    checkGemm(plain, host);
    GemmSpec linear = rowMajor(63, 65, 37);
    linear.bRow = 1;
    linear.bCol = 37;
    linear.hasBias = true;
    linear.biasCol = 1;
    checkGemm(linear, host);
    GemmSpec transposedA = rowMajor(31, 70, 1000);
    transposedA.aRow = 1;
    transposedA.aCol = 31;
    checkGemm(transposedA, host);
  }
}

TEST(GemmEmitter, OneMicroKernelPerProduct) {
  // A k that whole unrolled steps cover has no one-step tail: one copy of
  // the unrolled MR x 2 vectors x 4 steps of multiply-adds, which is most
  // of a GEMM's compile time, and where m is not a multiple of MR one of
  // the m % MR rows of the last panel (the only partial one) besides; where
  // m < MR only that one.
  for (int bits : {256, 512}) {
    int panelRows = bits == 512 ? 12 : 6;
    for (GemmSpec spec : {rowMajor(64, 64, 256), rowMajor(65, 64, 256),
                          rowMajor(7, 64, 256), rowMajor(65, 64, 1024)}) {
      int edgeRows = static_cast<int>(spec.m % panelRows);
      int perMicroKernel =
          ((spec.m >= panelRows ? panelRows : 0) + edgeRows) * 2 * 4;
      EXPECT_EQ(countMultiplyAdds(spec, withVectorBits(bits)), perMicroKernel)
          << describe(spec, withVectorBits(bits));
    }
  }
}

// Each micro-tile asks for its lines of C for writing before its k loop:
// every line of each of its rows (three where a row of 32 floats is not
// aligned to a line), where C's rows are contiguous.
TEST(GemmEmitter, MicroTilesPrefetchTheirLinesOfC) {
  auto writePrefetches = [](const llvm::Function &function) {
    int count = 0;
    for (const llvm::BasicBlock &block : function)
      for (const llvm::Instruction &instruction : block)
        if (const auto *call = llvm::dyn_cast<llvm::CallInst>(&instruction))
          if (call->getCalledFunction() &&
              call->getCalledFunction()->getIntrinsicID() ==
                  llvm::Intrinsic::prefetch) {
            EXPECT_TRUE(
                llvm::cast<llvm::ConstantInt>(call->getArgOperand(1))->isOne());
            ++count;
          }
    return count;
  };
  llvm::LLVMContext context;
  llvm::Module module("prefetch", context);
  // 64 rows in panels of 12: a whole panel's micro-tile and the 4-row
  // edge's, each row 2 vectors of 16.
  GemmSpec spec = rowMajor(64, 64, 256);
  backend::EmittedGemm rows =
      backend::emitGemm(module, spec, withVectorBits(512), "rows");
  EXPECT_EQ(writePrefetches(*rows.function), (12 + 4) * 3);
  spec.cRow = 1;
  spec.cCol = 64;
  backend::EmittedGemm columns =
      backend::emitGemm(module, spec, withVectorBits(512), "columns");
  EXPECT_EQ(writePrefetches(*columns.function), 0);
}

TEST(GemmEmitter, TilesFollowTheTarget) {
  // One thread: the largest tiles. Sixteen threads' worth: many more.
  GemmSpec spec = rowMajor(1024, 1024, 1024);
  spec.targetTiles = 1;
  llvm::LLVMContext context;
  llvm::Module module("tiles", context);
  backend::EmittedGemm large =
      backend::emitGemm(module, spec, withVectorBits(256), "large");
  spec.targetTiles = 64;
  backend::EmittedGemm small =
      backend::emitGemm(module, spec, withVectorBits(256), "small");
  EXPECT_GE(small.parallelRange, 32);
  EXPECT_LT(large.parallelRange, small.parallelRange);
  EXPECT_GT(large.stackBytes, 0);
  EXPECT_LE(large.stackBytes, int64_t(768) << 10);
  EXPECT_EQ(large.work, int64_t(1024) * 1024 * 1024);
  // Every target gives a grid, and tiles never outnumber the 6 x 16 micro-
  // tiles of C.
  for (int64_t m : {1, 7, 100, 777, 2048})
    for (int64_t n : {1, 30, 385, 4096})
      for (int64_t target : {1, 2, 3, 16, 64, 1000}) {
        GemmSpec shape = rowMajor(m, n, 64);
        shape.targetTiles = target;
        backend::EmittedGemm emitted =
            backend::emitGemm(module, shape, withVectorBits(256), "grid");
        EXPECT_GE(emitted.parallelRange, 1);
        EXPECT_LE(emitted.parallelRange, (m + 5) / 6 * ((n + 15) / 16));
        emitted.function->eraseFromParent();
      }
}

// Tiles split C's panels of rows and of columns evenly, so that threads
// taking them finish together: 296 rows in four tiles of whole 6-row
// panels differ by one panel at most (not 78, 78, 78 and 62 rows), as do
// 2048 columns in six tiles of 16-column panels (not five of 352 and one
// of 288).
TEST(GemmEmitter, TilesSplitPanelsEvenly) {
  HostTarget host = withVectorBits(256);
  const int panelRows = 6, panelColumns = 16;
  for (auto [m, n, target] : std::vector<std::array<int64_t, 3>>{
           {296, 64, 4}, {24, 2048, 6}, {296, 2048, 16}}) {
    GemmSpec spec = rowMajor(m, n, 32);
    spec.targetTiles = target;
    SCOPED_TRACE(describe(spec, host));
    CompiledGemm gemm = compileGemm(spec, host);
    ASSERT_GE(gemm.parallelRange, target);
    Operands operands(spec, 3, false);
    std::vector<char *> buffers = operands.buffers();
    int64_t fewestRows = m, mostRows = 0, fewestColumns = n, mostColumns = 0;
    for (int64_t tile = 0; tile < gemm.parallelRange; ++tile) {
      operands.resetC(spec);
      gemm.function(buffers.data(), tile, tile + 1);
      std::set<int64_t> rows, columns;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (!std::isnan(operands.c[operands.cOffset(spec, 0, i, j)])) {
            rows.insert(i);
            columns.insert(j);
          }
      int64_t tileRows = rows.size(), tileColumns = columns.size();
      fewestRows = std::min(fewestRows, tileRows);
      mostRows = std::max(mostRows, tileRows);
      fewestColumns = std::min(fewestColumns, tileColumns);
      mostColumns = std::max(mostColumns, tileColumns);
    }
    EXPECT_GT(fewestRows, 0);
    EXPECT_LE(mostRows - fewestRows, panelRows);
    EXPECT_LE(mostColumns - fewestColumns, panelColumns);
  }
}

// Given the pool's threads, a GEMM has a multiple of them as tiles where a
// few more tiles than the target make one: 1024 x 1024 on two threads is
// not three tiles (one thread would run two of them while the other waits).
TEST(GemmEmitter, TilesAreAMultipleOfTheThreads) {
  llvm::LLVMContext context;
  llvm::Module module("threads", context);
  GemmSpec spec = rowMajor(1024, 1024, 64);
  spec.targetTiles = 2;
  backend::EmittedGemm unknown =
      backend::emitGemm(module, spec, withVectorBits(256), "unknown");
  EXPECT_EQ(unknown.parallelRange % 2, 1);
  spec.threads = 2;
  backend::EmittedGemm two =
      backend::emitGemm(module, spec, withVectorBits(256), "two");
  EXPECT_EQ(two.parallelRange % 2, 0);
  EXPECT_LE(two.parallelRange, 8);
  // Threads take the tiles in chunks of equal counts or one at a time:
  // the most tiles a thread takes are at most 1/0.95 of the mean wherever tiles
  // can still split (2048 x 4096 on two threads is 22 tiles, not 11).
  for (auto [m, n] : std::vector<std::array<int64_t, 2>>{
           {2048, 4096}, {4096, 4096}, {3000, 1000}, {2048, 768}})
    for (int threads : {2, 3, 8, 16}) {
      GemmSpec shape = rowMajor(m, n, 64);
      shape.threads = threads;
      shape.targetTiles = backend::gemmTargetTiles(threads);
      backend::EmittedGemm emitted =
          backend::emitGemm(module, shape, withVectorBits(512), "busy");
      int64_t tiles = emitted.parallelRange;
      int64_t rounds = (tiles + threads - 1) / threads;
      EXPECT_GE(100 * tiles, 95 * rounds * threads)
          << m << " x " << n << " on " << threads << " threads: " << tiles
          << " tiles";
      emitted.function->eraseFromParent();
    }
}

// On one or two threads a GEMM is one tile a thread, each packing its part
// of B once (and A, where it is packed, once); on more, four a thread.
TEST(GemmEmitter, OneOrTwoThreadsTakeOneTileEach) {
  EXPECT_EQ(backend::gemmTargetTiles(1), 1);
  EXPECT_EQ(backend::gemmTargetTiles(2), 2);
  EXPECT_EQ(backend::gemmTargetTiles(16), 64);
  llvm::LLVMContext context;
  llvm::Module module("tiles", context);
  for (int threads : {1, 2}) {
    GemmSpec spec = rowMajor(512, 256, 1024);
    spec.bRow = 1; // a Linear layer's weight
    spec.bCol = 1024;
    spec.threads = threads;
    spec.targetTiles = backend::gemmTargetTiles(threads);
    backend::EmittedGemm emitted =
        backend::emitGemm(module, spec, withVectorBits(512), "linear");
    EXPECT_EQ(emitted.parallelRange, threads);
  }
}

// More tiles for a thread pool narrow the columns before they shorten the
// rows: a short, wide GEMM (a transformer's 128 tokens) keeps all its rows
// in every tile, so that no tile packs another tile's part of B again; a
// narrow one, whose columns cannot split, splits its rows.
TEST(GemmEmitter, TilesNarrowTheColumnsBeforeTheRows) {
  HostTarget host = withVectorBits(256);
  for (auto [m, n, rowsPerTile] : std::vector<std::array<int64_t, 3>>{
           {128, 1024, 128}, {100, 768, 100}, {296, 64, 78}}) {
    GemmSpec spec = rowMajor(m, n, 256);
    spec.targetTiles = 4;
    spec.threads = 2;
    SCOPED_TRACE(describe(spec, host));
    CompiledGemm gemm = compileGemm(spec, host);
    ASSERT_EQ(gemm.parallelRange, 4);
    Operands operands(spec, 3, false);
    std::vector<char *> buffers = operands.buffers();
    for (int64_t tile = 0; tile < gemm.parallelRange; ++tile) {
      operands.resetC(spec);
      gemm.function(buffers.data(), tile, tile + 1);
      std::set<int64_t> rows;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (!std::isnan(operands.c[operands.cOffset(spec, 0, i, j)]))
            rows.insert(i);
      EXPECT_LE(std::abs(int64_t(rows.size()) - rowsPerTile), 6)
          << "tile " << tile;
    }
  }
}

// B packed ahead (an exported model's weight): the packing runs once, in
// any order of its units, and the GEMM then reads only the packed copy
// (B's pointer is null when it runs), for edge shapes, a Linear layer's
// transposed weight, several k blocks, and batches with and without B's own.
TEST(GemmEmitter, BPackedAheadIsReadInsteadOfB) {
  std::vector<GemmSpec> specs;
  for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {7, 65, 63}, {65, 7, 1000}, {63, 1000, 65}})
    specs.push_back(rowMajor(m, n, k));
  GemmSpec linear = rowMajor(65, 70, 600);
  linear.bRow = 1;
  linear.bCol = 600;
  specs.push_back(linear);
  for (int64_t bBatch : {int64_t(0), int64_t(300 * 33)}) {
    GemmSpec batched = rowMajor(13, 33, 300);
    batched.batch = 3;
    batched.aBatch = 13 * 300;
    batched.bBatch = bBatch;
    batched.cBatch = 13 * 33;
    specs.push_back(batched);
  }
  for (GemmSpec spec : specs) {
    spec.targetTiles = 7;
    spec.packedBSlot = 4;
    SCOPED_TRACE(describe(spec, backend::hostTarget()));
    CompiledGemm gemm = compileGemm(spec, backend::hostTarget());
    ASSERT_NE(gemm.packB, nullptr);
    ASSERT_GT(gemm.packedBBytes, 0);
    Operands operands(spec, 5, false);
    std::vector<char *> buffers = operands.buffers();
    GuardedFloats packed;
    // 64-byte aligned: the guard page ends it, so its size is a multiple
    // of 16 floats.
    packed.resize((gemm.packedBBytes / 4 + 15) / 16 * 16);
    buffers.push_back(reinterpret_cast<char *>(packed.data()));
    for (int64_t unit = gemm.packRange; unit-- > 0;)
      gemm.packB(buffers.data(), unit, unit + 1);
    buffers[1] = nullptr;
    for (int64_t tile = gemm.parallelRange; tile-- > 0;)
      gemm.function(buffers.data(), tile, tile + 1);
    expectProduct(spec, operands, "B packed ahead");
  }
}

// B as the windows of a 2-d convolution's input (an implicit im2col): per
// image, C[o][position] = sum over (channel, tap) of weight[o][channel,
// tap] * input at the tap's position, 0 in the padding. The input ends at
// an inaccessible page, and reads before its start would land in the
// page before: the padding's elements must never be read. Stride 1 with
// "same" padding reads consecutive lanes (masked loads), other windows
// gather; k in several blocks, partial panels, 1x1 filters, no padding
// (no ranges: only the lanes past the tile are masked).
TEST(GemmEmitter, WindowedBIsAConvolutionsInput) {
  struct Convolution {
    int64_t batch, channels, height, width, outChannels, taps, stride, padding,
        dilation;
  };
  const Convolution convolutions[] = {
      {2, 3, 9, 11, 5, 3, 1, 1, 1}, {1, 32, 14, 14, 13, 3, 1, 1, 1},
      {2, 4, 9, 11, 7, 3, 2, 1, 1}, {1, 5, 10, 7, 3, 3, 1, 2, 2},
      {3, 6, 7, 9, 17, 1, 1, 0, 1}, {1, 70, 6, 6, 20, 3, 1, 0, 1},
      {1, 2, 1, 40, 3, 3, 1, 1, 1}, {2, 3, 8, 8, 4, 5, 3, 2, 1}};
  for (const Convolution &conv : convolutions) {
    auto outputs = [&](int64_t size) {
      return (size + 2 * conv.padding - conv.dilation * (conv.taps - 1) - 1) /
                 conv.stride +
             1;
    };
    int64_t outHeight = outputs(conv.height), outWidth = outputs(conv.width);
    GemmSpec spec;
    spec.batch = conv.batch;
    spec.m = conv.outChannels;
    spec.n = outHeight * outWidth;
    spec.k = conv.channels * conv.taps * conv.taps;
    spec.aRow = spec.k;
    spec.aCol = 1;
    spec.bBatch = conv.channels * conv.height * conv.width;
    spec.cBatch = spec.m * spec.n;
    spec.cRow = spec.n;
    spec.cCol = 1;
    spec.targetTiles = 5;
    backend::WindowedOperand window;
    window.depthExtents = {conv.channels, conv.taps, conv.taps};
    window.columnExtents = {outHeight, outWidth};
    window.depthStrides = {conv.height * conv.width, conv.dilation * conv.width,
                           conv.dilation};
    window.columnStrides = {conv.stride * conv.width, conv.stride};
    // Without padding, no ranges: every window is inside the input.
    if (conv.padding > 0) {
      window.ranges.push_back({{0, conv.dilation, 0},
                               {conv.stride, 0},
                               -conv.padding,
                               conv.height});
      window.ranges.push_back(
          {{0, 0, conv.dilation}, {0, conv.stride}, -conv.padding, conv.width});
    }
    spec.windowedB = window;
    checkGemm(spec, backend::hostTarget(), false,
              -conv.padding * conv.width - conv.padding);
    checkGemm(spec, withVectorBits(256), false,
              -conv.padding * conv.width - conv.padding);
  }
}
