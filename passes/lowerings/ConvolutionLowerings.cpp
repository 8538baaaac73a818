// Lowerings of convolution (N-d, grouped, strided, padded, dilated) and of
// 2-d pooling (max with indices, average, adaptive average) to reduction
// kernels over each output element's window, padding read as a `where` on
// the window position's bounds. A large convolution of one group is kiln's
// GEMM over the input's windows where they are (an implicit GEMM) or laid
// out as columns, where that pays or the program must run without torch;
// any other stays an extern that calls torch (oneDNN).
// Depends on passes/lowerings/Lowerer.h, ir/Error.h.
#include "passes/lowerings/Lowerer.h"

#include "ir/Error.h"
#include "ir/ops/MetaUtils.h"

#include <algorithm>
#include <limits>

namespace kiln::lowering {
namespace {

// Multiply-adds up to which a convolution is compiled in the JIT rather
// than left to torch, as for matrix products (LinearAlgebraLowerings.cpp).
constexpr int64_t kMaxNativeWork = 1 << 13;

LoweringResult one(LoweredTensor tensor) {
  return std::vector<LoweredTensor>{std::move(tensor)};
}

const Expr *conjunction(Lowerer &lowerer, const Expr *a, const Expr *b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return lowerer.binary(BinaryOp::LogicalAnd, a, b);
}

// One spatial dim of a sliding window: output position o and tap t read
// the input at o * stride - padding + t * dilation.
struct WindowDim {
  int64_t size;    // the input's extent
  int64_t outputs; // the result's extent
  int64_t taps;    // the window's extent
  int64_t stride = 1, padding = 0, dilation = 1;

