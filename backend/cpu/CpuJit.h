// kiln's one JIT: LLVM modules in, host machine code out (ORC LLJIT, math
// library defined); a module's code lives while its JitCode is held.
// Depends on backend/cpu/HostTarget.h and LLVM.
#pragma once

#include "backend/cpu/HostTarget.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class LLVMContext;
class MemoryBuffer;
class Module;
class TargetMachine;
namespace orc {
class JITTargetMachineBuilder;
class LLJIT;
} // namespace orc
} // namespace llvm

namespace kiln::backend {

/// The machine code of one added module; freed with the last reference.
class JitCode;

class CpuJit {
public:
  /// The process's JIT (creating one is slow); never destroyed, since
  /// programs may outlive static destruction.
  static CpuJit &instance();

  /// A JIT of its own for the host (hostTarget()).
  CpuJit();
  ~CpuJit();
  CpuJit(const CpuJit &) = delete;
  CpuJit &operator=(const CpuJit &) = delete;

  const HostTarget &host() const { return host_; }
  /// Gives `module` the JIT's data layout and target triple.
  void prepare(llvm::Module &module) const;
  /// Takes a module built in `context` and compiles it on the first lookup
  /// of one of its functions; its code is freed when the returned JitCode
  /// is. Throws kiln::Error on failure.
  std::shared_ptr<JitCode>
  addModule(std::unique_ptr<llvm::Module> module,
            std::unique_ptr<llvm::LLVMContext> context);
  /// Takes object files compiled for the host (by newTargetMachine()'s
  /// machines), linked on the first lookup of one of their functions; their
  /// code is freed when the returned JitCode is. Throws kiln::Error.
  std::shared_ptr<JitCode>
  addObjects(std::vector<std::unique_ptr<llvm::MemoryBuffer>> objects);
  /// A target machine for the host as the JIT compiles for it, owned by
  /// the caller (one per compiling thread).
  std::unique_ptr<llvm::TargetMachine> newTargetMachine() const;
  /// The address of a compiled function; throws kiln::Error when missing.
  uint64_t lookup(const std::string &symbol);
  /// Forgets the symbol names of freed code (ORC keeps them until asked).
  void releaseDeadSymbols();
  /// The host's target triple and CPU name, as the JIT compiles for them.
  std::string targetTriple() const;
  std::string cpuName() const;

private:
  HostTarget host_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> machineBuilder_;
};

} // namespace kiln::backend
