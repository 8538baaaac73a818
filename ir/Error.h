// kiln's error type: every failure a user can meet carries a message that
// says what failed and what to do. Depends on nothing in kiln.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace kiln {

/// Raised for invalid graphs, arguments a schema does not accept, shapes that
/// do not broadcast, and the like. The Python bridge maps it to RuntimeError.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

/// Raised when kiln meets something it does not support (yet). Callers fall
/// back to eager execution; the Python bridge maps it to kiln.Unsupported.
class Unsupported : public Error {
public:
  explicit Unsupported(const std::string &message) : Error(message) {}
};

/// Raised for an index out of a tensor's range that a compiled program
/// meets at run time (an embedding's ids), where torch raises IndexError,
/// or RuntimeError where `indexError` is false (gather's); `origin` is the
/// line of the user's code the op came from ("path:line in function", or
/// empty). The Python bridge maps it to that type, the origin added to the
/// traceback.
class IndexOutOfRange : public Error {
public:
  explicit IndexOutOfRange(const std::string &message, std::string origin = {},
                           bool indexError = true)
      : Error(message), origin_(std::move(origin)), indexError_(indexError) {}
  const std::string &origin() const { return origin_; }
  bool indexError() const { return indexError_; }

private:
  std::string origin_;
  bool indexError_;
};

} // namespace kiln