  int64_t start(int64_t output) const { return output * stride - padding; }
  int64_t last(int64_t output) const {
    return start(output) + (taps - 1) * dilation;
  }
  // Whether some window reaches before the input or past its end.
  bool below() const { return outputs > 0 && start(0) < 0; }
  bool above() const { return outputs > 0 && last(outputs - 1) >= size; }
  // Whether every window has a tap inside the input.
  bool neverEmpty() const {
    for (int64_t o = 0; o < outputs; ++o) {
      bool found = false;
      for (int64_t t = 0; t < taps && !found; ++t) {
        int64_t position = start(o) + t * dilation;
        found = position >= 0 && position < size;
      }
      if (!found)
        return false;
    }
    return true;
  }
};

// The input position of `output` and `tap`, clamped into the input so that
// no load leaves its buffer (both sides of a `where` may be evaluated), and
// whether it lies inside the input: nullptr where every position does.
struct WindowPosition {
  const Expr *position;
  const Expr *inside;
};

WindowPosition windowPosition(Lowerer &lowerer, const WindowDim &dim,
                              const Expr *output, const Expr *tap) {
  loop::ExprContext &exprs = lowerer.exprs();
  const Expr *position =
      exprs.add(exprs.add(exprs.mul(output, exprs.integer(dim.stride)),
                          exprs.integer(-dim.padding)),
                exprs.mul(tap, exprs.integer(dim.dilation)));
  const Expr *inside = nullptr;
  if (dim.below())
    inside = lowerer.binary(BinaryOp::Ge, position, exprs.integer(0));
  if (dim.above())
    inside = conjunction(
        lowerer, inside,
        lowerer.binary(BinaryOp::Lt, position, exprs.integer(dim.size)));
  if (dim.below())
    position = lowerer.binary(BinaryOp::Max, position, exprs.integer(0));
  if (dim.above())
    position =
        lowerer.binary(BinaryOp::Min, position, exprs.integer(dim.size - 1));
  return {position, inside};
}

// A convolution's reads at a point of its kernel over [n, o, positions...,
// c, taps...] (dims = 2 + spatial dims): the input's index at `channel`, the
// weight's at (outChannel, weightChannel, taps...), and where the window
// position is inside the input (nullptr: everywhere).
struct WindowIndices {
  Index input, weight;
  const Expr *inside = nullptr;
};

WindowIndices windowIndices(Lowerer &lowerer,
                            const std::vector<WindowDim> &windows,
                            const Index &index, const Expr *channel,
                            const Expr *outChannel, const Expr *weightChannel) {
  size_t dims = windows.size() + 2;
  WindowIndices at{{index[0], channel}, {outChannel, weightChannel}};
  for (size_t s = 0; s < windows.size(); ++s) {
    const Expr *tap = index[dims + 1 + s];
    WindowPosition position =
        windowPosition(lowerer, windows[s], index[2 + s], tap);
    at.input.push_back(position.position);
    at.weight.push_back(tap);
    at.inside = conjunction(lowerer, at.inside, position.inside);
  }
  return at;
}

// A `int[]` argument with one value per spatial dim (one value stands for
// all); nullopt where the count fits neither.
std::optional<Shape> perSpatialDim(const Argument &argument, size_t spatial) {
  Shape values = argument.toIntList();
  if (values.size() == 1)
    values.assign(spatial, values[0]);
  if (values.size() != spatial)
    return std::nullopt;
  return values;
}

// --- Convolution ---

std::optional<int64_t> wholeBuffer(Lowerer &lowerer,
                                   const LoweredTensor &tensor,
                                   const TensorMeta &layout);

// A convolution's result from its products ([n][o][positions...]), plus
// the bias of each output channel where there is one.
LoweredTensor withBias(Lowerer &lowerer, const LoweredTensor &products,
                       const std::optional<LoweredTensor> &bias,
                       const TensorMeta &meta) {
  std::vector<LoweredTensor> inputs{products};
  if (bias)
    inputs.push_back(lowerer.remap(
        *bias, meta.sizes, [](const Index &at) { return Index{at[1]}; }));
  return lowerer.pointwise(
      meta.sizes, products.dtype, meta.dtype, inputs,
      [&lowerer](const std::vector<const Expr *> &v) {
        return v.size() == 1 ? v[0] : lowerer.binary(BinaryOp::Add, v[0], v[1]);
      });
}

// A convolution of one group as a matrix product (an implicit GEMM) over
// the input's windows laid out as columns: columns[n][r][p] is the input
// element that tap r = (c, tap...) of window p = (output position...) reads
// (0 in the padding), computed into a buffer. The product is kiln's GEMM,
// the bias its epilogue. Where the windows are many (more than the output
// channels), per image result[n][o][p] = sum over r of weight[o][r] *
// columns[n][r][p], which comes out in the input's NCHW order. Where they
// are few (a vision transformer's patches: 36 windows of 768 taps per
// image, 256 channels), the GEMM's columns would be the windows, too few
// for its panels: then the columns are laid out [n][p][r] and all images'
// windows are one product's rows, result[n][p][o] = sum over r of
// columns[n][p][r] * weight[o][r], channels innermost (the order such a
// model reads them in next); so too where the input comes channels-last or
// `positionRows` asks (a 1x1 filter in the JIT: its result channels-last,
// as the rest of a CNN runs). For a program without torch: 4x32x56x56 by 32
// 3x3 filters ran in 64 ms on 2 threads as a window kernel, 4.0-4.2 ms so
// (oneDNN: 1.1-1.2). A copy of the input with the padding in it, so that
// the columns read in place, took longer (5.0 ms) than the padding's
// selects.
LoweredTensor convolutionAsProduct(Lowerer &lowerer, LoweredTensor input,
                                   LoweredTensor weight,
                                   const std::optional<LoweredTensor> &bias,
                                   const std::vector<WindowDim> &windows,
                                   const TensorMeta &meta, bool positionRows) {
  loop::ExprContext &exprs = lowerer.exprs();
  int64_t batch = meta.sizes[0], outChannels = meta.sizes[1];
  int64_t channels = input.sizes[1], taps = 1, positions = 1;
  Shape outputExtents;
  for (const WindowDim &window : windows) {
    taps *= window.taps;
    positions *= window.outputs;
    outputExtents.push_back(window.outputs);
  }
  int64_t depth = channels * taps;
  bool windowRows = positionRows || positions < outChannels ||
                    lowerer.sourceFormat(input) == MemoryFormat::ChannelsLast;
  // A filter of one tap reads each input element once at most: the
  // columns compute an expression input (a batch norm and ReLU) as they
  // are written.
  if (taps > 1)
    input = lowerer.readable(input, "convolution_input");
  // columns[n][c][tap...][output...] (or [n][output...][c][tap...] where
  // windows are rows), each coordinate a loop of its own (no division in
  // the kernel that writes it).
  size_t spatial = windows.size();
  LoweredTensor columns;
  columns.dtype = input.dtype;
  columns.sizes = {batch};
  if (windowRows)
    columns.sizes.insert(columns.sizes.end(), outputExtents.begin(),
                         outputExtents.end());
  columns.sizes.push_back(channels);
  for (const WindowDim &window : windows)
    columns.sizes.push_back(window.taps);
  if (!windowRows)
    columns.sizes.insert(columns.sizes.end(), outputExtents.begin(),
                         outputExtents.end());
  columns.symSizes = constantShape(columns.sizes);
  size_t channel = windowRows ? 1 + spatial : 1;
  size_t firstTap = channel + 1;
  size_t firstOutput = windowRows ? 1 : firstTap + spatial;
  columns.loader = [&lowerer, input, windows, spatial, channel, firstTap,
                    firstOutput](const Index &index) {
    Index at{index[0], index[channel]};
    const Expr *inside = nullptr;
    for (size_t s = 0; s < spatial; ++s) {
      WindowPosition position = windowPosition(
          lowerer, windows[s], index[firstOutput + s], index[firstTap + s]);
      at.push_back(position.position);
      inside = conjunction(lowerer, inside, position.inside);
    }
    const Expr *value = input.loader(at);
    return inside ? lowerer.where(inside, value,
                                  lowerer.constant(0, value->dtype()))
                  : value;
  };
  // A filter of one tap at stride 1 without padding reads each position
  // once, where it is: the columns are the input itself where that is a
  // whole buffer laid out as they are (channels innermost for rows of
  // positions, else NCHW).
  std::optional<int64_t> whole;
  bool eachPositionOnce = taps == 1;
  for (const WindowDim &window : windows)
    eachPositionOnce = eachPositionOnce && window.stride == 1 &&
                       window.padding == 0 && window.outputs == window.size;
  if (eachPositionOnce && (!windowRows || spatial == 2 || spatial == 3)) {
    MemoryFormat format = !windowRows    ? MemoryFormat::Contiguous
                          : spatial == 2 ? MemoryFormat::ChannelsLast
                                         : MemoryFormat::ChannelsLast3d;
    whole = wholeBuffer(lowerer, input,
                        TensorMeta(input.dtype, input.sizes,
                                   meta::stridesForFormat(input.sizes, format),
                                   0, lowerer.device()));
  }
  LoweredTensor written =
      whole
          ? lowerer.placed(
                {*whole,
                 symbolicStrides(contiguousMeta(columns.dtype, columns.sizes)),
                 size::constant(0)},
                columns.dtype, columns.sizes)
          : lowerer.realize(columns,
                            contiguousMeta(columns.dtype, columns.sizes),
                            loop::BufferKind::Temporary, "convolution columns");
  // The filters as [o][r]: a view of the weight's buffer where (c, tap...)
  // are one stride apart, else a copy.
  auto rowsOfOneStride = [&](const LoweredTensor &tensor) {
    if (!tensor.realized())
      return false;
    for (const SymSize &stride : tensor.placement->strides)
      if (!stride->constant())
        return false;
    for (int64_t d = 1; d + 1 < tensor.dim(); ++d)
      if (*tensor.placement->strides[d]->constant() !=
          *tensor.placement->strides[d + 1]->constant() * tensor.sizes[d + 1])
        return false;
    return true;
  };
  if (!rowsOfOneStride(weight))
    weight = lowerer.realize(weight, contiguousMeta(weight.dtype, weight.sizes),
                             loop::BufferKind::Temporary, "convolution_weight");
  const Placement &placed = *weight.placement;
  const Placement &columnsPlaced = *written.placement;
  std::optional<LoweredTensor> sums;
  if (windowRows) {
    // [n * p][r] by [r][o] (the weight transposed).
    LoweredTensor rows =
        lowerer.placed({columnsPlaced.buffer,
                        {size::constant(depth), size::constant(1)},
                        size::constant(0)},
                       written.dtype, Shape{batch * positions, depth});
    LoweredTensor filters =
        lowerer.placed({placed.buffer,
                        {placed.strides.back(), placed.strides[0]},
                        placed.offset},
                       weight.dtype, Shape{depth, outChannels});
    sums = matrixProduct(lowerer, rows, filters, meta.dtype);
  } else {
    // Per image [o][r] (the same filters for every image) by [r][p].
    LoweredTensor rows =
        lowerer.placed({columnsPlaced.buffer,
                        {size::constant(depth * positions),
                         size::constant(positions), size::constant(1)},
                        size::constant(0)},
                       written.dtype, Shape{batch, depth, positions});
    LoweredTensor filters = lowerer.placed(
        {placed.buffer,
         {size::constant(0), placed.strides[0], placed.strides.back()},
         placed.offset},
        weight.dtype, Shape{batch, outChannels, depth});
    sums = matrixProduct(lowerer, filters, rows, meta.dtype);
  }
  if (!sums)
    throw kiln::Error("convolution: no matrix product for " +
                      std::to_string(batch) + " images");
  // The sums as the result's [n][o][positions...], plus the bias.
  LoweredTensor products = lowerer.remap(
      *sums, meta.sizes,
      [&exprs, outputExtents, positions, windowRows](const Index &at) {
        const Expr *flat = exprs.integer(0);
        for (size_t d = 0; d < outputExtents.size(); ++d)
          flat = exprs.add(exprs.mul(flat, exprs.integer(outputExtents[d])),
                           at[2 + d]);
        if (windowRows)
          return Index{
              exprs.add(exprs.mul(at[0], exprs.integer(positions)), flat),
              at[1]};
        return Index{at[0], at[1], flat};
      });
  return withBias(lowerer, products, bias, meta);
}

// Whether the windows of consecutive output positions (in NCHW order)
// read consecutive input elements: stride 1 and the result as wide as the
// input in every spatial dim but the first (a "same" padding), so that the
// GEMM packs its B with vector loads rather than gathers.
bool consecutiveWindows(const std::vector<WindowDim> &windows) {
  for (size_t s = 0; s < windows.size(); ++s)
    if (windows[s].stride != 1 ||
        (s > 0 && windows[s].outputs != windows[s].size))
      return false;
  return true;
}

// Whether `value` reaches a pooling op through ops that keep its shape (a
// batch norm, a ReLU, a residual add): a pool's windows read channels as
// vectors where its input is channels-last (oneDNN's result), and an NCHW
// one's stride-2 windows gather (a 3x3 max pool over 8x32x56x56 took 0.64
// ms from NCHW on 2 threads, 0.15 channels-last).
bool feedsPool(const Graph &graph, const Value *value) {
  std::vector<const Value *> frontier{value};
  for (int depth = 0; depth < 4 && !frontier.empty(); ++depth) {
    std::vector<const Value *> next;
    for (const std::unique_ptr<Node> &node : graph.nodes()) {
      if (!node->schema())
        continue;
      std::vector<Value *> operands = node->operands();
      if (std::none_of(operands.begin(), operands.end(), [&](Value *operand) {
            return std::find(frontier.begin(), frontier.end(), operand) !=
                   frontier.end();
          }))
        continue;
      if (node->schema()->qualifiedName().find("pool") != std::string::npos)
        return true;
      for (const std::unique_ptr<Value> &result : node->results())
        if (result->meta().sizes == value->meta().sizes)
          next.push_back(result.get());
    }
    frontier = std::move(next);
  }
  return false;
}

// A convolution of one group as kiln's GEMM over the windows of its input
// where they are (an implicit GEMM, no columns laid out): per image,
// result[n][o][p...] = sum over (c, tap...) of weight[o][c][tap...] *
// input[n][c][p * stride - padding + tap * dilation] (0 in the padding),
// a contraction over (c, tap...) whose B the CPU backend packs from the
// input panel by panel (GemmSpec::windowedB). The result comes out in the
// input's NCHW order; the bias, and a batch norm and ReLU after it, are
// the GEMM's epilogue.
LoweredTensor convolutionAsWindows(Lowerer &lowerer, LoweredTensor input,
                                   LoweredTensor weight,
                                   const std::optional<LoweredTensor> &bias,
                                   const std::vector<WindowDim> &windows,
                                   const TensorMeta &meta) {
  input = lowerer.readable(input, "convolution_input");
  if (!input.realized() &&
      lowerer.element(input)->kind() != loop::ExprKind::Load)
    input = lowerer.realize(input, contiguousMeta(input.dtype, input.sizes),
                            loop::BufferKind::Temporary, "convolution_input");
  if (!weight.realized())
    weight = lowerer.realize(weight, contiguousMeta(weight.dtype, weight.sizes),
                             loop::BufferKind::Temporary, "convolution_weight");
  Shape domain = meta.sizes;
  domain.push_back(input.sizes[1]);
  for (const WindowDim &window : windows)
    domain.push_back(window.taps);
  std::vector<int64_t> reduced;
  for (size_t d = meta.sizes.size(); d < domain.size(); ++d)
    reduced.push_back(static_cast<int64_t>(d));
  ReductionKernel kernel(lowerer, domain, reduced);
  const Index &index = kernel.index();
  size_t dims = meta.sizes.size();
  WindowIndices at = windowIndices(lowerer, windows, index, index[dims],
                                   index[1], index[dims]);
  const Expr *window = input.loader(at.input);
  if (const Expr *inside = at.inside)
    window =
        lowerer.where(inside, window, lowerer.constant(0, window->dtype()));
  const Expr *sum = kernel.reduce(
      ReduceOp::Sum,
      lowerer.binary(BinaryOp::Mul, weight.loader(at.weight), window));
  LoweredTensor products =
      kernel.store(sum, contiguousMeta(meta.dtype, meta.sizes));
  kernel.markContraction();
  kernel.emit("convolution");
  return withBias(lowerer, products, bias, meta);
}

// Whether strides `a` and `b` of a tensor of `sizes` address its elements
// alike: equal wherever a dim has more than one position (a filter of one
// tap, or of one input channel, is contiguous and channels-last at once).
bool sameLayout(const Shape &sizes, const SymShape &a, const SymShape &b) {
  if (a.size() != sizes.size() || b.size() != sizes.size())
    return false;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && a[d] != b[d])
      return false;
  return true;
}

// The buffer `tensor` is all of, laid out as `layout`: a realized tensor
// placed so, or loads of such a buffer at every element's own position (a
// temporary kept channels-last: Lowerer::temporaryLayout).
std::optional<int64_t> wholeBuffer(Lowerer &lowerer,
                                   const LoweredTensor &tensor,
                                   const TensorMeta &layout) {
  const loop::Program &program = lowerer.program();
  SymShape strides = symbolicStrides(layout);
  if (tensor.realized()) {
    const Placement &at = *tensor.placement;
    const loop::Buffer &buffer = program.buffers[at.buffer];
    if (at.offset->constant() == 0 &&
        sameLayout(tensor.sizes, at.strides, strides) &&
        buffer.meta.sizes == tensor.sizes &&
        sameLayout(tensor.sizes, symbolicStrides(buffer.meta), strides))
      return at.buffer;
    return std::nullopt;
  }
  const Expr *element = lowerer.element(tensor);
  if (element->kind() != loop::ExprKind::Load ||
      element->dtype() != tensor.dtype)
    return std::nullopt;
  const loop::Buffer &buffer = program.buffers[element->id()];
  if (buffer.kind == loop::BufferKind::View ||
      buffer.meta.sizes != tensor.sizes ||
      !sameLayout(tensor.sizes, symbolicStrides(buffer.meta), strides) ||
      !lowerer.readsOwnPosition(element))
    return std::nullopt;
  return element->id();
}

// Whether torch's convolution runs faster channels-last, given its weight
// channels-last too: where the weight is at most twice the result (the
// measurements are convolutionInBestLayout's).
bool channelsLastPays(const LoweredTensor &weight, const TensorMeta &meta) {
  return numelOf(weight.sizes) <= 2 * meta.numel();
}

// A convolution torch runs (oneDNN), in the layout it is fastest in.
// oneDNN reorders a contiguous (NCHW) input to a blocked layout and its
// result back on every call, and runs its direct kernel between; with
// channels-last operands it runs its brgemm kernel on them as they are and
// gives a channels-last result, which the kernels after it read as it is
// (a CNN's batch norm and ReLU write the next layer's input channels-last
// too: Lowerer::temporaryLayout). On this 2-core machine, 2 threads:
// 4x32x56x56 by 64 3x3 filters 4.82 ms contiguous, 2.17 channels-last (the
// input's copy 0.17); a MobileNet-like stack of depthwise and 1x1 layers
// 15.8 against 6.6. But the weight is then given channels-last (below)
// and oneDNN reorders it on every call: where the weight is more than
// twice the result (deep layers of few positions) the call takes a
// contiguous input, copied from a channels-last one. Given its weight
// channels-last, torch's convolution measured (GPU host, 2 and 16 threads)
// faster than contiguous up to 1.5 weights per result and slower from 3
// (8x128x7x7 by 128 3x3: 2 threads 691 us against 649, 16 threads 224
// against 272; 8x256x4x4 by 256 3x3: 1154 against 880, 505 against 297). A
// first layer of an image's 3 channels is channels-last too: with a contiguous
// input oneDNN's reorder buffers (megabytes) are faulted in on every call of a
// plain process (8x3x112x112 by 32 7x7, 2 threads: 2.96 ms contiguous with 1540
// page faults a call, 1.02 channels-last with none), and the max pool after it
// then reads its windows' channels as vectors. Float32 on the CPU, 2-d and 3-d,
// shapes fixed.
LoweringResult convolutionInBestLayout(Lowerer &lowerer, const Node &node,
                                       const LoweredTensor &input,
                                       const LoweredTensor &weight,
                                       const TensorMeta &meta) {
  int64_t dims = meta.dim();
  if (lowerer.device().type != DeviceType::CPU ||
      meta.dtype != DType::Float32 || (dims != 4 && dims != 5) ||
      lowerer.symbolic() || meta.numel() == 0)
    return std::nullopt;
  bool channelsLast = channelsLastPays(weight, meta);
  MemoryFormat format = !channelsLast ? MemoryFormat::Contiguous
                        : dims == 4   ? MemoryFormat::ChannelsLast
                                      : MemoryFormat::ChannelsLast3d;
  auto layoutOf = [&](const LoweredTensor &tensor) {
    return TensorMeta(tensor.dtype, tensor.sizes,
                      meta::stridesForFormat(tensor.sizes, format), 0,
                      meta.device);
  };
  // An operand that is a whole buffer in that layout already (a graph
  // input, the previous layer's result) is read where it is.
  auto wholeIn = [&](const LoweredTensor &tensor) -> std::optional<int64_t> {
    std::optional<int64_t> whole =
        wholeBuffer(lowerer, tensor, layoutOf(tensor));
    if (!whole)
      return std::nullopt;
    loop::BufferKind kind = lowerer.program().buffers[*whole].kind;
    if (kind != loop::BufferKind::Input &&
        kind != loop::BufferKind::Temporary && kind != loop::BufferKind::Tensor)
      return std::nullopt;
    return whole;
  };
  auto inLayout = [&](const Value *value, const LoweredTensor &tensor,
                      const std::string &what) {
    if (std::optional<int64_t> whole = wholeIn(tensor))
      return lowerer.placed(
          {*whole, symbolicStrides(lowerer.program().buffers[*whole].meta),
           size::constant(0)},
          tensor.dtype, tensor.sizes);
    return lowerer.operandCopy(value, tensor, layoutOf(tensor), what);
  };
  // A contiguous call on an input that is no channels-last buffer: the
  // node as it is (its operands are copied to their own layouts).
  if (!channelsLast && (wholeIn(input) ||
                        meta::suggestMemoryFormat(lowerer.temporaryLayout(
                            input, contiguousMeta(input.dtype, input.sizes))) ==
                            MemoryFormat::Contiguous))
    return std::nullopt;
  const Value *inputValue = node.arguments().at(0).toTensor();
  std::vector<std::pair<const Value *, LoweredTensor>> operands{
      {inputValue,
       inLayout(inputValue, input,
                channelsLast ? "channels_last_input" : "contiguous_input")}};
  // A channels-last call is given its weight channels-last as well, copied
  // by a kiln kernel: torch would otherwise copy it itself on every call
  // (slower: 16 threads, 8x64x14x14 by 128 3x3 filters, stride 2: 230 us
  // with a contiguous weight, 182 with a channels-last one), as Inductor's
  // convolutions are given theirs.
  const Value *weightValue = node.arguments().at(1).toTensor();
  if (channelsLast && weightValue != inputValue)
    operands.push_back(
        {weightValue, inLayout(weightValue, weight, "channels_last_weight")});
  TensorMeta resultLayout(meta.dtype, meta.sizes,
                          meta::stridesForFormat(meta.sizes, format), 0,
                          meta.device);
  return lowerer.externCall(node, operands, {resultLayout});
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups): for output (n, o, p...), the sum over the
// group's input channels c and the taps k... of
// input[n, group * C/groups + c, p * stride - padding + k * dilation] *
// weight[o, c, k], plus bias[o]; padding reads as zero.
LoweringResult convolution(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  LoweredTensor input = lowerer.input(node, 0);
  LoweredTensor weight = lowerer.input(node, 1);
  // Transposed convolutions scatter into the result: left to torch.
  if (node.arguments().at(6).toBool())
    return std::nullopt;
  int64_t dims = weight.dim();
  if (dims < 3 || input.dim() != dims || meta.dim() != dims ||
      !isFloatingPoint(meta.dtype) || input.dtype != meta.dtype ||
      weight.dtype != meta.dtype)
    return std::nullopt;
  size_t spatial = static_cast<size_t>(dims - 2);
  std::optional<Shape> stride = perSpatialDim(node.arguments().at(3), spatial);
  std::optional<Shape> padding = perSpatialDim(node.arguments().at(4), spatial);
  std::optional<Shape> dilation =
      perSpatialDim(node.arguments().at(5), spatial);
  int64_t groups = node.arguments().at(8).toInt();
  if (!stride || !padding || !dilation || groups < 1)
    return std::nullopt;
  int64_t channels = input.sizes[1], outChannels = weight.sizes[0];
  int64_t groupChannels = weight.sizes[1];
  if (groupChannels * groups != channels || outChannels % groups != 0 ||
      meta.sizes[0] != input.sizes[0] || meta.sizes[1] != outChannels)
    return std::nullopt;
  std::vector<WindowDim> windows;
  int64_t reduction = groupChannels;
  for (size_t s = 0; s < spatial; ++s) {
    WindowDim window{input.sizes[s + 2], meta.sizes[s + 2], weight.sizes[s + 2],
                     (*stride)[s],       (*padding)[s],     (*dilation)[s]};
    // The result's extent must be the one the window gives (an extern
    // node's metadata is torch's and is checked, not trusted).
    if (window.stride <= 0 || window.dilation <= 0 || window.padding < 0 ||
        window.taps <= 0 ||
        window.outputs != (window.size + 2 * window.padding -
                           window.dilation * (window.taps - 1) - 1) /
                                  window.stride +
                              1)
      return std::nullopt;
    windows.push_back(window);
    reduction *= window.taps;
  }
  std::optional<LoweredTensor> bias;
  if (!node.arguments().at(2).isNone()) {
    bias = lowerer.input(node, 2);
    if (bias->dim() != 1 || bias->sizes[0] != outChannels)
      return std::nullopt;
  }
  // A large convolution is a GEMM over the input's windows where the
  // program runs without torch, and in the JIT where the windows do not
  // overlap (a vision transformer's patches): their columns are no more
  // than the input, and oneDNN's kernel for them is slow (8x3x96x96 by 256
  // 16x16 filters, stride 16: 0.7-1.0 ms on 2 threads; the columns 41 us
  // and kiln's GEMM 0.59 ms). 1x1 filters stay with oneDNN.
  bool large = meta.numel() * reduction > kMaxNativeWork;
  bool patches = true, wide = false;
  for (const WindowDim &window : windows) {
    patches = patches && window.taps * window.outputs <= window.size;
    wide = wide || window.taps > 1;
  }
  // A filter of one tap where torch's call would be channels-last
  // (convolutionInBestLayout) is kiln's GEMM too, its rows the result's
  // positions: the columns are the input (or every stride-th position of
  // it) channels innermost, as torch's call would take it, the product is
  // the result channels-last, and the batch norm and ReLU after it are the
  // GEMM's epilogue. In a plain process torch's call faults its result's
  // pages in on every call besides (MobileNet-like 8x32x56x56 by 64 1x1
  // filters: 1568 faults a call).
  bool pointwiseFilter =
      !wide && !lowerer.symbolic() && channelsLastPays(weight, meta);
  // A filter of several taps over an NCHW input whose positions are at
  // least its channels is kiln's GEMM over the input's windows where they
  // are (convolutionAsWindows): without torch always (its columns laid out
  // took 3-4x oneDNN's time), in the JIT where that beats torch's call and
  // the layout passes around it. On the 16-core Xeon (conv, batch norm and
  // ReLU; oneDNN's call with its channels-last copies against the windows,
  // us, 2 threads / 16 threads): 4x32x56x56 by 64 3x3 2681-2272 / 777-632
  // against 1748-2592 / 510-481, 8x16x56x56 by 32 1826-1466 / 487-473
  // against 1301-1294 / 328-304, 8x3x112x112 by 32 2424-2319 / 615-531
  // against 1412-1367 / 285-264, 8x64x28x28 by 128 at stride 2
  // (gathers) 1746-1173 / 427-383 against 1099-1305 / 334-286; but
  // 8x128x14x14 by 128 2121-1791 / 635-606 against 1839-2624 / 482-468 (few
  // positions), and a 7x7 stem at stride 2 over 3 channels took 2.36 ms
  // here against oneDNN's 1.26 (gathers for 32 filters). So in the JIT:
  // at least 256 positions an image, windows read as vectors (stride 1,
  // "same" width) or at least 128 filters to share each gather, and no
  // pool after it (feedsPool). An image's offsets must fit the GEMM's
  // 32-bit lanes.
  int64_t positions = 1;
  for (const WindowDim &window : windows)
    positions *= window.outputs;
  // (The graph walk of feedsPool last: only for a convolution that
  // otherwise qualifies.)
  if (large && wide && !patches && groups == 1 &&
      meta.dtype == DType::Float32 &&
      lowerer.device().type == DeviceType::CPU && !lowerer.symbolic() &&
      positions >= meta.sizes[1] &&
      numelOf(input.sizes) / input.sizes[0] < (int64_t(1) << 30) &&
      lowerer.sourceFormat(input) == MemoryFormat::Contiguous &&
      (lowerer.standalone() ||
       (positions >= 256 &&
        (consecutiveWindows(windows) || meta.sizes[1] >= 128) &&
        !feedsPool(lowerer.graph(), node.result()))))
    return one(
        convolutionAsWindows(lowerer, input, weight, bias, windows, meta));
  if (large && groups == 1 && meta.dtype == DType::Float32 &&
      lowerer.device().type == DeviceType::CPU &&
      (lowerer.standalone() || (patches && wide) || pointwiseFilter))
    return one(convolutionAsProduct(lowerer, input, weight, bias, windows, meta,
                                    pointwiseFilter));
  if (!lowerer.standalone() && large)
    return convolutionInBestLayout(lowerer, node, input, weight, meta);
  input = lowerer.readable(input, "convolution_input");
  weight = lowerer.readable(weight, "convolution_weight");

  // Outer dims n, o, p...; reduced dims c, k...
  DType math = accumulationType(meta.dtype);
  Shape domain = meta.sizes;
  std::vector<int64_t> reduced;
  domain.push_back(groupChannels);
  for (const WindowDim &window : windows)
    domain.push_back(window.taps);
  for (size_t d = meta.sizes.size(); d < domain.size(); ++d)
    reduced.push_back(static_cast<int64_t>(d));
  ReductionKernel kernel(lowerer, domain, reduced);
  const Index &index = kernel.index();
  loop::ExprContext &exprs = lowerer.exprs();
  const Expr *outChannel = index[1];
  const Expr *groupChannel = index[dims];
  const Expr *channel = groupChannel;
  if (groups > 1)
    channel =
        exprs.add(exprs.mul(exprs.floorDiv(outChannel, outChannels / groups),
                            exprs.integer(groupChannels)),
                  groupChannel);
  WindowIndices at =
      windowIndices(lowerer, windows, index, channel, outChannel, groupChannel);
  const Index &inputIndex = at.input, &weightIndex = at.weight;
  const Expr *inside = at.inside;
  const Expr *product = lowerer.binary(
      BinaryOp::Mul, lowerer.cast(input.loader(inputIndex), math),
      lowerer.cast(weight.loader(weightIndex), math));
  if (inside)
    product = lowerer.where(inside, product, lowerer.constant(0, math));
  const Expr *sum = kernel.reduce(ReduceOp::Sum, product);
  if (bias)
    sum = lowerer.binary(BinaryOp::Add, sum,
                         lowerer.cast(bias->loader({outChannel}), math));
  LoweredTensor result = kernel.store(sum, meta);
  kernel.emit("convolution");
  return one(result);
}

// --- 2-d pooling over the last two dims of a 3-d or 4-d input ---

// A `int[2]` argument given as one value or two; nullopt otherwise.
std::optional<std::pair<int64_t, int64_t>> twoInts(const Argument &argument) {
  Shape values = argument.toIntList();
  if (values.size() == 1)
    return std::make_pair(values[0], values[0]);
  if (values.size() != 2)
    return std::nullopt;
  return std::make_pair(values[0], values[1]);
}

// The height and width windows of max_pool2d and avg_pool2d: arguments
// kernel_size, stride (empty: the kernel), padding and, for max pooling,
// dilation; the result's extents are its metadata's. Nullopt for an input
// or a window the lowerings do not take.
std::optional<std::pair<WindowDim, WindowDim>>
poolWindows(const Node &node, const LoweredTensor &input,
            const TensorMeta &meta, std::optional<size_t> dilationArgument) {
  if ((input.dim() != 3 && input.dim() != 4) || meta.dim() != input.dim() ||
      !isFloatingPoint(input.dtype) || meta.dtype != input.dtype)
    return std::nullopt;
  auto kernel = twoInts(node.arguments().at(1));
  Shape strideList = node.arguments().at(2).toIntList();
  auto stride = strideList.empty() ? kernel : twoInts(node.arguments().at(2));
  auto padding = twoInts(node.arguments().at(3));
  auto dilation = dilationArgument
                      ? twoInts(node.arguments().at(*dilationArgument))
                      : std::make_pair(int64_t{1}, int64_t{1});
  if (!kernel || !stride || !padding || !dilation)
    return std::nullopt;
  int64_t h = input.dim() - 2, w = input.dim() - 1;
  WindowDim height{input.sizes[h], meta.sizes[h],  kernel->first,
                   stride->first,  padding->first, dilation->first};
  WindowDim width{input.sizes[w], meta.sizes[w],   kernel->second,
                  stride->second, padding->second, dilation->second};
  for (const WindowDim &window : {height, width})
    if (window.taps <= 0 || window.stride <= 0 || window.dilation <= 0 ||
        window.padding < 0)
      return std::nullopt;
  for (int64_t d = 0; d < h; ++d)
    if (meta.sizes[d] != input.sizes[d])
      return std::nullopt;
  return std::make_pair(height, width);
}

// The domain of a pooling kernel: the input's leading dims, the result's
// height and width, then the window's taps (reduced).
ReductionKernel poolKernel(Lowerer &lowerer, const TensorMeta &meta,
                           int64_t tapsHigh, int64_t tapsWide) {
  Shape domain = meta.sizes;
  domain.push_back(tapsHigh);
  domain.push_back(tapsWide);
  int64_t dims = meta.dim();
  return ReductionKernel(lowerer, domain, {dims, dims + 1});
}

// The layout a pooling kernel stores its result in: channels-last where
// its input is read from a channels-last buffer (a convolution's result
// through batch norm and ReLU; the next convolution takes it as it is),
// so that its outermost loops walk the input's positions and its innermost
// the channels, each tap's loads one vector. Otherwise the node's.
TensorMeta poolLayout(Lowerer &lowerer, const LoweredTensor &input,
                      const TensorMeta &meta) {
  if (meta.dim() != 4 || !meta.isContiguous())
    return meta;
  MemoryFormat format = lowerer.sourceFormat(input);
  if (format != MemoryFormat::ChannelsLast)
    return meta;
  return TensorMeta(meta.dtype, meta.sizes,
                    meta::stridesForFormat(meta.sizes, format), 0, meta.device);
}

// A pooling kernel's result stored in `layout`: where that is not the
// node's layout, loads of its buffer rather than a placed tensor (view ops
// place their results by the graph's strides).
LoweredTensor pooledResult(LoweredTensor stored, const TensorMeta &layout,
                           const TensorMeta &meta) {
  if (layout.strides != meta.strides)
    stored.placement.reset();
  return stored;
}

// The element of a pooling kernel's (poolKernel) current tap in `math`, and
// whether the tap lies inside the input (nullptr: always); its row and column
// in the input plane.
struct PoolTap {
  const Expr *element;
  const Expr *inside;
  WindowPosition row, column;
};

PoolTap poolTap(Lowerer &lowerer, const ReductionKernel &kernel,
                const LoweredTensor &input, const WindowDim &height,
                const WindowDim &width, DType math) {
  const Index &index = kernel.index();
  size_t leading = index.size() - 4;
  WindowPosition row =
      windowPosition(lowerer, height, index[leading], index[leading + 2]);
  WindowPosition column =
      windowPosition(lowerer, width, index[leading + 1], index[leading + 3]);
  Index at(index.begin(), index.begin() + leading);
  at.push_back(row.position);
  at.push_back(column.position);
  return {lowerer.cast(input.loader(at), math),
          conjunction(lowerer, row.inside, column.inside), row, column};
}

// max_pool2d_with_indices(self, kernel_size, stride, padding, dilation,
// ceil_mode) and max_pool2d: the window's maximum and, for the former, its
// position h * W + w in the input plane, as torch's CPU kernel picks it:
// the first maximum, or the last NaN where the window has one (NaN wins);
// padding is never picked.
LoweringResult maxPool(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  auto windows = poolWindows(node, input, meta, 4);
  // A window wholly in the padding has an index torch makes up.
  if (!windows || !windows->first.neverEmpty() || !windows->second.neverEmpty())
    return std::nullopt;
  auto [height, width] = *windows;
  bool withIndices = node.results().size() == 2;
  input = lowerer.readableByWindows(input, "max_pool_input");

  DType math = accumulationType(meta.dtype);
  TensorMeta layout = poolLayout(lowerer, input, meta);
  ReductionKernel kernel = poolKernel(lowerer, meta, height.taps, width.taps);
  PoolTap tap = poolTap(lowerer, kernel, input, height, width, math);
  const Expr *element = tap.element, *inside = tap.inside;
  const Expr *lowest =
      lowerer.constant(-std::numeric_limits<double>::infinity(), math);
  const Expr *maximum = kernel.reduce(
      ReduceOp::Max, inside ? lowerer.where(inside, element, lowest) : element);
  std::vector<LoweredTensor> results{
      pooledResult(kernel.store(maximum, layout), layout, meta)};
  // Indices nobody reads (nn.MaxPool2d's call of the op that returns both)
  // are not computed: a second pass over every window.
  if (withIndices && !lowerer.isUsed(node.result(1))) {
    results.push_back(
        lowerer.full(0, DType::Int64, lowerer.resultMeta(node, 1).sizes));
  } else if (withIndices) {
    // A second pass: a maximum found is equal to its element, and a NaN
    // maximum is a NaN of the window. ArgMax would give the first NaN, and
    // could pick padding in a window whose inside is all -inf.
    kernel.newPass();
    loop::ExprContext &exprs = lowerer.exprs();
    const Expr *flat =
        exprs.add(exprs.mul(tap.row.position, exprs.integer(width.size)),
                  tap.column.position);
    const Expr *isMaximum = conjunction(
        lowerer, inside, lowerer.binary(BinaryOp::Eq, element, maximum));
    const Expr *isNan =
        conjunction(lowerer, inside, lowerer.unary(UnaryOp::IsNan, element));
    // The flat position grows with the tap's row-major order, so the first
    // maximum has the least and the last NaN the greatest. (The plane's
    // size stands for none: integer constants pass through double.)
    const Expr *first = kernel.reduce(
        ReduceOp::Min, lowerer.where(isMaximum, flat,
                                     exprs.integer(height.size * width.size)));
    const Expr *lastNan = kernel.reduce(
        ReduceOp::Max, lowerer.where(isNan, flat, exprs.integer(-1)));
    const Expr *position =
        lowerer.where(lowerer.unary(UnaryOp::IsNan, maximum), lastNan, first);
    const TensorMeta &indicesMeta = lowerer.resultMeta(node, 1);
    TensorMeta indicesLayout(indicesMeta.dtype, indicesMeta.sizes,
                             layout.strides, 0, indicesMeta.device);
    results.push_back(pooledResult(kernel.store(position, indicesLayout),
                                   indicesLayout, indicesMeta));
  }
  kernel.emit("max_pool2d");
  return results;
}

// The element count of each window along one dim, as avg_pool2d divides
// by it: within the padded input (`withPadding`) or the input alone; a
// constant where every window has the same.
const Expr *windowCount(Lowerer &lowerer, const WindowDim &dim,
                        const Expr *output, bool withPadding) {
  auto count = [&](int64_t o) {
    int64_t start = dim.start(o);
    int64_t end = std::min(start + dim.taps, dim.size + dim.padding);
    if (withPadding)
      return end - start;
    return std::min(end, dim.size) - std::max<int64_t>(start, 0);
  };
  bool uniform = true;
  for (int64_t o = 1; o < dim.outputs && uniform; ++o)
    uniform = count(o) == count(0);
  loop::ExprContext &exprs = lowerer.exprs();
  if (uniform)
    return exprs.integer(dim.outputs > 0 ? count(0) : 1);
  const Expr *start = exprs.add(exprs.mul(output, exprs.integer(dim.stride)),
                                exprs.integer(-dim.padding));
  const Expr *end =
      lowerer.binary(BinaryOp::Min, exprs.add(start, exprs.integer(dim.taps)),
                     exprs.integer(dim.size + dim.padding));
  if (!withPadding)
    return exprs.add(
        lowerer.binary(BinaryOp::Min, end, exprs.integer(dim.size)),
        exprs.mul(lowerer.binary(BinaryOp::Max, start, exprs.integer(0)),
                  exprs.integer(-1)));
  return exprs.add(end, exprs.mul(start, exprs.integer(-1)));
}

// avg_pool2d(self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override): the window's sum divided by the
// override, or by its size within the padded input (count_include_pad) or
// within the input. A window wholly outside the input gives 0, as torch's.
LoweringResult avgPool(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  auto windows = poolWindows(node, input, meta, std::nullopt);
  if (!windows)
    return std::nullopt;
  auto [height, width] = *windows;
  bool countPadding = node.arguments().at(5).toBool();
  std::optional<int64_t> divisorOverride;
  if (node.arguments().size() > 6 && !node.arguments()[6].isNone())
    divisorOverride = node.arguments()[6].toInt();
  if (divisorOverride && *divisorOverride == 0)
    return std::nullopt;
  input = lowerer.readableByWindows(input, "avg_pool_input");

  DType math = accumulationType(meta.dtype);
  TensorMeta layout = poolLayout(lowerer, input, meta);
  ReductionKernel kernel = poolKernel(lowerer, meta, height.taps, width.taps);
  const Index &index = kernel.index();
  int64_t leading = meta.dim() - 2;
  PoolTap tap = poolTap(lowerer, kernel, input, height, width, math);
  const Expr *element = tap.element, *inside = tap.inside;
  if (inside)
    element = lowerer.where(inside, element, lowerer.constant(0, math));
  const Expr *sum = kernel.reduce(ReduceOp::Sum, element);
  loop::ExprContext &exprs = lowerer.exprs();
  const Expr *divisor;
  if (divisorOverride) {
    divisor = exprs.integer(*divisorOverride);
  } else {
    divisor = exprs.mul(
        windowCount(lowerer, height, index[leading], countPadding),
        windowCount(lowerer, width, index[leading + 1], countPadding));
    // An empty window sums to 0: 0 / 1 where torch skips the division.
    if (divisor->isIntegerConstant(0))
      divisor = exprs.integer(1);
    else if (!divisor->isConstant())
      divisor = lowerer.binary(BinaryOp::Max, divisor, exprs.integer(1));
  }
  const Expr *average =
      lowerer.binary(BinaryOp::Div, sum, lowerer.cast(divisor, math));
  LoweredTensor result =
      pooledResult(kernel.store(average, layout), layout, meta);
  kernel.emit("avg_pool2d");
  return one(result);
}

// One dim of an adaptive pool: output o averages the input over
// [floor(o * size / outputs), ceil((o + 1) * size / outputs)).
struct AdaptiveDim {
  int64_t size, outputs;

