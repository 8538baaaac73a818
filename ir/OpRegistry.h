// The op registry: each ATen op kiln knows, with its schema and meta function
// (result dtypes, sizes and strides) in one place, registered by name.
// Depends on ir/Schema.h, ir/TensorMeta.h.
#pragma once

#include "ir/Schema.h"
#include "ir/TensorMeta.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln {

/// Typed access to normalised arguments for a meta function. Tensor
/// arguments are read as metadata.
class MetaArgs {
public:
  MetaArgs(const OpSchema &schema, const std::vector<Argument> &arguments)
      : schema_(schema), arguments_(arguments) {}

  const OpSchema &schema() const { return schema_; }
  size_t size() const { return arguments_.size(); }
  const Argument &operator[](size_t index) const {
    return arguments_.at(index);
  }
  bool isNone(size_t index) const { return arguments_.at(index).isNone(); }

  const TensorMeta &tensor(size_t index) const;
  /// Null where the argument is None.
  const TensorMeta *optionalTensor(size_t index) const;
  /// Entries are null where a `Tensor?[]` holds None.
  std::vector<const TensorMeta *> tensorList(size_t index) const;
  int64_t integer(size_t index) const { return arguments_.at(index).toInt(); }
  std::optional<int64_t> optionalInteger(size_t index) const;
  double real(size_t index) const { return arguments_.at(index).toDouble(); }
  bool boolean(size_t index) const { return arguments_.at(index).toBool(); }
  std::vector<int64_t> intList(size_t index) const {
    return arguments_.at(index).toIntList();
  }
  std::optional<std::vector<int64_t>> optionalIntList(size_t index) const;
  std::optional<DType> optionalDType(size_t index) const;
  std::optional<Device> optionalDevice(size_t index) const;
  std::optional<MemoryFormat> optionalMemoryFormat(size_t index) const;
  const std::string &string(size_t index) const {
    return arguments_.at(index).toString();
  }

private:
  const OpSchema &schema_;
  const std::vector<Argument> &arguments_;
};

/// Returns one TensorMeta per tensor the op returns (a `Tensor[]` return
/// contributes as many as it has elements).
using MetaFunction = std::function<std::vector<TensorMeta>(const MetaArgs &)>;

struct OpInfo {
  std::shared_ptr<const OpSchema> schema;
  MetaFunction meta;
  /// Torch's own name for the op's family (for tables and logs): "add".
  std::string family;
};

/// One row of a registration table: the schema text exactly as torch prints
/// it, and the meta function.
struct OpRegistration {
  const char *schema;
  MetaFunction meta;
};

class OpRegistry {
public:
  /// The registry with every op kiln knows.
  static const OpRegistry &global();

  void add(const OpRegistration &registration);
  /// Null where the op is unknown. Accepts "aten::add.Tensor" and
  /// "aten::add" (the default overload).
  const OpInfo *find(std::string_view qualifiedName) const;
  std::vector<const OpInfo *> all() const;

private:
  std::unordered_map<std::string, std::unique_ptr<OpInfo>> ops_;
};

/// Runs the op's meta function after normalising the arguments.
std::vector<TensorMeta> inferMeta(const OpInfo &op,
                                  const std::vector<Argument> &arguments);

// Registration tables, one per family of ops (ir/ops/*.cpp).
void registerElementwiseOps(OpRegistry &registry);
void registerReductionOps(OpRegistry &registry);
void registerNormalizationOps(OpRegistry &registry);
void registerViewOps(OpRegistry &registry);
void registerTensorOps(OpRegistry &registry);
void registerLinearAlgebraOps(OpRegistry &registry);
void registerKilnOps(OpRegistry &registry);

} // namespace kiln
