// libFuzzer: the record reader (include/encore/records.hpp) on JSONL and CSV with quotes, read the way
// `encore train --data` reads them (text, optional text_pair, label). The first byte picks the format. Errors must
// be encore::Error naming the file.
#include <string>

#include "encore/error.hpp"
#include "encore/records.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool csv = data[0] & 1;
  const std::string path = encore_fuzz::write_input(data + 1, size - 1, csv ? "data.csv" : "data.jsonl");
  try {
    encore::RecordReader in(path, csv ? encore::RecordFormat::csv : encore::RecordFormat::jsonl,
                            {.allow_non_objects = false, .what = "training data"});
    for (encore::Record r; in.next(r);) {
      FUZZ_ASSERT(r.line >= 1);
      const std::string *text = in.scalar(r, "text"), *label = in.scalar(r, "label");
      in.scalar(r, "text_pair");
      if (!text || !label) in.fail(r, "expected 'text' and 'label'");
      FUZZ_ASSERT(r.find("text") && r.find("label"));
    }
  } catch (const encore::Error& e) {
    FUZZ_ASSERT(std::string(e.what()).find("data.") != std::string::npos);
  }
  return 0;
}
