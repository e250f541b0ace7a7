// WordPiece and WordLevel models, and make_model (which dispatches to BPE and Unigram too).
#include <algorithm>
#include <memory>
#include <unordered_map>

#include "tokenizer/components.hpp"
#include "tokenizer/json_util.hpp"
#include "tokenizer/models.hpp"
#include "tokenizer/trie.hpp"

namespace encore::tok {

Vocab read_vocab(const json& j, const std::string& path) {
  if (!j.is_object()) throw Error(path + ": expected an object of token -> id, got " + json_kind(j));
  Vocab v;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const int64_t id = as_int(it.value(), path + "[\"" + it.key() + "\"]");
    if (id < 0) throw Error(path + "[\"" + it.key() + "\"]: negative id " + std::to_string(id));
    v.to_id.assign(it.key(), id);
    v.to_token[id] = it.key();
  }
  v.index_ids();
  return v;
}

Vocab read_vocab(const VocabEntries& entries) {
  Vocab v;
  size_t bytes = 0;
  for (const auto& entry : entries) bytes += entry.first.size();
  v.to_id.reserve(entries.size(), bytes);
  int64_t max_id = -1;
  for (const auto& [token, id] : entries) {
    v.to_id.assign(token, id);
    max_id = std::max(max_id, id);
  }
  // read_vocab(json) visits the distinct tokens in sorted order and the last assignment of an id wins: for an id
  // given to several tokens, the greatest. Dense ids (every BERT vocabulary) go straight into by_id, with no
  // hash-map node per token (those were ~a third of this function's time).
  auto keep_greatest = [](std::optional<std::string>& slot, std::string_view token) {
    if (!slot || std::string_view(*slot) < token) slot = token;
  };
  if (Vocab::dense(max_id, v.to_id.size())) {
    v.by_id.resize(static_cast<size_t>(max_id) + 1);
    v.to_id.for_each([&](std::string_view token, int64_t id) { keep_greatest(v.by_id[static_cast<size_t>(id)], token); });
    return v;
  }
  v.to_token.reserve(v.to_id.size());
  v.to_id.for_each([&](std::string_view token, int64_t id) {
    auto [it, inserted] = v.to_token.try_emplace(id, token);
    if (!inserted && std::string_view(it->second) < token) it->second = token;
  });
  return v;
}

std::optional<int64_t> Vocab::find(std::string_view token) const { return to_id.find(token); }

std::optional<std::string> Vocab::token(int64_t id) const {
  if (const std::string* t = token_ref(id)) return *t;
  return std::nullopt;
}

const std::string* Vocab::token_ref(int64_t id) const {
  if (!by_id.empty()) {
    if (id < 0 || static_cast<size_t>(id) >= by_id.size()) return nullptr;
    const std::optional<std::string>& t = by_id[static_cast<size_t>(id)];
    return t ? &*t : nullptr;
  }
  auto it = to_token.find(id);
  return it == to_token.end() ? nullptr : &it->second;
}

void Vocab::index_ids() {
  by_id.clear();
  int64_t max_id = -1;
  for (const auto& [id, token] : to_token) max_id = std::max(max_id, id);
  if (!dense(max_id, to_token.size())) return;  // sparse: the map serves
  by_id.resize(static_cast<size_t>(max_id) + 1);
  for (auto& [id, token] : to_token) by_id[static_cast<size_t>(id)] = std::move(token);
  to_token.clear();
}

namespace {

// Greedy longest-match-first over each word, as BERT's WordpieceTokenizer; a word with any unknown piece,
// or longer than max_input_chars_per_word chars, is one unk token covering the whole word.
class WordPiece final : public Model {
 public:
  WordPiece(Vocab vocab, std::string unk, std::string prefix, size_t max_chars)
      : vocab_(std::move(vocab)), unk_(std::move(unk)), prefix_(std::move(prefix)), max_chars_(max_chars) {
    std::vector<std::string_view> keys;  // views into vocab_.to_id, which outlives the trie's construction
    keys.reserve(vocab_.to_id.size());
    ids_.reserve(vocab_.to_id.size());
    vocab_.to_id.for_each([&](std::string_view token, int64_t id) {
      keys.push_back(token);
      ids_.push_back(id);
    });
    trie_ = ByteTrie(keys);
    continuation_ = trie_.walk(prefix_);
  }

