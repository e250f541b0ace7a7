// The one record reader (include/encore/records.hpp): text lines, JSONL and RFC 4180 CSV, one record at a time.
#include "encore/records.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "encore/error.hpp"
#include "encore/files.hpp"

namespace encore {

size_t json_too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character (a quote included) is not the string's end
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

std::string json_too_deep_message(size_t offset) {
  return "arrays and objects nested more than " + std::to_string(kMaxJsonDepth) + " levels deep (at byte " +
         std::to_string(offset) + ")";
}

namespace {

// SAX events of nlohmann's parser: only the depth and the top-level keys are kept.
struct TopLevelKeys {
  std::unordered_set<std::string> seen;
  std::optional<std::string> duplicate;
  int depth = 0;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(nlohmann::json::number_integer_t) { return true; }
  bool number_unsigned(nlohmann::json::number_unsigned_t) { return true; }
  bool number_float(nlohmann::json::number_float_t, const nlohmann::json::string_t&) { return true; }
  bool string(nlohmann::json::string_t&) { return true; }
  bool binary(nlohmann::json::binary_t&) { return true; }
  bool start_object(std::size_t) { return ++depth, true; }
  bool end_object() { return --depth, true; }
  bool start_array(std::size_t) { return ++depth, true; }
  bool end_array() { return --depth, true; }
  bool key(nlohmann::json::string_t& k) {
    if (depth == 1 && !seen.insert(k).second) {
      duplicate = k;
      return false;  // found: stop
    }
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception&) {
    return false;
  }
};

}  // namespace

std::optional<std::string> json_duplicate_top_level_key(std::string_view text) {
  TopLevelKeys keys;
  nlohmann::json::sax_parse(text.begin(), text.end(), &keys);
  return keys.duplicate;
}


using Json = nlohmann::ordered_json;  // fields keep their file order (carried into output as they came)

RecordFormat record_format_from_path(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".jsonl" || ext == ".ndjson") return RecordFormat::jsonl;
  if (ext == ".csv") return RecordFormat::csv;
  return RecordFormat::text;
}

RecordFormat parse_record_format(const std::string& name) {
  if (name == "text") return RecordFormat::text;
  if (name == "jsonl") return RecordFormat::jsonl;
  if (name == "csv") return RecordFormat::csv;
  throw UsageError("record format '" + name + "': expected text, jsonl or csv");
}

const char* record_format_name(RecordFormat f) {
  switch (f) {
    case RecordFormat::text: return "text";
    case RecordFormat::jsonl: return "jsonl";
    case RecordFormat::csv: return "csv";
  }
  return "?";
}

