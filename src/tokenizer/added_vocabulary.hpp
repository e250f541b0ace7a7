// Added tokens ([CLS], <mask>, user additions): found in the text before the model sees it, as HF's
// AddedVocabulary. Tokens with normalized=false are matched in the raw input; the text between them is then
// normalized and tokens with normalized=true are matched (by their normalized form) in that. Matching is
// leftmost-longest; single_word rejects a match touching a word char, lstrip/rstrip swallow the adjacent
// whitespace into the token.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/components.hpp"
#include "tokenizer/trie.hpp"

namespace encore::tok {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // The input as splits: added tokens (with their token) and normalized text between them.
  PreTokenizedString extract_and_normalize(const Normalizer* normalizer, std::string_view text) const;

  std::optional<int64_t> token_to_id(std::string_view content) const;
  const AddedToken* by_id(int64_t id) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool is_special_id(int64_t id) const;

 private:
  struct MatchSet {
    ByteTrie trie;
    std::vector<size_t> token_index;  // trie key index -> tokens_ index
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, size_t> by_content_;
  std::unordered_map<int64_t, size_t> by_id_;
  MatchSet raw_, normalized_;

  // ((begin, end), token index or npos) covering the whole sentence.
  std::vector<std::pair<Offsets, size_t>> find_matches(std::string_view sentence, const MatchSet& set) const;
  std::vector<Split> split_with_indices(NormalizedString s, const MatchSet& set) const;
};

}  // namespace encore::tok
