// The loop IR: kernels over rectangular iteration domains whose bodies are
// hash-consed expression trees over loop variables, reading and writing flat
// buffers. The IR between the graph and machine code (Inductor's role).
// Depends on ir/DType.h, ir/TensorMeta.h, ir/Graph.h (extern steps).
#pragma once

#include "ir/DType.h"
#include "ir/Graph.h"
#include "ir/TensorMeta.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kiln::loop {

enum class ExprKind : uint8_t {
  Constant,       // a number of the expression's dtype
  Var,            // a loop variable of the enclosing kernel (Int64)
  Symbol,         // the value of size symbol s<id> in this call (Int64)
  Load,           // buffer[index]
  ReductionValue, // the result of an earlier reduction of the same kernel
  Unary,
  Binary,
  Where,  // operands: condition (Bool), then, else
  Cast,   // operand converted to the expression's dtype
  MulAdd, // operands a, b, c: a * b + c, fused where the target has it;
          // for a decomposition's own arithmetic (polynomials), never for
          // a user's separate multiply and add, whose roundings eager keeps
};

enum class UnaryOp : uint8_t {
  Neg,
  Abs,
  Exp,
  Exp2,
  Expm1,
  Log,
  Log2,
  Log10,
  Log1p,
  Sqrt,
  Rsqrt,
  Sin,
  Cos,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Tanh,
  Asinh,
  Acosh,
  Atanh,
  Erf,
  Erfc,
  Sigmoid,
  Reciprocal,
  Floor,
  Ceil,
  Round,
  Trunc,
  Sign,
  LogicalNot,
  BitwiseNot,
  IsNan,
  IsInf,
  Lgamma,
};

enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div, // Div: true division for floats; integer division
       // rounding toward zero for the index arithmetic
  FloorDiv,
  Mod,  // Python semantics (floor, sign of the divisor)
  Fmod, // C semantics (sign of the dividend)
  Pow,
  Atan2,
  Copysign,
  Max,
  Min, // NaN-propagating, like torch.maximum/minimum
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge, // Bool results
  LogicalAnd,
  LogicalOr,
  LogicalXor,
  BitwiseAnd,
  BitwiseOr,
  BitwiseXor,
  ShiftLeft,
  ShiftRight,
};

std::string_view unaryOpName(UnaryOp op);
std::string_view binaryOpName(BinaryOp op);

/// An immutable expression node. Nodes are unique within their ExprContext:
/// two structurally equal expressions are the same pointer, so pointer
/// equality is structural equality and a kernel's shared subexpressions are
/// computed once.
class Expr {
public:
  ExprKind kind() const { return kind_; }
  DType dtype() const { return dtype_; }
  const std::vector<const Expr *> &operands() const { return operands_; }
  const Expr *operand(size_t index) const { return operands_.at(index); }

  /// Constant: the value (integers and bools are exact in `integer()`).
  double real() const { return real_; }
  int64_t integer() const { return integer_; }
  /// Var: the variable's number; Symbol: the size symbol's number;
  /// Load: the buffer's number;
  /// ReductionValue: the reduction's number within its kernel.
  int64_t id() const { return integer_; }
  UnaryOp unaryOp() const { return static_cast<UnaryOp>(op_); }
  BinaryOp binaryOp() const { return static_cast<BinaryOp>(op_); }
  /// Load: the element offset from the buffer's data pointer.
  const Expr *index() const { return operands_.at(0); }

  bool isConstant() const { return kind_ == ExprKind::Constant; }
  bool isIntegerConstant(int64_t value) const;

private:
  friend class ExprContext;
  ExprKind kind_ = ExprKind::Constant;
  DType dtype_ = DType::Int64;
  uint8_t op_ = 0;
  double real_ = 0;
  int64_t integer_ = 0;
  std::vector<const Expr *> operands_;
};

/// Owns and uniques expressions. The builders fold constants and simplify
/// index arithmetic (x+0, x*1, x*0, constant folding), so that the affine
/// analysis below sees simple trees.
class ExprContext {
public:
  ExprContext();
  ~ExprContext();
  ExprContext(const ExprContext &) = delete;
  ExprContext &operator=(const ExprContext &) = delete;

