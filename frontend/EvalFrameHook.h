// The PEP 523 frame hook: while a compiled function runs in CPython (it could
// not be captured whole), frames of user functions it calls are captured and
// cached per code object too. Frames of the standard library, torch and kiln
// are never touched. Depends on CPython.
#pragma once

#include <Python.h>

namespace kiln::frontend {

struct CacheOptions;

/// While alive, frames on this thread are offered to kiln. Installs the hook
/// for the interpreter while any activation exists, on any thread.
class HookActivation {
public:
  /// `runsInCPython`: the code of the frame the caller is about to run in
  /// CPython (a compiled function that fell back): the hook leaves its
  /// first frame alone instead of trying to capture it a second time.
  /// `options`: what the compiled function on whose behalf frames are
  /// captured was asked for (backend, mode, cache limit); code the hook
  /// meets first under this activation caches with them (fullgraph aside:
  /// a nested frame falls back, it never raises). Null keeps the enclosing
  /// activation's.
  explicit HookActivation(PyObject *runsInCPython = nullptr,
                          const CacheOptions *options = nullptr);
  ~HookActivation();
  HookActivation(const HookActivation &) = delete;
  HookActivation &operator=(const HookActivation &) = delete;

private:
  PyObject *previousSkip_;
  const CacheOptions *previousOptions_;
};

/// While alive, frames on this thread run untouched (kiln's own work:
/// capture, graph execution).
class HookSuspension {
public:
  HookSuspension();
  ~HookSuspension();
  HookSuspension(const HookSuspension &) = delete;
  HookSuspension &operator=(const HookSuspension &) = delete;
};

/// Whether a code object's frames are skipped: the standard library's,
/// torch's and kiln's, but not those of other installed packages.
bool isSkippedFile(const char *filename);

/// The cache the hook keeps on `code` (entries, hits, ...), or None.
PyObject *codeCacheInfo(PyObject *code);

/// A resume function's code that runs the rest of a loop, a step per
/// capture (its break's constants differ each step): its cache keeps
/// `steps` entries more than the limit. Made with `options` (those of the
/// code whose break made it) unless the hook has met it already.
void allowLoopSteps(PyObject *code, const CacheOptions &options, int steps);

/// Makes the hook leave every frame of `code` to CPython (a graph break's
/// continuation, which runs the instruction kiln could not capture).
void skipCodeInHook(PyObject *code);

} // namespace kiln::frontend
