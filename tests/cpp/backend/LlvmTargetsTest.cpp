// Proves both LLVM targets are linked: a function JIT-compiled for the host
// runs, and a kernel compiles to PTX for sm_80.
#include "backend/cpu/CpuJit.h"
#include "backend/nvptx/PtxEmitter.h"
#include "ir/Error.h"

#include <gtest/gtest.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

using namespace kiln;

namespace {

// float axpy(float a, float x, float y) { return a * x + y; }
std::unique_ptr<llvm::Module> buildAxpy(llvm::LLVMContext &context) {
  auto module = std::make_unique<llvm::Module>("axpy", context);
  llvm::Type *f32 = llvm::Type::getFloatTy(context);
  auto *type = llvm::FunctionType::get(f32, {f32, f32, f32}, false);
  auto *function = llvm::Function::Create(type, llvm::Function::ExternalLinkage,
                                          "axpy", module.get());
  llvm::IRBuilder<> builder(
      llvm::BasicBlock::Create(context, "entry", function));
  auto args = function->arg_begin();
  llvm::Value *a = &*args++, *x = &*args++, *y = &*args;
  builder.CreateRet(builder.CreateFAdd(builder.CreateFMul(a, x), y));
  return module;
}

} // namespace

TEST(CpuJit, CompilesAndRunsAHostFunction) {
  backend::CpuJit jit;
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = buildAxpy(*context);
  auto code = jit.addModule(std::move(module), std::move(context));
  auto axpy =
      reinterpret_cast<float (*)(float, float, float)>(jit.lookup("axpy"));
  EXPECT_FLOAT_EQ(axpy(2.0f, 3.0f, 1.0f), 7.0f);
  EXPECT_NE(jit.targetTriple().find("x86_64"), std::string::npos);
}

TEST(CpuJit, MissingSymbolIsAnError) {
  backend::CpuJit jit;
  EXPECT_THROW(jit.lookup("no_such_function"), Error);
}

TEST(PtxEmitter, EmitsPtxForSm80) {
  llvm::LLVMContext context;
  auto module = std::make_unique<llvm::Module>("kernel", context);
  // void scale(float* data) { data[tid.x] *= 2; }
  llvm::Type *f32 = llvm::Type::getFloatTy(context);
  llvm::Type *pointer = llvm::PointerType::get(context, 1);
  auto *function = llvm::Function::Create(
      llvm::FunctionType::get(llvm::Type::getVoidTy(context), {pointer}, false),
      llvm::Function::ExternalLinkage, "scale", module.get());
  llvm::IRBuilder<> builder(
      llvm::BasicBlock::Create(context, "entry", function));
  llvm::Value *tid = builder.CreateIntrinsic(
      llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {});
  llvm::Value *address = builder.CreateGEP(f32, function->getArg(0), tid);
  llvm::Value *value = builder.CreateLoad(f32, address);
  builder.CreateStore(
      builder.CreateFMul(value, llvm::ConstantFP::get(f32, 2.0)), address);
  builder.CreateRetVoid();
  backend::markAsKernel(*module, "scale");

  std::string ptx = backend::emitPtx(*module, "sm_80");
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".entry scale"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("%tid.x"), std::string::npos) << ptx;
}
