// encore::Error - the one exception type encore throws.
//
//   try { layer.forward(x); } catch (const encore::Error& e) { std::cerr << e.what(); }
//
// Messages name the offending argument and, for tensors, its shape: "src: expected (B, T, 64), got (2, 5, 60)".
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace encore {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

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
