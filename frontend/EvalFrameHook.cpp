// The PEP 523 frame hook for CPython 3.11 and 3.12, with a per-code-object
// cache kept in the code object's extra slot. Depends on frontend/CodeCache.h
// and CPython's internal frame layout.
#include "frontend/EvalFrameHook.h"

#include "frontend/CodeCache.h"
#include "frontend/CodeExtra.h"

#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::frontend {
namespace {

thread_local int activeDepth = 0;
thread_local int suspendedDepth = 0;
// The code whose next frame runs in CPython untouched (HookActivation's).
thread_local PyObject *skipNextFrameOf = nullptr;
// The options of the compiled function the hook captures for (null: the
// defaults).
thread_local const CacheOptions *activeOptions = nullptr;
int installedCount = 0; // guarded by the GIL
_PyFrameEvalFunction previousEvalFrame = nullptr;

// What kiln decided about one code object, kept in its extra slot.
struct CodeExtra {
  explicit CodeExtra(const CacheOptions &options) : cache(options) {}
  bool skip = false;
  CodeCache cache;
};

CacheOptions inheritedOptions() {
  CacheOptions options = activeOptions ? *activeOptions : CacheOptions{};
  options.fullgraph = false; // a nested frame falls back, never raises
  return options;
}

void freeCodeExtra(void *extra) { delete static_cast<CodeExtra *>(extra); }

Py_ssize_t codeExtraIndex() {
  static Py_ssize_t index = KILN_REQUEST_CODE_EXTRA_INDEX(freeCodeExtra);
  return index;
}

/// site-packages folders: under the standard library's folder, not skipped.
std::vector<std::string> &packageRoots() {
  static std::vector<std::string> roots;
  return roots;
}

const std::vector<std::string> &skippedPrefixes() {
  // Imports may let another thread run: it waits without the GIL.
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<
      const std::vector<std::string> *>
      prefixes;
  return *prefixes
              .call_once_and_store_result([] {
                // Computing them runs Python code, whose frames must not come
                // back here.
                HookSuspension suspension;
                auto *result = new std::vector<std::string>();
                PyObject *type, *value, *traceback;
                PyErr_Fetch(&type, &value, &traceback);
                try {
                  py::module_ sysconfig = py::module_::import("sysconfig");
                  py::dict paths = sysconfig.attr("get_paths")();
                  for (const char *key : {"stdlib", "platstdlib"})
                    result->push_back(paths[key].cast<std::string>());
                  // Third-party packages live under the standard library's
                  // folder (lib/python3.x/site-packages) but are user code:
                  // a model from transformers is captured like one's own.
                  for (const char *key : {"purelib", "platlib"})
                    packageRoots().push_back(paths[key].cast<std::string>());
                  py::module_ os = py::module_::import("os");
                  for (const char *package : {"torch", "kiln"}) {
                    py::module_ module = py::module_::import(package);
                    result->push_back(
                        os.attr("path")
                            .attr("dirname")(module.attr("__file__"))
                            .cast<std::string>());
                  }
                } catch (py::error_already_set &) {
                }
                result->push_back("<frozen");
                PyErr_Restore(type, value, traceback);
                return result;
              })
              .get_stored();
}

CodeExtra *extraOf(PyCodeObject *code) {
  void *extra = nullptr;
  if (KILN_CODE_GET_EXTRA(reinterpret_cast<PyObject *>(code), codeExtraIndex(),
                          &extra) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  if (extra)
    return static_cast<CodeExtra *>(extra);
  auto *created = new CodeExtra(inheritedOptions());
  constexpr int kGeneratorFlags =
      CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR;
  // A 3.11 comprehension is a function of an iterator its caller made: its
  // caller's frame (captured or run in CPython) is where it belongs.
  const char *name = PyUnicode_AsUTF8(code->co_name);
  bool comprehension =
      name &&
      (!std::strcmp(name, "<listcomp>") || !std::strcmp(name, "<dictcomp>") ||
       !std::strcmp(name, "<setcomp>") || !std::strcmp(name, "<genexpr>"));
  created->skip = (code->co_flags & kGeneratorFlags) || comprehension ||
                  isSkippedFile(PyUnicode_AsUTF8(code->co_filename));
  if (PyErr_Occurred())
    PyErr_Clear();
  if (KILN_CODE_SET_EXTRA(reinterpret_cast<PyObject *>(code), codeExtraIndex(),
                          created) < 0) {
    PyErr_Clear();
    delete created;
    return nullptr;
  }
  return created;
}

PyObject *functionOf(_PyInterpreterFrame *frame) {
#if PY_VERSION_HEX >= 0x030C0000
  return frame->f_funcobj;
#else
  return reinterpret_cast<PyObject *>(frame->f_func);
#endif
}

#if PY_VERSION_HEX >= 0x030C0000
// 3.12's default evaluator clears and pops the frames it runs; a frame kiln
// answers itself must be cleared and popped here instead. Only frames with no
// frame object take this path (see canAnswer).
void clearAndPopFrame(PyThreadState *tstate, _PyInterpreterFrame *frame) {
  for (int i = 0; i < frame->stacktop; i++)
    Py_XDECREF(frame->localsplus[i]);
  frame->stacktop = 0;
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  // CPython 3.12 does not export its frame pop: the data stack is a chain of
  // chunks, and a frame at the start of a chunk releases that chunk.
  PyObject **base = reinterpret_cast<PyObject **>(frame);
  _PyStackChunk *chunk = tstate->datastack_chunk;
  if (base == &chunk->data[0] && chunk->previous) {
    _PyStackChunk *previous = chunk->previous;
    tstate->datastack_top = &previous->data[previous->top];
    tstate->datastack_chunk = previous;
    tstate->datastack_limit = reinterpret_cast<PyObject **>(
        reinterpret_cast<char *>(previous) + previous->size);
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, chunk, chunk->size);
  } else {
    tstate->datastack_top = base;
  }
}
#endif

bool canAnswer(_PyInterpreterFrame *frame) {
  if (frame->owner != FRAME_OWNED_BY_THREAD)
    return false;
#if PY_VERSION_HEX >= 0x030C0000
  // A frame object (a profiler or traceback asked for one) owns state that
  // only CPython can hand over: let CPython run the frame.
  if (frame->frame_obj)
    return false;
#endif
  // Module, class and exec() bodies (no CO_OPTIMIZED: their locals are a
  // dict) are not functions kiln can capture.
  if (!(frame->f_code->co_flags & CO_OPTIMIZED))
    return false;
  PyObject *function = functionOf(frame);
  return function && PyFunction_Check(function);
}

PyObject *kilnEvalFrame(PyThreadState *tstate, _PyInterpreterFrame *frame,
                        int throwflag) {
  if (activeDepth == 0 || suspendedDepth > 0 || throwflag || !canAnswer(frame))
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  if (skipNextFrameOf == reinterpret_cast<PyObject *>(frame->f_code)) {
    skipNextFrameOf = nullptr;
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
  PyCodeObject *code = frame->f_code;
  CodeExtra *extra = extraOf(code);
  if (!extra || extra->skip || extra->cache.runsInCPython())
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  PyObject *function = functionOf(frame);
  int count = code->co_argcount + code->co_kwonlyargcount +
              ((code->co_flags & CO_VARARGS) ? 1 : 0) +
              ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  FrameInputs inputs = frameInputsOf(function, frame->localsplus, count);
  PyObject *result = extra->cache.run(function, inputs);
  if (!result && !PyErr_Occurred())
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
#if PY_VERSION_HEX >= 0x030C0000
  clearAndPopFrame(tstate, frame);
#endif
  return result;
}

} // namespace

bool isSkippedFile(const char *filename) {
  if (!filename)
    return true;
  std::string name = filename;
  auto startsWith = [&](const std::string &prefix) {
    return !prefix.empty() && name.compare(0, prefix.size(), prefix) == 0;
  };
  const std::vector<std::string> &skipped = skippedPrefixes();
  // A package under site-packages is skipped only by a longer prefix
  // (torch's, kiln's), not by the standard library's folder around it.
  size_t packageRoot = 0;
  for (const std::string &root : packageRoots())
    if (startsWith(root))
      packageRoot = std::max(packageRoot, root.size());
  for (const std::string &prefix : skipped)
    if (startsWith(prefix) && prefix.size() > packageRoot)
      return true;
  return false;
}

PyObject *codeCacheInfo(PyObject *code) {
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "code_cache_info needs a code object");
    return nullptr;
  }
  void *extra = nullptr;
  if (KILN_CODE_GET_EXTRA(code, codeExtraIndex(), &extra) < 0)
    return nullptr;
  if (!extra)
    Py_RETURN_NONE;
  return static_cast<CodeExtra *>(extra)->cache.info().release().ptr();
}