  // The longest vocab entry that is a prefix of word[start..] (behind the continuation prefix after the first
  // piece), i.e. what probing ever shorter substrings would find first: entries are whole UTF-8 chars, so it
  // ends on a char boundary.
  void tokenize(std::string_view word, std::vector<Token>& out) const override {
    if (count_chars(word) > max_chars_) {
      out.push_back(unk_token(word.size()));
      return;
    }
    const size_t first = out.size();
    for (size_t start = 0; start < word.size();) {
      const auto [end, key] = trie_.longest(word, start, start == 0 ? ByteTrie::kRoot : continuation_);
      if (key < 0) {
        out.resize(first);
        out.push_back(unk_token(word.size()));
        return;
      }
      std::string value = start == 0 ? std::string() : prefix_;
      value.append(word.substr(start, end - start));
      out.push_back(Token{ids_[static_cast<size_t>(key)], std::move(value), {start, end}});
      start = end;
    }
  }

  std::optional<int64_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int64_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.to_id.size()); }
  std::string type() const override { return "WordPiece"; }
  std::optional<std::string> continuing_subword_prefix() const override { return prefix_; }
  std::optional<int64_t> unk_token_id() const override { return vocab_.find(unk_); }

 private:
  Vocab vocab_;
  std::string unk_, prefix_;
  size_t max_chars_;
  ByteTrie trie_;                                // every vocab entry; value: index into ids_
  std::vector<int64_t> ids_;
  uint32_t continuation_ = ByteTrie::kNone;      // the node after prefix_

  Token unk_token(size_t len) const {
    auto id = vocab_.find(unk_);
    if (!id) throw Error("WordPiece: the unk_token \"" + unk_ + "\" is not in the vocabulary");
    return Token{*id, unk_, {0, len}};
  }
};

class WordLevel final : public Model {
 public:
  WordLevel(Vocab vocab, std::string unk) : vocab_(std::move(vocab)), unk_(std::move(unk)) {}
  void tokenize(std::string_view word, std::vector<Token>& out) const override {
    if (auto id = vocab_.find(word)) {
      out.push_back(Token{*id, std::string(word), {0, word.size()}});
      return;
    }
    if (auto id = vocab_.find(unk_)) {
      out.push_back(Token{*id, unk_, {0, word.size()}});
      return;
    }
    throw Error("WordLevel: \"" + std::string(word) + "\" is not in the vocabulary and the unk_token \"" + unk_ +
                "\" is not either");
  }
  std::optional<int64_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int64_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.to_id.size()); }
  std::string type() const override { return "WordLevel"; }
  std::optional<int64_t> unk_token_id() const override { return vocab_.find(unk_); }

 private:
  Vocab vocab_;
  std::string unk_;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(std::vector<std::string> vocab, std::string unk_token,
                                      std::string continuing_subword_prefix, size_t max_input_chars_per_word) {
  Vocab v;
  for (size_t i = 0; i < vocab.size(); ++i) {
    v.to_id.assign(vocab[i], static_cast<int64_t>(i));  // a repeated line keeps its last id, as HF's vocab.txt reader
    v.to_token[static_cast<int64_t>(i)] = vocab[i];
  }
  v.index_ids();
  return std::make_unique<WordPiece>(std::move(v), std::move(unk_token), std::move(continuing_subword_prefix),
                                     max_input_chars_per_word);
}

std::unique_ptr<Model> make_model(const json& j, const std::string& path, const VocabEntries* vocab) {
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
  auto vocab_of = [&] { return vocab ? read_vocab(*vocab) : read_vocab(field(j, path, "vocab"), path + ".vocab"); };
  if (type == "WordPiece") {
    const int64_t max_chars = get_int(j, path, "max_input_chars_per_word", 100);
    return std::make_unique<WordPiece>(vocab_of(),
                                       get_string(j, path, "unk_token", "[UNK]"),
                                       get_string(j, path, "continuing_subword_prefix", "##"),
                                       static_cast<size_t>(std::max<int64_t>(0, max_chars)));
  }
  if (type == "WordLevel")
    return std::make_unique<WordLevel>(vocab_of(),
                                       get_string(j, path, "unk_token", "<unk>"));
  if (type == "BPE") return make_bpe(j, path, vocab);
  if (type == "Unigram") return make_unigram(j, path);
  unsupported(path, "model", type, {"WordPiece", "BPE", "Unigram", "WordLevel"});
}

}  // namespace encore::tok
