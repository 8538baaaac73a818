// ATen operator schemas ("add.Tensor(Tensor self, Tensor other, *,
// Scalar alpha=1) -> Tensor"): parsed from torch's own text, used to check
// arity and types and to normalise positional and keyword arguments.
// Depends on ir/Argument.h only.
#pragma once

#include "ir/Argument.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

/// A schema type: `Tensor`, `int[2]`, `Tensor?[]`, `ScalarType?`, ...
struct SchemaType {
  enum class Base : uint8_t {
    Tensor,
    Int, // int and SymInt
    Float,
    Bool,
    Scalar,
    ScalarType,
    Layout,
    Device,
    MemoryFormat,
    String,
    Generator,
    Dimname,
    Storage,
    Any,
  };
  Base base = Base::Tensor;
  bool isList = false;
  std::optional<int64_t> fixedListSize; // int[2]
  bool elementOptional = false;         // Tensor?[]
  bool optional = false;                // Tensor?, int[]?

  std::string str() const;
  /// Whether an actual argument of this kind is accepted (None only for
  /// optionals, an Int for `int[1]`, ...).
  bool accepts(const Argument &argument) const;
};

struct SchemaArgument {
  std::string name;
  SchemaType type;
  std::optional<Argument> defaultValue;
  bool kwargOnly = false;
  /// The alias annotation: "a" (a view of a), "a!" (writes a), or empty.
  std::string alias;

  bool isWrite() const { return !alias.empty() && alias.back() == '!'; }
};

class OpSchema {
public:
  std::string name;     // "aten::add"
  std::string overload; // "Tensor"; empty for the default overload
  std::vector<SchemaArgument> arguments;
  std::vector<SchemaArgument> returns;
  bool isVararg = false;

  /// "aten::add.Tensor", the registry key.
  std::string qualifiedName() const;
  /// The schema text, as torch prints it.
  std::string str() const;
  /// Any return aliases an argument without writing it (view, transpose).
  bool isView() const;
  /// Any argument is written (add_, copy_, out= overloads).
  bool isMutable() const;
  /// Index of the argument called `name`, or -1.
  int findArgument(std::string_view name) const;

  /// Matches positional and keyword arguments to this schema, fills in
  /// defaults and checks each against its type. The result has one entry per
  /// schema argument. Throws Error naming the op and argument on mismatch.
  std::vector<Argument> normalize(
      const std::vector<Argument> &positional,
      const std::vector<std::pair<std::string, Argument>> &keywords) const;
  /// Checks already-normalised arguments (one per schema argument).
  void check(const std::vector<Argument> &arguments) const;
};

/// Parses a schema; "aten::" is added when the name has no namespace.
/// Throws Error with the position of the problem.
OpSchema parseSchema(std::string_view text);

} // namespace kiln
