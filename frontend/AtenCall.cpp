// Appends one ATen operator call to a kiln graph: an Op node where the
// registry knows the op and agrees with torch's metadata, else an Extern.
// Depends on ir/, runtime/PythonConversion.h, pybind11.
#include "frontend/AtenCall.h"

#include "ir/Error.h"

#include <unordered_map>

namespace kiln::python {
namespace {

// Torch's schemas parsed once each (there are a few thousand operators).
std::shared_ptr<const OpSchema> torchSchemaOf(py::handle opOverload,
                                              const std::string &qualifiedName) {
  static auto *cache =
      new std::unordered_map<std::string, std::shared_ptr<const OpSchema>>();
  auto it = cache->find(qualifiedName);
  if (it != cache->end())
    return it->second;
  std::string text = py::str(opOverload.attr("_schema")).cast<std::string>();
  std::shared_ptr<const OpSchema> schema;
  try {
    schema = std::make_shared<const OpSchema>(parseSchema(text));
  } catch (const Error &error) {
    throw Unsupported(qualifiedName + ": " + error.what());
  }
  (*cache)[qualifiedName] = schema;
  return schema;
}

std::string metasToString(const std::vector<TensorMeta> &metas) {
  std::string text;
  for (size_t i = 0; i < metas.size(); ++i)
    text += (i ? ", " : "") + metas[i].str();
  return text;
}

} // namespace

Node *appendAtenCall(Graph &graph, py::handle opOverload,
                     const std::vector<Argument> &positional,
                     const std::vector<std::pair<std::string, Argument>> &keywords,
                     const std::optional<std::vector<TensorMeta>> &torchMetas,
                     const std::string &where, std::vector<std::string> &notes) {
  py::object torchSchema = opOverload.attr("_schema");
  std::string name = torchSchema.attr("name").cast<std::string>();
  std::string overload = torchSchema.attr("overload_name").cast<std::string>();
  std::string qualifiedName = overload.empty() ? name : name + "." + overload;

  const OpInfo *info = OpRegistry::global().find(qualifiedName);
  std::shared_ptr<const OpSchema> schema =
      info ? info->schema : torchSchemaOf(opOverload, qualifiedName);
  for (const SchemaArgument &result : schema->returns)
    if (result.type.base != SchemaType::Base::Tensor || result.type.optional ||
        result.type.elementOptional)
      throw Unsupported(qualifiedName + " returns " + result.type.str() +
                        ": kiln graphs hold tensor results only");
  std::vector<Argument> arguments = schema->normalize(positional, keywords);

  if (info) {
    // Keep the op only where kiln's meta function agrees with torch; else
    // run it as an extern with torch's metadata, so answers stay right.
    std::string disagreement;
    try {
      std::vector<TensorMeta> metas = inferMeta(*info, arguments);
      if (torchMetas && metas != *torchMetas)
        disagreement = "kiln's meta function gives " + metasToString(metas) +
                       " but torch gives " + metasToString(*torchMetas);
    } catch (const Error &error) {
      if (!torchMetas)
        throw;
      disagreement = std::string("kiln's meta function failed: ") + error.what();
    }
    if (disagreement.empty())
      return graph.addOp(qualifiedName, positional, keywords);
    notes.push_back(where + ": " + qualifiedName + ": " + disagreement +
                    "; kept as an extern node");
    return graph.addExtern(schema, arguments, *torchMetas);
  }
  if (!torchMetas)
    throw Unsupported(qualifiedName +
                      " is not in kiln's registry and torch gave no metadata "
                      "for its results");
  bool anyList = false;
  for (const SchemaArgument &result : schema->returns)
    anyList |= result.type.isList;
  if (!anyList && torchMetas->size() != schema->returns.size())
    throw Unsupported(qualifiedName + " returns " +
                      std::to_string(schema->returns.size()) +
                      " tensors but torch gave " +
                      std::to_string(torchMetas->size()));
  return graph.addExtern(schema, arguments, *torchMetas);
}

} // namespace kiln::python
