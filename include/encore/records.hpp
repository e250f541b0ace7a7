// encore::RecordReader - the one reader of record files (plain text lines, JSONL, CSV) behind `encore embed`,
// `encore accuracy`, `encore tokenize` and the trainers. Errors name the file and line ("data.jsonl:7: ...").
//
//   encore::RecordReader in("corpus.jsonl");              // format from the extension; "-" reads stdin
//   for (encore::Record r; in.next(r);)
//     std::string text = in.field(r, "text");            // throws "corpus.jsonl:3: no string field 'text'"
//
// Formats:
//   text   one record per line, its whole content (a trailing \r dropped) in the field "text"; empty lines are
//          records too (an empty text). Bytes are kept as they are (no UTF-8 check).
//   jsonl  one JSON object per line; blank lines are skipped. Field values keep their JSON text (`json`), and
//          `value` is the string itself for strings, the decimal for integers, the JSON text otherwise. With
//          allow_non_objects, a line holding another JSON value (a string, an array) gives a record without
//          fields whose `json` is that value; otherwise such a line is an error.
//   csv    RFC 4180 with a header line naming the fields: quoted fields may hold commas, "" and newlines.
//          Empty records are skipped; a record with more or fewer fields than the header is an error.
// Records are read one at a time (the file is never held whole), so a reader on stdin streams. Errors are
// encore::InputError ("file:line: ..."); a path that is a directory, a device or a symlink loop is refused before it
// is opened (include/encore/files.hpp), a FIFO too unless Options::allow_pipe.
// Not thread-safe: one reader per thread.
#pragma once
#include <cstdint>
#include <fstream>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace encore {

// Arrays and objects nested deeper than this are refused wherever encore parses JSON it is given (JSONL records,
// request bodies, config and tokenizer files, safetensors headers), before parsing: serde_json, which Hugging Face
// tokenizers and TEI parse with, stops at 127 levels, so what they read encore reads. Deeper values would overflow
// the stack in the JSON library's recursive dump and copy (a 140 KB request body of 70,000 '[' killed the server).
constexpr int kMaxJsonDepth = 128;
// The byte offset at which `text` opens its (kMaxJsonDepth + 1)-th nested array or object, or std::string::npos if
// it never does. Strings (with their escapes) are skipped; the text need not be valid JSON.
size_t json_too_deep_at(std::string_view text);
// "arrays and objects nested more than 128 levels deep (at byte N)": the error text for json_too_deep_at's offset.
std::string json_too_deep_message(size_t offset);
// The first key that the top-level object of `text` gives twice (compared unescaped), or nullopt: also when `text`
// is not a JSON object or not valid JSON (parsing it says so). A JSON library keeps the last value silently;
// serde (TEI) and the safetensors format refuse. One linear pass that builds nothing (a parser callback would make
// nlohmann 3.11's parse quadratic in the number of objects).
std::optional<std::string> json_duplicate_top_level_key(std::string_view text);

enum class RecordFormat { text, jsonl, csv };

// .jsonl / .ndjson -> jsonl, .csv -> csv, anything else (and "-") -> text.
RecordFormat record_format_from_path(const std::string& path);
// "text", "jsonl" or "csv"; anything else throws, naming the allowed values.
RecordFormat parse_record_format(const std::string& name);
const char* record_format_name(RecordFormat f);

struct RecordField {
  enum class Kind { string, integer, other };
  std::string name;
  std::string value;  // strings as they are, integers in decimal, other JSON values as JSON text
  std::string json;   // the value as JSON text (CSV and text fields: a JSON string)
  Kind kind = Kind::string;
};

struct Record {
  int64_t line = 0;                // 1-based line of the file where the record starts
  std::vector<RecordField> fields;  // in file order
  std::string json;                // jsonl: the whole line's JSON value as written (objects included)
  bool is_object = true;           // false: a non-object JSONL line (allow_non_objects)

  const RecordField* find(std::string_view name) const;
};

class RecordReader {
 public:
  struct Options {
    bool allow_non_objects = false;  // jsonl: accept lines that are not JSON objects (see above)
    std::string what = "file";       // how errors name the file: "cannot read training data 'x.csv'"
    bool allow_pipe = false;         // a FIFO may be read (texts read once: `-i <(zcat texts.gz)`)
  };
  // Format from the path's extension (record_format_from_path).
  explicit RecordReader(const std::string& path);
  RecordReader(const std::string& path, RecordFormat format);
  RecordReader(const std::string& path, RecordFormat format, Options options);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // The next record into r; false at the end of the file.
  bool next(Record& r);

  const std::string& path() const { return path_; }
  RecordFormat format() const { return format_; }
  // The CSV header's names (after the first next(); empty for other formats).
  const std::vector<std::string>& columns() const { return columns_; }

  // "path:line: " followed by the message, as an encore::Error.
  [[noreturn]] void fail(const Record& r, const std::string& message) const;
  // The string value of `name` (strings only); fails naming file:line when it is missing or not a string.
  const std::string& field(const Record& r, std::string_view name) const;
  // The value of `name` when it is a string or an integer (in decimal); nullptr when the record has no such
  // field; fails naming file:line for other JSON values (null, a float, an array, an object).
  const std::string* scalar(const Record& r, std::string_view name) const;

 private:
  bool next_text(Record& r);
  bool next_jsonl(Record& r);
  bool next_csv(Record& r);
  bool read_csv_fields(std::vector<std::string>& fields, int64_t& start_line);

  std::string path_;
  RecordFormat format_;
  Options options_;
  std::unique_ptr<std::ifstream> file_;
  std::istream* in_ = nullptr;
  int64_t line_ = 0;  // lines consumed so far
  std::vector<std::string> columns_;
  bool header_read_ = false;
};

// Every record of a file (format from the extension unless given). Each name in `required` must be a field of
// every record (CSV: a header column); errors name the file and line.
std::vector<Record> read_all_records(const std::string& path, RecordFormat format,
                                     const std::vector<std::string>& required = {}, const std::string& what = "file");

}  // namespace encore
