// The op registry and typed argument access for meta functions.
// Depends on ir/Schema.h, ir/TensorMeta.h, ir/Graph.h (values' metadata).
#include "ir/OpRegistry.h"

#include "ir/Error.h"
#include "ir/Graph.h"

namespace kiln {

const TensorMeta &MetaArgs::tensor(size_t index) const {
  Value *value = arguments_.at(index).toTensor();
  if (!value)
    throw Error(schema_.qualifiedName() + ": argument '" +
                schema_.arguments.at(index).name + "' is not defined");
  return value->meta();
}

const TensorMeta *MetaArgs::optionalTensor(size_t index) const {
  const Argument &argument = arguments_.at(index);
  return argument.isNone() ? nullptr : &tensor(index);
}

std::vector<const TensorMeta *> MetaArgs::tensorList(size_t index) const {
  std::vector<const TensorMeta *> metas;
  for (Value *value : arguments_.at(index).toTensorList())
    metas.push_back(value ? &value->meta() : nullptr);
  return metas;
}

std::optional<int64_t> MetaArgs::optionalInteger(size_t index) const {
  const Argument &argument = arguments_.at(index);
  if (argument.isNone())
    return std::nullopt;
  return argument.toInt();
}

std::optional<std::vector<int64_t>>
MetaArgs::optionalIntList(size_t index) const {
  const Argument &argument = arguments_.at(index);
  if (argument.isNone())
    return std::nullopt;
  return argument.toIntList();
}

std::optional<DType> MetaArgs::optionalDType(size_t index) const {
  const Argument &argument = arguments_.at(index);
  if (argument.isNone())
    return std::nullopt;
  return argument.toDType();
}

std::optional<Device> MetaArgs::optionalDevice(size_t index) const {
  const Argument &argument = arguments_.at(index);
  if (argument.isNone())
    return std::nullopt;
  return argument.toDevice();
}

std::optional<MemoryFormat> MetaArgs::optionalMemoryFormat(size_t index) const {
  const Argument &argument = arguments_.at(index);
  if (argument.isNone())
    return std::nullopt;
  return argument.toMemoryFormat();
}

const OpRegistry &OpRegistry::global() {
  static const OpRegistry *registry = [] {
    auto *result = new OpRegistry();
    registerElementwiseOps(*result);
    registerReductionOps(*result);
    registerNormalizationOps(*result);
    registerViewOps(*result);
    registerTensorOps(*result);
    registerLinearAlgebraOps(*result);
    registerKilnOps(*result);
    return result;
  }();
  return *registry;
}

void OpRegistry::add(const OpRegistration &registration) {
  auto info = std::make_unique<OpInfo>();
  info->schema =
      std::make_shared<const OpSchema>(parseSchema(registration.schema));
  info->meta = registration.meta;
  std::string name = info->schema->name;
  info->family = name.substr(name.find("::") + 2);
  std::string key = info->schema->qualifiedName();
  if (ops_.count(key))
    throw Error("op " + key + " is registered twice");
  ops_[key] = std::move(info);
}

const OpInfo *OpRegistry::find(std::string_view qualifiedName) const {
  auto it = ops_.find(std::string(qualifiedName));
  if (it != ops_.end())
    return it->second.get();
  // "aten::relu.default" is how torch spells the default overload.
  constexpr std::string_view kDefault = ".default";
  if (qualifiedName.size() > kDefault.size() &&
      qualifiedName.substr(qualifiedName.size() - kDefault.size()) == kDefault)
    return find(
        qualifiedName.substr(0, qualifiedName.size() - kDefault.size()));
  return nullptr;
}

std::vector<const OpInfo *> OpRegistry::all() const {
  std::vector<const OpInfo *> result;
  for (const auto &[name, info] : ops_)
    result.push_back(info.get());
  return result;
}

std::vector<TensorMeta> inferMeta(const OpInfo &op,
                                  const std::vector<Argument> &arguments) {
  op.schema->check(arguments);
  return op.meta(MetaArgs(*op.schema, arguments));
}

} // namespace kiln
