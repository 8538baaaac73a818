// In-place ops on the graph's own tensors as functional ops: alias groups
// (a tensor and the values that share its storage through views and
// in-place results) are found first; a group of one fresh tensor, views of
// it and the results of in-place ops on them, and nothing else, is
// rewritten (writes through views scattered into the tensor).
// Depends on passes/Functionalization.h, ir/Graph.h, ir/OpRegistry.h,
// ir/ops/MetaUtils.h.
#include "passes/Functionalization.h"

#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::passes {
namespace {

// The letter of an alias annotation: "a" of "a!" or "a -> *".
std::string aliasSet(const std::string &alias) {
  size_t end = alias.find_first_of("! -");
  return alias.substr(0, end);
}

// An op that writes its first argument, a tensor, and returns it: add_,
// relu_, masked_fill_ (not out= overloads, not ops writing others).
bool writesItsSelf(const Node &node) {
  const OpSchema *schema = node.schema();
  if (!schema || schema->name.empty() || schema->name.back() != '_' ||
      schema->returns.size() != 1 || !schema->returns[0].isWrite() ||
      schema->arguments.empty() || !schema->arguments[0].isWrite() ||
      node.arguments().empty() || !node.arguments()[0].isTensor())
    return false;
  for (size_t i = 1; i < schema->arguments.size(); ++i)
    if (!schema->arguments[i].alias.empty())
      return false;
  return true;
}

// The registered functional op of an in-place one: "aten::add.Tensor" for
// "aten::add_.Tensor"; null where there is none.
const OpInfo *functionalOf(const OpSchema &schema) {
  std::string name = schema.name.substr(0, schema.name.size() - 1);
  if (!schema.overload.empty())
    name += "." + schema.overload;
  return OpRegistry::global().find(name);
}

class AliasGroups {
public:
  Value *root(Value *value) {
    auto found = parent_.find(value);
    if (found == parent_.end() || found->second == value)
      return value;
    Value *top = root(found->second);
    parent_[value] = top;
    return top;
  }
  void join(Value *a, Value *b) {
    Value *ra = root(a), *rb = root(b);
    if (ra != rb)
      parent_[ra] = rb;
  }

private:
  std::unordered_map<Value *, Value *> parent_;
};

// Results that may share storage with an argument: those with an alias
// annotation, joined with the arguments of the same annotation (all
// annotated arguments, or all tensor arguments, where none matches).
void joinAliases(const Node &node, AliasGroups &groups) {
  const OpSchema *schema = node.schema();
  if (!schema || (!schema->isView() && !schema->isMutable()))
    return;
  const std::vector<Argument> &arguments = node.arguments();
  for (size_t r = 0; r < schema->returns.size() && r < node.results().size();
       ++r) {
    const std::string &alias = schema->returns[r].alias;
    if (alias.empty())
      continue;
    Value *result = node.result(static_cast<unsigned>(r));
    bool matched = false;
    for (size_t i = 0; i < schema->arguments.size() && i < arguments.size();
         ++i)
      if (arguments[i].isTensor() && !schema->arguments[i].alias.empty() &&
          aliasSet(schema->arguments[i].alias) == aliasSet(alias)) {
        groups.join(result, arguments[i].toTensor());
        matched = true;
      }
    if (!matched)
      for (Value *operand : node.operands())
        groups.join(result, operand);
  }
}

// Adds `node`'s copy to `graph` with `arguments` (mapped): an op by its
// name (its metas inferred again), an extern with its metas.
Node *copyNode(Graph &graph, const Node &node,
               std::vector<Argument> arguments) {
  if (node.kind() != Node::Kind::Extern)
    return graph.addNormalizedOp(node.schema()->qualifiedName(),
                                 std::move(arguments));
  std::vector<TensorMeta> metas;
  for (const auto &value : node.results())
    metas.push_back(value->meta());
  return graph.addExtern(node.sharedSchema(), std::move(arguments),
                         std::move(metas));
}

} // namespace

