// ATen operator schemas: the parser, normalisation of actual arguments and
// type checks. Depends on ir/Argument.h only.
#include "ir/Schema.h"

#include "ir/Error.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace kiln {
namespace {

struct BaseName {
  std::string_view name;
  SchemaType::Base base;
};

constexpr BaseName kBaseNames[] = {
    {"Tensor", SchemaType::Base::Tensor},
    {"int", SchemaType::Base::Int},
    {"SymInt", SchemaType::Base::Int},
    {"float", SchemaType::Base::Float},
    {"bool", SchemaType::Base::Bool},
    {"Scalar", SchemaType::Base::Scalar},
    {"ScalarType", SchemaType::Base::ScalarType},
    {"Layout", SchemaType::Base::Layout},
    {"Device", SchemaType::Base::Device},
    {"MemoryFormat", SchemaType::Base::MemoryFormat},
    {"str", SchemaType::Base::String},
    {"Generator", SchemaType::Base::Generator},
    {"Dimname", SchemaType::Base::Dimname},
    {"Storage", SchemaType::Base::Storage},
    {"Any", SchemaType::Base::Any},
};

class SchemaParser {
public:
  explicit SchemaParser(std::string_view text) : text_(text) {}

  OpSchema parse() {
    OpSchema schema;
    std::string name = identifier(/*allowColons=*/true);
    if (name.find("::") == std::string::npos)
      name = "aten::" + name;
    schema.name = name;
    if (accept('.'))
      schema.overload = identifier(false);
    expect('(');
    bool kwargOnly = false;
    if (!accept(')')) {
      do {
        skipSpace();
        if (acceptWord("*")) {
          kwargOnly = true;
          continue;
        }
        if (acceptWord("...")) {
          schema.isVararg = true;
          continue;
        }
        SchemaArgument argument = parseArgument(/*isReturn=*/false);
        argument.kwargOnly = kwargOnly;
        schema.arguments.push_back(std::move(argument));
      } while (accept(','));
      expect(')');
    }
    skipSpace();
    if (!acceptWord("->"))
      error("expected '->'");
    if (accept('(')) {
      if (!accept(')')) {
        do
          schema.returns.push_back(parseArgument(/*isReturn=*/true));
        while (accept(','));
        expect(')');
      }
    } else {
      schema.returns.push_back(parseArgument(/*isReturn=*/true));
    }
    skipSpace();
    if (pos_ != text_.size())
      error("unexpected text after the schema");
    return schema;
  }

private:
  [[noreturn]] void error(const std::string &message) {
    throw Error("cannot parse schema '" + std::string(text_) + "' at column " +
                std::to_string(pos_) + ": " + message);
  }

  void skipSpace() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  char peek() {
    skipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool accept(char c) {
    if (peek() != c)
      return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!accept(c))
      error(std::string("expected '") + c + "'");
  }
  bool acceptWord(std::string_view word) {
    skipSpace();
    if (text_.substr(pos_, word.size()) != word)
      return false;
    pos_ += word.size();
    return true;
  }

