// The FX importer: one pass over `gm.graph.nodes`, mapping each FX node to
// kiln graph values. Depends on ir/, frontend/AtenCall.h,
// bridge/PythonConversion.h, pybind11.
#include "frontend/FxImporter.h"

#include "frontend/AtenCall.h"
#include "frontend/SymbolicSizes.h"
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
    // Imports may let another thread run: see TorchHandles::get.
    PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<FxHandles *>
        handles;
    return *handles
                .call_once_and_store_result([] {
                  auto *h = new FxHandles(); // leaked: see TorchHandles::get
                  h->nodeType = py::module_::import("torch.fx").attr("Node");
                  h->opOverloadType =
                      py::module_::import("torch._ops").attr("OpOverload");
                  h->getitem = py::module_::import("operator").attr("getitem");
                  return h;
                })
                .get_stored();
  }
};

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
    if (symbols_.size() != result_.graph->symbols().size())
      throw Unsupported("a size symbol that no input tensor's size gives");
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

  static bool isSymbolic(py::handle value) {
    return frontend::SymbolTable::module()
        .attr("is_symbolic")(value)
        .cast<bool>();
  }

  /// A size node (a SymInt placeholder, sym_size, arithmetic on sizes):
  /// its hint and expression, or nullopt for other objects.
  std::optional<std::pair<int64_t, SymSize>> sizeNode(py::handle object) {
    if (!py::isinstance(object, FxHandles::get().nodeType))
      return std::nullopt;
    auto found = sizes_.find(object.ptr());
    if (found == sizes_.end())
      return std::nullopt;
    return found->second;
  }

  void bindSize(py::handle node, py::handle value) {
    sizes_[node.ptr()] = symbols_.sizeOfValue(value);
  }

  /// A tensor's meta: hints and symbolic layout for a fake tensor with
  /// symbolic sizes.
  TensorMeta metaOf(py::handle tensor) {
    if (frontend::SymbolTable::module()
            .attr("contains_symbolic")(
                py::make_tuple(tensor.attr("shape"), tensor.attr("stride")()))
            .cast<bool>())
      return symbols_.metaOf(tensor, deviceFromTorch(tensor.attr("device")));
    return tensorMetaOf(tensor);
  }

  Argument argumentOf(py::handle object) {
    if (auto size = sizeNode(object))
      return Argument::symbolicInt(size->first, size->second);
    if ((PyList_Check(object.ptr()) || PyTuple_Check(object.ptr())) &&
        std::any_of(object.begin(), object.end(), [&](py::handle item) {
          return sizeNode(item).has_value();
        })) {
      std::vector<int64_t> hints;
      std::vector<SymSize> exprs;
      for (py::handle item : object) {
        if (auto size = sizeNode(item)) {
          hints.push_back(size->first);
          exprs.push_back(size->second);
        } else if (PyLong_Check(item.ptr())) {
          hints.push_back(item.cast<int64_t>());
          exprs.push_back(size::constant(hints.back()));
        } else {
          throw Unsupported("a list of sizes holds a " + typeNameOf(item));
        }
      }
      return Argument::symbolicIntList(std::move(hints), std::move(exprs));
    }
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
    int64_t position = static_cast<int64_t>(placeholderIndex_++);
    if (value.is_none())
      throw Unsupported("placeholder has no metadata (node.meta['val']) and "
                        "no example input");
    if (isSymbolic(value)) { // a size the tensors' sizes give
      bindSize(node, value);
      return;
    }
    if (!isTensor(value))
      tensorMetaOrThrow(value, "the input"); // throws, saying what it is
    TensorMeta meta = metaOf(value);
    Value *input =
        result_.graph->addInput(meta, node.attr("name").cast<std::string>());
    result_.tensorInputs.push_back(position);
    symbols_.bindInputSymbols(*result_.graph, *input);
    bind(node, {input}, true);
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

  /// The metadata FX recorded for a node's results (node.meta['val']),
  /// flattened in return order; None where an op leaves a result out. The
  /// first result that is neither a tensor nor None is set aside in
  /// `notTensor`: only an op whose schema returns tensors must explain it.
  std::optional<TorchResults>
  fxResults(py::handle node, py::object &notTensor,
            std::vector<std::shared_ptr<const SymbolicLayout>> &layouts) {
    py::object value = metaValue(node);
    if (value.is_none())
      return std::nullopt;
    TorchResults results;
    auto flatten = [&](py::handle item, auto &self) -> void {
      if (PyTuple_Check(item.ptr()) || PyList_Check(item.ptr())) {
        for (py::handle element : item)
          self(element, self);
      } else if (isTensor(item)) {
        TensorMeta meta = metaOf(item);
        layouts.push_back(meta.symbolic);
        meta.symbolic = nullptr; // set on the values after the node is added
        results.add(meta);
      } else {
        if (!item.is_none() && !notTensor)
          notTensor = py::reinterpret_borrow<py::object>(item);
        layouts.emplace_back();
        results.add(std::nullopt);
      }
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
    if (py::object value = metaValue(node); isSymbolic(value)) {
      // Size arithmetic (sym_size, operator.mul on sizes): an argument of
      // the ops that read it, not a graph node.
      bindSize(node, value);
      return;
    }
    if (!py::isinstance(target, FxHandles::get().opOverloadType))
      throw Unsupported("calls " + py::repr(target).cast<std::string>() +
                        ", which is not an ATen operator overload");
    std::vector<Argument> positional;
    for (py::handle arg : node.attr("args"))
      positional.push_back(argumentOf(arg));
    std::vector<std::pair<std::string, Argument>> keywords;
    for (auto item : py::dict(node.attr("kwargs")))
      keywords.emplace_back(item.first.cast<std::string>(),
                            argumentOf(item.second));

    py::object notTensor;
    std::vector<std::shared_ptr<const SymbolicLayout>> layouts;
    std::optional<TorchResults> fx = fxResults(node, notTensor, layouts);
    Node *added = appendAtenCall(*result_.graph, target, positional, keywords,
                                 fx, where, result_.notes, "FX");
    if (notTensor) // the schema says tensor but FX recorded something else
      tensorMetaOrThrow(notTensor, "a result");
    added->setOrigin(where);

    const OpSchema &schema = *added->schema();
    Entry entry{flatResults(*added, fx), hasSingleResult(schema)};
    for (size_t i = 0; i < entry.values.size() && i < layouts.size(); ++i)
      if (entry.values[i] && layouts[i])
        entry.values[i]->setSymbolicLayout(layouts[i]);
    // getitem indexes the flat result list only where it matches the
    // returns one to one: all plain tensors, or one tensor list.
    entry.flatIndexing =
        schema.returns.size() == 1 ||
        std::none_of(
            schema.returns.begin(), schema.returns.end(),
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
      else if (sizeNode(item))
        throw Unsupported("the graph returns a size that varies between "
                          "calls");
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
  frontend::SymbolTable symbols_;
  std::unordered_map<PyObject *, std::pair<int64_t, SymSize>> sizes_;
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
                    "Registered ops kept as externs, and why.")
      .def_readonly("tensor_inputs", &FxImport::tensorInputs,
                    "Positions of the placeholders that are graph inputs; "
                    "the others are sizes a call leaves out.");
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
