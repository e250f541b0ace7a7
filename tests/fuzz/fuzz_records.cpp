// libFuzzer: the training-data readers (JSONL and CSV with quotes, as `encore train --data` reads them). The
// first byte picks the format. Errors must be encore::Error naming the file.
#include <string>

#include "encore/error.hpp"
#include "fuzz_util.hpp"
#include "train/records.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool csv = data[0] & 1;
  const std::string path = encore_fuzz::write_input(data + 1, size - 1, csv ? "data.csv" : "data.jsonl");
  try {
    const auto records = encore::train::read_records(path, {"text", "text_pair", "label"}, {"text", "label"});
    for (const auto& r : records) FUZZ_ASSERT(r.fields.count("text") == 1 && r.fields.count("label") == 1);
  } catch (const encore::Error& e) {
    FUZZ_ASSERT(std::string(e.what()).find("data.") != std::string::npos);
  }
  return 0;
}
