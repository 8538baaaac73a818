// The graph IR: construction, the printer and the verifier.
// Depends on ir/Argument.h, ir/Schema.h, ir/OpRegistry.h.
#include "ir/Graph.h"

#include "ir/Error.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace kiln {

bool Node::writesArguments() const {
  if (!schema_ || !schema_->isMutable())
    return false;
  if (schema_->qualifiedName() == "aten::native_batch_norm" &&
      arguments_.size() > 5 && arguments_[5].kind() == Argument::Kind::Bool &&
      !arguments_[5].toBool())
    return false;
  for (size_t i = 0; i < schema_->arguments.size() && i < arguments_.size();
       ++i)
    if (schema_->arguments[i].isWrite() && !arguments_[i].isNone())
      return true;
  return false;
}

std::vector<Value *> Node::operands() const {
  std::vector<Value *> values;
  for (const Argument &argument : arguments_) {
    if (argument.isTensor())
      values.push_back(argument.toTensor());
    else if (argument.isTensorList())
      for (Value *value : argument.toTensorList())
        if (value)
          values.push_back(value);
  }
  return values;
}

std::string Graph::freshName(std::string hint) {
  auto taken = [&](const std::string &name) { return usedNames_.count(name); };
  std::string name = hint;
  if (name.empty() || taken(name)) {
    do
      name = hint.empty() ? std::to_string(nextTemporary_++)
                          : hint + "_" + std::to_string(nextTemporary_++);
    while (taken(name));
  }
  usedNames_.insert(name);
  return name;
}

Node *Graph::appendNode(std::unique_ptr<Node> node) {
  for (const auto &result : node->results_)
    values_.insert(result.get());
  nodes_.push_back(std::move(node));
  return nodes_.back().get();
}

bool Graph::ownsValue(const Value *value) const {
  return values_.count(value) > 0;
}

Value *Graph::addInput(const TensorMeta &meta, std::string name) {
  auto node = std::make_unique<Node>();
  node->kind_ = Node::Kind::Input;
  node->results_.push_back(std::make_unique<Value>(
      node.get(), 0, meta, freshName(name.empty() ? "input" : name)));
  Value *value = appendNode(std::move(node))->result();
  inputs_.push_back(value);
  return value;
}

Value *Graph::addConstant(std::shared_ptr<const ConstantData> data,
                          std::string name) {
  if (!data)
    throw Error("a graph constant needs its data");
  if (data->bytes.size() !=
      static_cast<size_t>(data->meta.numel() * itemSize(data->meta.dtype)))
    throw Error("constant data of " + data->meta.str() + " has " +
                std::to_string(data->bytes.size()) + " bytes");
  auto node = std::make_unique<Node>();
  node->kind_ = Node::Kind::Constant;
  node->results_.push_back(std::make_unique<Value>(
      node.get(), 0, data->meta, freshName(name.empty() ? "const" : name)));
  node->constant_ = std::move(data);
  return appendNode(std::move(node))->result();
}

Node *
Graph::addOp(std::string_view qualifiedName,
             const std::vector<Argument> &positional,
             const std::vector<std::pair<std::string, Argument>> &keywords) {
  const OpInfo *info = OpRegistry::global().find(qualifiedName);
  if (!info)
    throw Error("unknown op '" + std::string(qualifiedName) +
                "': add it to the op registry or use an extern node");
  return addNormalizedOp(qualifiedName,
                         info->schema->normalize(positional, keywords));
}

Node *Graph::addNormalizedOp(std::string_view qualifiedName,
                             std::vector<Argument> normalizedArguments) {
  const OpInfo *info = OpRegistry::global().find(qualifiedName);
  if (!info)
    throw Error("unknown op '" + std::string(qualifiedName) +
                "': add it to the op registry or use an extern node");
  info->schema->check(normalizedArguments);
  auto node = std::make_unique<Node>();
  node->kind_ = Node::Kind::Op;
  node->schema_ = info->schema;
  node->opInfo_ = info;
  node->arguments_ = std::move(normalizedArguments);
  for (Value *operand : node->operands())
    if (!ownsValue(operand))
      throw Error(std::string(qualifiedName) +
                  ": an operand is not a value of this graph");
  std::vector<TensorMeta> metas = inferMeta(*info, node->arguments_);
  for (size_t i = 0; i < metas.size(); ++i)
    node->results_.push_back(
        std::make_unique<Value>(node.get(), static_cast<unsigned>(i),
                                std::move(metas[i]), freshName("")));
  return appendNode(std::move(node));
}

