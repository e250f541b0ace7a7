// encore::RecordReader (the one JSONL/CSV/text reader) and encore::cos_sim / pairwise_cos_sim.
// Oracles: the record cases are hand-written files whose expected fields follow RFC 4180 and JSON by reading;
// cosines are checked against a long-double loop written here (tolerance 1e-6: float32 output of values in
// [-1, 1]) and against exact values on orthogonal, parallel and zero vectors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include "encore/error.hpp"
#include "encore/records.hpp"
#include "encore/similarity.hpp"

namespace {

namespace fs = std::filesystem;

std::string write_temp(const std::string& name, const std::string& body) {
  const fs::path p = fs::temp_directory_path() / ("encore_records_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << body;
  return p.string();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const encore::Error& e) {
    return e.what();
  }
  return "";
}

TEST(RecordReader, FormatFromTheExtension) {
  EXPECT_EQ(encore::record_format_from_path("a.jsonl"), encore::RecordFormat::jsonl);
  EXPECT_EQ(encore::record_format_from_path("a.csv"), encore::RecordFormat::csv);
  EXPECT_EQ(encore::record_format_from_path("a.txt"), encore::RecordFormat::text);
  EXPECT_EQ(encore::record_format_from_path("-"), encore::RecordFormat::text);
  EXPECT_NE(error_of([] { encore::parse_record_format("xml"); }).find("text, jsonl or csv"), std::string::npos);
}

TEST(RecordReader, TextLinesKeepEmptyLinesAndDropCarriageReturns) {
  const std::string path = write_temp("t.txt", "one\r\n\ntwo \xff\n");
  encore::RecordReader in(path);
  std::vector<std::pair<int64_t, std::string>> got;
  for (encore::Record r; in.next(r);) got.emplace_back(r.line, in.field(r, "text"));
  const std::vector<std::pair<int64_t, std::string>> want = {{1, "one"}, {2, ""}, {3, "two \xff"}};
  EXPECT_EQ(got, want);
}

TEST(RecordReader, JsonlFieldsKeepTheirJsonAndErrorsNameTheLine) {
  const std::string path = write_temp("r.jsonl", "{\"id\": 7, \"text\": \"a\", \"score\": 0.5}\n\n  \n"
                                                 "{\"id\": \"x\", \"text\": \"b\"}\n[1, 2]\n");
  encore::RecordReader in(path);
  encore::Record r;
  ASSERT_TRUE(in.next(r));
  EXPECT_EQ(r.line, 1);
  ASSERT_EQ(r.fields.size(), 3u);
  EXPECT_EQ(r.fields[0].name, "id");
  EXPECT_EQ(r.fields[0].json, "7");
  EXPECT_EQ(r.fields[0].kind, encore::RecordField::Kind::integer);
  EXPECT_EQ(*in.scalar(r, "id"), "7");
  EXPECT_EQ(r.fields[2].kind, encore::RecordField::Kind::other);
  EXPECT_NE(error_of([&] { in.scalar(r, "score"); }).find(":1: 'score' must be a string or an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { in.field(r, "id"); }).find(":1: 'id' must be a string, got 7"), std::string::npos);
  ASSERT_TRUE(in.next(r));
  EXPECT_EQ(r.line, 4);  // blank lines skipped, still counted
  EXPECT_EQ(in.field(r, "text"), "b");
  EXPECT_EQ(r.fields[0].json, "\"x\"");
  const std::string e = error_of([&] { in.next(r); });
  EXPECT_NE(e.find("r.jsonl:5: expected a JSON object"), std::string::npos) << e;

  encore::RecordReader lenient(path, encore::RecordFormat::jsonl, {.allow_non_objects = true, .what = "file"});
  int n = 0;
  for (encore::Record x; lenient.next(x);) n += !x.is_object && x.json == "[1,2]";
  EXPECT_EQ(n, 1);
  const std::string bad = write_temp("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \n");
  encore::RecordReader b(bad);
  ASSERT_TRUE(b.next(r));
  EXPECT_NE(error_of([&] { b.next(r); }).find("bad.jsonl:2: not valid JSON"), std::string::npos);
}

TEST(RecordReader, CsvQuotedFieldsAndLineNumbersOfMultiLineRecords) {
  const std::string path =
      write_temp("r.csv", "id,text\r\n1,\"a, \"\"quoted\"\"\nsecond line\"\n\n2,plain\n3,one,too many\n");
  encore::RecordReader in(path);
  encore::Record r;
  ASSERT_TRUE(in.next(r));
  EXPECT_EQ(in.columns(), (std::vector<std::string>{"id", "text"}));
  EXPECT_EQ(r.line, 2);
  EXPECT_EQ(in.field(r, "text"), "a, \"quoted\"\nsecond line");
  ASSERT_TRUE(in.next(r));
  EXPECT_EQ(r.line, 5);  // the quoted newline and the empty record count as lines
  EXPECT_EQ(in.field(r, "id"), "2");
  const std::string e = error_of([&] { in.next(r); });
  EXPECT_NE(e.find("r.csv:6: the record has 3 fields, the header 2"), std::string::npos) << e;
  const std::string open = write_temp("open.csv", "text\n\"never closed\n");
  encore::RecordReader o(open);
  EXPECT_NE(error_of([&] { o.next(r); }).find("open.csv:2: unterminated quoted field"), std::string::npos);
}

TEST(RecordReader, ReadAllChecksRequiredFields) {
  const std::string csv = write_temp("req.csv", "text,label\nx,1\n");
  EXPECT_EQ(encore::read_all_records(csv, encore::RecordFormat::csv, {"text", "label"}).size(), 1u);
  const std::string e = error_of([&] { encore::read_all_records(csv, encore::RecordFormat::csv, {"text", "pair"}); });
  EXPECT_NE(e.find("the header needs 'text' and 'pair' columns"), std::string::npos) << e;
  const std::string jl = write_temp("req.jsonl", "{\"text\": \"x\"}\n");
  const std::string e2 = error_of([&] { encore::read_all_records(jl, encore::RecordFormat::jsonl, {"label"}); });
  EXPECT_NE(e2.find("req.jsonl:1:"), std::string::npos) << e2;
  const std::string e3 = error_of([] { encore::RecordReader r("/no/such/file.jsonl"); });
  EXPECT_NE(e3.find("file '/no/such/file.jsonl' does not exist"), std::string::npos) << e3;
  // special files are refused by name before open() (a FIFO would block), unless the reader allows pipes
  const std::string dir = std::filesystem::path(csv).parent_path().string();
  EXPECT_NE(error_of([&] { encore::RecordReader r(dir, encore::RecordFormat::text); }).find("is a directory"),
            std::string::npos);
}

TEST(CosSim, MatchesALongDoubleLoopAndTheExactCases) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 1.f);
  encore::Tensor a = encore::Tensor::empty({5, 37}), b = encore::Tensor::empty({4, 37});
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = d(rng);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = d(rng);
  std::fill_n(a.data<float>() + 4 * 37, 37, 0.f);  // a zero row: cosine 0 with everything (torch's eps)
  const encore::Tensor s = encore::cos_sim(a, b);
  ASSERT_EQ(s.shape(), (encore::Shape{5, 4}));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) {
      long double dot = 0, na = 0, nb = 0;
      for (int c = 0; c < 37; ++c) {
        const long double x = a.data<float>()[i * 37 + c], y = b.data<float>()[j * 37 + c];
        dot += x * y, na += x * x, nb += y * y;
      }
      const double want = na == 0 ? 0.0 : static_cast<double>(dot / std::sqrt(na * nb));
      EXPECT_NEAR(s.data<float>()[i * 4 + j], want, 1e-6) << i << "," << j;
    }
  encore::Tensor u = encore::Tensor::zeros({2, 3}), v = encore::Tensor::zeros({2, 3});
  u.data<float>()[0] = 2, v.data<float>()[0] = 5;  // parallel: 1
  u.data<float>()[3] = 1, v.data<float>()[5] = 3;  // orthogonal: 0
  const encore::Tensor p = encore::pairwise_cos_sim(u, v);
  EXPECT_EQ(p.data<float>()[0], 1.f);
  EXPECT_EQ(p.data<float>()[1], 0.f);
  // a transposed (non-contiguous) view gives the same numbers as its packed copy
  const encore::Tensor t = b.transpose(0, 1).contiguous().transpose(0, 1);
  const encore::Tensor s2 = encore::cos_sim(a, t);
  for (int64_t i = 0; i < s.numel(); ++i) EXPECT_EQ(s.data<float>()[i], s2.data<float>()[i]);
  EXPECT_NE(error_of([&] { encore::cos_sim(a, encore::Tensor::zeros({2, 5})); }).find("widths differ"),
            std::string::npos);
  EXPECT_NE(error_of([&] { encore::pairwise_cos_sim(a, b); }).find("row counts differ"), std::string::npos);
}

}  // namespace

// The nesting limit counts arrays and objects, not brackets inside strings (escaped quotes included).
TEST(RecordReader, JsonNestingLimitCountsContainersOnly) {
  using encore::json_too_deep_at;
  using encore::kMaxJsonDepth;
  const std::string at_limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(json_too_deep_at(at_limit), std::string::npos);
  const std::string past = "[" + at_limit + "]";
  EXPECT_EQ(json_too_deep_at(past), static_cast<size_t>(kMaxJsonDepth));  // the 129th '['
  const std::string in_string = R"({"text": ")" + std::string(1000, '[') + R"(\"{{{{ \\", "n": [1]})";
  EXPECT_EQ(json_too_deep_at(in_string), std::string::npos);
  // a quote escaped inside a string does not end it; the one after the escaped backslash does
  const std::string tricky = R"({"a": "\"[[[", "b": "\\")" + std::string(kMaxJsonDepth, '{');
  EXPECT_EQ(json_too_deep_at(tricky), tricky.size() - 1);
  // siblings do not add up: depth returns to 1 between them
  std::string wide = "[";
  for (int i = 0; i < 1000; ++i) wide += "[[]],";
  wide += "1]";
  EXPECT_EQ(json_too_deep_at(wide), std::string::npos);
}
