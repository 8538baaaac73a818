// CPython's per-code-object extra slots under the names of the running
// version (3.12 renamed them; the old names still work, deprecated).
// Depends on CPython.
#pragma once

#include <Python.h>

#if PY_VERSION_HEX >= 0x030C0000
#define KILN_REQUEST_CODE_EXTRA_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#define KILN_CODE_GET_EXTRA PyUnstable_Code_GetExtra
#define KILN_CODE_SET_EXTRA PyUnstable_Code_SetExtra
#else
#define KILN_REQUEST_CODE_EXTRA_INDEX _PyEval_RequestCodeExtraIndex
#define KILN_CODE_GET_EXTRA _PyCode_GetExtra
#define KILN_CODE_SET_EXTRA _PyCode_SetExtra
#endif
