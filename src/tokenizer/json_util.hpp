// Typed access to tokenizer.json fields with errors that name the JSON path: "model.vocab: expected an object
// of token -> id, got array". Optional fields take a default when absent or null.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "encore/error.hpp"

namespace encore::tok {

using json = nlohmann::json;

inline std::string json_kind(const json& j) { return j.type_name(); }

inline std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

inline const json& field(const json& j, const std::string& path, const char* key) {
  if (!j.is_object()) throw Error(detail::concat(path, ": expected an object, got ", json_kind(j)));
  auto it = j.find(key);
  if (it == j.end()) throw Error(detail::concat(path, ": missing field \"", key, "\""));
  return *it;
}

inline bool has(const json& j, const char* key) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

inline std::string as_string(const json& v, const std::string& path) {
  if (!v.is_string()) throw Error(detail::concat(path, ": expected a string, got ", json_kind(v)));
  return v.get<std::string>();
}

inline bool as_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) throw Error(detail::concat(path, ": expected true or false, got ", json_kind(v)));
  return v.get<bool>();
}

inline int64_t as_int(const json& v, const std::string& path) {
  if (!v.is_number_integer()) throw ModelFormatError(detail::concat(path, ": expected an integer, got ", json_kind(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw ModelFormatError(detail::concat(path, ": integer ", v.dump(), " is out of range"));
  return v.get<int64_t>();
}

inline double as_number(const json& v, const std::string& path) {
  if (!v.is_number()) throw ModelFormatError(detail::concat(path, ": expected a number, got ", json_kind(v)));
  return v.get<double>();
}

inline std::string get_string(const json& j, const std::string& path, const char* key, const std::string& dflt) {
  return has(j, key) ? as_string(j[key], path + "." + key) : dflt;
}
inline bool get_bool(const json& j, const std::string& path, const char* key, bool dflt) {
  return has(j, key) ? as_bool(j[key], path + "." + key) : dflt;
}
inline int64_t get_int(const json& j, const std::string& path, const char* key, int64_t dflt) {
  return has(j, key) ? as_int(j[key], path + "." + key) : dflt;
}

inline std::string type_of(const json& j, const std::string& path) {
  if (!j.is_object()) throw Error(detail::concat(path, ": expected an object, got ", json_kind(j)));
  return as_string(field(j, path, "type"), path + ".type");
}

[[noreturn]] inline void unsupported(const std::string& path, const std::string& what, const std::string& type,
                                     const std::vector<std::string>& supported) {
  throw Error(detail::concat(path, ": unsupported ", what, " type \"", type, "\" (supported: ", join_names(supported),
                             ")"));
}

}  // namespace encore::tok