  std::string identifier(bool allowColons) {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
        ++pos_;
      } else if (allowColons && c == ':' && pos_ + 1 < text_.size() &&
                 text_[pos_ + 1] == ':') {
        pos_ += 2;
      } else {
        break;
      }
    }
    if (start == pos_)
      error("expected a name");
    return std::string(text_.substr(start, pos_ - start));
  }

  // "(a!)", "(a -> *)": only the alias set and the write mark matter here.
  std::string aliasAnnotation() {
    if (!accept('('))
      return "";
    size_t start = pos_;
    size_t close = text_.find(')', pos_);
    if (close == std::string_view::npos)
      error("unclosed alias annotation");
    pos_ = close + 1;
    std::string alias;
    for (char c : text_.substr(start, close - start)) {
      if (c == ' ' || c == '-' || c == '>')
        break;
      alias += c;
    }
    return alias;
  }

  SchemaType parseType(std::string &alias) {
    SchemaType type;
    std::string baseName = identifier(true);
    bool known = false;
    for (const BaseName &candidate : kBaseNames) {
      if (candidate.name == baseName) {
        type.base = candidate.base;
        known = true;
      }
    }
    if (!known)
      error("unknown type '" + baseName + "'");
    alias = aliasAnnotation();
    if (accept('?'))
      type.elementOptional = true;
    if (accept('[')) {
      type.isList = true;
      if (peek() != ']')
        type.fixedListSize = std::stoll(identifier(false));
      expect(']');
      if (alias.empty())
        alias = aliasAnnotation();
      if (accept('?'))
        type.optional = true;
    } else if (type.elementOptional) {
      type.elementOptional = false;
      type.optional = true;
    }
    return type;
  }

  SchemaArgument parseArgument(bool isReturn) {
    SchemaArgument argument;
    argument.type = parseType(argument.alias);
    skipSpace();
    char c = peek();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_')
      argument.name = identifier(false);
    else if (!isReturn)
      error("expected an argument name");
    if (!isReturn && accept('='))
      argument.defaultValue = parseDefault(argument.type);
    return argument;
  }

  // A default value's raw text: up to the next top-level ',' or ')'.
  std::string defaultText() {
    skipSpace();
    size_t start = pos_;
    int depth = 0;
    char quote = 0;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (quote) {
        if (c == quote)
          quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '[') {
        ++depth;
      } else if (c == ']') {
        --depth;
      } else if ((c == ',' || c == ')') && depth == 0) {
        break;
      }
      ++pos_;
    }
    std::string text(text_.substr(start, pos_ - start));
    while (!text.empty() &&
           std::isspace(static_cast<unsigned char>(text.back())))
      text.pop_back();
    return text;
  }

  Argument parseNumber(const std::string &text, bool wantFloat) {
    if (text == "inf")
      return std::numeric_limits<double>::infinity();
    if (text == "-inf")
      return -std::numeric_limits<double>::infinity();
    bool isFloat = text.find_first_of(".eE") != std::string::npos;
    try {
      if (isFloat || wantFloat)
        return std::stod(text);
      return static_cast<int64_t>(std::stoll(text));
    } catch (const std::exception &) {
      error("invalid number '" + text + "'");
    }
  }

  Argument parseScalarDefault(const std::string &text, const SchemaType &type) {
    using Base = SchemaType::Base;
    if (text == "None")
      return Argument::none();
    if (text == "True" || text == "False")
      return text == "True";
    if (text.size() >= 2 && (text[0] == '"' || text[0] == '\''))
      return text.substr(1, text.size() - 2);
    if (text == "contiguous_format")
      return MemoryFormat::Contiguous;
    if (text == "preserve_format")
      return MemoryFormat::Preserve;
    if (text == "channels_last")
      return MemoryFormat::ChannelsLast;
    if (text == "strided")
      return Layout::Strided;
    // at::Reduction: None=0, Mean=1, Sum=2.
    if (text == "Mean")
      return int64_t{1};
    if (text == "Sum")
      return int64_t{2};
    // torch prints some memory format defaults as the enum's value
    // (`MemoryFormat memory_format=0`); kiln's enum has torch's order.
    if (type.base == Base::MemoryFormat && text.size() == 1 && text[0] >= '0' &&
        text[0] <= '3')
      return static_cast<MemoryFormat>(text[0] - '0');
    if (type.base == Base::ScalarType) {
      if (std::optional<DType> dtype = dtypeFromName(text))
        return *dtype;
      // torch prints some as c10::ScalarType's number (`dtype=4`: long).
      static const std::unordered_map<std::string, DType> numbered = {
          {"0", DType::UInt8},     {"1", DType::Int8},
          {"2", DType::Int16},     {"3", DType::Int32},
          {"4", DType::Int64},     {"5", DType::Float16},
          {"6", DType::Float32},   {"7", DType::Float64},
          {"9", DType::Complex64}, {"10", DType::Complex128},
          {"11", DType::Bool},     {"15", DType::BFloat16}};
      if (auto found = numbered.find(text); found != numbered.end())
        return found->second;
      error("unsupported ScalarType default '" + text + "'");
    }
    if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) ||
                          text[0] == '-' || text[0] == '.' || text == "inf"))
      return parseNumber(text, type.base == Base::Float);
    error("unsupported default value '" + text + "'");
  }

  Argument parseDefault(const SchemaType &type) {
    std::string text = defaultText();
    if (!type.isList || text == "None")
      return parseScalarDefault(text, type);
    std::vector<std::string> items;
    if (text.front() == '[') {
      std::string inner = text.substr(1, text.size() - 2);
      size_t start = 0;
      while (start < inner.size()) {
        size_t comma = inner.find(',', start);
        std::string item = inner.substr(start, comma - start);
        size_t first = item.find_first_not_of(' ');
        if (first != std::string::npos)
          items.push_back(
              item.substr(first, item.find_last_not_of(' ') - first + 1));
        if (comma == std::string::npos)
          break;
        start = comma + 1;
      }
    } else {
      // `int[2] stride=1` repeats the single value.
      items.assign(type.fixedListSize.value_or(1), text);
    }
    switch (type.base) {
    case SchemaType::Base::Int: {
      std::vector<int64_t> values;
      for (const std::string &item : items)
        values.push_back(parseNumber(item, false).toInt());
      return values;
    }
    case SchemaType::Base::Float: {
      std::vector<double> values;
      for (const std::string &item : items)
        values.push_back(parseNumber(item, true).toDouble());
      return values;
    }
    case SchemaType::Base::Bool: {
      std::vector<bool> values;
      for (const std::string &item : items)
        values.push_back(item == "True");
      return values;
    }
    case SchemaType::Base::Tensor:
      if (items.empty())
        return std::vector<Value *>();
      break;
    default:
      break;
    }
    error("unsupported list default '" + text + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

} // namespace

std::string SchemaType::str() const {
  std::string text;
  for (const BaseName &candidate : kBaseNames) {
    if (candidate.base == base) {
      text = std::string(candidate.name);
      break;
    }
  }
  if (isList) {
    if (elementOptional)
      text += "?";
    text += "[";
    if (fixedListSize)
      text += std::to_string(*fixedListSize);
    text += "]";
  }
  if (optional)
    text += "?";
  return text;
}

bool SchemaType::accepts(const Argument &argument) const {
  using Kind = Argument::Kind;
  Kind kind = argument.kind();
  if (base == Base::Any)
    return true;
  if (kind == Kind::None)
    return optional || base == Base::Generator;
  if (isList) {
    switch (base) {
    case Base::Tensor:
      if (kind != Kind::TensorList)
        return false;
      for (Value *value : argument.toTensorList())
        if (!value && !elementOptional)
          return false;
      return true;
    case Base::Int:
      return kind == Kind::IntList || (kind == Kind::Int && fixedListSize);
    case Base::Float:
      return kind == Kind::DoubleList || kind == Kind::IntList;
    case Base::Bool:
      return kind == Kind::BoolList;
    case Base::Scalar:
      return kind == Kind::DoubleList || kind == Kind::IntList;
    default:
      return false;
    }
  }
  switch (base) {
  case Base::Tensor:
    return kind == Kind::Tensor;
  case Base::Int:
    return kind == Kind::Int || kind == Kind::Bool;
  case Base::Float:
    return kind == Kind::Double || kind == Kind::Int || kind == Kind::Bool;
  case Base::Bool:
    return kind == Kind::Bool;
  case Base::Scalar:
    return argument.isScalar();
  case Base::ScalarType:
    return kind == Kind::DType;
  case Base::Layout:
    return kind == Kind::Layout;
  case Base::Device:
    return kind == Kind::Device;
  case Base::MemoryFormat:
    return kind == Kind::MemoryFormat;
  case Base::String:
    return kind == Kind::String;
  default:
    return false;
  }
}

std::string OpSchema::qualifiedName() const {
  return overload.empty() ? name : name + "." + overload;
}

std::string OpSchema::str() const {
  auto formatArgument = [](const SchemaArgument &argument) {
    std::string text = argument.type.str();
    if (!argument.alias.empty()) {
      // The annotation sits after the base name: Tensor(a!), Tensor(a)[].
      size_t at = text.find_first_of("?[");
      std::string annotation = "(" + argument.alias + ")";
      text = at == std::string::npos ? text + annotation
                                     : text.insert(at, annotation);
    }
    if (!argument.name.empty())
      text += " " + argument.name;
    if (argument.defaultValue)
      text += "=" + argument.defaultValue->str();
    return text;
  };
  std::string text = qualifiedName() + "(";
  bool kwargMarked = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i)
      text += ", ";
    if (arguments[i].kwargOnly && !kwargMarked) {
      text += "*, ";
      kwargMarked = true;
    }
    text += formatArgument(arguments[i]);
  }
  text += ") -> ";
  if (returns.size() == 1 && returns[0].name.empty()) {
    text += formatArgument(returns[0]);
  } else {
    text += "(";
    for (size_t i = 0; i < returns.size(); ++i) {
      if (i)
        text += ", ";
      text += formatArgument(returns[i]);
    }
    text += ")";
  }
  return text;
}

