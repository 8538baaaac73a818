// Memory planning: temporaries share one workspace per call; a temporary's
// bytes are reused once the last step reading it has run.
// Depends on ir/LoopIR.h, passes/Scheduler.h.
#include "passes/Scheduler.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

namespace kiln {

using namespace loop;

int64_t bufferBytes(const Buffer &buffer) { return bufferBytes(buffer.meta); }

int64_t bufferBytes(const TensorMeta &meta) {
  if (meta.numel() == 0)
    return 0;
  int64_t last = 0;
  for (size_t d = 0; d < meta.sizes.size(); ++d)
    last += (meta.sizes[d] - 1) * std::max<int64_t>(meta.strides[d], 0);
  return (meta.storageOffset + last + 1) * itemSize(meta.dtype);
}

namespace {

// The last step that reads each buffer's memory (a kernel's load, an
// extern's operand, of it or of a view of it), by root; steps.size() for
// an output's; -1 where none reads it.
std::vector<int64_t> lastReaders(const Program &program) {
  std::vector<int64_t> last(program.buffers.size(), -1);
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step &step = program.steps[s];
    auto read = [&](int64_t buffer) {
      if (buffer >= 0)
        last[program.rootOf(buffer)] = static_cast<int64_t>(s);
    };
    if (step.kind == Step::Kind::Extern) {
      for (const Value *operand : step.node->operands())
        read(program.operandBuffer(step, operand));
      continue;
    }
    forEachExpr(step.kernel, [&](const Expr *expr) {
      for (const Expr *load : loadsOf(expr))
        read(load->id());
    });
  }
  for (const ProgramOutput &output : program.outputs)
    if (output.buffer >= 0)
      last[program.rootOf(output.buffer)] =
          static_cast<int64_t>(program.steps.size());
  return last;
}

} // namespace

void writeOverDeadExternResults(Program &program) {
  std::unordered_set<int64_t> named = program.namedRoots();
  // A source is never one again once written over (it is then viewed), so
  // the readers found up front stay its readers.
  std::vector<int64_t> lastReader = lastReaders(program);
  std::unordered_set<int64_t> externResults, viewed;
  // Results torch allocates: not a view or a written argument of the call.
  for (const Step &step : program.steps) {
    if (step.kind != Step::Kind::Extern)
      continue;
    const OpSchema &schema = *step.node->schema();
    bool fresh = !schema.isMutable() &&
                 std::all_of(schema.returns.begin(), schema.returns.end(),
                             [](const SchemaArgument &result) {
                               return result.alias.empty();
                             });
    for (int64_t result : step.results)
      if (fresh)
        externResults.insert(result);
  }
  for (const Buffer &buffer : program.buffers)
    if (buffer.kind == BufferKind::View)
      viewed.insert(buffer.base);
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step &step = program.steps[s];
    if (step.kind != Step::Kind::Kernel || step.kernel.contraction ||
        step.kernel.loops.size() != 1 || !step.kernel.loops[0].ranges.empty() ||
        step.kernel.loops[0].stores.size() != 1)
      continue;
    const Store &store = step.kernel.loops[0].stores[0];
    Buffer &out = program.buffers[store.buffer];
    if (out.kind != BufferKind::Tensor || named.count(store.buffer) ||
        viewed.count(store.buffer) || externResults.count(store.buffer))
      continue;
    // The extern result it reads, every load of it at the store's index.
    int64_t source = -1;
    bool elementwise = true;
    for (const Expr *load : loadsOf(store.value)) {
      int64_t read = load->id();
      if (!externResults.count(read) || named.count(read) || viewed.count(read))
        continue;
      const Buffer &in = program.buffers[read];
      if (in.meta.dtype != out.meta.dtype || in.meta.sizes != out.meta.sizes ||
          in.meta.strides != out.meta.strides || in.meta.isSymbolic() ||
          out.meta.isSymbolic())
        continue;
      if (source >= 0 && source != read)
        continue;
      source = read;
      elementwise = elementwise && load->index() == store.index;
    }
    for (const Expr *load : loadsOf(store.index))
      elementwise = elementwise && program.rootOf(load->id()) != source;
    if (source < 0 || !elementwise ||
        lastReader[source] > static_cast<int64_t>(s))
      continue;
    out.kind = BufferKind::View;
    out.base = source;
    out.meta.storageOffset = 0;
    viewed.insert(source);
  }
}

