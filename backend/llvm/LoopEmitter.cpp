// Counted loops and loop nests as LLVM IR.
// Depends on backend/llvm/LoopEmitter.h, LLVM.
#include "backend/llvm/LoopEmitter.h"

#include <functional>
#include <vector>

namespace kiln::backend {

void emitCountedLoop(llvm::IRBuilderBase &builder, llvm::Value *start,
                     llvm::Value *end, int64_t step, LoopBody body) {
  llvm::LLVMContext &context = builder.getContext();
  llvm::BasicBlock *before = builder.GetInsertBlock();
  llvm::Function *function = before->getParent();
  auto *header = llvm::BasicBlock::Create(context, "loop", function);
  auto *bodyBlock = llvm::BasicBlock::Create(context, "body", function);
  auto *exit = llvm::BasicBlock::Create(context, "exit", function);
  builder.CreateBr(header);
  builder.SetInsertPoint(header);
  llvm::PHINode *counter = builder.CreatePHI(builder.getInt64Ty(), 2, "i");
  counter->addIncoming(start, before);
  builder.CreateCondBr(builder.CreateICmpSLT(counter, end), bodyBlock, exit);
  builder.SetInsertPoint(bodyBlock);
  body(counter);
  llvm::Value *next = builder.CreateAdd(counter, builder.getInt64(step), "",
                                        /*HasNUW=*/false, /*HasNSW=*/true);
  counter->addIncoming(next, builder.GetInsertBlock());
  builder.CreateBr(header);
  builder.SetInsertPoint(exit);
}

void emitLoopNest(llvm::IRBuilderBase &builder,
                  llvm::ArrayRef<llvm::Value *> extents, llvm::Value *position,
                  CountedLoop loop, LoopNestBody body) {
  std::vector<llvm::Value *> indices;
  std::function<void(size_t, llvm::Value *)> level =
      [&](size_t dimension, llvm::Value *outerPosition) {
        if (dimension == extents.size()) {
          body(indices, outerPosition);
          return;
        }
        loop(builder.getInt64(0), extents[dimension], 1,
             [&](llvm::Value *index) {
               indices.push_back(index);
               level(dimension + 1,
                     builder.CreateAdd(
                         builder.CreateMul(outerPosition, extents[dimension]),
                         index));
               indices.pop_back();
             });
      };
  level(0, position);
}

llvm::Value *vectorEnd(llvm::IRBuilderBase &builder, llvm::Value *start,
                       llvm::Value *end, int lanes) {
  llvm::Value *count = builder.CreateSub(end, start);
  llvm::Value *whole =
      builder.CreateMul(builder.CreateSDiv(count, builder.getInt64(lanes)),
                        builder.getInt64(lanes));
  return builder.CreateAdd(start, whole);
}

} // namespace kiln::backend