bool OpSchema::isView() const {
  for (const SchemaArgument &result : returns)
    if (!result.alias.empty() && !result.isWrite())
      return true;
  return false;
}

bool OpSchema::isMutable() const {
  for (const SchemaArgument &argument : arguments)
    if (argument.isWrite())
      return true;
  return false;
}

int OpSchema::findArgument(std::string_view argumentName) const {
  for (size_t i = 0; i < arguments.size(); ++i)
    if (arguments[i].name == argumentName)
      return static_cast<int>(i);
  return -1;
}

namespace {

// Coerces a matching argument to the schema's canonical kind: `int[2]`
// given one int becomes a list of two.
// An empty Python list reads as int[]; a Tensor[] slot wants it as such.
Argument coerce(const SchemaType &type, const Argument &argument) {
  if (!type.isList)
    return argument;
  if (argument.kind() == Argument::Kind::Int && type.fixedListSize)
    return std::vector<int64_t>(*type.fixedListSize, argument.toInt());
  if (argument.kind() == Argument::Kind::IntList) {
    std::vector<int64_t> items = argument.toIntList();
    if (type.base == SchemaType::Base::Tensor && items.empty())
      return std::vector<Value *>();
    if (type.base == SchemaType::Base::Float)
      return std::vector<double>(items.begin(), items.end());
  }
  return argument;
}

} // namespace

