// Where a captured value comes from, relative to the frame: a local, a global,
// an attribute or item of another source, the content of a closure cell.
// Guards check sources, and graph inputs are read through them.
// Depends on pybind11.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

namespace kiln::frontend {

namespace py = pybind11;

struct Source;
using SourcePtr = std::shared_ptr<const Source>;

struct Source {
  enum class Kind : uint8_t {
    Local,   // a frame local: `index` into the frame's locals, `name`
    Global,  // a module global: `name`
    Builtin, // a builtin the frame's globals do not shadow: `name`
    Cell,    // the content of the function's closure cell `index`
    Fixed,   // an object held by the guard itself (a module's globals dict)
    Attr,    // `base.name`
    Item,    // `base[key]`
  };
  Kind kind;
  SourcePtr base;
  std::string name;
  int index = 0;
  py::object key; // Item: the key; Fixed: the object
  /// `name` as an interned Python string, for attribute and dict lookups
  /// that skip encoding and hashing on every guard evaluation.
  py::object nameObject;

  static SourcePtr make(Kind kind, SourcePtr base, std::string name, int index,
                        py::object key) {
    auto source = std::make_shared<Source>();
    source->kind = kind;
    source->base = std::move(base);
    source->name = std::move(name);
    source->index = index;
    source->key = std::move(key);
    PyObject *interned = PyUnicode_InternFromString(source->name.c_str());
    source->nameObject = py::reinterpret_steal<py::object>(interned);
    return source;
  }
  static SourcePtr local(int index, std::string name) {
    return make(Kind::Local, nullptr, std::move(name), index, {});
  }
  static SourcePtr global(std::string name) {
    return make(Kind::Global, nullptr, std::move(name), 0, {});
  }
  static SourcePtr builtin(std::string name) {
    return make(Kind::Builtin, nullptr, std::move(name), 0, {});
  }
  static SourcePtr cell(int index, std::string name) {
    return make(Kind::Cell, nullptr, std::move(name), index, {});
  }
  static SourcePtr fixed(py::object object, std::string name) {
    return make(Kind::Fixed, nullptr, std::move(name), 0, std::move(object));
  }
  static SourcePtr attr(SourcePtr base, std::string name) {
    return make(Kind::Attr, std::move(base), std::move(name), 0, {});
  }
  static SourcePtr item(SourcePtr base, py::object key) {
    return make(Kind::Item, std::move(base), "", 0, std::move(key));
  }

  /// "L['x']", "G['torch'].nn", "L['self'].layers[0].weight".
  std::string str() const {
    switch (kind) {
    case Kind::Local:
      return "L['" + name + "']";
    case Kind::Global:
      return "G['" + name + "']";
    case Kind::Builtin:
      return "B['" + name + "']";
    case Kind::Cell:
      return "C['" + name + "']";
    case Kind::Fixed:
      return name;
    case Kind::Attr:
      return base->str() + "." + name;
    case Kind::Item:
      return base->str() + "[" + py::repr(key).cast<std::string>() + "]";
    }
    return "?";
  }
};

} // namespace kiln::frontend
