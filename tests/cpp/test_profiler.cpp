// encore::profiler: what a Scope records (only when on, only the outermost of nested ops), the summary's grouping
// and order, the Chrome trace file, and that the ops layer is instrumented (a real linear and attention call).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "encore/profiler.hpp"
#include "ops/ops.hpp"

namespace {

using encore::Tensor;
namespace profiler = encore::profiler;

struct ProfilerOn {
  ProfilerOn() {
    profiler::reset();
    profiler::set_enabled(true);
  }
  ~ProfilerOn() {
    profiler::set_enabled(false);
    profiler::reset();
  }
};

TEST(Profiler, RecordsOnlyWhenOn) {
  profiler::reset();
  profiler::set_enabled(false);
  { profiler::Scope s("off"); }
  EXPECT_TRUE(profiler::events().empty());
  ProfilerOn on;
  { profiler::Scope s("on", 10); }
  ASSERT_EQ(profiler::events().size(), 1u);
  EXPECT_STREQ(profiler::events()[0].name, "on");
  EXPECT_EQ(profiler::events()[0].flops, 10);
  EXPECT_LE(profiler::events()[0].begin_ns, profiler::events()[0].end_ns);
}

TEST(Profiler, NestedOpsCountOnceAsTheOuterOne) {
  ProfilerOn on;
  {
    profiler::Scope outer("outer");
    profiler::Scope inner("inner");
  }
  { profiler::Scope again("inner"); }  // depth is back to 0: recorded
  const auto ops = profiler::summary();
  ASSERT_EQ(ops.size(), 2u);
  for (const auto& op : ops) EXPECT_EQ(op.calls, 1) << op.name;
}

TEST(Profiler, SummaryGroupsByNameLongestFirst) {
  ProfilerOn on;
  for (int i = 0; i < 3; ++i) profiler::Scope s("short");
  {
    profiler::Scope s("long", 1e9);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto ops = profiler::summary();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].name, "long");
  EXPECT_GE(ops[0].seconds, 0.005);
  EXPECT_EQ(ops[0].flops, 1e9);
  EXPECT_EQ(ops[1].name, "short");
  EXPECT_EQ(ops[1].calls, 3);
  const std::string table = profiler::format_table(ops, 1, 0);
  EXPECT_NE(table.find("long"), std::string::npos);
  EXPECT_NE(table.find("sum of ops"), std::string::npos);
}

TEST(Profiler, OpsAreInstrumentedWithTheirFlops) {
  ProfilerOn on;
  const Tensor x = Tensor::full({4, 8}, 1.0f), w = Tensor::full({16, 8}, 0.5f);
  encore::ops::linear_forward(x, w, Tensor());
  const Tensor q = Tensor::full({2, 5, 8}, 0.1f);
  encore::ops::attention_forward(q, q, q, 2, {}, nullptr, 0.0, false, 0);
  const auto ops = profiler::summary();
  ASSERT_EQ(ops.size(), 2u);
  for (const auto& op : ops) {
    if (op.name == "linear") EXPECT_EQ(op.flops, 2.0 * 4 * 8 * 16);
    else if (op.name == "attention") EXPECT_EQ(op.flops, 2.0 * 5 * 5 * (2 * (8 + 8)));  // B T S (2E + 2Ev)
    else ADD_FAILURE() << "unexpected op " << op.name;
  }
}

TEST(Profiler, ChromeTraceIsJsonWithOneEventPerRecord) {
  ProfilerOn on;
  { profiler::Scope a("a", 3); }
  { profiler::Scope b("b"); }
  const std::string path = testing::TempDir() + "/encore_trace.json";
  profiler::write_chrome_trace(path);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  ASSERT_EQ(trace["traceEvents"].size(), 2u);
  EXPECT_EQ(trace["traceEvents"][0]["name"], "a");
  EXPECT_EQ(trace["traceEvents"][0]["ph"], "X");
  EXPECT_EQ(trace["traceEvents"][0]["args"]["flops"], 3);
  std::remove(path.c_str());
  EXPECT_THROW(profiler::write_chrome_trace("/nonexistent-dir/trace.json"), encore::ResourceError);
}

}  // namespace
