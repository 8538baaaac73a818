// The symbolic evaluator's state and methods, private to frontend/ and
// shared by the files that define them: SymbolicEvaluator.cpp (values,
// torch calls, attributes, the result), EvaluatorCalls.cpp (calls and
// inlining), BytecodeInterpreter.cpp (the instruction loop).
// Depends on frontend/, ir/, pybind11, CPython.
#pragma once

#include "frontend/AtenCall.h"
#include "frontend/Bytecode.h"
#include "frontend/SymbolicEvaluator.h"
#include "frontend/SymbolicSizes.h"
#include "ir/Error.h"

#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace kiln::frontend::evaluation {

using Kind = Variable::Kind;

constexpr int kMaxInlineDepth = 64;
constexpr long kMaxInstructions = 200000;

// Python objects the evaluator recognises by identity.
struct Handles {
  py::module_ builtins = py::module_::import("builtins");
  py::module_ operatorModule = py::module_::import("operator");
  py::module_ torch = py::module_::import("torch");
  py::module_ trace = py::module_::import("kiln._trace");
  py::object traceCall = trace.attr("trace");
  py::object metaTensor = trace.attr("meta_tensor");
  py::object tensorType = torch.attr("Tensor");
  py::object moduleBase = torch.attr("nn").attr("Module");
  py::object moduleCall = moduleBase.attr("__call__");
  py::object sizeType = torch.attr("Size");
  // Sizes that vary between calls, in a capture with dynamic shapes.
  py::object symInt = torch.attr("SymInt");
  py::object symFloat = torch.attr("SymFloat");
  py::object symBool = torch.attr("SymBool");
  py::object noGrad = torch.attr("no_grad");
  py::object enableGrad = torch.attr("enable_grad");
  py::object setGradEnabled = torch.attr("set_grad_enabled");
  py::object isGradEnabled = torch.attr("is_grad_enabled");
  py::object tensorFromData = torch.attr("tensor");
  py::object asTensor = torch.attr("as_tensor");
  py::object functionType = py::module_::import("types").attr("FunctionType");
  py::object methodType = py::module_::import("types").attr("MethodType");
  py::object moduleType = py::module_::import("types").attr("ModuleType");
  py::object cellType = py::module_::import("types").attr("CellType");
  py::object codeType = py::module_::import("types").attr("CodeType");
  py::object dtypeType = torch.attr("dtype");
  py::object deviceType = torch.attr("device");
  py::object nnModules = torch.attr("nn").attr("modules").attr("module");
  // Functions that ask whether torch-function overrides are active: kiln's
  // values are plain tensors, so the answer is no.
  std::vector<py::object> alwaysFalse = {
      torch.attr("_C").attr("_has_torch_function"),
      torch.attr("_C").attr("_has_torch_function_unary"),
      torch.attr("_C").attr("_has_torch_function_variadic"),
      torch.attr("jit").attr("is_scripting"),
      torch.attr("jit").attr("is_tracing"),
  };
  // Functions that ask whether a compiler is capturing the code: yes, as
  // under TorchDynamo (code skips its eager-only checks and logging).
  std::vector<py::object> alwaysTrue = {
      torch.attr("compiler").attr("is_compiling"),
      torch.attr("_dynamo").attr("is_compiling"),
      torch.attr("_utils").attr("is_compiling"),
  };
  // Builtins that have no side effects: with constant arguments they are
  // evaluated during capture.
  std::unordered_set<PyObject *> pureBuiltins;
  // Functions and classes without side effects whose result, for constant
  // arguments, is an immutable object the capture reads (torch.finfo(dtype),
  // inspect.signature(f)).
  std::unordered_set<PyObject *> pureObjectCalls;
  py::object environment = py::module_::import("os").attr("environ");
  py::object partialType = py::module_::import("functools").attr("partial");
  // Pure-Python models of builtins the evaluator inlines (kiln._polyfills).
  py::module_ polyfillModule = py::module_::import("kiln._polyfills");
  py::object polyfills = polyfillModule.attr("POLYFILLS");
  py::object itemgetterCall = polyfillModule.attr("itemgetter_call");
  py::object attrgetterCall = polyfillModule.attr("attrgetter_call");
  py::object itemgetterType =
      py::module_::import("operator").attr("itemgetter");
  py::object attrgetterType =
      py::module_::import("operator").attr("attrgetter");
  /// The model of builtin `function` (an empty object: none).
  py::object polyfillFor(py::handle function) const {
    PyObject *found = PyDict_GetItemWithError(polyfills.ptr(), function.ptr());
    if (!found) {
      PyErr_Clear(); // absent, or unhashable
      return py::object();
    }
    return py::reinterpret_borrow<py::object>(found);
  }
  // The exits of grad-mode blocks a graph break left open, by the mode
  // they restore (kiln._resume.GRAD_MODE_EXITS).
  std::vector<py::object> gradModeExits = [] {
    py::tuple exits =
        py::module_::import("kiln._resume").attr("GRAD_MODE_EXITS");
    return std::vector<py::object>{exits[0], exits[1]};
  }();
  py::object enumType = py::module_::import("enum").attr("Enum");
  py::object orderedDictType =
      py::module_::import("collections").attr("OrderedDict");
  py::object defaultDictType =
      py::module_::import("collections").attr("defaultdict");
  py::object dequeType = py::module_::import("collections").attr("deque");
  py::object autocastType =
      py::module_::import("torch.amp.autocast_mode").attr("autocast");
  py::object autocastEnabled = polyfillModule.attr("autocast_enabled");
  py::object recordFunctionType =
      py::module_::import("torch.autograd.profiler").attr("record_function");
  py::object nullContextType =
      py::module_::import("contextlib").attr("nullcontext");
  py::object lruCacheWrapperType =
      py::module_::import("functools").attr("_lru_cache_wrapper");
  py::object incomparableKey = polyfillModule.attr("Incomparable");
  py::object partialModel = polyfillModule.attr("partial");
  py::object gradModeWrapper = polyfillModule.attr("grad_mode_wrapper");
  py::object tupleNew = py::reinterpret_borrow<py::object>(
                            reinterpret_cast<PyObject *>(&PyTuple_Type))
                            .attr("__new__");
  py::object simpleNamespaceType =
      py::module_::import("types").attr("SimpleNamespace");