  int64_t start(int64_t o) const { return o * size / outputs; }
  int64_t end(int64_t o) const {
    return ((o + 1) * size + outputs - 1) / outputs;
  }
  int64_t widest() const {
    int64_t taps = 0;
    for (int64_t o = 0; o < outputs; ++o)
      taps = std::max(taps, end(o) - start(o));
    return taps;
  }
  bool uniform() const {
    for (int64_t o = 0; o < outputs; ++o)
      if (end(o) - start(o) != widest())
        return false;
    return true;
  }
  const Expr *startExpr(loop::ExprContext &exprs, const Expr *o) const {
    return exprs.floorDiv(exprs.mul(o, exprs.integer(size)), outputs);
  }
  const Expr *endExpr(loop::ExprContext &exprs, const Expr *o) const {
    return exprs.floorDiv(exprs.add(exprs.mul(o, exprs.integer(size)),
                                    exprs.integer(size + outputs - 1)),
                          outputs);
  }
};

// _adaptive_avg_pool2d and adaptive_avg_pool2d(self, output_size): a
// reduction over the widest window, the narrower ones masked, divided by
// the window's height and then its width, as torch's CPU kernel does.
LoweringResult adaptiveAvgPool(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if ((input.dim() != 3 && input.dim() != 4) || meta.dim() != input.dim() ||
      !isFloatingPoint(input.dtype) || meta.dtype != input.dtype)
    return std::nullopt;
  int64_t leading = input.dim() - 2;
  for (int64_t d = 0; d < input.dim(); ++d)
    if (input.sizes[d] == 0 && d >= leading)
      return std::nullopt;
  if (meta.numel() == 0)
    return one(lowerer.full(0, meta.dtype, meta.sizes));
  AdaptiveDim height{input.sizes[leading], meta.sizes[leading]};
  AdaptiveDim width{input.sizes[leading + 1], meta.sizes[leading + 1]};
  input = lowerer.readableByWindows(input, "adaptive_avg_pool_input");

  DType math = accumulationType(meta.dtype);
  TensorMeta layout = poolLayout(lowerer, input, meta);
  ReductionKernel kernel =
      poolKernel(lowerer, meta, height.widest(), width.widest());
  const Index &index = kernel.index();
  loop::ExprContext &exprs = lowerer.exprs();
  Index at(index.begin(), index.begin() + leading);
  const Expr *inside = nullptr;
  std::vector<const Expr *> counts;
  for (int64_t d = 0; d < 2; ++d) {
    const AdaptiveDim &dim = d == 0 ? height : width;
    const Expr *output = index[leading + d], *tap = index[leading + 2 + d];
    const Expr *start = dim.startExpr(exprs, output);
    const Expr *position = exprs.add(start, tap);
    if (dim.uniform()) {
      counts.push_back(exprs.integer(dim.widest()));
    } else {
      const Expr *count = exprs.add(dim.endExpr(exprs, output),
                                    exprs.mul(start, exprs.integer(-1)));
      inside = conjunction(lowerer, inside,
                           lowerer.binary(BinaryOp::Lt, tap, count));
      position =
          lowerer.binary(BinaryOp::Min, position, exprs.integer(dim.size - 1));
      counts.push_back(count);
    }
    at.push_back(position);
  }
  const Expr *element = lowerer.cast(input.loader(at), math);
  if (inside)
    element = lowerer.where(inside, element, lowerer.constant(0, math));
  const Expr *average = kernel.reduce(ReduceOp::Sum, element);
  for (const Expr *count : counts)
    average = lowerer.binary(BinaryOp::Div, average, lowerer.cast(count, math));
  LoweredTensor result =
      pooledResult(kernel.store(average, layout), layout, meta);
  kernel.emit("adaptive_avg_pool2d");
  return one(result);
}

} // namespace

void registerConvolutionLowerings(LoweringTable &table) {
  table.insert({
      {"aten::convolution", convolution},
      {"aten::max_pool2d", maxPool},
      {"aten::max_pool2d_with_indices", maxPool},
      {"aten::avg_pool2d", avgPool},
      {"aten::adaptive_avg_pool2d", adaptiveAvgPool},
      {"aten::_adaptive_avg_pool2d", adaptiveAvgPool},
  });
}

} // namespace kiln::lowering