Node *Graph::addExtern(std::shared_ptr<const OpSchema> schema,
                       std::vector<Argument> normalizedArguments,
                       std::vector<TensorMeta> resultMetas) {
  if (!schema)
    throw Error("an extern node needs a schema");
  schema->check(normalizedArguments);
  auto node = std::make_unique<Node>();
  node->kind_ = Node::Kind::Extern;
  node->schema_ = std::move(schema);
  node->arguments_ = std::move(normalizedArguments);
  for (Value *operand : node->operands())
    if (!ownsValue(operand))
      throw Error(node->schema_->qualifiedName() +
                  ": an operand is not a value of this graph");
  for (size_t i = 0; i < resultMetas.size(); ++i)
    node->results_.push_back(
        std::make_unique<Value>(node.get(), static_cast<unsigned>(i),
                                std::move(resultMetas[i]), freshName("")));
  return appendNode(std::move(node));
}

void Graph::setOutputs(std::vector<Argument> outputs) {
  for (const Argument &output : outputs) {
    if (output.isTensor() && !ownsValue(output.toTensor()))
      throw Error("a graph output is not a value of this graph");
  }
  outputs_ = std::move(outputs);
}

int64_t Graph::addSymbol(SymbolBinding binding) {
  if (binding.input < 0 ||
      binding.input >= static_cast<int64_t>(inputs_.size()) ||
      binding.dim < 0 || binding.dim >= inputs_[binding.input]->meta().dim())
    throw Error("a size symbol must be bound to a dimension of a graph input");
  symbols_.push_back(binding);
  return static_cast<int64_t>(symbols_.size()) - 1;
}

std::vector<int64_t>
symbolValues(const Graph &graph,
             const std::vector<const TensorMeta *> &inputs) {
  std::vector<int64_t> values;
  for (const SymbolBinding &binding : graph.symbols()) {
    if (binding.input >= static_cast<int64_t>(inputs.size()) ||
        binding.dim >= inputs[binding.input]->dim())
      throw Error("a size symbol's input is missing");
    values.push_back(inputs[binding.input]->sizes[binding.dim]);
  }
  return values;
}

Argument mapTensors(const Argument &argument,
                    const std::unordered_map<const Value *, Value *> &mapped) {
  if (argument.isTensor())
    return Argument(mapped.at(argument.toTensor()));
  if (argument.isTensorList()) {
    std::vector<Value *> values;
    for (Value *value : argument.toTensorList())
      values.push_back(value ? mapped.at(value) : nullptr);
    return Argument(std::move(values));
  }
  return argument;
}

// An op whose meta function disagrees with the graph's symbolic layout at
// these values (or fails) becomes an extern node with that layout: torch
// runs it, and the graph never holds sizes other than the symbols give.
std::shared_ptr<Graph> specializeGraph(const Graph &graph,
                                       const std::vector<int64_t> &symbols) {
  auto result = std::make_shared<Graph>();
  std::unordered_map<const Value *, Value *> mapped;
  auto mapArgument = [&](const Argument &argument) -> Argument {
    if (argument.isTensor() || argument.isTensorList())
      return mapTensors(argument, mapped);
    return argument.specialized(symbols);
  };
  for (const auto &node : graph.nodes()) {
    std::vector<Argument> arguments;
    for (const Argument &argument : node->arguments())
      arguments.push_back(mapArgument(argument));
    Node *made = nullptr;
    switch (node->kind()) {
    case Node::Kind::Input: {
      const Value *input = node->result();
      mapped[input] =
          result->addInput(input->meta().specialized(symbols), input->name());
      continue;
    }
    case Node::Kind::Constant:
      mapped[node->result()] =
          result->addConstant(node->sharedConstant(), node->result()->name());
      continue;
    case Node::Kind::Op: {
      // The results the graph expects at these values; where kiln's meta
      // function disagrees (or fails), torch runs the op as an extern.
      std::vector<TensorMeta> expected;
      for (const auto &value : node->results())
        expected.push_back(value->meta().specialized(symbols));
      bool agrees = false;
      try {
        std::vector<TensorMeta> inferred =
            inferMeta(*node->opInfo(), arguments);
        agrees = inferred.size() == expected.size();
        for (size_t i = 0; agrees && i < inferred.size(); ++i)
          agrees = inferred[i].sizes == expected[i].sizes;
      } catch (const Error &) {
        agrees = false;
      }
      if (!agrees) {
        made = result->addExtern(node->sharedSchema(), std::move(arguments),
                                 std::move(expected));
        break;
      }
      made = result->addNormalizedOp(node->schema()->qualifiedName(),
                                     std::move(arguments));
      break;
    }
    case Node::Kind::Extern: {
      std::vector<TensorMeta> metas;
      for (const auto &value : node->results())
        metas.push_back(value->meta().specialized(symbols));
      made = result->addExtern(node->sharedSchema(), std::move(arguments),
                               std::move(metas));
      break;
    }
    }
    made->setOrigin(node->origin());
    for (size_t i = 0; i < node->results().size(); ++i) {
      const TensorMeta expected =
          node->result(static_cast<unsigned>(i))->meta().specialized(symbols);
      Value *value = made->result(static_cast<unsigned>(i));
      if (value->meta().sizes != expected.sizes)
        throw Error(node->schema()->qualifiedName() + ": sizes " +
                    shapeToString(value->meta().sizes) + " for symbols where " +
                    shapeToString(expected.sizes) + " were expected");
      mapped[node->result(static_cast<unsigned>(i))] = value;
    }
  }
  std::vector<Argument> outputs;
  for (const Argument &output : graph.outputs())
    outputs.push_back(mapArgument(output));
  result->setOutputs(std::move(outputs));
  return result;
}

