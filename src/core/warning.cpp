// encore::warn and its handler (include/encore/error.hpp).
#include <cstdio>
#include <mutex>

#include "encore/error.hpp"

namespace encore {

namespace {
std::mutex g_warning_mutex;
WarningHandler g_warning_handler = nullptr;  // nullptr: stderr
}  // namespace

void set_warning_handler(WarningHandler handler) {
  std::lock_guard<std::mutex> lock(g_warning_mutex);
  g_warning_handler = handler;
}

void warn(const std::string& message) {
  WarningHandler handler = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_warning_mutex);
    handler = g_warning_handler;
  }
  if (handler) {
    handler(message);  // outside the lock: a handler may take its own (the Python GIL)
    return;
  }
  std::fprintf(stderr, "encore: warning: %s\n", message.c_str());
}

}  // namespace encore
