// Runs a compiled program from raw buffers (address, dtype, sizes,
// strides): inputs' addresses, buffers a call allocates, the workspace,
// views, then the kernels and extern calls in order. No Python: the host
// (the Python bridge, an exported program's caller) says where allocated
// buffers live and how extern steps run.
// Depends on runtime/CompiledProgram.h.
#pragma once

#include "runtime/CompiledProgram.h"

#include <memory>
#include <vector>

namespace kiln::runtime {

/// A tensor as raw memory: the address of its element 0 (after any storage
/// offset), its dtype, sizes and strides in elements.
struct TensorBuffer {
  char *data = nullptr;
  DType dtype = DType::Float32;
  Shape sizes;
  Shape strides;
};

/// One call's sizes of a program whose sizes vary between calls: the size
/// symbols' values, every buffer's layout at them, and the workspace
/// planned for them. A static program's calls need none.
struct CallLayout {
  std::vector<int64_t> symbols;
  std::vector<TensorMeta> metas;         // by buffer
  std::vector<int64_t> workspaceOffsets; // by buffer (Temporary; else -1)
  int64_t workspaceBytes = 0;

  /// Lays `program` out for `symbols` (one value per size symbol).
  static CallLayout of(const loop::Program &program,
                       std::vector<int64_t> symbols);
};

/// What a run needs from its caller besides the inputs.
class ExecutionHost {
public:
  explicit ExecutionHost(const CompiledProgram &program) : program_(program) {}
  virtual ~ExecutionHost() = default;
  /// Memory for a Tensor buffer no step produces (an output, an extern's
  /// operand), with the buffer's layout.
  virtual char *allocate(int64_t buffer) = 0;
  /// Runs extern step `step` (an op kiln does not compile) on the buffers
  /// at `addresses`, and sets the address of each of its results.
  virtual void runExtern(size_t step, std::vector<char *> &addresses) = 0;
  /// View buffer `buffer` now has its address (for hosts that keep a tensor
  /// per buffer).
  virtual void viewReady(int64_t /*buffer*/,
                         std::vector<char *> & /*addresses*/) {}
  /// The address of constant buffer `buffer` on the program's device: its
  /// bytes in the program by default (host memory).
  virtual char *constantAddress(int64_t buffer);
  /// Memory for the call's temporaries (`bytes`, 64-byte aligned), held
  /// until the returned object goes: the device's workspace by default.
  virtual Workspace workspace(int64_t bytes);
  /// The stream kernels are queued on (GPU programs).
  virtual backend::LaunchContext launchContext() { return {}; }
  /// No later step uses buffer `buffer` (CompiledProgram::releasedAfter):
  /// a host that holds memory for it may let it go now.
  virtual void release(int64_t /*buffer*/) {}

protected:
  const CompiledProgram &program_;
};

/// Whether a tensor laid out as `actual` can stand where `expected` was
/// compiled for: the same dtype and sizes, and the same strides where a
/// dimension has more than one element (none matter for an empty tensor).
bool sameLayout(const TensorMeta &actual, const TensorMeta &expected);

/// Throws kiln::Error when `tensor` is not what graph input `index` of
/// `program` was compiled for (dtype, sizes, strides where a dimension has
/// more than one element; at `layout`'s sizes where they vary).
void checkInput(const CompiledProgram &program, size_t index,
                const TensorBuffer &tensor, const CallLayout *layout = nullptr);

/// Runs `program` with `inputAddresses[i]` the address of graph input i.
/// Every buffer's address ends in `addresses` (indexed by buffer number).
/// `layout`: the call's sizes, for a program whose sizes vary.
void runProgram(const CompiledProgram &program, char *const *inputAddresses,
                size_t inputCount, ExecutionHost &host,
                std::vector<char *> &addresses,
                const CallLayout *layout = nullptr);

/// The outputs of a run without a host: tensors on the program's device,
/// allocated by the run (freed with this object) or views of the inputs.
struct ProgramOutputs {
  std::vector<TensorBuffer> tensors;
  std::vector<std::shared_ptr<char>> memory;
};

/// Runs `program` on `inputs` (checked) with outputs allocated on its
/// device; a program whose sizes vary takes its symbols' values from the
/// inputs' sizes. Throws kiln::Unsupported for a program with extern steps or a
/// non-tensor output, which need a host.
ProgramOutputs runProgram(const CompiledProgram &program,
                          const std::vector<TensorBuffer> &inputs);

} // namespace kiln::runtime
