#include "train/records.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "encore/error.hpp"

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
  ENCORE_CHECK(!quoted, "CSV: unterminated quoted field");
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
  std::ifstream in(path, std::ios::binary);
  ENCORE_CHECK(in.good(), "cannot read training data '", path, "'");
  std::vector<Record> out;
  if (std::filesystem::path(path).extension() == ".csv") {
    std::vector<std::string> header, row;
    ENCORE_CHECK(read_csv_record(in, header), "'", path, "' is empty");
    ENCORE_CHECK(!missing([&](const std::string& f) { return std::find(header.begin(), header.end(), f) != header.end(); }),
                 "'", path, "': the header needs ", names, " columns");
    int64_t line = 1;
    while (read_csv_record(in, row)) {
      ++line;
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
      throw Error(detail::concat(path, ":", line, ": not valid JSON: ", e.what()));
    }
    ENCORE_CHECK(j.is_object() && !missing([&](const std::string& f) { return j.contains(f); }), path, ":", line,
                 ": expected a JSON object", required.empty() ? "" : " with ", names);
    Record r{{}, line};
    for (const auto& name : wanted) {
      if (!j.contains(name)) continue;
      const Json& v = j[name];
      ENCORE_CHECK(v.is_string() || v.is_number_integer(), path, ":", line, ": '", name,
                   "' must be a string or an integer");
      r.fields[name] = v.is_string() ? v.get<std::string>() : std::to_string(v.get<int64_t>());
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace encore::train
