// Counted loops and loop nests as LLVM IR, for every LLVM target: the loop
// structure is written here once, and what runs inside comes from a body
// callback. Depends on LLVM.
#pragma once

#include <llvm/ADT/ArrayRef.h>
#include <llvm/ADT/STLFunctionalExtras.h>
#include <llvm/IR/IRBuilder.h>

#include <cstdint>

namespace kiln::backend {

using LoopBody = llvm::function_ref<void(llvm::Value *index)>;
/// A way to emit `for (index = start; index < end; index += step) body`: the
/// plain emitCountedLoop, or an emitter's that opens a scope around it.
using CountedLoop = llvm::function_ref<void(
    llvm::Value *start, llvm::Value *end, int64_t step, LoopBody body)>;
using LoopNestBody = llvm::function_ref<void(
    llvm::ArrayRef<llvm::Value *> indices, llvm::Value *position)>;

/// `for (index = start; index < end; index += step) body(index)` over i64,
/// in the function the builder is in (blocks "loop", "body", "exit"); the
/// builder is left at the exit.
void emitCountedLoop(llvm::IRBuilderBase &builder, llvm::Value *start,
                     llvm::Value *end, int64_t step, LoopBody body);

/// A row-major nest of loops from 0 to each of `extents`, outermost first,
/// each emitted by `loop`; `body` gets the indices and the row-major
/// position of the point, counted on from `position` (the position of the
/// nest's first point divided by the nest's size).
void emitLoopNest(llvm::IRBuilderBase &builder,
                  llvm::ArrayRef<llvm::Value *> extents, llvm::Value *position,
                  CountedLoop loop, LoopNestBody body);

/// The end of the part of [start, end) that whole vectors of `lanes` cover.
llvm::Value *vectorEnd(llvm::IRBuilderBase &builder, llvm::Value *start,
                       llvm::Value *end, int lanes);

} // namespace kiln::backend
