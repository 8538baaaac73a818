// A kernel's cache key: its function's LLVM IR as text, under one name, with
// attributes and metadata spelled out. Depends on backend/llvm/KernelKey.h,
// LLVM.
#include "backend/llvm/KernelKey.h"

#include <llvm/IR/Function.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

namespace kiln::backend {

std::string kernelKey(llvm::Function &function) {
  std::string name = function.getName().str();
  function.setName("kiln_kernel");
  std::string text;
  llvm::raw_string_ostream stream(text);
  function.print(stream);
  function.setName(name);
  // The define line names its attributes by a module-wide group number:
  // spell them out instead.
  size_t lineEnd = text.find('\n', text.find("define "));
  size_t group = text.rfind(" #", lineEnd);
  if (lineEnd != std::string::npos && group != std::string::npos &&
      group > text.find("define "))
    text.replace(group, text.find(" {", group) - group,
                 " " + function.getAttributes().getAsString(
                           llvm::AttributeList::FunctionIndex));
  // Metadata prints as slot numbers: add what each attachment holds.
  llvm::SmallVector<std::pair<unsigned, llvm::MDNode *>, 4> attached;
  for (llvm::Instruction &instruction : llvm::instructions(function)) {
    instruction.getAllMetadata(attached);
    for (const auto &[kind, node] : attached) {
      stream << kind << ' ';
      node->print(stream, function.getParent());
      stream << '\n';
    }
  }
  return text;
}

} // namespace kiln::backend
