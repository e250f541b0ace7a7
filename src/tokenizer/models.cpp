// WordPiece and WordLevel models, and make_model (which dispatches to BPE and Unigram too).
#include <memory>
#include <unordered_map>

#include "tokenizer/components.hpp"
#include "tokenizer/json_util.hpp"
#include "tokenizer/models.hpp"

namespace encore::tok {

Vocab read_vocab(const json& j, const std::string& path) {
  if (!j.is_object()) throw Error(path + ": expected an object of token -> id, got " + json_kind(j));
  Vocab v;
  v.to_id.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const int64_t id = as_int(it.value(), path + "[\"" + it.key() + "\"]");
    if (id < 0) throw Error(path + "[\"" + it.key() + "\"]: negative id " + std::to_string(id));
    v.to_id[it.key()] = id;
    v.to_token[id] = it.key();
  }
  return v;
}

std::optional<int64_t> Vocab::find(std::string_view token) const {
  auto it = to_id.find(token);
  if (it == to_id.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Vocab::token(int64_t id) const {
  auto it = to_token.find(id);
  if (it == to_token.end()) return std::nullopt;
  return it->second;
}

namespace {

// Greedy longest-match-first over each word, as BERT's WordpieceTokenizer; a word with any unknown piece,
// or longer than max_input_chars_per_word chars, is one unk token covering the whole word.
class WordPiece final : public Model {
 public:
  WordPiece(Vocab vocab, std::string unk, std::string prefix, size_t max_chars)
      : vocab_(std::move(vocab)), unk_(std::move(unk)), prefix_(std::move(prefix)), max_chars_(max_chars) {
    for (const auto& [tok, id] : vocab_.to_id) max_token_bytes_ = std::max(max_token_bytes_, tok.size());
  }

  std::vector<Token> tokenize(std::string_view word) const override {
    if (count_chars(word) > max_chars_) return {unk_token(word.size())};
    std::vector<Token> out;
    std::string key;
    size_t start = 0;
    while (start < word.size()) {
      // the longest vocab entry is max_token_bytes_: no need to try longer substrings
      const size_t room = start > 0 ? (max_token_bytes_ > prefix_.size() ? max_token_bytes_ - prefix_.size() : 0)
                                    : max_token_bytes_;
      size_t end = word.size();
      if (end - start > room) {
        end = start + room;
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;  // char boundary
      }
      bool found = false;
      while (start < end) {
        key.clear();
        if (start > 0) key = prefix_;
        key.append(word.substr(start, end - start));
        if (auto id = vocab_.find(key)) {
          out.push_back(Token{*id, key, {start, end}});
          found = true;
          break;
        }
        do --end;  // drop the last char
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (!found) return {unk_token(word.size())};
      start = end;
    }
    return out;
  }

  std::optional<int64_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int64_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.to_id.size()); }
  std::string type() const override { return "WordPiece"; }

 private:
  Vocab vocab_;
  std::string unk_, prefix_;
  size_t max_chars_;
  size_t max_token_bytes_ = 0;

  Token unk_token(size_t len) const {
    auto id = vocab_.find(unk_);
    if (!id) throw Error("WordPiece: the unk_token \"" + unk_ + "\" is not in the vocabulary");
    return Token{*id, unk_, {0, len}};
  }
};

class WordLevel final : public Model {
 public:
  WordLevel(Vocab vocab, std::string unk) : vocab_(std::move(vocab)), unk_(std::move(unk)) {}
  std::vector<Token> tokenize(std::string_view word) const override {
    if (auto id = vocab_.find(word)) return {Token{*id, std::string(word), {0, word.size()}}};
    if (auto id = vocab_.find(unk_)) return {Token{*id, unk_, {0, word.size()}}};
    throw Error("WordLevel: \"" + std::string(word) + "\" is not in the vocabulary and the unk_token \"" + unk_ +
                "\" is not either");
  }
  std::optional<int64_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int64_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.to_id.size()); }
  std::string type() const override { return "WordLevel"; }

 private:
  Vocab vocab_;
  std::string unk_;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(std::vector<std::string> vocab, std::string unk_token,
                                      std::string continuing_subword_prefix, size_t max_input_chars_per_word) {
  Vocab v;
  for (size_t i = 0; i < vocab.size(); ++i) {
    v.to_id[vocab[i]] = static_cast<int64_t>(i);  // a repeated line keeps its last id, as HF's vocab.txt reader
    v.to_token[static_cast<int64_t>(i)] = vocab[i];
  }
  return std::make_unique<WordPiece>(std::move(v), std::move(unk_token), std::move(continuing_subword_prefix),
                                     max_input_chars_per_word);
}

std::unique_ptr<Model> make_model(const json& j, const std::string& path) {
  if (!j.is_object()) throw Error(path + ": expected an object, got " + json_kind(j));
  std::string type;
  if (has(j, "type")) {
    type = as_string(j["type"], path + ".type");
  } else if (j.contains("merges")) {  // files without "type": recognise the model by its fields, as HF does
    type = "BPE";
  } else if (j.contains("vocab") && j["vocab"].is_array()) {
    type = "Unigram";
  } else if (j.contains("continuing_subword_prefix") || j.contains("max_input_chars_per_word")) {
    type = "WordPiece";
  } else {
    type = "WordLevel";
  }
  if (type == "WordPiece") {
    const int64_t max_chars = get_int(j, path, "max_input_chars_per_word", 100);
    return std::make_unique<WordPiece>(read_vocab(field(j, path, "vocab"), path + ".vocab"),
                                       get_string(j, path, "unk_token", "[UNK]"),
                                       get_string(j, path, "continuing_subword_prefix", "##"),
                                       static_cast<size_t>(std::max<int64_t>(0, max_chars)));
  }
  if (type == "WordLevel")
    return std::make_unique<WordLevel>(read_vocab(field(j, path, "vocab"), path + ".vocab"),
                                       get_string(j, path, "unk_token", "<unk>"));
  if (type == "BPE") return make_bpe(j, path);
  if (type == "Unigram") return make_unigram(j, path);
  unsupported(path, "model", type, {"WordPiece", "BPE", "Unigram", "WordLevel"});
}

}  // namespace encore::tok
