// Shared pieces of the model implementations (models.cpp, bpe.cpp, unigram.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/components.hpp"
#include "tokenizer/token_index.hpp"

namespace encore::tok {

// Hash that lets unordered_map<std::string, ...> be searched with a string_view, without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// id -> token is by_id (an array, when the ids are dense: the largest below 2 x the number of ids + 1024) or else
// to_token. Move-only (a vocabulary is large; nothing needs a copy).
struct Vocab {
  TokenIndex to_id;
  std::unordered_map<int64_t, std::string> to_token;  // sparse ids (and while read_vocab(json) fills it)
  std::vector<std::optional<std::string>> by_id;      // dense ids; nullopt: no token has that id

  Vocab() = default;
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  std::optional<int64_t> find(std::string_view token) const;
  std::optional<std::string> token(int64_t id) const;
  const std::string* token_ref(int64_t id) const;  // nullptr: no such id
  // Moves to_token into by_id once it is complete, if the ids are dense.
  void index_ids();
  static bool dense(int64_t max_id, size_t n_ids) { return max_id >= 0 && static_cast<size_t>(max_id) < 2 * n_ids + 1024; }
};

// {"token": id, ...}
Vocab read_vocab(const json& j, const std::string& path);
// The same members read flat (json_reader.hpp): valid ids, in file order. For a token given twice its last id,
// and for an id given to several tokens the greatest token, as read_vocab(json) gives them.
Vocab read_vocab(const VocabEntries& entries);

std::unique_ptr<Model> make_bpe(const json& j, const std::string& path, const VocabEntries* vocab = nullptr);
std::unique_ptr<Model> make_unigram(const json& j, const std::string& path);

}  // namespace encore::tok