const RecordField* Record::find(std::string_view name) const {
  for (const RecordField& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

RecordReader::RecordReader(const std::string& path) : RecordReader(path, record_format_from_path(path)) {}
RecordReader::RecordReader(const std::string& path, RecordFormat format) : RecordReader(path, format, Options{}) {}

RecordReader::RecordReader(const std::string& path, RecordFormat format, Options options)
    : path_(path == "-" ? "<stdin>" : path), format_(format), options_(std::move(options)) {
  if (path == "-") {
    in_ = &std::cin;
    return;
  }
  // A directory, a device, a symlink loop (and a FIFO unless allowed) are refused by name before open().
  check_readable_file(path, options_.what.c_str(), options_.allow_pipe);
  file_ = std::make_unique<std::ifstream>(path, std::ios::binary);
  ENCORE_CHECK_AS(InputError, file_->good(), "cannot read ", options_.what, " '", path, "': ", std::strerror(errno));
  in_ = file_.get();
}

RecordReader::~RecordReader() = default;

void RecordReader::fail(const Record& r, const std::string& message) const {
  throw InputError(detail::concat(path_, ":", r.line, ": ", message));
}

const std::string& RecordReader::field(const Record& r, std::string_view name) const {
  const RecordField* f = r.find(name);
  if (!f || f->kind != RecordField::Kind::string) {
    const char* shape = format_ == RecordFormat::csv ? "column" : "string field";
    fail(r, detail::concat(f ? "'" : "no ", f ? "" : shape, f ? "" : " '", name, "'",
                           f ? " must be a string, got " + f->json : std::string()));
  }
  return f->value;
}

const std::string* RecordReader::scalar(const Record& r, std::string_view name) const {
  const RecordField* f = r.find(name);
  if (!f) return nullptr;
  if (f->kind == RecordField::Kind::other) fail(r, detail::concat("'", name, "' must be a string or an integer"));
  return &f->value;
}

bool RecordReader::next(Record& r) {
  r.fields.clear();
  r.json.clear();
  r.is_object = true;
  switch (format_) {
    case RecordFormat::text: return next_text(r);
    case RecordFormat::jsonl: return next_jsonl(r);
    case RecordFormat::csv: return next_csv(r);
  }
  return false;
}

bool RecordReader::next_text(Record& r) {
  std::string line;
  if (!std::getline(*in_, line)) return false;
  r.line = ++line_;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  r.fields.push_back({"text", line, Json(line).dump(-1, ' ', false, Json::error_handler_t::replace),
                      RecordField::Kind::string});
  return true;
}

bool RecordReader::next_jsonl(Record& r) {
  std::string line;
  while (std::getline(*in_, line)) {
    r.line = ++line_;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j;
    if (const size_t at = json_too_deep_at(line); at != std::string::npos)
      fail(r, "not read: " + json_too_deep_message(at));
    try {
      j = Json::parse(line);
    } catch (const Json::exception& e) {
      fail(r, std::string("not valid JSON: ") + e.what());
    }
    r.json = j.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (!j.is_object()) {
      if (!options_.allow_non_objects) fail(r, "expected a JSON object, got " + r.json.substr(0, 80));
      r.is_object = false;
      return true;
    }
    for (const auto& [name, v] : j.items()) {
      RecordField f{name, {}, v.dump(-1, ' ', false, Json::error_handler_t::replace), RecordField::Kind::other};
      if (v.is_string()) {
        f.value = v.get<std::string>();
        f.kind = RecordField::Kind::string;
      } else if (v.is_number_integer()) {
        f.value = v.is_number_unsigned() ? std::to_string(v.get<uint64_t>()) : std::to_string(v.get<int64_t>());
        f.kind = RecordField::Kind::integer;
      } else {
        f.value = f.json;
      }
      r.fields.push_back(std::move(f));
    }
    return true;
  }
  return false;
}

// One RFC 4180 record: quoted fields may hold commas, quotes as "", and newlines. false at the end of input.
bool RecordReader::read_csv_fields(std::vector<std::string>& fields, int64_t& start_line) {
  fields.clear();
  std::string field;
  bool quoted = false, any = false;
  start_line = line_ + 1;
  char c;
  while (in_->get(c)) {
    any = true;
    if (c == '\n') ++line_;
    if (quoted) {
      if (c == '"') {
        if (in_->peek() == '"') {
          field.push_back('"');
          in_->get();
        } else {
          quoted = false;
        }
      } else {
        field.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      field.push_back(c);
    }
  }
  if (!any) return false;
  if (quoted)
    throw InputError(detail::concat(path_, ":", start_line, ": unterminated quoted field (a '\"' opens a field that "
                                    "never closes)"));
  fields.push_back(std::move(field));
  return true;
}

bool RecordReader::next_csv(Record& r) {
  std::vector<std::string> row;
  int64_t start = 0;
  if (!header_read_) {
    header_read_ = true;
    ENCORE_CHECK_AS(InputError, read_csv_fields(columns_, start), "'", path_,
                    "' is empty: a CSV file needs a header line");
  }
  while (read_csv_fields(row, start)) {
    r.line = start;
    if (row.size() == 1 && row[0].empty()) continue;
    if (row.size() != columns_.size())
      fail(r, detail::concat("the record has ", row.size(), " fields, the header ", columns_.size()));
    for (size_t i = 0; i < row.size(); ++i)
      r.fields.push_back({columns_[i], row[i], Json(row[i]).dump(-1, ' ', false, Json::error_handler_t::replace),
                          RecordField::Kind::string});
    return true;
  }
  return false;
}

std::vector<Record> read_all_records(const std::string& path, RecordFormat format,
                                     const std::vector<std::string>& required, const std::string& what) {
  RecordReader in(path, format, {.allow_non_objects = false, .what = what});
  std::string names;  // 'a' and 'b'
  for (size_t i = 0; i < required.size(); ++i)
    names += (i == 0 ? "" : i + 1 == required.size() ? " and " : ", ") + ("'" + required[i] + "'");
  std::vector<Record> out;
  Record r;
  bool more = in.next(r);
  if (format == RecordFormat::csv)
    for (const std::string& f : required)
      ENCORE_CHECK_AS(InputError, std::find(in.columns().begin(), in.columns().end(), f) != in.columns().end(), "'",
                      in.path(), "': the header needs ", names, " columns");
  for (; more; more = in.next(r)) {
    for (const std::string& f : required)
      if (!r.find(f)) in.fail(r, "expected a JSON object with " + names);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace encore
