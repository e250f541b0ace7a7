#include "io/json_file.hpp"

#include <cmath>

#include "encore/error.hpp"
#include "encore/files.hpp"

namespace encore::io {

using Json = nlohmann::json;

std::string describe_json_value(const Json& v, size_t max_chars) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > max_chars) s = s.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return std::string(v.type_name()) + " " + s;
}

nlohmann::json read_json_file(const std::filesystem::path& p) {
  const std::string text = read_text_file(p.string(), "JSON file");
  if (const size_t at = json_too_deep_at(text); at != std::string::npos)
    throw ModelFormatError(detail::concat("'", p.string(), "': ", json_too_deep_message(at)));
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw ModelFormatError(detail::concat("'", p.string(), "' is not valid JSON: ", e.what()));
  }
}

namespace {
std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}
}  // namespace

std::string JsonAt::where() const { return "'" + file_ + "' " + (pointer_.empty() ? "/" : pointer_); }

void JsonAt::fail(const std::string& expected) const {
  throw ModelFormatError(where() + ": expected " + expected + ", got " + describe_json_value(*j_));
}

bool JsonAt::has(const char* key) const {
  if (!j_->is_object()) return false;
  auto it = j_->find(key);
  return it != j_->end() && !it->is_null();
}

JsonAt JsonAt::operator[](const char* key) const {
  expect_object();
  auto it = j_->find(key);
  const std::string ptr = pointer_ + "/" + escape_pointer_token(key);
  if (it == j_->end()) throw ModelFormatError("'" + file_ + "' " + ptr + ": missing required field");
  return JsonAt(*it, file_, ptr);
}

JsonAt JsonAt::at(size_t index) const {
  expect_array();
  if (index >= j_->size()) fail("at least " + std::to_string(index + 1) + " elements");
  return JsonAt((*j_)[index], file_, pointer_ + "/" + std::to_string(index));
}

size_t JsonAt::size() const {
  expect_array();
  return j_->size();
}

void JsonAt::expect_object() const {
  if (!j_->is_object()) fail("an object");
}
void JsonAt::expect_array() const {
  if (!j_->is_array()) fail("an array");
}

std::string JsonAt::str() const {
  if (!j_->is_string()) fail("a string");
  return j_->get<std::string>();
}

bool JsonAt::boolean() const {
  if (!j_->is_boolean()) fail("true or false");
  return j_->get<bool>();
}

int64_t JsonAt::integer(int64_t lo, int64_t hi) const {
  const std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!j_->is_number_integer()) fail(range);
  if (j_->is_number_unsigned() && j_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(range);
  const int64_t v = j_->get<int64_t>();
  if (v < lo || v > hi) fail(range);
  return v;
}

double JsonAt::number(double lo, double hi) const {
  std::ostringstream range;
  range << "a finite number in [" << lo << ", " << hi << "]";
  if (!j_->is_number()) fail(range.str());
  const double v = j_->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) fail(range.str());
  return v;
}

}  // namespace encore::io