  Handles() {
    for (const char *name :
         {"abs",     "all",     "any",      "bool",       "callable",
          "chr",     "divmod",  "float",    "format",     "frozenset",
          "hasattr", "hash",    "int",      "isinstance", "issubclass",
          "len",     "max",     "min",      "ord",        "pow",
          "range",   "repr",    "reversed", "round",      "slice",
          "sorted",  "str",     "sum",      "tuple",      "type",
          "getattr", "list",    "dict",     "set",        "enumerate",
          "zip",     "setattr", "iter",     "next",       "hex",
          "oct",     "bin",     "vars"})
      pureBuiltins.insert(builtins.attr(name).ptr());
    // torch.device("cpu"), torch.device("cuda", 0): a constant.
    pureBuiltins.insert(torch.attr("device").ptr());
    for (py::object call : {torch.attr("finfo"), torch.attr("iinfo"),
                            torch.attr("promote_types"), torch.attr("can_cast"),
                            py::module_::import("inspect").attr("signature")})
      pureObjectCalls.insert(call.release().ptr());
  }
  static const Handles &get() {
    // Building the handles imports modules, which may let another thread
    // run: it waits without the GIL (a plain static would deadlock).
    PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<const Handles *>
        handles;
    return *handles.call_once_and_store_result([] { return new Handles(); })
                .get_stored();
  }
  py::object builtin(const char *name) const { return builtins.attr(name); }
};

