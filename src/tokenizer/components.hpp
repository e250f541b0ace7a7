// The pipeline stages of a tokenizer.json, as interfaces, and the factories that build them from JSON:
//   text -> [added tokens split off] -> Normalizer -> PreTokenizer -> Model -> PostProcessor -> Encoding
//   ids  -> tokens -> Decoder -> text
// Each factory takes the JSON object and its JSON path ("model", "normalizer.normalizers[2]") so errors can
// say exactly where a tokenizer.json is wrong. All components are immutable after construction, so a
// Tokenizer can encode from many threads.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "encore/tokenizer.hpp"
#include "tokenizer/json_reader.hpp"
#include "tokenizer/normalized_string.hpp"

namespace encore::tok {

using json = nlohmann::json;

struct Token {
  int64_t id = 0;
  std::string value;
  Offsets offsets;  // bytes of the string the model was given (normalized split), then of the original input
};

// A normalized input cut into splits; a split holding tokens (an added token) is final.
struct Split {
  NormalizedString normalized;
  std::optional<std::vector<Token>> tokens;
};

struct PreTokenizedString {
  std::vector<Split> splits;
  // Replaces every split that has no tokens by the non-empty pieces f(index, normalized, pieces) appends to
  // `pieces`.
  template <class F>
  void split(F&& f) {
    std::vector<Split> out;
    out.reserve(splits.size());
    std::vector<NormalizedString> pieces;  // one split's, reused
    size_t index = 0;
    for (Split& s : splits) {
      if (s.tokens) {
        out.push_back(std::move(s));
        continue;
      }
      pieces.clear();
      f(index++, std::move(s.normalized), pieces);
      for (NormalizedString& piece : pieces)
        if (!piece.empty()) out.push_back(Split{std::move(piece), std::nullopt});
    }
    splits = std::move(out);
  }
  template <class F>
  void normalize(F&& f) {
    for (Split& s : splits)
      if (!s.tokens) f(s.normalized);
  }
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedString& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedString& p) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of one pre-tokenized word to `out`; their offsets are bytes of `word`.
  virtual void tokenize(std::string_view word, std::vector<Token>& out) const = 0;
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int64_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string type() const = 0;
  // The prefix marking a word's continuation tokens ("##" for WordPiece; BPE's when set), as the Python model's
  // `continuing_subword_prefix` attribute (None for the models without one).
  virtual std::optional<std::string> continuing_subword_prefix() const { return std::nullopt; }
  // The id unknown input maps to, when the model has one.
  virtual std::optional<int64_t> unk_token_id() const { return std::nullopt; }
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual int64_t added_tokens(bool is_pair) const = 0;
  // Transforms the list of (1 or 2) encodings in place; the caller concatenates them afterwards. texts[i] is
  // the input encodings[i] came from (its offsets index it).
  virtual void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens,
                                 const std::vector<std::string_view>& texts) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& path);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& path);
// vocab: model.vocab read flat (json_reader.hpp), used instead of j["vocab"] when given.
std::unique_ptr<Model> make_model(const json& j, const std::string& path, const VocabEntries* vocab = nullptr);
std::unique_ptr<PostProcessor> make_post_processor(const json& j, const std::string& path);
std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& path);

// {"String": s} (a literal) or {"Regex": r}, the pattern field of Split / Replace.
std::shared_ptr<const Pattern> make_pattern(const json& j, const std::string& path);
// "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous".
SplitBehavior make_split_behavior(const json& j, const std::string& path);
// The Precompiled normalizer from its base64 charsmap (precompiled.cpp).
std::unique_ptr<Normalizer> make_precompiled(const std::string& base64_charsmap, const std::string& path);

// Models built directly (vocab.txt loading, tests).
std::unique_ptr<Model> make_wordpiece(std::vector<std::string> vocab, std::string unk_token,
                                      std::string continuing_subword_prefix, size_t max_input_chars_per_word);

// The byte <-> printable-char map of GPT-2's byte-level BPE.
char32_t byte_to_char(uint8_t b);
// -1 when c is not one of the 256 byte chars.
int char_to_byte(char32_t c);
// Byte-level mapping of a whole string (the ByteLevel pre-tokenizer's and normalizer's step): each byte of each
// char becomes its printable char; the chars made from one original char stay aligned to it.
void byte_level_map(NormalizedString& s);

// fn(a.field, b.field) for every per-token field of an Encoding (ids, type ids, tokens, offsets, the masks,
// sequence ids, word ids), so code that reshapes tokens cannot forget one. B: Encoding or const Encoding.
template <typename B, typename Fn>
void for_each_token_field(Encoding& a, B& b, Fn&& fn) {
  fn(a.ids, b.ids);
  fn(a.type_ids, b.type_ids);
  fn(a.tokens, b.tokens);
  fn(a.offsets, b.offsets);
  fn(a.special_tokens_mask, b.special_tokens_mask);
  fn(a.attention_mask, b.attention_mask);
  fn(a.sequence_ids, b.sequence_ids);
  fn(a.word_ids, b.word_ids);
}

// Appends e's tokens (every per-token field) after out's; e is moved from.
void append_encoding(Encoding& out, Encoding&& e);
// Capacity for n tokens in every per-token field.
void reserve_tokens(Encoding& e, size_t n);
// The encodings' tokens one after the other.
Encoding concatenate(std::vector<Encoding>&& encs);

// Trims the whitespace (or byte-level space 'Ġ') a token's offsets cover (ByteLevel/Roberta processors), by
// whole chars of `text`, as the Python library does (it trims offsets already converted to chars).
void trim_byte_level_offsets(Encoding& e, bool add_prefix_space, std::string_view text);

}  // namespace encore::tok
