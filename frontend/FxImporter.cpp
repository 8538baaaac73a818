// The FX importer: one pass over `gm.graph.nodes`, mapping each FX node to
// kiln graph values. Depends on ir/, runtime/PythonConversion.h, pybind11.
#include "frontend/FxImporter.h"

#include "ir/Error.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace kiln::python {
namespace {

struct FxHandles {
  py::object nodeType;       // torch.fx.Node
  py::object opOverloadType; // torch._ops.OpOverload
  py::object getitem;        // operator.getitem

  static const FxHandles &get() {
    static FxHandles *handles = [] {
      auto *h = new FxHandles(); // leaked: see TorchHandles::get
      h->nodeType = py::module_::import("torch.fx").attr("Node");
      h->opOverloadType = py::module_::import("torch._ops").attr("OpOverload");
      h->getitem = py::module_::import("operator").attr("getitem");
      return h;
    }();
    return *handles;
  }
};

/// Schemas of extern ops, parsed once per schema text. A text kiln cannot
/// parse keeps its error, so that every node of that op says why.
struct ParsedSchema {
  std::shared_ptr<const OpSchema> schema;
  std::string error;
};

const ParsedSchema &parseSchemaCached(const std::string &text) {
  static auto *cache = new std::unordered_map<std::string, ParsedSchema>();
  auto it = cache->find(text);
  if (it != cache->end())
    return it->second;
  ParsedSchema parsed;
  try {
    parsed.schema = std::make_shared<const OpSchema>(parseSchema(text));
  } catch (const Error &error) {
    parsed.error = error.what();
  }
  return cache->emplace(text, std::move(parsed)).first->second;
}

std::string typeNameOf(py::handle object) {
  return py::str(py::type::of(object).attr("__name__")).cast<std::string>();
}

/// "/path/model.py:12 in forward: x = self.linear(x)" from the last frame
/// of an FX node's `stack_trace`; empty when there is none.
std::string sourceLineOf(const std::string &stackTrace) {
  size_t file = stackTrace.rfind("File \"");
  if (file == std::string::npos)
    return "";
  size_t lineEnd = stackTrace.find('\n', file);
  std::string frame = stackTrace.substr(file + 6, lineEnd - file - 6);
  std::string path = frame.substr(0, frame.find('"'));
  std::string line, function;
  if (size_t at = frame.find(", line "); at != std::string::npos) {
    size_t comma = frame.find(',', at + 7);
    line = frame.substr(at + 7, comma - at - 7);
    if (size_t in = frame.find(", in ", at); in != std::string::npos)
      function = frame.substr(in + 5);
  }
  std::string text = path + ":" + line;
  if (!function.empty())
    text += " in " + function;
  if (lineEnd != std::string::npos) {
    std::string code = stackTrace.substr(lineEnd + 1);
    code = code.substr(0, code.find('\n'));
    size_t first = code.find_first_not_of(' ');
    if (first != std::string::npos)
      text += ": " + code.substr(first);
  }
  return text;
}

/// Whether every return is a tensor or a tensor list: what a kiln node can
/// produce.
std::string nonTensorReturn(const OpSchema &schema) {
  for (const SchemaArgument &result : schema.returns)
    if (result.type.base != SchemaType::Base::Tensor || result.type.optional ||
        result.type.elementOptional)
      return result.type.str();
  return "";
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

bool hasSingleResult(const OpSchema &schema) {
  return schema.returns.size() == 1 && !schema.returns[0].type.isList;
}

class FxImporter {
public:
  FxImporter(py::handle graphModule, py::handle exampleInputs)
      : module_(graphModule), exampleInputs_(exampleInputs) {}

  FxImport run() {
    result_.graph = std::make_shared<Graph>();
    // Copied into a list first: torch's node iterator starts over when
    // asked again after its end, and pybind11's iterators do ask again.
    py::list nodes(module_.attr("graph").attr("nodes"));
    for (py::handle node : nodes) {
      std::string kind = node.attr("op").cast<std::string>();
      std::string where = describe(node);
      try {
        if (kind == "placeholder")
          importPlaceholder(node);
        else if (kind == "get_attr")
          importGetAttr(node);
        else if (kind == "call_function")
          importCallFunction(node, where);
        else if (kind == "output")
          importOutput(node);
        else
          throw Unsupported(kind + " nodes are not supported: kiln imports "
                                   "graphs of ATen operators (aot_autograd, "
                                   "make_fx)");
      } catch (const Unsupported &error) {
        if (std::string_view(error.what()).rfind("FX node", 0) == 0)
          throw;
        throw Unsupported(where + ": " + error.what());
      } catch (const Error &error) {
        // Torch accepted what kiln's schemas reject: kiln cannot hold it.
        throw Unsupported(where + ": " + error.what());
      }
    }
    // Importer bugs, not user errors: these stay kiln::Error.
    result_.graph->verify();
    return std::move(result_);
  }

private:
  std::string describe(py::handle node) const {
    std::string text =
        "FX node '" + node.attr("name").cast<std::string>() + "'";
    py::object trace = node.attr("meta").attr("get")("stack_trace");
    if (PyUnicode_Check(trace.ptr())) {
      std::string line = sourceLineOf(trace.cast<std::string>());
      if (!line.empty())
        text += " (" + line + ")";
    }
    return text;
  }

  static py::object metaValue(py::handle node) {
    return node.attr("meta").attr("get")("val");
  }

  void bind(py::handle node, std::vector<Value *> values, bool single) {
    entries_[node.ptr()] = Entry{std::move(values), single};
  }

  /// The value an FX node stands for; null for objects that are not nodes.
  Value *valueOf(py::handle object) const {
    if (!py::isinstance(object, FxHandles::get().nodeType))
      return nullptr;
    auto it = entries_.find(object.ptr());
    std::string name = object.attr("name").cast<std::string>();
    if (it == entries_.end())
      throw Unsupported("reads FX node '" + name +
                        "', which is not a tensor kiln holds");
    if (!it->second.single)
      throw Unsupported("reads FX node '" + name +
                        "', which has several results, as a whole");
    if (!it->second.values[0])
      throw Unsupported("reads FX node '" + name +
                        "', a result its operator left out (None)");
    return it->second.values[0];
  }

  bool isLeftOutResult(py::handle object) const {
    auto it = entries_.find(object.ptr());
    return it != entries_.end() && it->second.single && !it->second.values[0];
  }

  Argument argumentOf(py::handle object) {
    return argumentFromPython(
        object, [&](py::handle tensor) { return addConstant(tensor, ""); },
        [&](py::handle item) { return valueOf(item); });
  }

  TensorMeta tensorMetaOrThrow(py::handle object, const std::string &what) {
    if (!isTensor(object))
      throw Unsupported(what + " is " + typeNameOf(object) + " " +
                        py::repr(object).cast<std::string>() +
                        ", not a tensor: kiln graphs hold tensors only" +
                        (py::hasattr(object, "node")
                             ? " (symbolic sizes are not supported yet)"
                             : ""));
    return tensorMetaOf(object);
  }

  void importPlaceholder(py::handle node) {
    py::object value = metaValue(node);
    if (value.is_none() && !exampleInputs_.is_none() &&
        placeholderIndex_ < py::len(exampleInputs_))
      value = exampleInputs_[py::int_(placeholderIndex_)];
    ++placeholderIndex_;
    if (value.is_none())
      throw Unsupported("placeholder has no metadata (node.meta['val']) and "
                        "no example input");
    TensorMeta meta = tensorMetaOrThrow(value, "the input");
    bind(node,
         {result_.graph->addInput(meta, node.attr("name").cast<std::string>())},
         true);
  }

  Value *addConstant(py::handle tensor, const std::string &name) {
    const TorchHandles &torch = TorchHandles::get();
    py::handle type = py::type::of(tensor);
    if (!type.is(torch.tensorType) &&
        !type.is(torch.torch.attr("nn").attr("Parameter")))
      throw Unsupported("a constant of type " + typeNameOf(tensor) +
                        ": only plain tensors can be baked into a graph");
    TensorMeta original = tensorMetaOf(tensor);
    if (!original.isContiguous())
      throw Unsupported("a non-contiguous constant " + original.str());
    return result_.graph->addConstant(constantDataOf(tensor), name);
  }

  void importGetAttr(py::handle node) {
    std::string target = node.attr("target").cast<std::string>();
    py::object object = py::reinterpret_borrow<py::object>(module_);
    size_t start = 0;
    while (true) {
      size_t dot = target.find('.', start);
      object = object.attr(target.substr(start, dot - start).c_str());
      if (dot == std::string::npos)
        break;
      start = dot + 1;
    }
    if (!isTensor(object))
      throw Unsupported("get_attr of '" + target + "', a " +
                        typeNameOf(object) + ": only tensors become constants");
    bind(node, {addConstant(object, node.attr("name").cast<std::string>())},
         true);
  }

  /// The metadata FX recorded for a node's results, flattened in return
  /// order. Results an op leaves out (None, as convolution_backward does for
  /// gradients its output mask does not ask for) have no metadata and no
  /// value.
  struct FxResults {
    std::vector<TensorMeta> metas; // the tensors, in order
    std::vector<bool> present;     // per flat result: not None
    bool allPresent() const {
      return std::all_of(present.begin(), present.end(),
                         [](bool value) { return value; });
    }
  };

  std::optional<FxResults> fxResults(py::handle node) {
    py::object value = metaValue(node);
    if (value.is_none())
      return std::nullopt;
    FxResults results;
    auto flatten = [&](py::handle item, auto &self) -> void {
      if (PyTuple_Check(item.ptr()) || PyList_Check(item.ptr())) {
        for (py::handle element : item)
          self(element, self);
        return;
      }
      results.present.push_back(!item.is_none());
      if (!item.is_none())
        results.metas.push_back(tensorMetaOrThrow(item, "a result"));
    };
    flatten(value, flatten);
    return results;
  }

  void importGetItem(py::handle node) {
    py::tuple args = node.attr("args");
    py::handle source = args[0];
    auto it = entries_.find(source.ptr());
    if (args.size() != 2 || it == entries_.end() || it->second.single ||
        !PyLong_Check(args[1].ptr()))
      throw Unsupported("operator.getitem is supported on the results of "
                        "multi-result ATen operators only");
    int64_t index = args[1].cast<int64_t>();
    const std::vector<Value *> &values = it->second.values;
    if (index < 0)
      index += static_cast<int64_t>(values.size());
    if (index < 0 || index >= static_cast<int64_t>(values.size()) ||
        !it->second.flatIndexing)
      throw Unsupported("operator.getitem index " +
                        std::to_string(args[1].cast<int64_t>()) +
                        " does not name one tensor result");
    // A result the op left out (None) binds to null: outputs may return it.
    bind(node, {values[index]}, true);
  }

  void importCallFunction(py::handle node, const std::string &where) {
    py::object target = node.attr("target");
    if (target.is(FxHandles::get().getitem))
      return importGetItem(node);
    if (!py::isinstance(target, FxHandles::get().opOverloadType))
      throw Unsupported("calls " + py::repr(target).cast<std::string>() +
                        ", which is not an ATen operator overload");
    py::object torchSchema = target.attr("_schema");
    std::string name = torchSchema.attr("name").cast<std::string>();
    std::string overload =
        torchSchema.attr("overload_name").cast<std::string>();
    std::string qualifiedName = overload.empty() ? name : name + "." + overload;

    std::vector<Argument> positional;
    for (py::handle arg : node.attr("args"))
      positional.push_back(argumentOf(arg));
    std::vector<std::pair<std::string, Argument>> keywords;
    for (auto item : py::dict(node.attr("kwargs")))
      keywords.emplace_back(item.first.cast<std::string>(),
                            argumentOf(item.second));

    const OpInfo *info = OpRegistry::global().find(qualifiedName);
    // Registered ops follow torch's schema text exactly; parse only others.
    std::shared_ptr<const OpSchema> schema;
    if (info) {
      schema = info->schema;
    } else {
      const ParsedSchema &parsed =
          parseSchemaCached(py::str(torchSchema).cast<std::string>());
      if (!parsed.schema)
        throw Unsupported(qualifiedName + ": " + parsed.error);
      schema = parsed.schema;
    }
    if (auto relaxed = scalarsForTensors(*schema, positional, keywords)) {
      info = nullptr; // kiln's registry has no entry for this form
      schema = std::move(relaxed);
    }
    if (std::string type = nonTensorReturn(*schema); !type.empty())
      throw Unsupported(qualifiedName + " returns " + type +
                        ": kiln graphs hold tensor results only");
    std::optional<FxResults> fx = fxResults(node);
    std::vector<Argument> arguments = schema->normalize(positional, keywords);

    Node *added = nullptr;
    if (info) {
      // Keep the op only where kiln's meta function agrees with FX; else run
      // it as an extern with FX's metadata, so that answers stay right while
      // meta functions improve.
      std::string disagreement;
      try {
        std::vector<TensorMeta> metas = inferMeta(*info, arguments);
        if (fx && (!fx->allPresent() || metas != fx->metas)) {
          disagreement = "kiln's meta function gives ";
          for (size_t i = 0; i < metas.size(); ++i)
            disagreement += (i ? ", " : "") + metas[i].str();
          disagreement += " but FX recorded ";
          for (size_t i = 0, next = 0; i < fx->present.size(); ++i)
            disagreement += (i ? ", " : "") +
                            (fx->present[i] ? fx->metas[next++].str() : "None");
        }
      } catch (const Error &error) {
        if (!fx)
          throw;
        disagreement =
            std::string("kiln's meta function failed: ") + error.what();
      }
      if (disagreement.empty()) {
        added = result_.graph->addOp(qualifiedName, positional, keywords);
      } else {
        result_.notes.push_back(where + ": " + qualifiedName + ": " +
                                disagreement + "; kept as an extern node");
        added = result_.graph->addExtern(schema, arguments, fx->metas);
      }
    } else {
      if (!fx)
        throw Unsupported(qualifiedName +
                          " is not in kiln's registry and FX recorded no "
                          "metadata (node.meta['val']) for its results");
      bool anyList = std::any_of(
          schema->returns.begin(), schema->returns.end(),
          [](const SchemaArgument &result) { return result.type.isList; });
      if (!anyList && fx->present.size() != schema->returns.size())
        throw Unsupported(qualifiedName + " returns " +
                          std::to_string(schema->returns.size()) +
                          " tensors but FX recorded " +
                          std::to_string(fx->present.size()));
      added = result_.graph->addExtern(schema, arguments, fx->metas);
    }
    added->setOrigin(where);

    // One entry per flat result; null where the op leaves a result out.
    std::vector<Value *> values;
    size_t next = 0;
    if (fx && !added->isOp()) {
      for (bool present : fx->present)
        values.push_back(present ? added->result(next++) : nullptr);
    } else {
      for (const auto &value : added->results())
        values.push_back(value.get());
    }
    bool single = hasSingleResult(*schema);
    Entry entry{std::move(values), single};
    // getitem indexes the flat result list only where it matches the
    // returns one to one: all plain tensors, or one tensor list.
    entry.flatIndexing =
        schema->returns.size() == 1 ||
        std::none_of(
            schema->returns.begin(), schema->returns.end(),
            [](const SchemaArgument &result) { return result.type.isList; });
    entries_[node.ptr()] = std::move(entry);
  }

  void importOutput(py::handle node) {
    py::object returned = py::tuple(node.attr("args"))[0];
    std::vector<py::object> items;
    if (PyTuple_Check(returned.ptr()) || PyList_Check(returned.ptr())) {
      result_.outputForm =
          PyList_Check(returned.ptr()) ? OutputForm::List : OutputForm::Tuple;
      for (py::handle item : returned)
        items.push_back(py::reinterpret_borrow<py::object>(item));
    } else {
      result_.outputForm = OutputForm::Single;
      items.push_back(returned);
    }
    std::vector<Argument> outputs;
    for (const py::object &item : items) {
      if (isLeftOutResult(item))
        outputs.push_back(Argument::none());
      else if (Value *value = valueOf(item))
        outputs.push_back(value);
      else if (item.is_none() || PyBool_Check(item.ptr()) ||
               PyLong_Check(item.ptr()) || PyFloat_Check(item.ptr()))
        outputs.push_back(argumentFromPython(item, nullptr));
      else
        throw Unsupported("the graph returns " + typeNameOf(item) + " " +
                          py::repr(item).cast<std::string>() +
                          ": kiln graphs return tensors, None and numbers");
    }
    result_.graph->setOutputs(std::move(outputs));
  }

  struct Entry {
    std::vector<Value *> values;
    bool single = true;
    bool flatIndexing = true;
  };

  py::handle module_;
  py::handle exampleInputs_;
  size_t placeholderIndex_ = 0;
  std::unordered_map<PyObject *, Entry> entries_;
  FxImport result_;
};

} // namespace

FxImport importFxGraph(py::handle graphModule, py::handle exampleInputs) {
  return FxImporter(graphModule, exampleInputs).run();
}

void defineFxImporterBindings(py::module_ &module) {
  py::class_<FxImport>(module, "FxImport",
                       "A kiln graph imported from a torch.fx.GraphModule.")
      .def_readonly("graph", &FxImport::graph)
      .def_property_readonly(
          "output_form",
          [](const FxImport &imported) {
            return std::string(outputFormName(imported.outputForm));
          },
          "How the GraphModule returns its outputs: 'tuple', 'list' or "
          "'single'.")
      .def_readonly("notes", &FxImport::notes,
                    "Registered ops kept as externs, and why.");
  module.def(
      "import_fx",
      [](py::object graphModule, py::object exampleInputs) {
        return importFxGraph(graphModule, exampleInputs);
      },
      py::arg("graph_module"), py::arg("example_inputs") = py::none(),
      "Imports a torch.fx.GraphModule of ATen operators into a kiln graph. "
      "Raises kiln.Unsupported, naming the FX node, for what kiln cannot "
      "represent.");
}

} // namespace kiln::python