void Graph::eraseNodes(const std::function<bool(const Node &)> &shouldErase) {
  std::unordered_set<const Value *> erased;
  std::vector<std::unique_ptr<Node>> kept;
  for (auto &node : nodes_) {
    if (node->kind() != Node::Kind::Input && shouldErase(*node)) {
      for (const auto &result : node->results())
        erased.insert(result.get());
      continue;
    }
    for (Value *operand : node->operands())
      if (erased.count(operand))
        throw Error("cannot erase the producer of %" + operand->name() +
                    ": a kept node reads it");
    kept.push_back(std::move(node));
  }
  for (const Argument &output : outputs_)
    if (output.isTensor() && erased.count(output.toTensor()))
      throw Error("cannot erase the producer of graph output %" +
                  output.toTensor()->name());
  for (const Value *value : erased)
    values_.erase(value);
  nodes_ = std::move(kept);
}

std::string Graph::str() const {
  std::string text = "graph(";
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (i)
      text += ", ";
    text += "%" + inputs_[i]->name() + ": " + inputs_[i]->meta().str();
  }
  text += "):\n";
  for (const auto &node : nodes_) {
    if (node->kind() == Node::Kind::Input)
      continue;
    text += "  ";
    for (size_t i = 0; i < node->results().size(); ++i) {
      if (i)
        text += ", ";
      const Value *value = node->result(i);
      text += "%" + value->name() + ": " + value->meta().str();
    }
    if (node->results().empty())
      text += "()";
    if (node->kind() == Node::Kind::Constant) {
      text += " = constant()\n";
      continue;
    }
    text += " = ";
    if (node->isExtern())
      text += "extern ";
    text += node->schema()->qualifiedName() + "(";
    const OpSchema &schema = *node->schema();
    bool first = true;
    for (size_t i = 0; i < node->arguments().size(); ++i) {
      const SchemaArgument &formal = schema.arguments[i];
      const Argument &actual = node->arguments()[i];
      // Arguments left at their defaults are omitted, as torch prints them.
      if (formal.defaultValue && *formal.defaultValue == actual)
        continue;
      if (!first)
        text += ", ";
      first = false;
      if (formal.kwargOnly || formal.defaultValue)
        text += formal.name + "=";
      text += actual.str();
    }
    text += ")\n";
  }
  text += "  return (";
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (i)
      text += ", ";
    text += outputs_[i].str();
  }
  return text + ")\n";
}

void Graph::verify() const {
  std::unordered_set<const Value *> defined;
  for (const auto &node : nodes_) {
    std::string where = node->schema() ? node->schema()->qualifiedName()
                                       : std::string("an input or constant");
    if (node->kind() == Node::Kind::Op || node->kind() == Node::Kind::Extern) {
      node->schema()->check(node->arguments());
      for (Value *operand : node->operands()) {
        if (!defined.count(operand))
          throw Error("graph is not in execution order: " + where + " reads %" +
                      operand->name() + " before it is defined");
      }
    }
    if (node->kind() == Node::Kind::Op) {
      std::vector<TensorMeta> metas =
          inferMeta(*node->opInfo(), node->arguments());
      if (metas.size() != node->results().size())
        throw Error(where + " has " + std::to_string(node->results().size()) +
                    " results but its meta function gives " +
                    std::to_string(metas.size()));
      for (size_t i = 0; i < metas.size(); ++i) {
        // Meta functions see the hints of symbolic sizes.
        TensorMeta recorded = node->result(i)->meta();
        recorded.symbolic = nullptr;
        if (metas[i] != recorded)
          throw Error(where + ": result %" + node->result(i)->name() +
                      " is recorded as " + node->result(i)->meta().str() +
                      " but the meta function gives " + metas[i].str());
      }
    }
    for (const auto &result : node->results()) {
      if (!defined.insert(result.get()).second)
        throw Error("value %" + result->name() + " is defined twice");
    }
  }
  for (Value *input : inputs_)
    if (input->producer()->kind() != Node::Kind::Input)
      throw Error("graph input %" + input->name() + " is not an input node");
  for (const Argument &output : outputs_) {
    if (output.isTensor() && !defined.count(output.toTensor()))
      throw Error("graph output %" + output.toTensor()->name() +
                  " is not defined");
  }
}

} // namespace kiln
