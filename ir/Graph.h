// The graph IR: a DAG of ATen-named tensor operations with per-value tensor
// metadata, graph inputs, tensor constants and outputs.
// Depends on ir/Argument.h, ir/Schema.h, ir/OpRegistry.h.
#pragma once

#include "ir/Argument.h"
#include "ir/OpRegistry.h"
#include "ir/Schema.h"

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kiln {

class Node;

/// A tensor-valued SSA value: a graph input, a constant, or one result of an
/// operation.
class Value {
public:
  Value(Node *producer, unsigned index, TensorMeta meta, std::string name)
      : producer_(producer), index_(index), meta_(std::move(meta)),
        name_(std::move(name)) {}

  Node *producer() const { return producer_; }
  /// Which result of its producer this is.
  unsigned index() const { return index_; }
  const TensorMeta &meta() const { return meta_; }
  const std::string &name() const { return name_; }
  /// Gives the value a layout that varies between calls (its meta keeps the
  /// example call's values as hints). For capture, which learns the
  /// symbolic layouts of results from torch after adding the node.
  void setSymbolicLayout(std::shared_ptr<const SymbolicLayout> layout) {
    meta_.symbolic = std::move(layout);
  }

private:
  Node *producer_;
  unsigned index_;
  TensorMeta meta_;
  std::string name_;
};

/// The bytes of a tensor constant, contiguous in row-major order.
struct ConstantData {
  TensorMeta meta; // contiguous
  std::vector<uint8_t> bytes;
};

class Node {
public:
  enum class Kind : uint8_t {
    Input,    // a graph input
    Constant, // a tensor baked into the graph
    Op,       // an operation the registry knows
    Extern,   // an operation it does not: executed by calling torch
  };

  Kind kind() const { return kind_; }
  bool isOp() const { return kind_ == Kind::Op; }
  bool isExtern() const { return kind_ == Kind::Extern; }
  /// The schema of an Op or Extern node; null for inputs and constants.
  const OpSchema *schema() const { return schema_.get(); }
  /// The registry entry of an Op node; null otherwise.
  const OpInfo *opInfo() const { return opInfo_; }
  /// Normalised arguments, one per schema argument.
  const std::vector<Argument> &arguments() const { return arguments_; }
  /// Whether running the node writes to one of its arguments: one its
  /// schema marks as written is given (not None). native_batch_norm writes
  /// its running statistics in training only.
  bool writesArguments() const;
  const std::vector<std::unique_ptr<Value>> &results() const {
    return results_;
  }
  Value *result(unsigned index = 0) const { return results_.at(index).get(); }
  const ConstantData *constant() const { return constant_.get(); }
  const std::shared_ptr<const ConstantData> &sharedConstant() const {
    return constant_;
  }
  const std::shared_ptr<const OpSchema> &sharedSchema() const {
    return schema_;
  }
  /// Where the node came from (an FX node name, a Python source line).
  const std::string &origin() const { return origin_; }
  void setOrigin(std::string origin) { origin_ = std::move(origin); }
  /// The values this node reads, in argument order.
  std::vector<Value *> operands() const;

private:
  friend class Graph;
  Kind kind_ = Kind::Op;
  std::shared_ptr<const OpSchema> schema_;
  const OpInfo *opInfo_ = nullptr;
  std::vector<Argument> arguments_;
  std::vector<std::unique_ptr<Value>> results_;
  std::shared_ptr<const ConstantData> constant_;
  std::string origin_;
};

/// Where a size symbol's value comes from on each call: size `dim` of graph
/// input `input`. `hint` is its value in the example call.
struct SymbolBinding {
  int64_t input = 0;
  int64_t dim = 0;
  int64_t hint = 0;
};

/// Nodes are kept in a valid execution order: a node is added after the
/// nodes whose results it reads.
class Graph {
public:
  Graph() = default;
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  Value *addInput(const TensorMeta &meta, std::string name = "");
  Value *addConstant(std::shared_ptr<const ConstantData> data,
                     std::string name = "");
  /// Adds a registered op; arguments are normalised against its schema and
  /// the results' metadata come from its meta function.
  Node *
  addOp(std::string_view qualifiedName, const std::vector<Argument> &positional,
        const std::vector<std::pair<std::string, Argument>> &keywords = {});
  /// The same with arguments already normalised against the op's schema
  /// (one per schema argument, as a node holds them).
  Node *addNormalizedOp(std::string_view qualifiedName,
                        std::vector<Argument> normalizedArguments);
  /// Adds an op the registry does not know; the caller provides its schema
  /// and the metadata of its results (one per tensor the op returns).
  Node *addExtern(std::shared_ptr<const OpSchema> schema,
                  std::vector<Argument> normalizedArguments,
                  std::vector<TensorMeta> resultMetas);
  /// Graph outputs: tensors, or constants (None, numbers) a function returns.
  void setOutputs(std::vector<Argument> outputs);
  /// Symbol `symbols().size()` (s<n>) is read from size `dim` of graph
  /// input `input`; returns its number.
  int64_t addSymbol(SymbolBinding binding);
  /// The size symbols, by number: a graph with symbols has shapes that
  /// vary between calls (dynamic shapes).
  const std::vector<SymbolBinding> &symbols() const { return symbols_; }

  const std::vector<std::unique_ptr<Node>> &nodes() const { return nodes_; }
  const std::vector<Value *> &inputs() const { return inputs_; }
  const std::vector<Argument> &outputs() const { return outputs_; }

  /// Removes the op, extern and constant nodes for which `shouldErase` is
  /// true. Throws Error if a kept node or an output reads a removed value.
  void eraseNodes(const std::function<bool(const Node &)> &shouldErase);

  /// The readable text form; stable, so tests can compare it.
  std::string str() const;
  /// Checks arity and argument types against schemas, metadata against meta
  /// functions, and that every value is defined before it is used. Throws
  /// Error describing the first problem.
  void verify() const;

private:
  Node *appendNode(std::unique_ptr<Node> node);
  std::string freshName(std::string hint);
  bool ownsValue(const Value *value) const;

  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value *> inputs_;
  std::vector<Argument> outputs_;
  std::vector<SymbolBinding> symbols_;
  std::unordered_set<std::string> usedNames_;
  std::unordered_set<const Value *> values_; // every node's results
  unsigned nextTemporary_ = 0;
};

/// `argument` with each tensor in it (a tensor, or the values of a tensor
/// list) replaced by its entry in `mapped`, which must have one.
Argument mapTensors(const Argument &argument,
                    const std::unordered_map<const Value *, Value *> &mapped);

/// A static copy of a graph with symbols: every symbol given its value in
/// `symbols`, sizes and arguments evaluated, metas of ops inferred again.
/// Throws kiln::Error where the values break the graph's assumptions.
std::shared_ptr<Graph> specializeGraph(const Graph &graph,
                                       const std::vector<int64_t> &symbols);
/// The symbols' values for these input metas (one per graph input), read
/// as the graph's bindings say.
std::vector<int64_t>
symbolValues(const Graph &graph, const std::vector<const TensorMeta *> &inputs);

} // namespace kiln
