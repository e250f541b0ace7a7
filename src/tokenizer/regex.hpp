// The regexes of tokenizer.json files (the Split pre-tokenizer's and the Replace normalizer/decoder's {"Regex":
// ...} patterns), run by Oniguruma (libonig), the engine Hugging Face `tokenizers` runs them with (through the
// Rust `onig` crate): same compile settings (UTF-8, Oniguruma syntax, no options) and the same match iteration
// as that crate's find_iter, so possessive quantifiers, \b, \p{..}, lookbehind... mean what they mean there.
//
//   Regex re(R"(\p{N}{1,3})");
//   for (auto [b, e] : re.find_all("in 2024")) ...;   // byte ranges: {3, 6}, {6, 7}
//
// Thread safety: the constructor takes a process-wide lock (Oniguruma's compiler is not thread-safe, as the
// onig crate also serialises it); find_all is const and may run concurrently on one Regex: each call owns its
// match region, the compiled regex is only read.
//
// gpt2_split: the GPT-2 pattern of the ByteLevel pre-tokenizer (kGpt2Pattern), hand-written: a measured fast path
// (bench/tokenizers.py) tested equal to Oniguruma running kGpt2Pattern (tests/cpp/test_tokenizer.cpp).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/normalized_string.hpp"

struct re_pattern_buffer;  // Oniguruma's regex_t (OnigRegex is a pointer to it)

namespace encore::tok {

class Regex {
 public:
  // Throws encore::Error naming the pattern and Oniguruma's message for a pattern it rejects.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping leftmost matches of s (valid UTF-8; throws otherwise), as byte ranges, including empty
  // matches except one that ends where the previous match ended (the onig crate's find_iter). Throws
  // encore::Error when Oniguruma gives up (its backtracking limit per match attempt).
  std::vector<Offsets> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  re_pattern_buffer* re_ = nullptr;
};

// The pre-tokenizer pattern of GPT-2's ByteLevel (HF tokenizers' byte_level.rs).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// kGpt2Pattern's matches of s (valid UTF-8), hand-written: linear, no backtracking.
std::vector<Offsets> gpt2_split(std::string_view s);

}  // namespace encore::tok