void allowLoopSteps(PyObject *code, const CacheOptions &options, int steps) {
  const CacheOptions *previous = activeOptions;
  activeOptions = &options;
  CodeExtra *extra = extraOf(reinterpret_cast<PyCodeObject *>(code));
  activeOptions = previous;
  if (extra)
    extra->cache.allowLoopSteps(steps);
}

void skipCodeInHook(PyObject *code) {
  if (CodeExtra *extra = extraOf(reinterpret_cast<PyCodeObject *>(code)))
    extra->skip = true;
}

HookActivation::HookActivation(PyObject *runsInCPython,
                               const CacheOptions *options)
    : previousSkip_(skipNextFrameOf), previousOptions_(activeOptions) {
  skippedPrefixes(); // computed before the hook can ask for them
  skipNextFrameOf = runsInCPython;
  if (options)
    activeOptions = options;
  ++activeDepth;
  if (installedCount++ == 0) {
    PyInterpreterState *interpreter = PyInterpreterState_Get();
    previousEvalFrame = _PyInterpreterState_GetEvalFrameFunc(interpreter);
    _PyInterpreterState_SetEvalFrameFunc(interpreter, kilnEvalFrame);
  }
}

HookActivation::~HookActivation() {
  skipNextFrameOf = previousSkip_;
  activeOptions = previousOptions_;
  --activeDepth;
  if (--installedCount == 0)
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(),
                                         previousEvalFrame);
}

HookSuspension::HookSuspension() { ++suspendedDepth; }
HookSuspension::~HookSuspension() { --suspendedDepth; }

} // namespace kiln::frontend