std::vector<Argument> OpSchema::normalize(
    const std::vector<Argument> &positional,
    const std::vector<std::pair<std::string, Argument>> &keywords) const {
  std::vector<std::optional<Argument>> slots(arguments.size());
  size_t positionalCount = 0;
  for (const SchemaArgument &argument : arguments)
    positionalCount += !argument.kwargOnly;
  if (positional.size() > positionalCount)
    throw Error(qualifiedName() + " takes " + std::to_string(positionalCount) +
                " positional arguments but " +
                std::to_string(positional.size()) + " were given");
  for (size_t i = 0; i < positional.size(); ++i)
    slots[i] = positional[i];
  for (const auto &[keyword, value] : keywords) {
    int index = findArgument(keyword);
    if (index < 0)
      throw Error(qualifiedName() + " got an unexpected keyword argument '" +
                  keyword + "'");
    if (slots[index])
      throw Error(qualifiedName() + " got multiple values for argument '" +
                  keyword + "'");
    slots[index] = value;
  }
  std::vector<Argument> normalized;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const SchemaArgument &argument = arguments[i];
    if (!slots[i]) {
      if (!argument.defaultValue)
        throw Error(qualifiedName() + " is missing the required argument '" +
                    argument.name + "'");
      slots[i] = argument.defaultValue;
    }
    normalized.push_back(coerce(argument.type, *slots[i]));
  }
  check(normalized);
  return normalized;
}

// Ops whose tensor arguments torch's Python binding also takes as numbers
// (wrapped numbers, which promote like scalars): aot_autograd's graphs hold
// sub.Tensor(x, 1.0). torch's should_allow_numbers_as_tensors lists them.
static bool takesNumbersAsTensors(std::string name) {
  // In-place variants (add_) take numbers as their functional forms do.
  if (name.size() > 1 && name.back() == '_' && name != "aten::copy_")
    name.pop_back();
  static const char *const kNames[] = {
      "aten::add",    "aten::sub",         "aten::mul",
      "aten::div",    "aten::multiply",    "aten::subtract",
      "aten::divide", "aten::true_divide", "aten::floor_divide",
      "aten::to",     "aten::_to_copy",    "aten::copy_",
      "aten::_conj"};
  for (const char *candidate : kNames)
    if (name == candidate)
      return true;
  return false;
}

void OpSchema::check(const std::vector<Argument> &actual) const {
  if (actual.size() != arguments.size())
    throw Error(qualifiedName() + " expects " +
                std::to_string(arguments.size()) + " arguments, got " +
                std::to_string(actual.size()));
  bool numbersAsTensors = takesNumbersAsTensors(name);
  for (size_t i = 0; i < arguments.size(); ++i) {
    const SchemaType &type = arguments[i].type;
    if (numbersAsTensors && type.base == SchemaType::Base::Tensor &&
        !type.isList && actual[i].isScalar())
      continue;
    if (!arguments[i].type.accepts(actual[i]))
      throw Error(qualifiedName() + ": argument '" + arguments[i].name +
                  "' must be " + arguments[i].type.str() + ", not " +
                  std::string(argumentKindName(actual[i].kind())));
  }
}

OpSchema parseSchema(std::string_view text) {
  return SchemaParser(text).parse();
}

} // namespace kiln
