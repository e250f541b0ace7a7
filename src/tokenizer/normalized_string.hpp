// NormalizedString: a normalized UTF-8 string that remembers, for each of its bytes, the byte range of the
// original input it came from, so token offsets can be reported in the input's bytes. It is the C++ twin of
// HF tokenizers' NormalizedString (same transform/filter/prepend/replace/split semantics, hence the same
// offsets), with two simplifications: alignments are absolute offsets into the whole input, so a slice keeps
// them unchanged instead of shifting them; and while every char still sits at its original byte position
// (nothing inserted, removed or resized; an ASCII lowercase keeps positions), the alignments are implied
// rather than stored, so slicing such a string copies only its bytes.
//
// Pattern: what split/replace look for. find_matches returns the whole input cut into consecutive
// ((begin, end), is_match) byte ranges, as HF's Pattern trait does.
#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/unicode.hpp"

namespace encore::tok {

using Offsets = std::pair<size_t, size_t>;
using Match = std::pair<Offsets, bool>;

class Pattern {
 public:
  virtual ~Pattern() = default;
  virtual std::vector<Match> find_matches(std::string_view s) const = 0;
};

// Each char satisfying the predicate is one match (as HF's `Fn(char) -> bool` pattern). `pred` must depend on
// the char only: its answers for ASCII are tabulated once.
class CharPredicatePattern final : public Pattern {
 public:
  explicit CharPredicatePattern(std::function<bool(char32_t)> pred);
  std::vector<Match> find_matches(std::string_view s) const override;

 private:
  std::function<bool(char32_t)> pred_;
  std::array<bool, 0x80> ascii_{};
};

class Regex;  // regex.hpp

// Non-overlapping leftmost matches of a regex; a literal string is a regex of its escaped text.
class RegexPattern final : public Pattern {
 public:
  explicit RegexPattern(std::shared_ptr<const Regex> re) : re_(std::move(re)) {}
  std::vector<Match> find_matches(std::string_view s) const override;

 private:
  std::shared_ptr<const Regex> re_;
};

class LiteralPattern final : public Pattern {
 public:
  explicit LiteralPattern(std::string lit) : lit_(std::move(lit)) {}
  std::vector<Match> find_matches(std::string_view s) const override;

 private:
  std::string lit_;
};

class InvertPattern final : public Pattern {
 public:
  explicit InvertPattern(std::shared_ptr<const Pattern> p) : p_(std::move(p)) {}
  std::vector<Match> find_matches(std::string_view s) const override;

 private:
  std::shared_ptr<const Pattern> p_;
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct Alignment {
  size_t begin, end;
  bool operator==(const Alignment& o) const { return begin == o.begin && end == o.end; }
};

class NormalizedString {
 public:
  NormalizedString() = default;
  // `input` may be any bytes: each maximal invalid UTF-8 subsequence becomes U+FFFD aligned to its bytes.
  explicit NormalizedString(std::string_view input);

  const std::string& get() const { return normalized_; }
  size_t size() const { return normalized_.size(); }
  bool empty() const { return normalized_.empty(); }
  // Byte range of the original input this string covers.
  size_t original_begin() const { return orig_begin_; }
  size_t original_end() const { return orig_end_; }

  // Normalized byte range -> original byte range (HF convert_offsets(Range::Normalized)).
  std::optional<Offsets> to_original(Offsets normalized_range) const;
  // A slice by normalized byte range (must be on char boundaries).
  NormalizedString slice(Offsets normalized_range) const;

  // Replaces normalized[range] by `dest` (see unicode.hpp for the change markers); `initial_offset` counts
  // the chars removed at the very start of the range.
  void transform_range(Offsets range, const std::vector<Change>& dest, size_t initial_offset);
  void transform(const std::vector<Change>& dest, size_t initial_offset) {
    transform_range({0, normalized_.size()}, dest, initial_offset);
  }

  void normalize(NormForm form);
  void filter(const std::function<bool(char32_t)>& keep);
  void map(const std::function<char32_t(char32_t)>& f);
  void lowercase();
  // Each byte b becomes the char table[b] (the byte-level map); the chars made from one char's bytes take that
  // char's alignment, as transform() with changes 0, +1, +1... gives them.
  void map_bytes(const std::array<char32_t, 256>& table);
  void prepend(std::string_view s);
  void append(std::string_view s);
  void replace(const Pattern& pattern, std::string_view content);
  void lrstrip(bool left, bool right);
  // Appends the pieces to `out`.
  void split(const Pattern& pattern, SplitBehavior behavior, std::vector<NormalizedString>& out) const;

 private:
  std::string normalized_;
  // One per normalized byte: original [begin, end). Empty while `positional_`.
  std::vector<Alignment> alignments_;
  // Every char of normalized_ sits where its original char sat: byte k's alignment is the byte range of the
  // char holding k, shifted by orig_begin_ (and orig_end_ - orig_begin_ == normalized_.size()).
  bool positional_ = true;
  size_t orig_begin_ = 0, orig_end_ = 0;

  Alignment alignment(size_t k) const;
  bool rewrite_in_place(size_t rb, size_t re, const std::vector<Change>& dest);
  // Stores the implied alignments (before an edit that moves chars).
  void materialize();
};

}  // namespace encore::tok