  const Expr *constant(double value, DType dtype);
  const Expr *integer(int64_t value) { return constant(value, DType::Int64); }
  const Expr *var(int64_t number);
  /// The value of size symbol s<number> in the running call.
  const Expr *symbol(int64_t number);
  /// A size expression as index arithmetic over Symbol nodes.
  const Expr *size(SymSize size);
  const Expr *load(int64_t buffer, DType dtype, const Expr *index);
  const Expr *reductionValue(int64_t reduction, DType dtype);
  const Expr *unary(UnaryOp op, const Expr *operand);
  /// Operands must have the same dtype; comparisons and logical ops give
  /// Bool.
  const Expr *binary(BinaryOp op, const Expr *lhs, const Expr *rhs);
  const Expr *where(const Expr *condition, const Expr *then,
                    const Expr *otherwise);
  const Expr *cast(const Expr *operand, DType dtype);
  /// a * b + c of floating-point operands of one dtype (see MulAdd).
  const Expr *mulAdd(const Expr *a, const Expr *b, const Expr *c);

  // Index arithmetic on Int64 expressions.
  const Expr *add(const Expr *a, const Expr *b);
  const Expr *mul(const Expr *a, const Expr *b);
  const Expr *floorDiv(const Expr *a, int64_t divisor);
  const Expr *mod(const Expr *a, int64_t divisor);

  /// Replaces Var(n) by `vars[n]` (vars a var does not index stay).
  const Expr *substituteVars(const Expr *expr,
                             const std::vector<const Expr *> &vars);
  /// Replaces every node `from` by `to`, wherever it occurs.
  const Expr *
  replace(const Expr *expr,
          const std::unordered_map<const Expr *, const Expr *> &replacements);

  /// While read-only (the CPU backend emits kernels on several threads,
  /// each reading the program), asking for a node the context does not
  /// hold yet throws instead of racing on its tables; nodes it holds are
  /// still found.
  void setReadOnly(bool readOnly);

private:
  const Expr *intern(Expr node);
  /// A Var or Symbol node (int64, identified by its number).
  const Expr *numbered(ExprKind kind, int64_t number);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Python's floor division of integers (`divisor` nonzero).
int64_t floorDivide(int64_t value, int64_t divisor);

/// The coefficient of Var(`var`) in `index` when `index` is affine in it
/// (the variable occurs only under Add and under Mul by constants), 0 when
/// the variable does not occur, and nullopt otherwise (under division,
/// modulo, a load, ...).
std::optional<int64_t> affineCoefficient(const Expr *index, int64_t var);
/// Whether `index`, free of loads and size symbols, reads Var(firstDigit),
/// ..., Var(firstDigit + digitExtents.size() - 1) only as one row-major flat
/// index over `digitExtents` times a stride (each digit's coefficient the
/// next one's times the next digit's extent): a GEMM's columns that are a
/// convolution's output positions.
bool readsDigitsFlat(const Expr *index, int64_t firstDigit,
                     const std::vector<int64_t> &digitExtents);
/// Whether `value` reads those digits only in load indices that
/// readsDigitsFlat accepts, and nowhere else.
bool loadsReadDigitsFlat(const Expr *value, int64_t firstDigit,
                         const std::vector<int64_t> &digitExtents);
/// `affineCoefficient` where the coefficient may be a size expression (an
/// index over a tensor whose strides vary between calls).
std::optional<SymSize> symbolicCoefficient(const Expr *index, int64_t var);
/// `expr`, integer arithmetic over constants and Symbol nodes, as a size
/// expression; null where it reads anything else (a variable, a load).
SymSize sizeOfExpr(const Expr *expr);
/// Whether Var(`var`) occurs in `expr`.
bool dependsOnVar(const Expr *expr, int64_t var);
/// Whether a Symbol node occurs in `expr`.
bool dependsOnSymbol(const Expr *expr);
/// Whether some node of `root` (searched below the nodes `descend` accepts,
/// every node when it is empty) satisfies `match`. Each shared node is
/// visited once: expressions are DAGs, and a walk of their paths can take
/// exponential time.
bool anyNode(const Expr *root, const std::function<bool(const Expr *)> &match,
             const std::function<bool(const Expr *)> &descend = {});
/// The operations of `expr` (its distinct nodes with operands, loads and
/// their indices included) not yet in `seen`, which gains them.
int64_t operationCount(const Expr *expr,
                       std::unordered_set<const Expr *> &seen);
/// A kernel's body grows, by lowering's inlining of single-use values and
/// by fusion, up to about this many operations. Past it, fusing saves one
/// store and one load per point among hundreds of operations, while making
/// one function's machine code (instruction selection and register
/// allocation over one long body) costs more than linear time.
constexpr int64_t kMaxKernelOperations = 192;
/// Whether `expr` is arithmetic, comparisons, selects and casts only: no
/// division, power or transcendental function (index arithmetic inside
/// loads is not looked at). Cheap to compute again where it is read.
bool isCheapArithmetic(const Expr *expr);
/// Every Load node of `expr`, each once.
std::vector<const Expr *> loadsOf(const Expr *expr);
/// "add(load(buf2, 4*v0 + v1), 1.0:f32)".
std::string exprToString(const Expr *expr);

enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, Any, All };
std::string_view reduceOpName(ReduceOp op);

