#include "train/records.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "encore/error.hpp"
#include "encore/files.hpp"

namespace encore::train {

bool read_csv_record(std::istream& in, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false, any = false;
  char c;
  while (in.get(c)) {
    any = true;
    if (quoted) {
      if (c == '"') {
        if (in.peek() == '"') {
          field.push_back('"');
          in.get();
        } else {
          quoted = false;
        }
      } else {
        field.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      field.push_back(c);
    }
  }
  if (!any) return false;
  ENCORE_CHECK_AS(InputError, !quoted, "CSV: unterminated quoted field (a '\"' opens a field that never closes)");
  fields.push_back(field);
  return true;
}

std::vector<Record> read_records(const std::string& path, const std::vector<std::string>& wanted,
                                 const std::vector<std::string>& required) {
  using Json = nlohmann::json;
  std::string names;  // 'a' and 'b'
  for (size_t i = 0; i < required.size(); ++i)
    names += (i == 0 ? "" : i + 1 == required.size() ? " and " : ", ") + ("'" + required[i] + "'");
  auto missing = [&](const auto& has) {
    return std::any_of(required.begin(), required.end(), [&](const std::string& f) { return !has(f); });
  };
  check_readable_file(path, "training data");  // a FIFO, a directory or a symlink loop is refused by name
  std::ifstream in(path, std::ios::binary);
  ENCORE_CHECK_AS(InputError, in.good(), "cannot read training data '", path, "'");
  std::vector<Record> out;
  if (std::filesystem::path(path).extension() == ".csv") {
    std::vector<std::string> header, row;
    try {
      ENCORE_CHECK_AS(InputError, read_csv_record(in, header), "'", path, "' is empty");
    } catch (const InputError& e) {
      throw InputError(detail::concat(path, ":1: ", e.what()));
    }
    ENCORE_CHECK(!missing([&](const std::string& f) { return std::find(header.begin(), header.end(), f) != header.end(); }),
                 "'", path, "': the header needs ", names, " columns");
    int64_t line = 1;
    for (;;) {
      ++line;
      try {
        if (!read_csv_record(in, row)) break;
      } catch (const InputError& e) {  // the record starting on this line
        throw InputError(detail::concat(path, ": record ", line, ": ", e.what()));
      }
      if (row.size() == 1 && row[0].empty()) continue;
      ENCORE_CHECK(row.size() == header.size(), path, ": record ", line, " has ", row.size(), " fields, the header ",
                   header.size());
      Record r{{}, line};
      for (size_t i = 0; i < header.size(); ++i)
        if (std::find(wanted.begin(), wanted.end(), header[i]) != wanted.end()) r.fields[header[i]] = row[i];
      out.push_back(std::move(r));
    }
    return out;
  }
  std::string l;
  int64_t line = 0;
  while (std::getline(in, l)) {
    ++line;
    if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j;
    try {
      j = Json::parse(l);
    } catch (const Json::exception& e) {
      throw InputError(detail::concat(path, ":", line, ": not valid JSON: ", e.what()));
    }
    ENCORE_CHECK(j.is_object() && !missing([&](const std::string& f) { return j.contains(f); }), path, ":", line,
                 ": expected a JSON object", required.empty() ? "" : " with ", names);
    Record r{{}, line};
    for (const auto& name : wanted) {
      if (!j.contains(name)) continue;
      const Json& v = j[name];
      ENCORE_CHECK(v.is_string() || v.is_number_integer(), path, ":", line, ": '", name,
                   "' must be a string or an integer");
      r.fields[name] = v.is_string() ? v.get<std::string>() : v.dump();  // an integer exactly as written
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace encore::train
