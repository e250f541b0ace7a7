// UTF-8 decoding/encoding and the Unicode predicates and normalisations the tokenizer needs, on top of
// utf8proc. Every predicate mirrors the one the Rust `tokenizers` crate uses (named in its comment), because
// a different definition of "whitespace" or "punctuation" is a different tokenisation.
//
// Transformations that change text return (char, change) pairs, the currency of NormalizedString::transform:
// change = 0 replaces one input char, +1 inserts a new char, -N replaces one input char and removes the N
// following ones (the convention of HF's `unicode-normalization-alignments`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace encore::tok {

using Change = std::pair<char32_t, int>;

// --- UTF-8 ---------------------------------------------------------------------------------------------
// Decodes the char starting at s[i] (s must be valid UTF-8, as every normalized string is); returns the
// code point and sets `len` to its byte length.
char32_t decode_utf8(std::string_view s, size_t i, size_t* len);
void append_utf8(std::string& out, char32_t c);
size_t utf8_len(char32_t c);
// Number of code points of a valid UTF-8 string.
size_t count_chars(std::string_view s);
std::vector<char32_t> to_chars(std::string_view s);
std::string to_utf8(const std::vector<char32_t>& cps);

// Length of the maximal ill-formed subsequence or of the well-formed char at s[i] (>= 1), and whether it
// is well formed: Unicode's "maximal subpart" practice, as Python's errors="replace" and Rust's
// from_utf8_lossy, so every invalid run becomes exactly the U+FFFDs those produce.
size_t utf8_scan(std::string_view s, size_t i, bool* valid);
bool is_valid_utf8(std::string_view s);

// --- predicates -----------------------------------------------------------------------------------------
bool is_whitespace(char32_t c);       // Rust char::is_whitespace (Unicode White_Space); also Oniguruma's \s
bool is_letter(char32_t c);           // \p{L}
bool is_number(char32_t c);           // \p{N}: Nd, Nl, No
bool is_punctuation(char32_t c);      // \p{P}: Pc Pd Ps Pe Pi Pf Po
bool is_other(char32_t c);            // \p{C}: Cc Cf Cs Co Cn (unicode_categories is_other)
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_combining_mark(char32_t c);   // Mn, Mc, Me
bool is_rust_word_char(char32_t c);   // Rust regex \w (AddedToken single_word): Alphabetic, M, Nd, Pc, Join_Control
int combining_class(char32_t c);

// --- transformations ------------------------------------------------------------------------------------
enum class NormForm { NFD, NFKD, NFC, NFKC };
// Normalises `chars` to `form`, with the change markers of unicode-normalization-alignments.
std::vector<Change> normalize_with_changes(const std::vector<char32_t>& chars, NormForm form);
std::string normalize_string(std::string_view s, NormForm form);
// Rust char::to_lowercase (full mapping: U+0130 -> "i\u0307"); first char change 0, further ones +1.
void append_lowercase(char32_t c, std::vector<Change>& out);
std::string to_lower(std::string_view s);

// Extended grapheme clusters of a valid UTF-8 string, as (byte begin, byte end).
std::vector<std::pair<size_t, size_t>> graphemes(std::string_view s);

}  // namespace encore::tok
