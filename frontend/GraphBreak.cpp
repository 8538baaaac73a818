// Graph breaks, capture side: where the symbolic evaluator stops before an
// instruction it cannot capture, the live stack items and locals become the
// graph's outputs and a plan (RebuildStep) that rebuilds them on every cache
// hit; kiln._resume makes the code that continues in CPython.
// Depends on frontend/Evaluator.h, pybind11, CPython.
#include "frontend/Evaluator.h"

namespace kiln::frontend::evaluation {

// The most loop steps a break's resume function keeps entries for.
constexpr size_t kMostLoopSteps = 1024;

int Evaluator::rebuild(const VariablePtr &value, Rebuilder &rebuilder) {
  auto known = rebuilder.byVariable.find(value.get());
  if (known != rebuilder.byVariable.end())
    return known->second;
  RebuildStep step;
  // What came from the frame's inputs is read from this call's, not taken
  // from the capture: containers the caller sees keep their identity, and
  // objects guarded only by type are this call's objects.
  auto read = [&]() {
    step.kind = RebuildStep::Kind::Read;
    step.index = guards_.addRead(value->source);
  };
  switch (value->kind) {
  case Kind::Tensor: {
    if (value->source) {
      read();
      break;
    }
    auto it = rebuilder.byTensor.find(value->tensor);
    if (it != rebuilder.byTensor.end()) {
      rebuilder.byVariable[value.get()] = it->second;
      return it->second;
    }
    // The graph hands out a constant's own buffer on every call, and code
    // after the graph may write into it: it leaves as a copy.
    Value *output = value->tensor;
    if (output->producer()->kind() == Node::Kind::Constant)
      output =
          torchCall(Handles::get().torch.attr("clone"), {value}, {})->tensor;
    step.kind = RebuildStep::Kind::Output;
    step.index = static_cast<int>(rebuilder.outputs.size());
    rebuilder.outputs.push_back(output);
    int index = rebuilder.add(std::move(step));
    rebuilder.byTensor[value->tensor] = index;
    rebuilder.byVariable[value.get()] = index;
    return index;
  }
  case Kind::Constant:
    if (holdsVaryingSize(value->object))
      unsupported("a size that varies between calls is live after the graph");
    step.kind = RebuildStep::Kind::Constant;
    step.object = value->object;
    break;
  case Kind::Tuple:
  case Kind::List:
  case Kind::Dict:
    // The evaluator never changes a container the caller can see.
    if (value->source && !value->ownedByFrame) {
      read();
      break;
    }
    for (const VariablePtr &item : value->items)
      step.items.push_back(rebuild(item, rebuilder));
    step.keys = value->keys;
    step.kind = value->is(Kind::List)   ? RebuildStep::Kind::List
                : value->is(Kind::Dict) ? RebuildStep::Kind::Dict
                : value->object && !value->object.is_none()
                    ? RebuildStep::Kind::Struct
                    : RebuildStep::Kind::Tuple;
    if (step.kind == RebuildStep::Kind::Struct)
      step.object = structBuilder(value->object);
    break;
  case Kind::Module:
  case Kind::Callable:
  case Kind::PythonModule:
  case Kind::Object:
  case Kind::Function:
    if (value->source) {
      read();
      break;
    }
    if (value->is(Kind::Function) && !value->object) {
      // A function the frame defined: made again from its code, globals,
      // defaults and closure cells, as the frame's MAKE_FUNCTION made it.
      for (const VariablePtr &item : value->items)
        step.items.push_back(rebuild(item, rebuilder));
      for (const VariablePtr &cell : value->cells) {
        if (!cell->is(Kind::Cell))
          unsupported("a function defined in the frame with a closure of a " +
                      kindNameOf(pythonTypeOf(cell)) + " is live at the break");
        step.items.push_back(rebuild(cell, rebuilder));
      }
      step.kind = RebuildStep::Kind::Struct;
      step.object =
          py::module_::import("functools")
              .attr("partial")(
                  py::module_::import("kiln._resume").attr("make_function"),
                  value->code, value->globals, value->kwdefaults,
                  py::int_(value->items.size()));
      break;
    }
    if (!value->object)
      unsupported("a function defined in the frame is live at the break");
    step.kind = RebuildStep::Kind::Constant;
    step.object = value->object;
    break;
  case Kind::Method:
    if (value->source) {
      read();
      break;
    }
    step.items.push_back(rebuild(value->items.at(0), rebuilder));
    if (!value->object || value->object.is_none()) {
      step.kind = RebuildStep::Kind::Attribute;
      step.name = value->name;
    } else {
      step.kind = RebuildStep::Kind::BoundMethod;
      step.object = value->object;
    }
    break;
  case Kind::Instance: {
    if (!rebuilder.inProgress.insert(value.get()).second)
      unsupported("an object made in the frame refers to itself");
    if (value->object.is(Handles::get().dequeType)) {
      // deque(items, maxlen=...): a Struct step calls it with the tuple.
      step.kind = RebuildStep::Kind::Struct;
      step.object =
          py::module_::import("functools")
              .attr("partial")(value->object,
                               py::arg("maxlen") = dequeMaxlen(value)->object);
      for (const VariablePtr &item : value->items[1]->items)
        step.items.push_back(rebuild(item, rebuilder));
      rebuilder.inProgress.erase(value.get());
      break;
    }
    const VariablePtr &attributes = value->items[0];
    for (size_t i = 0; i < attributes->keys.size(); ++i) {
      step.keys.push_back(attributes->keys[i]);
      step.items.push_back(rebuild(attributes->items[i], rebuilder));
    }
    step.index = static_cast<int>(attributes->keys.size());
    if (value->items.size() > 1) {
      for (py::handle base : value->object.attr("__mro__")) {
        auto *type = reinterpret_cast<PyTypeObject *>(base.ptr());
        if (type->tp_flags & Py_TPFLAGS_HEAPTYPE)
          continue;
        if (PyObject *slot = lookUpOnType(base, "__setitem__")) {
          step.setItem = py::reinterpret_borrow<py::object>(slot);
          break;
        }
      }
      const VariablePtr &contents = value->items[1];
      for (size_t i = 0; i < contents->keys.size(); ++i) {
        step.keys.push_back(contents->keys[i]);
        step.items.push_back(rebuild(contents->items[i], rebuilder));
      }
    }
    rebuilder.inProgress.erase(value.get());
    step.kind = RebuildStep::Kind::Instance;
    step.object = value->object;
    break;
  }
  case Kind::Set:
    if (value->source) { // the caller's (a change reaches it as an effect)
      read();
      break;
    }
    step.kind = RebuildStep::Kind::Set;
    step.object = value->object;
    break;
  case Kind::GradRestore:
    // The exit of a grad-mode block the break is inside of: the resume
    // function leaves the block through an object its capture reads back.
    step.kind = RebuildStep::Kind::Constant;
    step.object = Handles::get().gradModeExits[value->flag ? 1 : 0];
    break;
  case Kind::Cell: {
    // A closure cell of the frame: the cell the call passed in (a resume
    // function's), the one a class defined in the frame closes over, or a
    // new one per call with the cell's value, which the frame's functions
    // rebuilt with it share.
    if (value->object) {
      const VariablePtr passed =
          value->cells.empty() ? VariablePtr() : value->cells[0];
      if (!passed || !passed->source)
        unsupported("a closure cell of an enclosing function is live at the "
                    "break");
      int index = rebuild(passed, rebuilder);
      rebuilder.byVariable[value.get()] = index;
      return index;
    }
    if (value->realCell) {
      step.kind = RebuildStep::Kind::Constant;
      step.object = value->realCell;
      break;
    }
    step.kind = RebuildStep::Kind::Cell;
    int index = rebuilder.add(std::move(step));
    rebuilder.byVariable[value.get()] = index;
    if (!value->items.empty()) {
      int contents = rebuild(value->items[0], rebuilder);
      rebuilder.state.steps[index].items.push_back(contents);
    }
    return index;
  }
  case Kind::Iterator:
    unsupported("a live iterator (an iter() around the break, or a loop's "
                "held elsewhere too)");
  default:
    unsupported("a " + kindNameOf(pythonTypeOf(value)) +
                " is live at the break and cannot be rebuilt");
  }
  int index = rebuilder.add(std::move(step));
  rebuilder.byVariable[value.get()] = index;
  return index;
}

void Evaluator::planSideEffects(Rebuilder &rebuilder) {
  for (const AttributeWrite &write : writes_) {
    SideEffect effect;
    effect.target = rebuild(write.target, rebuilder);
    effect.name = write.name;
    effect.value = rebuild(write.value, rebuilder);
    rebuilder.state.effects.push_back(std::move(effect));
  }
  for (const VariablePtr &container : changedContainers_) {
    // Another source that reached the same list read it apart from these
    // changes; one that reached another list must not reach it next time.
    for (const auto &[key, variable] : bySource_) {
      if (variable == container || variable->kind != container->kind ||
          !variable->object)
        continue;
      if (variable->object.is(container->object))
        unsupported("changing " + container->source->str() +
                    ", which the frame also reads as " +
                    variable->source->str());
      guards_.addDistinctFrom(variable->source, container->source);
    }
    SideEffect effect;
    effect.contents = true;
    effect.target = rebuild(container, rebuilder); // the caller's, read
    RebuildStep contents;
    if (container->is(Kind::Set)) {
      contents.kind = RebuildStep::Kind::Set; // a copy of the model
      contents.object = container->object;
    } else {
      contents.kind = container->is(Kind::List) ? RebuildStep::Kind::List
                                                : RebuildStep::Kind::Dict;
      for (const VariablePtr &item : container->items)
        contents.items.push_back(rebuild(item, rebuilder));
      contents.keys = container->keys;
    }
    effect.value = rebuilder.add(std::move(contents));
    rebuilder.state.effects.push_back(std::move(effect));
  }
  // A written object is read through its source on each call, like any
  // object guarded by class. Another source the capture saw reach the same
  // object must reach that call's object too, and one that reached another
  // object of its class must not reach it: reads were taken apart from the
  // writes.
  for (const auto &[key, variable] : bySource_) {
    if (!variable->is(Kind::Object) || !variable->object)
      continue;
    for (const auto &[object, target] : writtenObjects_) {
      if (variable == target || !target->is(Kind::Object) ||
          Py_TYPE(object) != Py_TYPE(variable->object.ptr()))
        continue;
      if (object == variable->object.ptr())
        guards_.addSameAs(variable->source, target->source);
      else
        guards_.addDistinctFrom(variable->source, target->source);
    }
  }
}

namespace {

/// Whether the iterator reads a list as it goes (itself, or through the
/// iterator an enumerate, zip or reversed of it reads). A tensor's rows are
/// taken when the loop starts (iterate).
bool readsLiveContainer(const Variable &iterator) {
  for (const VariablePtr &cell : iterator.cells)
    if (cell->is(Kind::List) ||
        (cell->is(Kind::Iterator) && readsLiveContainer(*cell)))
      return true;
  return false;
}

} // namespace

int Evaluator::rebuildIteratorState(const VariablePtr &iterator,
                                    size_t position, Rebuilder &rebuilder) {
  if (!rebuilder.iterators.insert(iterator.get()).second)
    unsupported("an iterator that two live iterators read is live at the "
                "break");
  // Constants are steps of their own: rebuild() would remember a
  // temporary variable by its address, which the next one may reuse.
  auto constant = [&](py::object value) {
    RebuildStep step;
    step.kind = RebuildStep::Kind::Constant;
    step.object = std::move(value);
    return rebuilder.add(std::move(step));
  };
  auto tagged = [&](const char *tag, std::vector<int> items) {
    RebuildStep step;
    step.kind = RebuildStep::Kind::Tuple;
    step.items.push_back(constant(py::str(tag)));
    step.items.insert(step.items.end(), items.begin(), items.end());
    return rebuilder.add(std::move(step));
  };
  auto count = [&](int64_t value) { return constant(py::int_(value)); };
  if (iterator->recipe) {
    const Variable::Recipe &recipe = *iterator->recipe;
    auto sourceState = [&](size_t i) {
      const VariablePtr &source = recipe.sources[i];
      size_t at = recipe.from[i] + position;
      if (source->is(Kind::List))
        return tagged("list", {rebuild(source, rebuilder),
                               count(static_cast<int64_t>(at))});
      return rebuildIteratorState(source, at, rebuilder);
    };
    if (recipe.how == "enumerate")
      return tagged("enumerate",
                    {sourceState(0),
                     count(recipe.start + static_cast<int64_t>(position))});
    if (recipe.how == "zip") {
      RebuildStep sources;
      sources.kind = RebuildStep::Kind::Tuple;
      for (size_t i = 0; i < recipe.sources.size(); ++i)
        sources.items.push_back(sourceState(i));
      return tagged("zip", {rebuilder.add(std::move(sources))});
    }
    // reversed(list): the index of the next item it gives.
    return tagged("reversed",
                  {rebuild(recipe.sources[0], rebuilder),
                   count(static_cast<int64_t>(iterator->items.size()) - 1 -
                         static_cast<int64_t>(position))});
  }
  for (const VariablePtr &cell : iterator->cells)
    if (cell->is(Kind::List))
      return tagged("list", {rebuild(cell, rebuilder),
                             count(static_cast<int64_t>(position))});
  // Items taken when it was made (a tuple's, a range's, a dict's keys):
  // the rest of them.
  RebuildStep rest;
  rest.kind = RebuildStep::Kind::Tuple;
  for (size_t i = position; i < iterator->items.size(); ++i)
    rest.items.push_back(rebuild(iterator->items[i], rebuilder));
  return tagged("tuple", {rebuilder.add(std::move(rest))});
}

int Evaluator::rebuildLoopIterator(const Frame &frame,
                                   const VariablePtr &iterator,
                                   Rebuilder &rebuilder,
                                   GraphBreak::Iterated &how) {
  // A loop's iterator on the stack leaves as a tuple of the items still to
  // come, and the resume function iterates that tuple (kiln._resume): its
  // capture then reads the items as any tuple argument's. One that reads a
  // list as the loop goes (the list's own, an enumerate, zip or reversed
  // of it), which a tuple would not follow, leaves as a state the resume
  // function makes it again from: the list and the position reached, and
  // how an enumerate, zip or reversed was made over that. A handler
  // around the break would run the loop on in CPython over what left; and
  // an iterator reached another way (a local too) is the same object
  // there, which a new one is not.
  if (iteratorIsStale(*iterator))
    unsupported("a live iterator over a list changed since, or one that an "
                "unfinished enumerate or zip reads");
  if (frame.code->handlerAt(frame.pc))
    unsupported("a loop's iterator is live at a break inside a try or with "
                "block");
  for (const VariablePtr &local : frame.locals)
    if (local == iterator)
      unsupported("a loop's iterator that a local also holds is live at the "
                  "break");
  if (readsLiveContainer(*iterator)) {
    how = GraphBreak::Iterated::AsState;
    return rebuildIteratorState(iterator, iterator->position, rebuilder);
  }
  how = GraphBreak::Iterated::AsTuple;
  RebuildStep step;
  step.kind = RebuildStep::Kind::Tuple;
  for (size_t i = iterator->position; i < iterator->items.size(); ++i)
    step.items.push_back(rebuild(iterator->items[i], rebuilder));
  return rebuilder.add(std::move(step));
}

Capture Evaluator::captureAtBreak(Frame &frame, bool initialGradMode) {
  const Instruction &instruction = frame.code->instructions.at(frame.pc);
  if (frame.pc != stopPc_)
    unsupported("the capture did not reach the same instruction again");
  auto state = std::make_shared<GraphBreak>();
  if (gradEnabled_ != initialGradMode)
    state->gradMode = gradEnabled_;
  state->code = frame.codeObject;
  state->offset = instruction.offset;
  state->instruction = instruction.opname;
  state->location =
      frame.code->filename + ":" + std::to_string(instruction.line);
  state->reason = breakReason_;
  Rebuilder rebuilder{*state, {}, {}, {}, {}, {}};
  for (const VariablePtr &item : frame.stack) {
    GraphBreak::Iterated iterated = GraphBreak::Iterated::No;
    if (item->is(Kind::Null))
      state->stack.push_back(-1);
    else if (item->is(Kind::Iterator)) {
      state->stack.push_back(
          rebuildLoopIterator(frame, item, rebuilder, iterated));
      size_t left =
          item->items.size() - std::min(item->position, item->items.size());
      state->loopSteps = std::min<size_t>(
          std::max<size_t>(state->loopSteps, 1) * (left + 1), kMostLoopSteps);
    } else
      state->stack.push_back(rebuild(item, rebuilder));
    state->iterated.push_back(iterated);
  }
  for (size_t i = 0; i < frame.locals.size(); ++i) {
    // A free variable's cell comes from the closure the continuation is
    // made with; the capture never rebinds it.
    if (frame.localKinds.at(i) & kFreeVariableKind) {
      state->locals.push_back(-1);
      continue;
    }
    if (frame.locals[i]) {
      state->locals.push_back(rebuild(frame.locals[i], rebuilder));
    } else if (i < frame.rootArguments.size() && frame.rootArguments[i]) {
      // An argument the capture never read: this call's, as it is.
      RebuildStep step;
      step.kind = RebuildStep::Kind::Read;
      step.index = guards_.addRead(
          Source::local(static_cast<int>(i), frame.localNames[i]));
      state->locals.push_back(rebuilder.add(std::move(step)));
    } else {
      state->locals.push_back(-1);
    }
  }
  planSideEffects(rebuilder);
  graph_->setOutputs(std::move(rebuilder.outputs));
  Capture capture;
  if (symbolic_)
    addSizeRelations();
  capture.graph = graph_;
  capture.guards = std::move(guards_);
  capture.graphBreak = std::move(state);
  capture.notes = std::move(notes_);
  return capture;
}

} // namespace kiln::frontend::evaluation

