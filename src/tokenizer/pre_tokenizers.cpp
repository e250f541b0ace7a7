// Pre-tokenizers: BertPreTokenizer, ByteLevel, Whitespace, WhitespaceSplit, Metaspace, Punctuation, Digits,
// Split, CharDelimiterSplit, Sequence; and the byte-level byte <-> char map shared with the decoder and the
// post-processors.
#include <array>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "tokenizer/components.hpp"
#include "tokenizer/json_util.hpp"
#include "tokenizer/regex.hpp"

namespace encore::tok {

// --- byte-level map (GPT-2's bytes_to_unicode) ---------------------------------------------------------

namespace {
struct ByteMap {
  std::array<char32_t, 256> to_char{};
  ByteMap() {
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

char32_t byte_to_char(uint8_t b) { return byte_map().to_char[b]; }

int char_to_byte(char32_t c) {
  if (c < 256) {
    const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    return printable ? static_cast<int>(c) : -1;
  }
  if (c < 256 + 68) {  // 68 = number of non-printable bytes
    for (int b = 0; b < 256; ++b)
      if (byte_map().to_char[b] == c) return b;
  }
  return -1;
}

void byte_level_map(NormalizedString& s) { s.map_bytes(byte_map().to_char); }

// --- patterns from JSON --------------------------------------------------------------------------------

std::shared_ptr<const Pattern> make_pattern(const json& j, const std::string& path) {
  if (j.is_object() && j.contains("String"))
    return std::make_shared<LiteralPattern>(as_string(j["String"], path + ".String"));
  if (j.is_object() && j.contains("Regex")) {
    try {
      return std::make_shared<RegexPattern>(std::make_shared<Regex>(as_string(j["Regex"], path + ".Regex")));
    } catch (const Error& e) {
      throw Error(path + ".Regex: " + e.what());
    }
  }
  throw Error(path + ": expected {\"String\": ...} or {\"Regex\": ...}, got " + j.dump().substr(0, 80));
}

SplitBehavior make_split_behavior(const json& j, const std::string& path) {
  const std::string b = as_string(j, path);
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  throw Error(path + ": unknown split behavior \"" + b +
              "\" (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

namespace {

bool bert_punctuation(char32_t c) {
  return (c < 0x80 && ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                       (c >= 123 && c <= 126))) ||
         is_punctuation(c);
}

// Splits every split by one pattern with one behavior.
void split_all(PreTokenizedString& p, const Pattern& pattern, SplitBehavior b) {
  p.split([&](size_t, NormalizedString&& s, std::vector<NormalizedString>& pieces) { s.split(pattern, b, pieces); });
}

class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& p) const override {
    static const CharPredicatePattern space([](char32_t c) { return is_whitespace(c); });
    static const CharPredicatePattern punct(bert_punctuation);
    split_all(p, space, SplitBehavior::removed);
    split_all(p, punct, SplitBehavior::isolated);
  }
};

class GptSplitPattern final : public Pattern {
 public:
  std::vector<Match> find_matches(std::string_view s) const override {
    if (s.empty()) return {{{0, 0}, false}};
    std::vector<Match> out;
    for (const Offsets& o : gpt2_split(s)) out.push_back({o, true});
    return out;
  }
};

// The GPT-2 split: the hand-written fast path, or Oniguruma running kGpt2Pattern when the environment says
// ENCORE_TOKENIZER_REGEX=oniguruma (read when a tokenizer is loaded: for A/B benchmarks and for bisecting a
// difference to the fast path).
std::shared_ptr<const Pattern> gpt2_pattern() {
  const char* env = std::getenv("ENCORE_TOKENIZER_REGEX");
  const std::string_view mode = env ? env : "fast";
  if (mode == "oniguruma") return std::make_shared<RegexPattern>(std::make_shared<Regex>(kGpt2Pattern));
  if (mode != "fast" && !mode.empty())
    throw Error(detail::concat("ENCORE_TOKENIZER_REGEX=", mode, ": expected \"fast\" (default) or \"oniguruma\""));
  return std::make_shared<GptSplitPattern>();
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), split_(gpt2_pattern()) {}
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split([&](size_t, NormalizedString&& s, std::vector<NormalizedString>& pieces) {
      if (add_prefix_space_ && (s.get().empty() || s.get()[0] != ' ')) s.prepend(" ");
      if (use_regex_)
        s.split(*split_, SplitBehavior::isolated, pieces);
      else
        pieces.push_back(std::move(s));
    });
    p.normalize(byte_level_map);
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::shared_ptr<const Pattern> split_;
};

// \w+|[^\w\s]+ kept, the rest (whitespace) removed. HF compiles this one with the Rust regex crate, whose \w
// differs from Oniguruma's (Join_Control in, Latin-1 superscripts out).
class Whitespace final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& p) const override {
    static const WordPattern words;
    split_all(p, words, SplitBehavior::removed);
  }

 private:
  // Matches are the gaps (whitespace runs), so Removed keeps the \w+ and [^\w\s]+ runs as separate pieces.
  class WordPattern final : public Pattern {
   public:
    std::vector<Match> find_matches(std::string_view s) const override {
      if (s.empty()) return {{{0, 0}, true}};
      std::vector<Match> out;
      size_t i = 0, len = 0;
      int prev_kind = -1;  // 0 word, 1 other, 2 space
      size_t start = 0;
      while (i < s.size()) {
        const char32_t c = decode_utf8(s, i, &len);
        const int kind = is_rust_word_char(c) ? 0 : is_whitespace(c) ? 2 : 1;
        if (kind != prev_kind && i > 0) {
          out.push_back({{start, i}, prev_kind == 2});
          start = i;
        }
        prev_kind = kind;
        i += len;
      }
      out.push_back({{start, s.size()}, prev_kind == 2});
      return out;
    }
  };
};

class WhitespaceSplit final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& p) const override {
    static const CharPredicatePattern space([](char32_t c) { return is_whitespace(c); });
    split_all(p, space, SplitBehavior::removed);
  }
};

