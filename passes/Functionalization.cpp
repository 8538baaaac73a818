// In-place ops on the graph's own tensors as functional ops: alias groups
// (a tensor and the values that share its storage through views and
// in-place results) are found first; a group of one fresh tensor and the
// results of in-place ops on it, and nothing else, is rewritten.
// Depends on passes/Functionalization.h, ir/Graph.h, ir/OpRegistry.h.
#include "passes/Functionalization.h"

#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/OpRegistry.h"

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
  // result that aliases nothing), the others are in-place ops' results or
  // views, and every view is taken after the group's last write (a view
  // taken before would see the write).
  struct Group {
    int fresh = 0;
    bool other = false;
    size_t lastWrite = 0, firstView = SIZE_MAX;
  };
  std::unordered_map<Value *, Group> byRoot;
  const auto &nodes = graph->nodes();
  for (size_t index = 0; index < nodes.size(); ++index) {
    const Node &node = *nodes[index];
    const OpSchema *schema = node.schema();
    bool inPlace = writesItsSelf(node);
    bool made =
        node.kind() == Node::Kind::Op || node.kind() == Node::Kind::Extern;
    for (const auto &result : node.results()) {
      Group &group = byRoot[groups.root(result.get())];
      if (inPlace)
        group.lastWrite = index;
      else if (made && schema->isView() && !schema->isMutable())
        group.firstView = std::min(group.firstView, index);
      else if (made && !schema->isMutable() && !result->meta().isSymbolic())
        ++group.fresh;
      else
        group.other = true;
    }
  }
  // Whether the functional op of in-place `node` gives the tensor as the
  // in-place op leaves it: its dtype, sizes and strides (a float16 tensor
  // plus a float32 one is float32; add_ keeps float16).
  auto rewritable = [](const Node &node) -> const OpInfo * {
    const OpInfo *functional = functionalOf(*node.schema());
    if (!functional)
      return nullptr;
    try {
      std::vector<TensorMeta> metas = inferMeta(*functional, node.arguments());
      return metas.size() == 1 &&
                     metas[0] == node.arguments()[0].toTensor()->meta()
                 ? functional
                 : nullptr;
    } catch (const Error &) {
      return nullptr;
    }
  };
  // A group with a write that stays in place keeps all of its writes: a
  // functional op after it would read the tensor as a value (fused with
  // its producer, say), not the storage the write changed.
  for (const auto &node : nodes)
    if (writesItsSelf(*node) && !rewritable(*node))
      byRoot[groups.root(node->arguments()[0].toTensor())].other = true;
  auto qualifies = [&](Value *value) {
    const Group &group = byRoot[groups.root(value)];
    return group.fresh == 1 && !group.other &&
           group.firstView > group.lastWrite;
  };

  auto rewritten = std::make_shared<Graph>();
  std::unordered_map<const Value *, Value *> mapped;
  // The values of each rewritten group seen so far, by root: after a write
  // each of them reads as its result.
  std::unordered_map<Value *, std::vector<const Value *>> members;
  bool changed = false;
  for (const auto &node : graph->nodes()) {
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
    Node *made = write ? rewritten->addNormalizedOp(
                             rewritable(*node)->schema->qualifiedName(),
                             std::move(arguments))
                       : copyNode(*rewritten, *node, std::move(arguments));
    made->setOrigin(node->origin());
    for (size_t i = 0; i < node->results().size(); ++i) {
      Value *result = node->result(static_cast<unsigned>(i));
      mapped[result] = made->result(static_cast<unsigned>(i));
      if (qualifies(result))
        members[groups.root(result)].push_back(result);
    }
    if (write) {
      // Every value of the group reads as this write's result from now on.
      changed = true;
      for (const Value *member : members[groups.root(self)])
        mapped[member] = made->result();
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
