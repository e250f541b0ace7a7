// encore::profiler (include/encore/profiler.hpp): the records, their summary, the Chrome trace, and
// ENCORE_PROFILE=1 (profile the whole process, print the table at exit).
#include "encore/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "encore/error.hpp"

namespace encore::profiler {

namespace {

std::mutex g_mutex;
std::vector<Event> g_events;  // guarded by g_mutex
std::map<std::thread::id, uint32_t> g_threads;

// ENCORE_PROFILE=1: on from the start; the table (and ENCORE_PROFILE_TRACE's trace) at exit.
struct FromEnvironment {
  FromEnvironment() {
    const char* v = std::getenv("ENCORE_PROFILE");
    if (!v || std::string(v) == "0" || std::string(v).empty()) return;
    set_enabled(true);
    std::atexit([] {
      set_enabled(false);
      std::cerr << "encore profile (ENCORE_PROFILE=1): every op of this process\n" << format_table(summary(), 1, 0);
      if (const char* path = std::getenv("ENCORE_PROFILE_TRACE")) {
        try {
          write_chrome_trace(path);
          std::cerr << "trace written to " << path << "\n";
        } catch (const std::exception& e) {
          std::cerr << "encore: " << e.what() << "\n";
        }
      }
    });
  }
} g_from_environment;

}  // namespace

void set_enabled(bool on) { detail::on.store(on, std::memory_order_relaxed); }
bool enabled() { return detail::on.load(std::memory_order_relaxed); }

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.clear();
}

int64_t detail::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void detail::record(const char* name, int64_t begin_ns, int64_t end_ns, double flops) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto [it, added] = g_threads.try_emplace(std::this_thread::get_id(), static_cast<uint32_t>(g_threads.size()));
  g_events.push_back({name, begin_ns, end_ns, flops, it->second});
}

std::vector<Event> events() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_events;
}

std::vector<OpStats> summary() {
  std::map<std::string, OpStats> by_name;
  for (const Event& e : events()) {
    OpStats& s = by_name[e.name];
    s.name = e.name;
    s.calls += 1;
    s.seconds += static_cast<double>(e.end_ns - e.begin_ns) * 1e-9;
    s.flops += e.flops;
  }
  std::vector<OpStats> out;
  for (auto& [name, s] : by_name) out.push_back(std::move(s));
  std::stable_sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) { return a.seconds > b.seconds; });
  return out;
}

void write_chrome_trace(const std::string& path) {
  const std::vector<Event> all = events();
  const int64_t origin = all.empty() ? 0 : std::min_element(all.begin(), all.end(), [](const Event& a, const Event& b) {
                                             return a.begin_ns < b.begin_ns;
                                           })->begin_ns;
  std::ofstream out(path);
  ENCORE_CHECK_AS(ResourceError, out.good(), "cannot write the trace '", path, "'");
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  char line[256];
  for (size_t i = 0; i < all.size(); ++i) {
    const Event& e = all[i];
    std::snprintf(line, sizeof line,
                  "%s{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, "
                  "\"args\": {\"flops\": %.0f}}",
                  i ? ",\n" : "", e.name, e.thread, static_cast<double>(e.begin_ns - origin) * 1e-3,
                  static_cast<double>(e.end_ns - e.begin_ns) * 1e-3, e.flops);
    out << line;
  }
  out << "\n]}\n";
  out.flush();
  ENCORE_CHECK_AS(ResourceError, out.good(), "cannot write the trace '", path, "'");
}

std::string format_table(const std::vector<OpStats>& ops, int64_t runs, double reference_seconds) {
  const double per_run = 1.0 / static_cast<double>(std::max<int64_t>(runs, 1));
  double sum = 0;
  for (const OpStats& s : ops) sum += s.seconds;
  const double whole = reference_seconds > 0 ? reference_seconds : sum * per_run;
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "%-24s %9s %12s %7s %9s\n", "op", "calls/run", "ms/run", "%", "GFLOP/s");
  out << line;
  for (const OpStats& s : ops) {
    const double ms = s.seconds * per_run * 1e3;
    std::snprintf(line, sizeof line, "%-24s %9.1f %12.3f %7.1f ", s.name.c_str(), static_cast<double>(s.calls) * per_run,
                  ms, whole > 0 ? 100.0 * s.seconds * per_run / whole : 0.0);
    out << line;
    if (s.flops > 0 && s.seconds > 0) {
      std::snprintf(line, sizeof line, "%9.1f\n", s.flops / s.seconds * 1e-9);
      out << line;
    } else {
      out << std::string(9, ' ').replace(8, 1, "-") << "\n";
    }
  }
  std::snprintf(line, sizeof line, "%-24s %9s %12.3f %7.1f\n", "sum of ops", "", sum * per_run * 1e3,
                whole > 0 ? 100.0 * sum * per_run / whole : 0.0);
  out << line;
  if (reference_seconds > 0) {
    std::snprintf(line, sizeof line, "%-24s %9s %12.3f %7.1f\n", "run, measured", "", reference_seconds * 1e3, 100.0);
    out << line;
  }
  return out.str();
}

}  // namespace encore::profiler
