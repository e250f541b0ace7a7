// encore::Error - the one exception type encore throws, with a few subclasses saying whose fault it is.
//
//   try { layer.forward(x); } catch (const encore::Error& e) { std::cerr << e.what(); }
//
// Messages name the offending argument and, for tensors, its shape: "src: expected (B, T, 64), got (2, 5, 60)";
// for files, the file and the JSON pointer or line: "'m/config.json' /layer_norm_eps: expected a number > 0, got -10".
//
// Classes (docs/errors.md; CLI exit code / Python class):
//   Error            an argument or input is wrong (a plain ENCORE_CHECK)     3   encore.Error (a ValueError)
//   UsageError       a command-line option or API argument out of its range   2   encore.UsageError
//   InputError       user data: texts, JSONL/CSV lines, tokenizer input       3   encore.InputError
//   ModelFormatError a model/tokenizer/config file is malformed or missing    3   encore.ModelFormatError
//   ResourceError    memory, disk, a size limit, a failed write                4   encore.ResourceError
//   NonFiniteError   a forward or training step produced NaN/Inf              3   encore.NonFiniteError
//   InternalError    a bug in encore (an invariant broke)                     70  encore.InternalError
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace encore {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

#define ENCORE_ERROR_SUBCLASS(Name, Base)                      \
  class Name : public Base {                                   \
   public:                                                     \
    explicit Name(const std::string& what) : Base(what) {}     \
  };
ENCORE_ERROR_SUBCLASS(UsageError, Error)
ENCORE_ERROR_SUBCLASS(InputError, Error)
ENCORE_ERROR_SUBCLASS(ModelFormatError, InputError)
ENCORE_ERROR_SUBCLASS(NonFiniteError, Error)
ENCORE_ERROR_SUBCLASS(ResourceError, Error)
ENCORE_ERROR_SUBCLASS(InternalError, Error)
#undef ENCORE_ERROR_SUBCLASS

// The CLI's exit code for an error of this class (docs/errors.md): usage 2, bad input 3, resource 4, internal 70.
inline int exit_code_of(const Error& e) {
  if (dynamic_cast<const UsageError*>(&e)) return 2;
  if (dynamic_cast<const ResourceError*>(&e)) return 4;
  if (dynamic_cast<const InternalError*>(&e)) return 70;
  return 3;
}

// Warnings: something the library did differently from what a caller may assume, without failing (e.g. a
// checkpoint whose task head encore cannot run loads as its base model). warn() hands the message to the handler:
// by default one "encore: warning: <message>" line on stderr; the Python package turns it into a UserWarning.
// set_warning_handler(nullptr) restores the default. Thread-safe; the handler may run on any thread.
using WarningHandler = void (*)(const std::string& message);
void set_warning_handler(WarningHandler handler);
void warn(const std::string& message);

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace encore

// Throws encore::Error with the streamed message when cond is false.
#define ENCORE_CHECK(cond, ...)                                       \
  do {                                                                \
    if (!(cond)) throw ::encore::Error(::encore::detail::concat(__VA_ARGS__)); \
  } while (0)

// The same, throwing a given subclass: ENCORE_CHECK_AS(ResourceError, bytes <= limit, "...").
#define ENCORE_CHECK_AS(Kind, cond, ...)                                         \
  do {                                                                           \
    if (!(cond)) throw ::encore::Kind(::encore::detail::concat(__VA_ARGS__));    \
  } while (0)
