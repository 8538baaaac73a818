// Appends one ATen operator call to a kiln graph: an Op node where the
// registry knows the op and agrees with torch's metadata, else an Extern.
// Depends on ir/, pybind11.
#include "frontend/AtenCall.h"

#include "ir/Error.h"

#include <algorithm>
#include <unordered_map>

namespace kiln::python {
namespace {

/// Torch's schemas, parsed once per operator (there are a few thousand). A
/// schema kiln cannot parse keeps its error, so that every call says why.
std::shared_ptr<const OpSchema>
torchSchemaOf(py::handle opOverload, const std::string &qualifiedName) {
  struct ParsedSchema {
    std::shared_ptr<const OpSchema> schema;
    std::string error;
  };
  static auto *cache = new std::unordered_map<std::string, ParsedSchema>();
  auto it = cache->find(qualifiedName);
  if (it == cache->end()) {
    std::string text = py::str(opOverload.attr("_schema")).cast<std::string>();
    ParsedSchema parsed;
    try {
      parsed.schema = std::make_shared<const OpSchema>(parseSchema(text));
    } catch (const Error &error) {
      parsed.error = error.what();
    }
    it = cache->emplace(qualifiedName, std::move(parsed)).first;
  }
  if (!it->second.schema)
    throw Unsupported(qualifiedName + ": " + it->second.error);
  return it->second.schema;
}

/// ATen lets a Python number stand where a schema says Tensor (a "wrapped
/// number", promoted like a scalar): `aten.mul.Tensor(x, 2)`. A kiln schema
/// cannot say that, so such a call keeps torch's schema with those
/// arguments typed Scalar, and runs as an extern. Null when no argument is
/// such a number.
std::shared_ptr<const OpSchema> scalarsForTensors(
    const OpSchema &schema, const std::vector<Argument> &positional,
    const std::vector<std::pair<std::string, Argument>> &keywords) {
  std::vector<bool> relax(schema.arguments.size(), false);
  bool any = false;
  auto consider = [&](int index, const Argument &argument) {
    if (index < 0 || index >= static_cast<int>(relax.size()))
      return;
    const SchemaType &type = schema.arguments[index].type;
    if (type.base == SchemaType::Base::Tensor && !type.isList &&
        argument.isScalar())
      relax[index] = any = true;
  };
  for (size_t i = 0; i < positional.size(); ++i)
    consider(static_cast<int>(i), positional[i]);
  for (const auto &[name, argument] : keywords)
    consider(schema.findArgument(name), argument);
  if (!any)
    return nullptr;
  std::string key = schema.str();
  for (bool relaxed : relax)
    key += relaxed ? '1' : '0';
  static auto *cache =
      new std::unordered_map<std::string, std::shared_ptr<const OpSchema>>();
  auto it = cache->find(key);
  if (it != cache->end())
    return it->second;
  auto copy = std::make_shared<OpSchema>(schema);
  for (size_t i = 0; i < relax.size(); ++i)
    if (relax[i])
      copy->arguments[i].type.base = SchemaType::Base::Scalar;
  return cache->emplace(key, std::move(copy)).first->second;
}

std::string metasToString(const std::vector<TensorMeta> &metas) {
  std::string text;
  for (size_t i = 0; i < metas.size(); ++i)
    text += (i ? ", " : "") + metas[i].str();
  return text;
}

} // namespace

void TorchResults::add(std::optional<TensorMeta> meta) {
  present.push_back(meta.has_value());
  if (meta)
    metas.push_back(std::move(*meta));
}

bool TorchResults::allPresent() const {
  return std::all_of(present.begin(), present.end(),
                     [](bool value) { return value; });
}

std::string TorchResults::str() const {
  std::string text;
  for (size_t i = 0, next = 0; i < present.size(); ++i)
    text += (i ? ", " : "") + (present[i] ? metas[next++].str() : "None");
  return text;
}

Node *
appendAtenCall(Graph &graph, py::handle opOverload,
               const std::vector<Argument> &positional,
               const std::vector<std::pair<std::string, Argument>> &keywords,
               const std::optional<TorchResults> &torchResults,
               const std::string &where, std::vector<std::string> &notes,
               const std::string &metadataSource) {
  py::object torchSchema = opOverload.attr("_schema");
  std::string name = torchSchema.attr("name").cast<std::string>();
  std::string overload = torchSchema.attr("overload_name").cast<std::string>();
  std::string qualifiedName = overload.empty() ? name : name + "." + overload;

  const OpInfo *info = OpRegistry::global().find(qualifiedName);
  // Registered ops follow torch's schema text exactly; parse only others.
  std::shared_ptr<const OpSchema> schema =
      info ? info->schema : torchSchemaOf(opOverload, qualifiedName);
  if (auto relaxed = scalarsForTensors(*schema, positional, keywords)) {
    info = nullptr; // kiln's registry has no entry for this form
    schema = std::move(relaxed);
  }
  for (const SchemaArgument &result : schema->returns)
    if (result.type.base != SchemaType::Base::Tensor || result.type.optional ||
        result.type.elementOptional)
      throw Unsupported(qualifiedName + " returns " + result.type.str() +
                        ": kiln graphs hold tensor results only");
  std::vector<Argument> arguments = schema->normalize(positional, keywords);

  if (info) {
    // Keep the op only where kiln's meta function agrees with torch; else
    // run it as an extern with torch's metadata, so that answers stay right
    // while meta functions improve.
    std::string disagreement;
    try {
      std::vector<TensorMeta> metas = inferMeta(*info, arguments);
      if (torchResults &&
          (!torchResults->allPresent() || metas != torchResults->metas))
        disagreement = "kiln's meta function gives " + metasToString(metas) +
                       " but " + metadataSource + " recorded " +
                       torchResults->str();
    } catch (const Error &error) {
      if (!torchResults)
        throw;
      disagreement =
          std::string("kiln's meta function failed: ") + error.what();
    }
    if (disagreement.empty())
      return graph.addOp(qualifiedName, positional, keywords);
    notes.push_back(where + ": " + qualifiedName + ": " + disagreement +
                    "; kept as an extern node");
    return graph.addExtern(schema, arguments, torchResults->metas);
  }
  if (!torchResults)
    throw Unsupported(qualifiedName + " is not in kiln's registry and " +
                      metadataSource + " recorded no metadata for its results");
  bool anyList = std::any_of(
      schema->returns.begin(), schema->returns.end(),
      [](const SchemaArgument &result) { return result.type.isList; });
  if (!anyList && torchResults->present.size() != schema->returns.size())
    throw Unsupported(qualifiedName + " returns " +
                      std::to_string(schema->returns.size()) + " tensors but " +
                      metadataSource + " recorded " +
                      std::to_string(torchResults->present.size()));
  return graph.addExtern(schema, arguments, torchResults->metas);
}

std::vector<Value *>
flatResults(const Node &node, const std::optional<TorchResults> &torchResults) {
  std::vector<Value *> values;
  if (!torchResults) {
    for (const auto &value : node.results())
      values.push_back(value.get());
    return values;
  }
  // An op node agreed with torch, so all its results are present; an extern
  // has one result per present one.
  size_t next = 0;
  for (bool present : torchResults->present)
    values.push_back(present ? node.result(next++) : nullptr);
  return values;
}

} // namespace kiln::python
