// Reading tokenizer.json: a JSON DOM of the pipeline, with the model's vocabulary read flat.
//
//   TokenizerJson t = read_tokenizer_json(text, "tokenizer.json");
//   make_model(t.doc["model"], path, t.flat_vocab ? &t.vocab : nullptr);
//
// Why: a BERT vocabulary is ~30k "token": id members. As a DOM each one is a std::map node (a string compare per
// level on insert, a tree walk to read back): parsing and reading them was ~60% of Tokenizer.load (~20 of 33 ms
// for all-MiniLM-L6-v2). Here the members of model.vocab go straight into one vector, in file order.
//
// Contract: the flat form is only taken when every member of model.vocab is a non-negative integer that fits
// int64. At the first member that is anything else, the members read so far go back into the DOM as an object
// and reading continues as a DOM, so make_model's checks see exactly the document and report the same errors
// ("model.vocab[\"x\"]: expected an integer, got string"). With the flat form the DOM holds an empty object at
// model.vocab (so the model's type is still recognised by its fields). Floats are read as serde_json reads them
// (serde_f64), as the Rust library does. A malformed document throws ModelFormatError naming `source`.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/json_util.hpp"

namespace encore::tok {

// model.vocab's members in file order (a repeated token appears each time).
using VocabEntries = std::vector<std::pair<std::string, int64_t>>;

struct TokenizerJson {
  json doc;
  VocabEntries vocab;      // model.vocab's members, when flat_vocab
  bool flat_vocab = false;
};

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& source);
// Any JSON file the tokenizer reads (tokenizer_config.json): a plain DOM, floats as serde_json reads them.
json parse_json(std::string_view text, const std::string& source);
// A float the way serde_json (without its float_roundtrip feature) reads it.
double serde_f64(std::string_view s);

}  // namespace encore::tok
