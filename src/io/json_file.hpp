// JSON files read whole, and typed access to their fields in one place: every error names the file and the
// JSON pointer of the field, says what was expected and what was found:
//   "'m/1_Pooling/config.json' /pooling_mode_mean_tokens: expected true or false, got string \"yes\""
//
//   const nlohmann::json j = io::read_json_file(dir / "config.json");      // special files refused first
//   io::JsonAt root(j, path);
//   int64_t n = root["in_features"].integer(1, 1 << 20);                   // required
//   bool bias = root.get_or("bias", true);                                   // optional (absent or null)
//
// Numbers: integers must be integers (3.0 is refused), within int64 and the given range; doubles must be finite
// (1e999 is refused by the parser with the file named) and within range. Errors are encore::ModelFormatError.
#pragma once
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "encore/records.hpp"  // json_too_deep_at

namespace encore::io {

// A JSON value in an error message: its type and at most max_chars of its text ('array [1,2,3,...').
std::string describe_json_value(const nlohmann::json& v, size_t max_chars = 60);

// Refuses special files before opening (check_readable_file), then parses; errors name the file, and invalid
// JSON (including numbers out of double range such as 1e999, or nesting beyond kMaxJsonDepth) says where.
nlohmann::json read_json_file(const std::filesystem::path& path);

class JsonAt {
 public:
  JsonAt(const nlohmann::json& j, std::string file, std::string pointer = "")
      : j_(&j), file_(std::move(file)), pointer_(std::move(pointer)) {}

  const nlohmann::json& json() const { return *j_; }
  std::string where() const;  // "'file' /a/b" (pointer "/" for the root)
  [[noreturn]] void fail(const std::string& expected) const;  // "<where>: expected <expected>, got <kind value>"

  bool has(const char* key) const;          // present and not null
  JsonAt operator[](const char* key) const;  // required: missing -> error naming the key
  JsonAt at(size_t index) const;
  size_t size() const;                       // of an array (else error)

  std::string str() const;
  bool boolean() const;
  int64_t integer(int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max()) const;
  double number(double lo = -std::numeric_limits<double>::max(),
                double hi = std::numeric_limits<double>::max()) const;
  void expect_object() const;
  void expect_array() const;

  std::string get_or(const char* key, const std::string& dflt) const { return has(key) ? (*this)[key].str() : dflt; }
  std::string get_or(const char* key, const char* dflt) const { return get_or(key, std::string(dflt)); }
  bool get_or(const char* key, bool dflt) const { return has(key) ? (*this)[key].boolean() : dflt; }

 private:
  const nlohmann::json* j_;
  std::string file_, pointer_;
};

}  // namespace encore::io
