// libFuzzer: encode/decode arbitrary bytes with real tokenizers (MiniLM's WordPiece, the default model's, and the
// tokenizer.json files in $ENCORE_FUZZ_TOKENIZERS, colon-separated: scripts/fuzz.sh passes the byte-level BPE and
// Unigram seeds of tests/fuzz/corpus/tokenizer_json). Checked: offsets lie inside the text they belong to
// (begin <= end <= its byte length), ids inside the vocabulary, char offsets convert, decode returns. The first
// byte picks the tokenizer and whether the input is a pair (split in the middle).
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "encore/error.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/tokenizer.hpp"
#include "fuzz_util.hpp"

namespace {
std::vector<encore::Tokenizer>& tokenizers() {
  static std::vector<encore::Tokenizer> all = [] {
    std::vector<encore::Tokenizer> v;
    const char* list = std::getenv("ENCORE_FUZZ_TOKENIZERS");  // colon-separated tokenizer.json paths / dirs
    v.push_back(encore::Tokenizer::load(encore::default_model_dir()));
    if (list) {
      std::stringstream ss(list);
      for (std::string p; std::getline(ss, p, ':');)
        if (!p.empty()) v.push_back(p.ends_with(".json") ? encore::Tokenizer::from_file(p) : encore::Tokenizer::load(p));
    }
    if (v.empty()) std::abort();
    for (auto& t : v) t.set_truncation(std::nullopt);
    return v;
  }();
  return all;
}

void check(const encore::Tokenizer& tok, const encore::Encoding& e, size_t n1, size_t n2) {
  FUZZ_ASSERT(e.ids.size() == e.offsets.size() && e.ids.size() == e.tokens.size());
  for (size_t i = 0; i < e.size(); ++i) {
    const auto [b, en] = e.offsets[i];
    const size_t n = e.sequence_ids.size() > i && e.sequence_ids[i] == 1 ? n2 : n1;
    FUZZ_ASSERT(0 <= b && b <= en && static_cast<size_t>(en) <= n);
    FUZZ_ASSERT(e.ids[i] >= 0 && e.ids[i] < static_cast<int64_t>(tok.vocab_size()));
  }
  (void)tok.decode(e.ids, true);
  (void)tok.decode(e.ids, false);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto& all = tokenizers();
  const encore::Tokenizer& tok = all[data[0] % all.size()];
  const bool pair = data[0] & 0x80;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (pair) {
      const size_t cut = rest.size() / 2;
      const std::string_view a = rest.substr(0, cut), b = rest.substr(cut);
      check(tok, tok.encode_pair(a, b), a.size(), b.size());
    } else {
      const encore::Encoding e = tok.encode(rest);
      check(tok, e, rest.size(), 0);
      const auto chars = encore::Tokenizer::char_offsets(rest, e.offsets);
      FUZZ_ASSERT(chars.size() == e.offsets.size());
    }
  } catch (const encore::Error&) {
  }
  return 0;
}