/// The attribute `name` as `type`'s MRO defines it (no descriptor called),
/// or null. Borrowed.
PyObject *lookUpOnType(py::handle type, const std::string &name);
/// Whether `type`'s `__getattribute__` (or `__setattr__`, with `setter`)
/// is the generic one of object and builtin containers (a Python override
/// or a builtin with its own lookup is not).
bool hasGenericAttributes(py::handle type, bool setter);
/// Whether an object is an immutable constant the evaluator folds (None,
/// numbers, strings, slices, dtypes, devices, tuples of such).
bool isConstantObject(py::handle object);
/// The C type name of an object ("list", "Tensor").
std::string typeName(py::handle object);
/// The Python type name of what a variable stands for: "list", "Tensor".
std::string kindNameOf(py::handle type);
/// The module a callable was defined in ("torch.nn.functional", "math").
std::string moduleOf(py::handle callable);
/// What builds an object of the tuple class `cls` from a tuple of its items
/// (`cls` itself, or a namedtuple's `_make`).
py::object structBuilder(py::handle cls);
/// "G[torch.nn.functional]": the globals of another module, by its name.
std::string globalsName(py::handle globals);
bool startsWith(const std::string &text, const std::string &prefix);
/// Modules whose functions the evaluator calls rather than inlines.
bool isTorchModuleName(const std::string &name);

/// Whether Python's iterator would now give other items than the
/// capture's snapshot: its list changed, or an enumerate or zip made over it
/// (which took its items at once) has items left.
bool iteratorIsStale(const Variable &iterator);
/// Whether `function` is a Python function defined inside another (its
/// code flagged CO_NESTED): each call of its maker makes a new one.
bool isNestedFunction(py::handle function);
/// Whether a Function variable is such a function read from a source: it is
/// guarded by its code, and what else it brings (defaults, closure,
/// attributes) is read through that source.
bool readThroughSource(const Variable &function);
/// CPython's co_localspluskinds flags of a cell and of a free variable
/// (CO_FAST_CELL, CO_FAST_FREE in 3.11 and 3.12's internal headers).
constexpr uint8_t kCellVariableKind = 0x40;
constexpr uint8_t kFreeVariableKind = 0x80;
/// The lists an iterator reads as it goes (its own, or those of the
/// iterators an enumerate, zip or reversed of it reads), into `lists`.
void listsReadBy(const Variable &iterator, std::vector<VariablePtr> &lists);
/// The position of `key` among a dict variable's keys, or -1.
int findKey(const VariablePtr &dict, py::handle key);
/// The maxlen (a constant: None or an int) of a deque made in the frame.
const VariablePtr &dequeMaxlen(const VariablePtr &deque);

/// A Python exception raised inside the code being evaluated (a missing
/// dict key, a `raise` statement): runFrame looks for the `try` block that
/// catches it, in the raising frame and then in its callers.
struct PythonException {
  py::object exception; // the exception instance
};

class Evaluator {
public:
  explicit Evaluator(const FrameInputs &inputs,
                     const DynamicPolicy *dynamic = nullptr)
      : inputs_(inputs), graph_(std::make_shared<Graph>()), dynamic_(dynamic) {
    gradEnabled_ = Handles::get().isGradEnabled().cast<bool>();
    if (dynamic_)
      symbolic_ = SymbolTable::module().attr("SymbolicCapture")();
  }

  Capture run(py::handle function);

