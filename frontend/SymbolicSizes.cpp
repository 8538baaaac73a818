// Torch's symbolic sizes into kiln's size expressions.
// Depends on frontend/SymbolicSizes.h, bridge/PythonConversion.h.
#include "frontend/SymbolicSizes.h"

#include "bridge/PythonConversion.h"
#include "ir/Error.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <vector>

namespace kiln::frontend {

const py::module_ &SymbolTable::module() {
  // Leaked: module handles must outlive the interpreter's own teardown.
  static py::module_ *symbolic =
      new py::module_(py::module_::import("kiln._symbolic"));
  return *symbolic;
}

SymSize SymbolTable::sizeOf(py::handle description) {
  py::tuple item = py::reinterpret_borrow<py::tuple>(description);
  std::string op = item[0].cast<std::string>();
  if (op == "int")
    return size::constant(item[1].cast<int64_t>());
  if (op == "sym") {
    std::string name = item[1].cast<std::string>();
    auto found = numbers_.find(name);
    if (found != numbers_.end())
      return size::symbol(found->second);
    int64_t number = static_cast<int64_t>(numbers_.size());
    numbers_[name] = number;
    return size::symbol(number);
  }
  std::vector<SymSize> operands;
  for (size_t i = 1; i < item.size(); ++i)
    operands.push_back(sizeOf(item[i]));
  if (op == "add" || op == "mul") {
    SymSize result = size::constant(op == "add" ? 0 : 1);
    for (SymSize operand : operands)
      result =
          op == "add" ? size::add(result, operand) : size::mul(result, operand);
    return result;
  }
  if (operands.size() == 2) {
    if (op == "floordiv")
      return size::floorDiv(operands[0], operands[1]);
    if (op == "mod")
      return size::mod(operands[0], operands[1]);
    if (op == "max")
      return size::max(operands[0], operands[1]);
  }
  throw Unsupported("size expression '" + op + "'");
}

std::shared_ptr<const SymbolicLayout>
SymbolTable::layoutOf(py::handle description) {
  if (description.is_none())
    return nullptr;
  py::tuple parts = py::reinterpret_borrow<py::tuple>(description);
  auto layout = std::make_shared<SymbolicLayout>();
  for (py::handle size : parts[0])
    layout->sizes.push_back(sizeOf(size));
  for (py::handle stride : parts[1])
    layout->strides.push_back(sizeOf(stride));
  layout->storageOffset = sizeOf(parts[2]);
  return layout;
}

TensorMeta SymbolTable::metaOf(py::handle fakeTensor, Device device) {
  py::tuple layout = module().attr("layout")(fakeTensor);
  TensorMeta meta(python::dtypeFromTorch(fakeTensor.attr("dtype")),
                  layout[0].cast<std::vector<int64_t>>(),
                  layout[1].cast<std::vector<int64_t>>(),
                  layout[2].cast<int64_t>(), device);
  meta.symbolic = layoutOf(layout[3]);
  return meta;
}

std::pair<int64_t, SymSize> SymbolTable::sizeOfValue(py::handle value) {
  try {
    return {module().attr("hint")(value).cast<int64_t>(),
            sizeOf(module().attr("describe")(value))};
  } catch (py::error_already_set &error) {
    std::string message = error.what();
    throw Unsupported(message.substr(0, message.find('\n')));
  }
}

void SymbolTable::bindInputSymbols(Graph &graph, const Value &input) {
  const TensorMeta &meta = input.meta();
  if (!meta.isSymbolic())
    return;
  const auto &inputs = graph.inputs();
  int64_t index =
      std::find(inputs.begin(), inputs.end(), &input) - inputs.begin();
  for (int64_t d = 0; d < meta.dim(); ++d) {
    SymSize size = meta.symbolic->sizes[d];
    if (size->kind() == SizeKind::Symbol &&
        size->value() >= static_cast<int64_t>(graph.symbols().size()) &&
        graph.addSymbol({index, d, meta.sizes[d]}) != size->value())
      throw Unsupported("size symbols out of order");
  }
}

} // namespace kiln::frontend
