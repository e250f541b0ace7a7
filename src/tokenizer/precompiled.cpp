// The Precompiled normalizer: SentencePiece's compiled normalisation rules (e.g. nmt_nfkc), as stored in
// tokenizer.json's base64 "precompiled_charsmap" for XLM-R, ALBERT, T5, mBART...
//
// Blob layout: u32 little-endian trie_size (bytes), then trie_size bytes of a darts-clone double array of
// u32 units, then the normalized strings, NUL-separated. A trie lookup of a prefix of the input yields an
// offset into the strings. HF's normalize() is reproduced exactly, quirks included: it looks up each
// grapheme cluster shorter than 6 bytes first (the shortest trie match wins, replacing the whole cluster),
// otherwise each char; a rule that deletes a char folds the deletion into the previous char's change.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "tokenizer/components.hpp"
#include "tokenizer/json_util.hpp"

namespace encore::tok {

namespace {

std::string base64_decode(const std::string& in, const std::string& path) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    const int v = val(c);
    if (v < 0) throw Error(path + ": not valid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

class Precompiled final : public Normalizer {
 public:
  Precompiled(const std::string& blob, const std::string& path) {
    ENCORE_CHECK(blob.size() >= 4, path, ": charsmap too short (", blob.size(), " bytes)");
    uint32_t trie_size = 0;
    std::memcpy(&trie_size, blob.data(), 4);  // little-endian (x86-64)
    ENCORE_CHECK(trie_size % 4 == 0 && 4 + static_cast<size_t>(trie_size) <= blob.size(), path,
                 ": charsmap trie size ", trie_size, " does not fit the ", blob.size(), "-byte blob");
    units_.resize(trie_size / 4);
    std::memcpy(units_.data(), blob.data() + 4, trie_size);
    normalized_ = blob.substr(4 + trie_size);
    ENCORE_CHECK(!units_.empty(), path, ": charsmap has an empty trie");
    for (size_t b = 0; b < ascii_kept_.size(); ++b) {
      const char c = static_cast<char>(b);
      ascii_kept_[b] = c != '\r' && !transform(std::string_view(&c, 1));
    }
  }

  void normalize(NormalizedString& s) const override {
    const std::string& text = s.get();
    // ASCII without CR is one grapheme per char: when the map keeps each of them, it keeps the text
    if (std::all_of(text.begin(), text.end(), [&](char c) { return c >= 0 && ascii_kept_[static_cast<size_t>(c)]; }))
      return;
    std::vector<Change> dest;
    dest.reserve(text.size());
    bool modified = false;
    for (const auto& [gb, ge] : graphemes(text)) {
      const std::string_view g(text.data() + gb, ge - gb);
      if (g.size() < 6) {
        if (auto norm = transform(g)) {
          modified = true;
          replace(dest, g, *norm);
          continue;
        }
      }
      size_t len = 0;
      for (size_t i = 0; i < g.size(); i += len) {
        const char32_t c = decode_utf8(g, i, &len);
        const std::string_view part = g.substr(i, len);
        if (auto norm = transform(part)) {
          modified = true;
          replace(dest, part, *norm);
        } else {
          dest.emplace_back(c, 0);
        }
      }
    }
    if (modified) s.transform(dest, 0);
  }

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;
  std::array<bool, 0x80> ascii_kept_{};  // ASCII chars the map leaves as they are (CR excluded: CR LF is one grapheme)

  // darts-clone unit fields
  static bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
  static size_t offset(uint32_t u) { return static_cast<size_t>((u >> 10) << ((u & (1u << 9)) >> 6)); }

  // The first (shortest) prefix of `key` in the trie -> its replacement, as spm_precompiled's transform().
  std::optional<std::string_view> transform(std::string_view key) const {
    size_t node = 0;
    uint32_t unit = units_[0];
    node ^= offset(unit);
    for (char ch : key) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == 0) break;
      node ^= c;
      if (node >= units_.size()) return std::nullopt;
      unit = units_[node];
      if (label(unit) != c) return std::nullopt;
      node ^= offset(unit);
      if (has_leaf(unit)) {
        if (node >= units_.size()) return std::nullopt;
        const size_t at = value(units_[node]);
        if (at >= normalized_.size()) return std::nullopt;
        const size_t end = normalized_.find('\0', at);
        std::string_view out(normalized_.data() + at, (end == std::string::npos ? normalized_.size() : end) - at);
        if (!is_valid_utf8(out)) return std::nullopt;
        return out;
      }
    }
    return std::nullopt;
  }

  static void replace(std::vector<Change>& dest, std::string_view old_part, std::string_view new_part) {
    const auto old_count = static_cast<long>(count_chars(old_part));
    const std::vector<char32_t> nc = to_chars(new_part);
    const long diff = static_cast<long>(nc.size()) - old_count;
    for (char32_t c : nc) dest.emplace_back(c, 0);
    if (diff > 0) {
      for (long k = 0; k < diff && k < static_cast<long>(dest.size()); ++k) dest[dest.size() - 1 - k].second = 1;
    } else if (diff < 0 && !dest.empty()) {
      dest.back().second += static_cast<int>(diff);
    }
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const std::string& base64_charsmap, const std::string& path) {
  return std::make_unique<Precompiled>(base64_decode(base64_charsmap, path), path);
}

}  // namespace encore::tok
