// The regexes tokenizer.json files use (Split pre-tokenizer, Replace normalizer/decoder), matched with the
// semantics of Oniguruma, which HF `tokenizers` uses for them: leftmost match, ordered alternation, greedy
// quantifiers with backtracking. std::regex has no \p{L}, so this is a small backtracking engine over code
// points with utf8proc's categories.
//
// Supported: literals and escapes (\n \r \t \f \v \e \0 \xHH \x{H..} \uHHHH and escaped punctuation), . \s \S
// \d \D \w \W \h \p{..} \P{..} (L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So
// Z Zs Zl Zp C Cc Cf Co Cn, with or without "Is"/long names for L N P S Z M), classes [...] with ranges and
// negation, groups ( ) (?: ) (?i: ) (?i), lookahead (?= ) (?! ), quantifiers * + ? {n} {n,} {n,m} (lazy
// with a trailing ?; possessive + treated as greedy), anchors ^ $ \A \z.
// Repetition of a single-char item runs in a loop (a 1 MB run does not recurse); other constructs recurse.
//
// gpt2_split: the GPT-2 pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
// of the ByteLevel pre-tokenizer, hand-written: linear and allocation-free.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/normalized_string.hpp"

namespace encore::tok {

struct RegexNode;

class Regex {
 public:
  // Throws encore::Error naming the pattern and the position of a syntax error.
  explicit Regex(std::string_view pattern);
  ~Regex();
  // Non-overlapping leftmost matches, as byte ranges of s (valid UTF-8).
  std::vector<Offsets> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::vector<std::unique_ptr<RegexNode>> nodes_;  // owns every node; nodes_[root_] is the root
  RegexNode* root_ = nullptr;
  friend class RegexParser;
};

// Escapes every regex metacharacter of a literal.
std::string regex_escape(std::string_view literal);

std::vector<Offsets> gpt2_split(std::string_view s);

}  // namespace encore::tok
