// Training-data records shared by the trainers (internal to src/train): CSV records per RFC 4180 and JSONL/CSV
// files read as rows of named string fields.
#pragma once
#include <istream>
#include <map>
#include <string>
#include <vector>

namespace encore::train {

// One CSV record (RFC 4180: quoted fields may hold commas, quotes as "", and newlines). false at end of input.
bool read_csv_record(std::istream& in, std::vector<std::string>& fields);

// Every record of a .csv (header line) or .jsonl file as field -> string (JSON strings as they are, integers in
// decimal; other JSON values are refused), with its 1-based line (JSONL) or record (CSV) number. Fields outside
// `wanted` are skipped; every field in `required` must be there (the CSV header's columns, each JSON object's
// keys). Blank JSONL lines and empty CSV records are skipped. Errors name the file and line.
struct Record {
  std::map<std::string, std::string> fields;
  int64_t line = 0;
};
std::vector<Record> read_records(const std::string& path, const std::vector<std::string>& wanted,
                                 const std::vector<std::string>& required = {});

}  // namespace encore::train