std::shared_ptr<Graph> functionalizeInPlaceOps(std::shared_ptr<Graph> graph) {
  // Dynamic shapes keep their in-place ops: ops are added again below with
  // their metas inferred, which needs static sizes.
  if (!graph->symbols().empty())
    return graph;
  AliasGroups groups;
  bool anyInPlace = false;
  for (const auto &node : graph->nodes()) {
    joinAliases(*node, groups);
    anyInPlace = anyInPlace || writesItsSelf(*node);
  }
  if (!anyInPlace)
    return graph;
  // A group qualifies where exactly one of its values is fresh (an op's
  // result that aliases nothing: the base), dense, and the others are
  // views of it (taken anywhere) or in-place ops' results.
  struct Group {
    const Value *base = nullptr;
    int fresh = 0;
    bool other = false;
    int64_t viewWrites = 0;
  };
  std::unordered_map<Value *, Group> byRoot;
  const auto &nodes = graph->nodes();
  for (const auto &node : nodes) {
    const OpSchema *schema = node->schema();
    bool inPlace = writesItsSelf(*node);
    bool made =
        node->kind() == Node::Kind::Op || node->kind() == Node::Kind::Extern;
    for (const auto &result : node->results()) {
      Group &group = byRoot[groups.root(result.get())];
      if (inPlace || (made && schema->isView() && !schema->isMutable()))
        continue;
      const TensorMeta &meta = result->meta();
      if (made && !schema->isMutable() && !meta.isSymbolic() &&
          meta.storageOffset == 0 && meta.isNonOverlappingAndDense()) {
        ++group.fresh;
        group.base = result.get();
      } else {
        group.other = true;
      }
    }
  }
  // Whether a tensor is the whole base: its elements where the base's are.
  auto isWhole = [](const TensorMeta &value, const TensorMeta &base) {
    return value.dtype == base.dtype && value.sizes == base.sizes &&
           value.strides == base.strides &&
           value.storageOffset == base.storageOffset;
  };
  // The functional op of in-place `node` that gives its tensor's elements:
  // for a write to the whole base, with the base's dtype, sizes and
  // strides (a float16 tensor plus a float32 one is float32; add_ keeps
  // float16); for a write through a view (scattered into the base), its
  // dtype and sizes.
  auto rewritable = [&](const Node &node) -> const OpInfo * {
    const OpInfo *functional = functionalOf(*node.schema());
    if (!functional)
      return nullptr;
    const Value *self = node.arguments()[0].toTensor();
    const Group &group = byRoot[groups.root(const_cast<Value *>(self))];
    try {
      std::vector<TensorMeta> metas = inferMeta(*functional, node.arguments());
      if (metas.size() != 1)
        return nullptr;
      if (!group.base || isWhole(self->meta(), group.base->meta()))
        return metas[0] == self->meta() ? functional : nullptr;
      return metas[0].dtype == self->meta().dtype &&
                     metas[0].sizes == self->meta().sizes &&
                     self->meta().dtype == group.base->meta().dtype &&
                     !self->meta().isSymbolic() &&
                     !meta::overlapsItself(self->meta().sizes,
                                           self->meta().strides)
                 ? functional
                 : nullptr;
    } catch (const Error &) {
      return nullptr;
    }
  };
  // A group with a write that stays in place keeps all of its writes: a
  // functional op after it would read the tensor as a value (fused with
  // its producer, say), not the storage the write changed. Many writes
  // through views (a loop filling columns) each scatter into the whole
  // base: past kMaxViewWrites they stay torch's.
  constexpr int64_t kMaxViewWrites = 64;
  std::unordered_map<const Node *, const OpInfo *> functionalOps;
  for (const auto &node : nodes) {
    if (!writesItsSelf(*node))
      continue;
    Value *self = node->arguments()[0].toTensor();
    Group &group = byRoot[groups.root(self)];
    const OpInfo *functional = functionalOps[node.get()] = rewritable(*node);
    if (!functional)
      group.other = true;
    else if (group.base && !isWhole(self->meta(), group.base->meta()) &&
             ++group.viewWrites > kMaxViewWrites)
      group.other = true;
  }
  auto qualifies = [&](const Value *value) {
    const Group &group = byRoot[groups.root(const_cast<Value *>(value))];
    return group.fresh == 1 && !group.other;
  };
  // The last node (or the outputs, nodes.size()) that reads each value:
  // after a write, only views read later are taken again.
  std::unordered_map<const Value *, size_t> lastUse;
  for (size_t index = 0; index < nodes.size(); ++index)
    for (const Value *operand : nodes[index]->operands())
      lastUse[operand] = index;
  for (const Argument &output : graph->outputs()) {
    if (output.isTensor())
      lastUse[output.toTensor()] = nodes.size();
    if (output.isTensorList())
      for (const Value *value : output.toTensorList())
        lastUse[value] = nodes.size();
  }
  // A view is read where a view of it or a write's result through it is.
  for (size_t index = nodes.size(); index-- > 0;) {
    const Node &node = *nodes[index];
    const OpSchema *schema = node.schema();
    bool write = writesItsSelf(node);
    if (!write && !(schema && schema->isView() && !schema->isMutable()))
      continue;
    for (const auto &result : node.results())
      for (const Value *operand : node.operands())
        if (write ? operand == node.arguments()[0].toTensor() : true)
          lastUse[operand] = std::max(lastUse[operand], lastUse[result.get()]);
  }

  // How a value of a rewritten group is had again after a write: the base
  // is the write's result, a view is its op taken again of its (current)
  // source, an in-place op's result is what its self is.
  struct Member {
    const Value *value;
    const Node *view = nullptr;  // the op that took it, for a view
    const Value *same = nullptr; // the written tensor, for a write's result
  };
  std::unordered_map<Value *, std::vector<Member>> members;
  std::unordered_map<Value *, Value *> current; // each group's base now

  auto rewritten = std::make_shared<Graph>();
  std::unordered_map<const Value *, Value *> mapped;
  bool changed = false;
  for (size_t index = 0; index < nodes.size(); ++index) {
    const Node *node = nodes[index].get();
    if (node->kind() == Node::Kind::Input) {
      const Value *input = node->result();
      mapped[input] = rewritten->addInput(input->meta(), input->name());
      continue;
    }
    if (node->kind() == Node::Kind::Constant) {
      mapped[node->result()] = rewritten->addConstant(node->sharedConstant(),
                                                      node->result()->name());
      continue;
    }
    std::vector<Argument> arguments;
    for (const Argument &argument : node->arguments())
      arguments.push_back(mapTensors(argument, mapped));
    Value *self =
        writesItsSelf(*node) ? node->arguments()[0].toTensor() : nullptr;
    bool write = self && qualifies(self);
    // copy_(v, w) where w is v's elements now (Python's `y[:, 1:3] += 1`
    // writes the slice back into itself) changes nothing.
    if (write && node->schema()->name == "aten::copy_" &&
        node->arguments()[1].isTensor()) {
      const Value *source = node->arguments()[1].toTensor();
      if (qualifies(source) &&
          groups.root(const_cast<Value *>(source)) == groups.root(self) &&
          source->meta() == self->meta()) {
        Value *result = node->result();
        mapped[result] = mapped[self];
        members[groups.root(self)].push_back({result, nullptr, self});
        continue;
      }
    }
    Node *made = write ? rewritten->addNormalizedOp(
                             functionalOps.at(node)->schema->qualifiedName(),
                             std::move(arguments))
                       : copyNode(*rewritten, *node, std::move(arguments));
    made->setOrigin(node->origin());
    for (size_t i = 0; i < node->results().size(); ++i) {
      Value *result = node->result(static_cast<unsigned>(i));
      mapped[result] = made->result(static_cast<unsigned>(i));
      if (!qualifies(result))
        continue;
      Value *root = groups.root(result);
      if (write) {
        members[root].push_back({result, nullptr, self});
      } else if (result == byRoot[root].base) {
        current[root] = made->result(static_cast<unsigned>(i));
        members[root].push_back({result});
      } else {
        members[root].push_back({result, node});
      }
    }
    if (!write)
      continue;
    // The base now: the write's result where it wrote the whole base,
    // else the base with the view's elements replaced by it.
    changed = true;
    Value *root = groups.root(self);
    const TensorMeta &view = self->meta();
    const TensorMeta &base = byRoot[root].base->meta();
    Value *now = made->result();
    if (!isWhole(view, base)) {
      Node *scatter = rewritten->addNormalizedOp(
          "aten::as_strided_scatter",
          {current[root], now, view.sizes, view.strides,
           Argument(view.storageOffset)});
      scatter->setOrigin(node->origin());
      now = scatter->result();
    }
    current[root] = now;
    // Every value of the group that is read later reads it from now on.
    for (const Member &member : members[root]) {
      if (member.value == byRoot[root].base) {
        mapped[member.value] = now;
      } else if (member.same) {
        mapped[member.value] = mapped[member.same];
      } else if (lastUse[member.value] > index) {
        std::vector<Argument> again;
        for (const Argument &argument : member.view->arguments())
          again.push_back(mapTensors(argument, mapped));
        Node *taken = copyNode(*rewritten, *member.view, std::move(again));
        taken->setOrigin(member.view->origin());
        for (size_t r = 0; r < member.view->results().size(); ++r)
          if (member.view->result(static_cast<unsigned>(r)) == member.value)
            mapped[member.value] = taken->result(static_cast<unsigned>(r));
      }
    }
  }
  if (!changed)
    return graph;
  std::vector<Argument> outputs;
  for (const Argument &output : graph->outputs())
    outputs.push_back(mapTensors(output, mapped));
  rewritten->setOutputs(std::move(outputs));
  return rewritten;
}

} // namespace kiln::passes
