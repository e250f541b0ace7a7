// UTF-8 and Unicode helpers on utf8proc: see unicode.hpp.
#include "tokenizer/unicode.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <array>

namespace encore::tok {

// --- UTF-8 ---------------------------------------------------------------------------------------------

char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) -> char32_t {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) & 0x3Fu : 0u;
  };
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *len = 2;
    return (char32_t(b0 & 0x1F) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return (char32_t(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  }
  *len = 4;
  return (char32_t(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

size_t utf8_len(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

std::vector<char32_t> to_chars(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0, len = 0; i < s.size(); i += len) out.push_back(decode_utf8(s, i, &len));
  return out;
}

std::string to_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

size_t utf8_scan(std::string_view s, size_t i, bool* valid) {
  const auto byte = [&](size_t k) -> int { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : -1; };
  const int b0 = byte(0);
  *valid = true;
  if (b0 < 0x80) return 1;
  int need = 0, lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *valid = false;
    return 1;
  }
  for (int k = 1; k <= need; ++k) {
    const int b = byte(k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *valid = false;
      return static_cast<size_t>(k);  // the valid prefix is the maximal subpart
    }
  }
  return static_cast<size_t>(need + 1);
}

bool is_valid_utf8(std::string_view s) {
  bool valid = true;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    i += utf8_scan(s, i, &valid);
    if (!valid) return false;
  }
  return true;
}

// --- predicates -----------------------------------------------------------------------------------------

static int category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  const int k = category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int k = category(c);
  return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

static bool is_punctuation_category(char32_t c) {
  const int k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_punctuation(char32_t c) {
  static const std::array<bool, 0x80> ascii = [] {
    std::array<bool, 0x80> t{};
    for (char32_t a = 0; a < 0x80; ++a) t[a] = is_punctuation_category(a);
    return t;
  }();
  return c < 0x80 ? ascii[c] : is_punctuation_category(c);
}

// unicode_categories' is_other() as the `tokenizers` crate sees it: Cc, Cf, Cs, Co. Unassigned code points
// (Cn) are kept (checked against tokenizers 0.23: U+0378 survives BertNormalizer's clean_text).
bool is_other(char32_t c) {
  if (c < 0x80) return c < 0x20 || c == 0x7F;  // ASCII has only Cc among these
  const int k = category(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
         k == UTF8PROC_CATEGORY_CO;
}

bool is_mark_nonspacing(char32_t c) { return c >= 0x300 && category(c) == UTF8PROC_CATEGORY_MN; }

bool is_combining_mark(char32_t c) {
  if (c < 0x300) return false;
  const int k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

// The Rust regex crate's \w (AddedToken single_word): Alphabetic, marks, Nd, Pc, Join_Control.
bool is_rust_word_char(char32_t c) {
  if (c < 0x80) return is_letter(c) || is_number(c) || c == '_';
  const int k = category(c);
  if ((k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ND) || k == UTF8PROC_CATEGORY_NL ||
      k == UTF8PROC_CATEGORY_PC)
    return true;
  return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
         (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

int combining_class(char32_t c) {
  if (c < 0x300) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// --- normalisation with change markers ------------------------------------------------------------------

// Primary composite of (starter, c), or 0: utf8proc's own pairwise composition step on a 2-char buffer.
static char32_t compose_pair(char32_t starter, char32_t c) {
  if (c < 0x300) return 0;  // nothing below U+0300 composes as a second char
  utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(starter), static_cast<utf8proc_int32_t>(c)};
  const utf8proc_ssize_t n =
      utf8proc_normalize_utf32(buf, 2, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  return n == 1 ? static_cast<char32_t>(buf[0]) : 0;
}

// Decomposition: each char's full decomposition, first char change 0 and the rest +1; then canonical
// ordering (stable sort of each run of non-starters by combining class), markers travelling with chars.
static std::vector<Change> decompose(const std::vector<char32_t>& chars, bool compat) {
  std::vector<Change> out;
  out.reserve(chars.size() + chars.size() / 4);
  const auto opts = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  utf8proc_int32_t buf[32];
  for (char32_t c : chars) {
    if (c < 0xA0) {  // no decomposition below U+00A0
      out.emplace_back(c, 0);
      continue;
    }
    int boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32, opts, &boundclass);
    if (n <= 0 || n > 32) {
      out.emplace_back(c, 0);
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) out.emplace_back(static_cast<char32_t>(buf[k]), k == 0 ? 0 : 1);
  }
  // canonical ordering
  for (size_t i = 0; i < out.size();) {
    if (combining_class(out[i].first) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j].first) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j),
                       [](const Change& a, const Change& b) { return combining_class(a.first) < combining_class(b.first); });
    i = j;
  }
  return out;
}

// Canonical composition as the `Recompositions` iterator of unicode-normalization(-alignments) does it: a
// char absorbed into the starter adds its change to the starter's and removes one (-1).
static std::vector<Change> recompose(const std::vector<Change>& in) {
  std::vector<Change> out;
  out.reserve(in.size());
  std::vector<Change> buffer;  // blocked non-starters waiting behind the composee
  bool has_composee = false;
  Change composee{0, 0};
  int last_ccc = -1;  // -1 = None
  auto flush_buffer = [&] {
    for (const Change& b : buffer) out.push_back(b);
    buffer.clear();
  };
  for (const Change& ch : in) {
    const int ccc = combining_class(ch.first);
    if (!has_composee) {
      if (ccc != 0) {
        out.push_back(ch);
        continue;
      }
      composee = ch;
      has_composee = true;
      continue;
    }
    if (last_ccc < 0) {
      if (char32_t r = compose_pair(composee.first, ch.first)) {
        composee = {r, composee.second + ch.second - 1};
        continue;
      }
      if (ccc == 0) {
        out.push_back(composee);
        composee = ch;
        continue;
      }
      buffer.push_back(ch);
      last_ccc = ccc;
    } else {
      if (last_ccc >= ccc) {  // blocked
        if (ccc == 0) {
          out.push_back(composee);
          flush_buffer();
          composee = ch;
          last_ccc = -1;
          continue;
        }
        buffer.push_back(ch);
        last_ccc = ccc;
        continue;
      }
      if (char32_t r = compose_pair(composee.first, ch.first)) {
        composee = {r, composee.second + ch.second - 1};
        continue;
      }
      buffer.push_back(ch);
      last_ccc = ccc;
    }
  }
  if (has_composee) out.push_back(composee);
  flush_buffer();
  return out;
}

std::vector<Change> normalize_with_changes(const std::vector<char32_t>& chars, NormForm form) {
  const bool compat = form == NormForm::NFKD || form == NormForm::NFKC;
  std::vector<Change> d = decompose(chars, compat);
  if (form == NormForm::NFD || form == NormForm::NFKD) return d;
  return recompose(d);
}

std::string normalize_string(std::string_view s, NormForm form) {
  std::string out;
  for (const Change& c : normalize_with_changes(to_chars(s), form)) append_utf8(out, c.first);
  return out;
}

void append_lowercase(char32_t c, std::vector<Change>& out) {
  if (c < 0x80) {
    out.emplace_back((c >= 'A' && c <= 'Z') ? c + 32 : c, 0);
    return;
  }
  if (c == 0x130) {  // the one unconditional multi-char lowercase mapping (SpecialCasing.txt)
    out.emplace_back(U'i', 0);
    out.emplace_back(0x307, 1);
    return;
  }
  out.emplace_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), 0);
}

std::string to_lower(std::string_view s) {
  std::vector<Change> tmp;
  std::string out;
  for (char32_t c : to_chars(s)) {
    tmp.clear();
    append_lowercase(c, tmp);
    for (const Change& t : tmp) append_utf8(out, t.first);
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> graphemes(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t start = 0, i = 0, len = 0;
  utf8proc_int32_t state = 0;
  char32_t prev = 0;
  while (i < s.size()) {
    const char32_t c = decode_utf8(s, i, &len);
    if (i > 0 && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                  static_cast<utf8proc_int32_t>(c), &state)) {
      out.emplace_back(start, i);
      start = i;
    }
    prev = c;
    i += len;
  }
  if (i > start) out.emplace_back(start, i);
  return out;
}

}  // namespace encore::tok