  /// Makes run() stop before the root frame's instruction number `step`
  /// (counting executed instructions; it must be the one at index `pc`) and
  /// end the capture at a graph break there, for `reason`.
  void stopBefore(long step, size_t pc, std::string reason) {
    stopStep_ = step;
    stopPc_ = pc;
    breakReason_ = std::move(reason);
  }
  /// After run() threw Unsupported: whether an instruction of the root frame
  /// was executing (a graph break could stop before it), and which.
  bool failedInRootFrame() const { return failedStep_ >= 0; }
  /// A torch call failed on tensors with symbolic sizes (its meta function
  /// cannot take them): a static capture, not a graph break, is the answer.
  bool failedOnSymbolicSizes() const { return failedOnSymbolicSizes_; }
  /// Whether the root frame failed inside an except block: a resume
  /// function would run the rest of the block without the exception being
  /// handled (a bare raise there fails), so the frame runs in CPython.
  bool failedInExceptBlock() const { return failedInExceptBlock_; }
  long failedStep() const { return failedStep_; }
  size_t failedPc() const { return failedPc_; }
  int failedOffset() const { return failedOffset_; }

private:
  struct Frame {
    std::shared_ptr<const Bytecode> code;
    py::object codeObject;
    std::vector<VariablePtr> locals;
    std::vector<py::object> rootArguments; // root frame: not yet wrapped
    std::vector<std::string> localNames;
    std::vector<uint8_t> localKinds;
    std::vector<VariablePtr> stack;
    py::object globals;
    py::object builtins;
    bool isRoot = false;
    std::vector<VariablePtr> freeCells;
    py::object kwnames;
    size_t pc = 0;
    VariablePtr returned;
    std::vector<VariablePtr> yielded; // a generator's values, in order
  };

  // --- the interpreter loop -------------------------------------------
  /// Decodes `code` into `frame` and sizes its locals; `globals` is the
  /// function's module dict (its builtins come from there).
  void setUpFrame(Frame &frame, py::object code, py::object globals);
  VariablePtr runFrame(Frame &frame);
  void execute(Frame &frame, const Instruction &instruction);
  VariablePtr pop(Frame &frame) {
    if (frame.stack.empty())
      throw Error("symbolic stack underflow");
    VariablePtr top = std::move(frame.stack.back());
    frame.stack.pop_back();
    return top;
  }
  std::vector<VariablePtr> popN(Frame &frame, size_t n) {
    if (frame.stack.size() < n)
      throw Error("symbolic stack underflow");
    std::vector<VariablePtr> items(frame.stack.end() - n, frame.stack.end());
    frame.stack.resize(frame.stack.size() - n);
    return items;
  }
  VariablePtr &peek(Frame &frame, size_t depth = 1) {
    if (frame.stack.size() < depth)
      throw Error("symbolic stack underflow");
    return frame.stack[frame.stack.size() - depth];
  }
  void jump(Frame &frame, const Instruction &instruction) {
    frame.pc = instruction.jumpTarget;
  }
  VariablePtr local(Frame &frame, int index);
  VariablePtr loadGlobal(Frame &frame, const std::string &name);
  /// Where a global `name` of the module whose dict is `globals` is read
  /// from: G['name'] for the compiled function's own module, else an item
  /// of that module's dict.
  SourcePtr globalSource(const py::object &globals, const std::string &name);
  /// The module whose namespace the frame's globals are, as a guarded
  /// variable (unsupported(`what`...) for exec'd code).
  VariablePtr globalsModule(Frame &frame, const std::string &what);
  void doCall(Frame &frame, size_t argumentCount);
  void binaryOp(Frame &frame, int op);
  /// `operator.<name>` of one operand: evaluated on a constant, recorded on
  /// a tensor.
  VariablePtr unaryOp(const char *name, const VariablePtr &operand);
  void compareOp(Frame &frame, const std::string &op);