class CharDelimiterSplit final : public PreTokenizer {
 public:
  explicit CharDelimiterSplit(char32_t d) : pattern_([d](char32_t c) { return c == d; }) {}
  void pre_tokenize(PreTokenizedString& p) const override { split_all(p, pattern_, SplitBehavior::removed); }

 private:
  CharPredicatePattern pattern_;
};

enum class PrependScheme { always, first, never };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split), is_space_([](char32_t c) { return c == U' '; }),
        is_replacement_([replacement](char32_t c) { return c == replacement; }) {
    append_utf8(rep_, replacement);
  }
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split([&](size_t, NormalizedString&& s, std::vector<NormalizedString>& pieces) {
      s.replace(is_space_, rep_);
      const bool starts = s.get().compare(0, rep_.size(), rep_) == 0;
      if (scheme_ == PrependScheme::always && !starts) s.prepend(rep_);
      if (scheme_ == PrependScheme::first && !starts && s.original_begin() == 0) s.prepend(rep_);
      if (split_)
        s.split(is_replacement_, SplitBehavior::merged_with_next, pieces);
      else
        pieces.push_back(std::move(s));
    });
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
  CharPredicatePattern is_space_, is_replacement_;
};

class Punctuation final : public PreTokenizer {
 public:
  explicit Punctuation(SplitBehavior b) : b_(b) {}
  void pre_tokenize(PreTokenizedString& p) const override {
    static const CharPredicatePattern punct(bert_punctuation);
    split_all(p, punct, b_);
  }

 private:
  SplitBehavior b_;
};

class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void pre_tokenize(PreTokenizedString& p) const override {
    static const CharPredicatePattern digit(is_number);  // Rust char::is_numeric: Nd, Nl, No
    split_all(p, digit, individual_ ? SplitBehavior::isolated : SplitBehavior::contiguous);
  }

 private:
  bool individual_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::shared_ptr<const Pattern> pattern, SplitBehavior b, bool invert)
      : pattern_(invert ? std::make_shared<InvertPattern>(std::move(pattern)) : std::move(pattern)), b_(b) {}
  void pre_tokenize(PreTokenizedString& p) const override { split_all(p, *pattern_, b_); }

 private:
  std::shared_ptr<const Pattern> pattern_;
  SplitBehavior b_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(PreTokenizedString& p) const override {
    for (const auto& part : parts_) part->pre_tokenize(p);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

char32_t single_char(const json& j, const std::string& path) {
  const std::string s = as_string(j, path);
  const std::vector<char32_t> cs = is_valid_utf8(s) ? to_chars(s) : std::vector<char32_t>{};
  if (cs.size() != 1) throw Error(path + ": expected a single character, got \"" + s + "\"");
  return cs[0];
}

PrependScheme prepend_scheme(const json& j, const std::string& path) {
  if (has(j, "prepend_scheme")) {
    const std::string s = as_string(j["prepend_scheme"], path + ".prepend_scheme");
    if (s == "always") return PrependScheme::always;
    if (s == "first") return PrependScheme::first;
    if (s == "never") return PrependScheme::never;
    throw Error(path + ".prepend_scheme: unknown value \"" + s + "\" (supported: always, first, never)");
  }
  // files before tokenizers 0.14: add_prefix_space
  return get_bool(j, path, "add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& path) {
  const std::string type = type_of(j, path);
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(get_bool(j, path, "add_prefix_space", true), get_bool(j, path, "use_regex", true));
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "CharDelimiterSplit")
    return std::make_unique<CharDelimiterSplit>(single_char(field(j, path, "delimiter"), path + ".delimiter"));
  if (type == "Metaspace") {
    const char32_t rep = has(j, "replacement") ? single_char(j["replacement"], path + ".replacement") : U'\u2581';
    return std::make_unique<Metaspace>(rep, prepend_scheme(j, path), get_bool(j, path, "split", true));
  }
  if (type == "Punctuation")
    return std::make_unique<Punctuation>(
        has(j, "behavior") ? make_split_behavior(j["behavior"], path + ".behavior") : SplitBehavior::isolated);
  if (type == "Digits") return std::make_unique<Digits>(get_bool(j, path, "individual_digits", false));
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(make_pattern(field(j, path, "pattern"), path + ".pattern"),
                                               make_split_behavior(field(j, path, "behavior"), path + ".behavior"),
                                               get_bool(j, path, "invert", false));
  if (type == "Sequence") {
    const json& list = field(j, path, "pretokenizers");
    if (!list.is_array()) throw Error(path + ".pretokenizers: expected an array, got " + json_kind(list));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(make_pre_tokenizer(list[i], path + ".pretokenizers[" + std::to_string(i) + "]"));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  unsupported(path, "pre_tokenizer", type,
              {"BertPreTokenizer", "ByteLevel", "Whitespace", "WhitespaceSplit", "CharDelimiterSplit", "Metaspace",
               "Punctuation", "Digits", "Split", "Sequence"});
}

}  // namespace encore::tok