namespace kiln::frontend {

namespace {

// An object of a Python class the capture made: its class's __new__, then
// its builtin dict base's items and its attributes set as object's own
// slots would (a custom __setitem__ or __setattr__ ran during the capture
// already; what it did is the state being restored).
py::object buildInstance(const RebuildStep &step,
                         const std::vector<py::object> &values) {
  py::object cls = step.object;
  py::object instance = cls.attr("__new__")(cls);
  size_t attributes = static_cast<size_t>(step.index);
  for (size_t i = attributes; i < step.items.size(); ++i)
    step.setItem(instance, step.keys[i], values[step.items[i]]);
  for (size_t i = 0; i < attributes; ++i)
    if (PyObject_GenericSetAttr(instance.ptr(), step.keys[i].ptr(),
                                values[step.items[i]].ptr()) < 0)
      throw py::error_already_set();
  return instance;
}

} // namespace

std::vector<py::object>
RebuildPlan::rebuild(PyObject *const *outputs,
                     const std::vector<py::object> &reads) const {
  std::vector<py::object> values;
  values.reserve(steps.size());
  for (const RebuildStep &step : steps) {
    switch (step.kind) {
    case RebuildStep::Kind::Output:
      values.push_back(py::reinterpret_borrow<py::object>(outputs[step.index]));
      break;
    case RebuildStep::Kind::Read:
      values.push_back(reads.at(step.index));
      break;
    case RebuildStep::Kind::Constant:
      values.push_back(step.object);
      break;
    case RebuildStep::Kind::Tuple:
    case RebuildStep::Kind::Struct: {
      py::tuple items(step.items.size());
      for (size_t i = 0; i < step.items.size(); ++i)
        items[i] = values[step.items[i]];
      values.push_back(step.kind == RebuildStep::Kind::Struct
                           ? step.object(items)
                           : py::object(std::move(items)));
      break;
    }
    case RebuildStep::Kind::List: {
      py::list items;
      for (int item : step.items)
        items.append(values[item]);
      values.push_back(std::move(items));
      break;
    }
    case RebuildStep::Kind::Dict: {
      py::dict items;
      for (size_t i = 0; i < step.keys.size(); ++i)
        items[step.keys[i]] = values[step.items[i]];
      values.push_back(std::move(items));
      break;
    }
    case RebuildStep::Kind::BoundMethod:
      values.push_back(py::reinterpret_steal<py::object>(
          PyMethod_New(step.object.ptr(), values[step.items[0]].ptr())));
      if (!values.back())
        throw py::error_already_set();
      break;
    case RebuildStep::Kind::Attribute:
      values.push_back(values[step.items[0]].attr(step.name.c_str()));
      break;
    case RebuildStep::Kind::Instance:
      values.push_back(buildInstance(step, values));
      break;
    case RebuildStep::Kind::Set:
      // A copy keeps the set's table, so eager's iteration order.
      values.push_back(step.object.attr("copy")());
      break;
    case RebuildStep::Kind::Cell:
      values.push_back(py::reinterpret_steal<py::object>(PyCell_New(nullptr)));
      break;
    }
  }
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].kind == RebuildStep::Kind::Cell && !steps[i].items.empty() &&
        PyCell_Set(values[i].ptr(), values[steps[i].items[0]].ptr()) < 0)
      throw py::error_already_set();
  for (const SideEffect &effect : effects) {
    py::object target = values[effect.target];
    if (!effect.contents) {
      py::setattr(target, effect.name.c_str(), values[effect.value]);
    } else if (PyList_Check(target.ptr())) {
      if (PyList_SetSlice(target.ptr(), 0, PY_SSIZE_T_MAX,
                          values[effect.value].ptr()) < 0)
        throw py::error_already_set();
    } else {
      target.attr("clear")();
      target.attr("update")(values[effect.value]);
    }
  }
  return values;
}

} // namespace kiln::frontend