  // --- values -----------------------------------------------------------
  VariablePtr wrap(py::handle object, SourcePtr source);
  VariablePtr wrapTensor(py::handle tensor, const SourcePtr &source);
  VariablePtr loadAttr(const VariablePtr &base, const std::string &name);
  VariablePtr call(const VariablePtr &callable, std::vector<VariablePtr> args,
                   std::vector<std::pair<std::string, VariablePtr>> kwargs);
  VariablePtr
  callBuiltin(py::handle function, std::vector<VariablePtr> &args,
              std::vector<std::pair<std::string, VariablePtr>> &kwargs,
              bool &handled);
  VariablePtr dictReadMethod(const VariablePtr &self, const std::string &name,
                             py::handle attribute);
  VariablePtr readGuardedDict(const VariablePtr &self, const std::string &name,
                              std::vector<VariablePtr> &args);
  VariablePtr callMethodOfContainer(const VariablePtr &self,
                                    const std::string &name,
                                    std::vector<VariablePtr> &args);
  VariablePtr
  callTensorMethod(const VariablePtr &self, const std::string &name,
                   std::vector<VariablePtr> &args,
                   std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  VariablePtr
  inlineFunction(const VariablePtr &function, std::vector<VariablePtr> args,
                 std::vector<std::pair<std::string, VariablePtr>> kwargs);
  /// A Python model of a builtin or library function (kiln._polyfills),
  /// inlined as user code is.
  VariablePtr
  inlineModel(py::object model, std::vector<VariablePtr> args,
              std::vector<std::pair<std::string, VariablePtr>> kwargs);
  /// `type(self).<name>(self, *args)` inlined when the object's class
  /// defines that special method in Python (a Mapping's __getitem__ or
  /// __contains__, a __len__); null when it does not.
  VariablePtr callPythonSpecialMethod(const VariablePtr &self, const char *name,
                                      std::vector<VariablePtr> args);
  /// A module call: its class's own Python __call__ if it has one (unless
  /// this is nn.Module.__call__ reached from there), else forward inlined.
  VariablePtr
  inlineModule(const VariablePtr &module, std::vector<VariablePtr> args,
               std::vector<std::pair<std::string, VariablePtr>> kwargs,
               bool viaModuleCall = false);
  VariablePtr
  torchCall(py::handle function, const std::vector<VariablePtr> &args,
            const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  /// A call's arguments as Python objects, each a constant; `refusal` if
  /// one is not.
  std::pair<py::list, py::dict> constantArguments(
      const std::vector<VariablePtr> &args,
      const std::vector<std::pair<std::string, VariablePtr>> &kwargs,
      const std::string &refusal);
  /// The sort or max/min key of `item`: what `key` gives for it (called
  /// once, as Python calls it; null `key`: the item itself), in
  /// `keyValue`, and that as a constant, nullopt where it is none (a
  /// module counts as none).
  std::optional<py::object> constantKey(const VariablePtr &item,
                                        const VariablePtr &key,
                                        VariablePtr &keyValue);
  VariablePtr iterate(const VariablePtr &iterable);
  std::vector<VariablePtr> unpack(const VariablePtr &sequence);
  /// collections.OrderedDict(...) and defaultdict(...) made in the frame.
  /// A class statement in the frame (__build_class__(body, name,
  /// *bases)): the class is made at capture, its body run in CPython, and
  /// every call of the capture uses it.
  VariablePtr
  defineClass(const std::vector<VariablePtr> &args,
              const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  /// A new object of class `cls` made in the frame: its attributes (an
  /// empty Dict), and a builtin base's contents of kind `contents` (a dict
  /// subclass's Dict, a deque's List) where it has one.
  VariablePtr newInstance(py::handle cls,
                          std::optional<Kind> contents = std::nullopt);
  /// OrderedDict.copy() / defaultdict.copy() of `self`, a dict subclass
  /// instance of the frame or an input: one of its class.
  VariablePtr copyBuiltinDict(const VariablePtr &self);
  VariablePtr constructBuiltinDict(
      py::handle cls, std::vector<VariablePtr> &args,
      const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  /// collections.deque(iterable, maxlen) made in the frame: an instance
  /// whose contents are a list of the frame and whose `maxlen` is kept in
  /// its attributes.
  VariablePtr constructDeque(
      std::vector<VariablePtr> &args,
      const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  /// A deque's own methods (appendleft, popleft, extendleft, rotate, and
  /// append/extend/insert at its maxlen) on its contents; null for the
  /// methods a list has as they are.
  VariablePtr callDequeMethod(const VariablePtr &deque, const std::string &name,
                              std::vector<VariablePtr> &args);
  /// `instance[key]` where the key is missing from a dict subclass made in
  /// the frame: its __missing__ (null where its class has none).
  VariablePtr missingItem(const VariablePtr &instance, const VariablePtr &key);
  /// `left <op> right` through the operands' Python special methods
  /// (`__add__`, then the other's `__radd__`; `__eq__` and its reflection
  /// `__eq__`), as CPython dispatches them; null where neither operand's
  /// class defines the method in Python.
  VariablePtr userOperator(const VariablePtr &left, const VariablePtr &right,
                           const std::string &method,
                           const std::string &reflected,
                           bool comparison = false);
  /// `value` as a list or tuple variable (a constant tuple as a tuple of
  /// constants), or null where it is neither.
  VariablePtr sequenceOf(const VariablePtr &value);
  /// dict.update(other) of a dict variable by a dict, pairs or keywords:
  /// existing keys keep their place.
  void mergeIntoDict(const VariablePtr &dict, const VariablePtr &other);
  void setDictItem(const VariablePtr &dict, const py::object &key,
                   const VariablePtr &value);
  /// `type(callable).__call__` bound to `callable` where it is a Python
  /// function, else null.
  VariablePtr pythonCallMethod(const VariablePtr &callable);
  /// The hooks in `owner.<name>` (a module's or torch's global hook dict)
  /// by id, their keys guarded through `ownerSource` where there is one.
  std::vector<std::pair<py::object, VariablePtr>>
  moduleHooks(py::handle owner, const SourcePtr &ownerSource, const char *name);
  /// `items` in the order sorted() and list.sort() give them, with their
  /// `key` and `reverse` keyword arguments.
  std::vector<VariablePtr>
  sortedItems(const std::vector<VariablePtr> &items,
              const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  /// A namedtuple class called in the frame: the tuple, or null when `cls`
  /// is not one.
  VariablePtr constructNamedTuple(
      py::handle cls, const std::vector<VariablePtr> &args,
      const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  /// A torch nn.Module class without parameters or buffers built in the
  /// frame from constants: the module, made now; null for other classes.
  VariablePtr constructStatelessModule(
      py::handle cls, const std::vector<VariablePtr> &args,
      const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  /// The items an iterator the frame made has left, which it no longer has.
  std::vector<VariablePtr> takeRest(const VariablePtr &iterator);
  bool truthy(const VariablePtr &value);
  std::optional<py::object> asConstant(const VariablePtr &value);
  py::object toTraceObject(const VariablePtr &value);
  VariablePtr fromTraceObject(py::handle object);
  py::object metaTensorOf(Value *value);

  // --- dynamic shapes (SymbolicEvaluator.cpp) -----------------------------
  /// The dims of an input tensor the capture makes symbolic.
  std::vector<int64_t> dynamicDims(py::handle tensor, const SourcePtr &source,
                                   const TensorMeta &meta);
  /// Whether `object` (or an item of it) is a size of this symbolic
  /// capture, which a plan made of constants cannot hold.
  bool holdsVaryingSize(py::handle object) const;
  /// `object` with each size that varies (a torch.SymInt, in tuples, lists
  /// and dicts) replaced by its value, which the capture's guards then pin:
  /// for Python work on a size that symbols cannot follow (text, hashing,
  /// type checks).
  py::object specializeSizes(py::object object);
  /// A recorded argument that holds torch SymInts, as a symbolic Argument.
  std::optional<Argument> symbolicArgument(py::handle argument);
  /// The relations torch's ShapeEnv recorded, as guards.
  void addSizeRelations();
  py::object pythonTypeOf(const VariablePtr &value);
  void checkNotInput(const VariablePtr &container, const char *what);
  /// Python's index into `size` items (negative ones count from the end);
  /// unsupported("<what> index out of range") outside them.
  size_t sequenceIndex(int64_t index, size_t size, const char *what);
  void setGradMode(bool enabled);
  OutputTemplate buildOutput(const VariablePtr &value,
                             std::vector<Argument> &outputs);
  /// `list[slice] = value` on a list made in the frame.
  void assignListSlice(const VariablePtr &list, py::handle slice,
                       const VariablePtr &value);
  /// A local slot's value is gone (deleted, cleared): in the root frame its
  /// argument must not be read again either.
  void clearLocal(Frame &frame, int index);

  // --- graph breaks (GraphBreak.cpp) -----------------------------------
  /// The capture of everything before the root frame's current instruction,
  /// whose graph outputs the live values there.
  Capture captureAtBreak(Frame &frame, bool initialGradMode);
  struct Rebuilder;
  int rebuild(const VariablePtr &value, Rebuilder &rebuilder);
  /// A loop's iterator on the stack at the break, as `how` says it leaves
  /// (GraphBreak::Iterated).
  int rebuildLoopIterator(const Frame &frame, const VariablePtr &iterator,
                          Rebuilder &rebuilder, GraphBreak::Iterated &how);
  /// The state kiln._resume.iterator_at makes a live iterator again from,
  /// once it has given `position` items.
  int rebuildIteratorState(const VariablePtr &iterator, size_t position,
                           Rebuilder &rebuilder);
  /// `cell.cell_contents = value` for a cell passed into a resume function
  /// (Cell with the cell object's variable in cells[0]): recorded as an
  /// attribute write, replayed after the graph.
  void writeCellContents(const VariablePtr &cell, const VariablePtr &value);
  /// The recorded writes as side effects of the plan, and the guards that
  /// keep their targets apart from other objects.
  void planSideEffects(Rebuilder &rebuilder);

  // --- objects made in the frame (Instances.cpp) -------------------------
  /// `cls(*args, **kwargs)` for a Python class kiln models, with __init__
  /// inlined; null when the class is not one (a builtin or extension base,
  /// a Python __new__, a metaclass __call__, an nn.Module).
  VariablePtr
  constructInstance(py::handle cls, std::vector<VariablePtr> args,
                    std::vector<std::pair<std::string, VariablePtr>> kwargs);
  /// `self.name` as Python looks it up: data descriptors (properties), the
  /// instance dict, the class, then a Python __getattr__ if allowed.
  VariablePtr instanceAttribute(const VariablePtr &self,
                                const std::string &name, bool orGetattrHook);
  bool instanceHasAttribute(const VariablePtr &self, const std::string &name);
  /// `self.name = value` through the class's __setattr__.
  void storeInstanceAttribute(const VariablePtr &self, const std::string &name,
                              const VariablePtr &value);
  /// object.__setattr__(self, name, value): a property's setter or a store
  /// into the modelled __dict__.
  void setRawAttribute(const VariablePtr &self, const std::string &name,
                       const VariablePtr &value);
  /// `super().name` inside a method of an instance made in the frame.
  VariablePtr superAttribute(const VariablePtr &super, const std::string &name);
  /// A builtin base's slot or method (object.__setattr__, dict.__setitem__,
  /// OrderedDict.keys) called on an instance made in the frame.
  VariablePtr callSlotOnInstance(py::handle slot, const VariablePtr &self,
                                 std::vector<VariablePtr> &args);
  /// For an instance of a dict subclass whose class does not define
  /// `specialMethod` in Python: its modelled contents; otherwise `value`.
  /// `module.parameters()` and nn.Module's other structure iterators
  /// (buffers, children, modules, and their named_ forms) where the module's
  /// class keeps nn.Module's own: an iterator over what they give now, each
  /// tensor and submodule read from its attribute path, with the module
  /// tree's structure guarded. Null for another method.
  VariablePtr moduleStructureCall(
      const VariablePtr &module, py::handle function,
      const std::vector<VariablePtr> &args,
      const std::vector<std::pair<std::string, VariablePtr>> &kwargs);
  VariablePtr builtinContents(const VariablePtr &value,
                              const char *specialMethod);
  void addToSet(const VariablePtr &set, const VariablePtr &item);
  /// A new Python set of a Set's elements, inserted in the same order.
  py::object realSet(const VariablePtr &set);
  VariablePtr setFromObject(py::handle object);
  VariablePtr callMethodOfSet(const VariablePtr &self, const std::string &name,
                              std::vector<VariablePtr> &args);

  // --- side effects (SideEffects.cpp) ------------------------------------
  /// `target.name = value` on an object from outside the frame: recorded,
  /// read back by later loads, replayed after the graph.
  void storeAttr(const VariablePtr &target, const std::string &name,
                 const VariablePtr &value);
  /// The value the capture wrote to `object.name`, or null.
  VariablePtr writtenAttribute(const VariablePtr &base,
                               const std::string &name);
  /// os.environ[key] (or .get(key, fallback) with `fallback`), read now and
  /// guarded: the key's presence and its value.
  VariablePtr readEnvironment(const VariablePtr &environment,
                              const VariablePtr &key,
                              const VariablePtr *fallback);
  /// hasattr(value, name), guarded.
  VariablePtr hasAttribute(const VariablePtr &value, const std::string &name);

  [[noreturn]] void unsupported(const std::string &what) {
    throw Unsupported(what);
  }
  /// Raises `type(argument)` into the code being evaluated: its `try`
  /// blocks may catch it (runFrame); one no block catches ends the capture
  /// (kiln::Unsupported), and CPython raises it.
  [[noreturn]] void raisePython(py::handle type, py::object argument);
  /// Raises the Python error a call made during capture set.
  [[noreturn]] void raiseCaptured(py::error_already_set &error);
  /// The exception being handled (an `except` block's), or null.
  VariablePtr handling_;

  FrameInputs inputs_;
  std::shared_ptr<Graph> graph_;
  const DynamicPolicy *dynamic_ = nullptr;
  py::object symbolic_;     // kiln._symbolic.SymbolicCapture
  SymbolTable symbolTable_; // torch's symbols, numbered for kiln
  GuardTree guards_;
  std::vector<std::string> notes_;
  std::unordered_map<std::string, VariablePtr> bySource_;
  std::unordered_map<Value *, py::object> metaTensors_;
  /// The tensor each graph input was read from (this capture's call), for
  /// `is` between inputs.
  std::unordered_map<const Value *, py::object> inputObjects_;
  std::unordered_map<PyObject *, Value *> valueOfMeta_;
  std::vector<py::object> keepAlive_;
  struct AttributeWrite {
    VariablePtr target;
    std::string name;
    VariablePtr value;
  };
  std::vector<AttributeWrite> writes_; // in program order
  /// An instance or set was made: the result may need a rebuild plan.
  bool madeInstances_ = false;
  /// Lists and dicts of the caller's that the frame changed: their final
  /// contents are replayed after the graph.
  std::vector<VariablePtr> changedContainers_;
  std::map<std::pair<PyObject *, std::string>, VariablePtr> written_;
  std::map<PyObject *, VariablePtr> writtenObjects_; // object -> target
  bool gradEnabled_ = true;
  int depth_ = 0;
  long executed_ = 0;
  std::string where_;
  // Graph breaks: the root frame's instructions started so far, where to
  // stop, and where the last Unsupported came from.
  long rootStep_ = 0;
  long stopStep_ = -1;
  size_t stopPc_ = 0;
  bool stopped_ = false;
  std::string breakReason_;
  long failedStep_ = -1;
  bool failedOnSymbolicSizes_ = false;
  bool failedInExceptBlock_ = false;
  size_t failedPc_ = 0;
  int failedOffset_ = 0;
};

/// The plan a capture's end builds: steps and graph outputs, with each
/// variable and tensor built once.
struct Evaluator::Rebuilder {
  RebuildPlan &state;
  std::vector<Argument> outputs;
  std::unordered_map<const Variable *, int> byVariable;
  std::unordered_map<Value *, int> byTensor;
  std::unordered_set<const Variable *> inProgress;
  /// The iterators made again at the break: one read twice (by two live
  /// loops) would become two.
  std::unordered_set<const Variable *> iterators;

  int add(RebuildStep step) {
    state.steps.push_back(std::move(step));
    return static_cast<int>(state.steps.size()) - 1;
  }
};

} // namespace kiln::frontend::evaluation