/// The extent of a loop: a constant in a static program, an expression over
/// size symbols where sizes vary between calls.
using Range = SymSize;

/// The extents of a loop nest, outermost first. Built from numbers (a static
/// kernel) or from size expressions; code that needs a number asks for a
/// constant (`constants()`, `Range::constant()`) or for the example call's
/// value (`Program::hint`), and must not rely on the latter.
class Ranges : public std::vector<SymSize> {
public:
  Ranges() = default;
  Ranges(std::initializer_list<int64_t> values);
  Ranges(const std::vector<int64_t> &values);
  Ranges(std::vector<SymSize> values)
      : std::vector<SymSize>(std::move(values)) {}
  Ranges(std::initializer_list<SymSize> values)
      : std::vector<SymSize>(values) {}
  template <typename It>
  Ranges(It first, It last) : std::vector<SymSize>(first, last) {}

  /// Whether every range is a constant.
  bool isStatic() const;
  /// The ranges as numbers; throws kiln::Error where one is symbolic.
  Shape constants() const;
  /// The number of points: their product.
  SymSize numel() const;
};

/// "[v0 < 4, v1 < s0]".
std::string rangesToString(const Ranges &ranges, int64_t firstVar);

/// `buffer[index] = value`.
struct Store {
  int64_t buffer;
  const Expr *index;
  const Expr *value;
};

/// A reduction over all points of its loop. Sum/Prod/Max/Min/Any/All give a
/// value of `value`'s dtype (bools for Any/All); ArgMax/ArgMin give the
/// Int64 row-major position within the loop's ranges of the first maximum
/// (minimum), NaN counting as the maximum (minimum), as torch does.
struct Reduction {
  ReduceOp op;
  const Expr *value;
  DType dtype() const;
};

/// One loop nest inside a kernel, run once per outer point. Its variables
/// are numbered from the kernel's outer-variable count up: Var(outer + j) is
/// the j-th of `ranges`. A loop with no ranges runs once per outer point.
/// Its reductions are numbered after those of the earlier loops of the same
/// kernel; every later loop may read their results as ReductionValue.
struct Loop {
  Ranges ranges;
  std::vector<Reduction> reductions;
  /// Performed at every point, after the reductions' values are final: a
  /// loop with both stores and reductions stores only what does not read
  /// its own reductions (the lowering puts those in a later loop).
  std::vector<Store> stores;
};

/// Calls `visit` on every expression of `loop`: each reduction's value, then
/// each store's index and value.
void forEachExpr(const Loop &loop,
                 const std::function<void(const Expr *)> &visit);
/// Replaces every expression of `loop` (as forEachExpr lists them) by
/// `rewrite` of it.
void rewriteExprs(Loop &loop,
                  const std::function<const Expr *(const Expr *)> &rewrite);

/// A kernel: `outerRanges` are its parallel loops (Var(0)..Var(n-1)); at
/// each outer point its loops run in order. A pointwise kernel has one loop
/// with no ranges.
struct Kernel {
  std::string name;
  Ranges outerRanges;
  std::vector<Loop> loops;
  /// What the scheduler fused into it, for logs ("add+mul+exp").
  std::string origin;
  /// A matrix product as lowering made it (outer ranges [batch,] m, n; one
  /// loop over k summing load(a) * load(b); one store of the sum): fusion and
  /// loop order leave it as it is, so that a backend can recognise it and
  /// emit a GEMM (backend/cpu/GemmEmitter.h); the loops stay its meaning.
  bool contraction = false;

  int64_t reductionCount() const;
};

enum class BufferKind : uint8_t {
  Input,     // graph input `graphInput`
  Constant,  // a constant tensor of the graph
  Temporary, // an intermediate only kernels read: planned memory
  Tensor,    // an intermediate or output that must be a torch tensor
  View,      // a view of buffer `base`: no memory of its own
};

/// A flat array of elements. Kernels address it by element offset from its
/// data pointer; `meta` is the layout torch sees (for views: sizes and
/// strides, and the offset in elements from the base's data pointer).
struct Buffer {
  std::string name;
  BufferKind kind = BufferKind::Temporary;
  TensorMeta meta;
  int64_t graphInput = -1;                // Input
  const ConstantData *constant = nullptr; // Constant
  int64_t base = -1;                      // View
  /// Temporary: byte offset in the call's workspace (memory planning).
  int64_t workspaceOffset = -1;

