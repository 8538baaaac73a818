// kiln's JIT: LLVM modules in, callable machine code for the host out,
// through ORC LLJIT. Depends on LLVM and backend/LlvmTargets.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace llvm {
class LLVMContext;
class Module;
namespace orc {
class LLJIT;
class ThreadSafeContext;
} // namespace orc
} // namespace llvm

namespace kiln::backend {

/// One JIT instance owns the code of the modules added to it; the code lives
/// as long as the instance.
class OrcJit {
public:
  OrcJit();
  ~OrcJit();
  OrcJit(const OrcJit &) = delete;
  OrcJit &operator=(const OrcJit &) = delete;

  /// Takes ownership of a module built in `context` and compiles it lazily
  /// on first lookup. Throws kiln::Error on failure.
  void addModule(std::unique_ptr<llvm::Module> module,
                 std::unique_ptr<llvm::LLVMContext> context);
  /// The address of a compiled function; throws kiln::Error when missing.
  uint64_t lookup(const std::string &symbol);
  /// The host's target triple and CPU name, as the JIT compiles for them.
  std::string targetTriple() const;
  std::string cpuName() const;

private:
  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

} // namespace kiln::backend