namespace {

constexpr int64_t kAlignment = 64;

int64_t alignUp(int64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

} // namespace

std::vector<int64_t> planWorkspace(const Program &program,
                                   const std::vector<int64_t> &bytesOf,
                                   int64_t &total) {
  size_t count = program.buffers.size();
  std::vector<int64_t> offsets(count, -1);
  std::vector<int64_t> firstWrite(count, -1), lastRead(count, -1);
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step &step = program.steps[s];
    if (step.kind != Step::Kind::Kernel)
      continue;
    forEachExpr(step.kernel, [&](const Expr *expr) {
      for (const Expr *load : loadsOf(expr))
        lastRead[load->id()] = static_cast<int64_t>(s);
    });
    for (const Loop &loop : step.kernel.loops)
      for (const Store &store : loop.stores)
        if (firstWrite[store.buffer] < 0)
          firstWrite[store.buffer] = static_cast<int64_t>(s);
  }
  struct Block {
    int64_t offset, bytes, freeAfter;
  };
  std::vector<Block> blocks;
  total = 0;
  for (size_t b = 0; b < count; ++b) {
    const Buffer &buffer = program.buffers[b];
    // Temporaries fusion forwarded away are never written: no memory.
    if (buffer.kind != BufferKind::Temporary || firstWrite[b] < 0) {
      continue;
    }
    int64_t bytes = alignUp(std::max<int64_t>(bytesOf[b], 1));
    int64_t born = firstWrite[b];
    int64_t dies = std::max(lastRead[b], born);
    // First fit among blocks whose last reader ran before this is written.
    Block *reuse = nullptr;
    for (Block &block : blocks)
      if (block.freeAfter < born && block.bytes >= bytes &&
          (!reuse || block.bytes < reuse->bytes))
        reuse = &block;
    if (reuse) {
      offsets[b] = reuse->offset;
      reuse->freeAfter = dies;
      continue;
    }
    offsets[b] = total;
    blocks.push_back({total, bytes, dies});
    total += bytes;
  }
  return offsets;
}

void planMemory(Program &program) {
  std::vector<int64_t> bytes;
  for (const Buffer &buffer : program.buffers)
    bytes.push_back(bufferBytes(buffer));
  int64_t total = 0;
  std::vector<int64_t> offsets = planWorkspace(program, bytes, total);
  for (size_t b = 0; b < program.buffers.size(); ++b)
    if (offsets[b] >= 0)
      program.buffers[b].workspaceOffset = offsets[b];
  program.workspaceBytes = total;
}

std::string scheduleSummary(const Program &program) {
  std::ostringstream out;
  int kernels = 0, externs = 0;
  for (const Step &step : program.steps) {
    if (step.kind == Step::Kind::Extern) {
      ++externs;
      out << "extern " << step.node->schema()->qualifiedName() << "\n";
      continue;
    }
    ++kernels;
    const Kernel &kernel = step.kernel;
    size_t stores = 0, reductions = 0;
    for (const Loop &loop : kernel.loops) {
      stores += loop.stores.size();
      reductions += loop.reductions.size();
    }
    out << kernel.name << ": " << kernel.loops.size() << " loop(s), "
        << reductions << " reduction(s), " << stores << " store(s) over [";
    for (size_t i = 0; i < kernel.outerRanges.size(); ++i)
      out << (i ? ", " : "") << kernel.outerRanges[i]->str();
    out << "]; fused: " << kernel.origin << "\n";
  }
  out << kernels << " kernel(s), " << externs << " extern(s), workspace "
      << program.workspaceBytes << " bytes\n";
  return out.str();
}

} // namespace kiln