  DType dtype() const { return meta.dtype; }
};

/// One step of a program: a kernel, or an extern node run by calling torch.
struct Step {
  enum class Kind : uint8_t { Kernel, Extern } kind = Kind::Kernel;
  Kernel kernel;
  const Node *node = nullptr; // Extern: the graph node
  /// Extern: the buffer of each result of the node.
  std::vector<int64_t> results;
  /// Extern: operands torch reads from another buffer than the value's own
  /// (Program::bufferOf): a copy in the layout its kernel is fastest with
  /// (a convolution's input in channels-last).
  std::vector<std::pair<const Value *, int64_t>> operandBuffers;
};

/// What a graph output is: a buffer (outputs that are views of other
/// buffers are View buffers), or a non-tensor constant.
struct ProgramOutput {
  int64_t buffer = -1;
  Argument constant; // when buffer < 0
};

/// An input of index type whose every element read must lie in [0, size):
/// the rows an embedding, index_select or gather reads from a table of
/// `size` rows. A kernel reading them clamps each index (it must not read
/// outside the table); the runtime checks the input before the first step
/// that reads it and raises what torch raises (`report`; an exported run
/// checks every one before any step and returns an error). Where
/// `fromEnd`, elements in [-size, 0) pass too (indexing counts them from
/// the end); where `ignored` is set, elements of that value pass wherever
/// it lies (nll_loss's ignore_index).
struct IndexCheck {
  /// What an element out of range raises, as torch's op does.
  enum class Report : uint8_t {
    Table,    // IndexError "index out of range in self" (embedding)
    Indexing, // IndexError "index 5 is out of bounds for dimension 0 with
              // size 5" (indexing with index tensors)
    Gather,   // RuntimeError with that text (gather)
    Target,   // IndexError "Target 5 is out of bounds." (nll_loss)
  };
  int64_t buffer = -1;
  int64_t size = 0;
  bool fromEnd = false;
  /// The dim the message names (Indexing, Gather).
  int64_t dim = 0;
  /// The elements read: the input, or a view of it (a slice, an expand, a
  /// transpose), its storage offset in elements from the input's first.
  TensorMeta elements;
  Report report = Report::Table;
  std::optional<int64_t> ignored;
  /// The user's line the reading op came from ("path:line in function").
  std::string origin;
};

/// A whole graph as loop IR: buffers, steps in execution order, outputs.
/// Extern steps read the buffer that `bufferOf` gives for each tensor value
/// of their node's arguments.
struct Program {
  std::shared_ptr<const Graph> graph;
  std::unique_ptr<ExprContext> exprs = std::make_unique<ExprContext>();
  std::vector<Buffer> buffers;
  std::vector<Step> steps;
  std::vector<ProgramOutput> outputs;
  std::unordered_map<const Value *, int64_t> bufferOf;
  /// Bytes of workspace a call needs for Temporary buffers.
  int64_t workspaceBytes = 0;
  /// A program whose sizes vary between calls: the example call's value of
  /// each size symbol (buffer layouts and ranges mention the symbols, and a
  /// call passes their values). Empty for a static program.
  std::vector<int64_t> symbolHints;
  /// Inputs the runtime checks before the first step (IndexCheck).
  std::vector<IndexCheck> indexChecks;

  bool isSymbolic() const { return !symbolHints.empty(); }
  /// `size`'s value in the example call: for choices that only affect
  /// speed, never for what the code computes.
  int64_t hint(SymSize size) const;
  /// The example call's values of `ranges`.
  Shape hints(const Ranges &ranges) const;

  int64_t addBuffer(Buffer buffer);
  /// The buffer extern `step` reads for its operand `value`: its
  /// operandBuffers' where that names the value, else bufferOf's; -1 where
  /// neither has one.
  int64_t operandBuffer(const Step &step, const Value *value) const;
  /// The roots (rootOf) of the buffers a graph value (bufferOf) or an
  /// output names: torch may see them as they are laid out.
  std::unordered_set<int64_t> namedRoots() const;
  /// The buffer whose memory `buffer` is: itself, or for a View the end of
  /// its chain of bases.
  int64_t rootOf(int64_t buffer) const;
  /// The readable text form (KILN_LOGS=loop_ir).
  std::string str() const;
};

/// forEachExpr and rewriteExprs over every loop of a kernel.
void forEachExpr(const Kernel &kernel,
                 const std::function<void(const Expr *)> &visit);
void rewriteExprs(Kernel &kernel,
                  const std::function<const Expr *(const Expr *)> &rewrite);

std::string kernelToString(const Kernel &kernel, const Program &program);

} // namespace kiln::loop
