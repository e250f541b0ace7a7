// The thread count a test sets (encore::set_num_threads), restored when the test's scope ends.
#pragma once
#include "encore/runtime.hpp"

struct ScopedThreads {
  explicit ScopedThreads(int n) : previous(encore::get_num_threads()) { encore::set_num_threads(n); }
  ~ScopedThreads() { encore::set_num_threads(previous); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
  int previous;
};
