// NormalizedString and Patterns: see normalized_string.hpp.
#include "tokenizer/normalized_string.hpp"

#include <algorithm>

#include "tokenizer/regex.hpp"

namespace encore::tok {

// --- patterns ------------------------------------------------------------------------------------------

CharPredicatePattern::CharPredicatePattern(std::function<bool(char32_t)> pred) : pred_(std::move(pred)) {
  for (char32_t c = 0; c < 0x80; ++c) ascii_[c] = pred_(c);
}

std::vector<Match> CharPredicatePattern::find_matches(std::string_view s) const {
  if (s.empty()) return {{{0, 0}, false}};
  std::vector<Match> out;
  size_t last = 0, len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const auto b = static_cast<unsigned char>(s[i]);
    bool hit;
    if (b < 0x80) {
      len = 1;
      hit = ascii_[b];
    } else {
      hit = pred_(decode_utf8(s, i, &len));
    }
    if (hit) {
      if (last < i) out.push_back({{last, i}, false});
      out.push_back({{i, i + len}, true});
      last = i + len;
    }
  }
  if (last < s.size()) out.push_back({{last, s.size()}, false});
  return out;
}

// Cuts s by a list of non-overlapping (begin, end) matches, as HF's Pattern impl for regexes.
static std::vector<Match> cut(std::string_view s, const std::vector<Offsets>& found) {
  if (s.empty()) return {{{0, 0}, false}};
  std::vector<Match> out;
  size_t prev = 0;
  for (const Offsets& m : found) {
    if (prev != m.first) out.push_back({{prev, m.first}, false});
    out.push_back({m, true});
    prev = m.second;
  }
  if (prev != s.size()) out.push_back({{prev, s.size()}, false});
  return out;
}

std::vector<Match> RegexPattern::find_matches(std::string_view s) const { return cut(s, re_->find_all(s)); }

std::vector<Match> LiteralPattern::find_matches(std::string_view s) const {
  if (lit_.empty()) return {{{0, s.size()}, false}};
  std::vector<Offsets> found;
  for (size_t pos = s.find(lit_); pos != std::string_view::npos; pos = s.find(lit_, pos + lit_.size()))
    found.emplace_back(pos, pos + lit_.size());
  return cut(s, found);
}

std::vector<Match> InvertPattern::find_matches(std::string_view s) const {
  std::vector<Match> m = p_->find_matches(s);
  for (Match& x : m) x.second = !x.second;
  return m;
}

// --- NormalizedString ----------------------------------------------------------------------------------

namespace {

bool is_continuation(char ch) { return (static_cast<unsigned char>(ch) & 0xC0) == 0x80; }

// Whether a[0, bytes.size()) are the alignments of chars left at their positions from original byte `base`.
bool implied_by_positions(const Alignment* a, std::string_view bytes, size_t base) {
  size_t len = 0;
  for (size_t i = 0; i < bytes.size(); i += len) {
    decode_utf8(bytes, i, &len);
    const Alignment want{base + i, base + i + len};
    for (size_t k = i; k < i + len; ++k)
      if (!(a[k] == want)) return false;
  }
  return true;
}

}  // namespace

NormalizedString::NormalizedString(std::string_view input) : orig_begin_(0), orig_end_(input.size()) {
  if (is_valid_utf8(input)) {  // every char at its own position
    normalized_.assign(input);
    return;
  }
  positional_ = false;
  normalized_.reserve(input.size());
  alignments_.reserve(input.size());
  bool valid = true;
  for (size_t i = 0; i < input.size();) {
    const size_t n = utf8_scan(input, i, &valid);
    if (valid) {
      normalized_.append(input.substr(i, n));
    } else {
      normalized_.append("\xEF\xBF\xBD");  // U+FFFD
    }
    const size_t bytes = valid ? n : 3;
    for (size_t k = 0; k < bytes; ++k) alignments_.push_back({i, i + n});
    i += n;
  }
}

Alignment NormalizedString::alignment(size_t k) const {
  if (!positional_) return alignments_[k];
  size_t b = k, e = k + 1;
  while (b > 0 && is_continuation(normalized_[b])) --b;
  while (e < normalized_.size() && is_continuation(normalized_[e])) ++e;
  return {orig_begin_ + b, orig_begin_ + e};
}

void NormalizedString::materialize() {
  if (!positional_) return;
  alignments_.resize(normalized_.size());
  size_t len = 0;
  for (size_t i = 0; i < normalized_.size(); i += len) {
    decode_utf8(normalized_, i, &len);
    std::fill_n(alignments_.begin() + static_cast<std::ptrdiff_t>(i), len,
                Alignment{orig_begin_ + i, orig_begin_ + i + len});
  }
  positional_ = false;
}

std::optional<Offsets> NormalizedString::to_original(Offsets r) const {
  if (r.first > r.second || r.second > normalized_.size()) return std::nullopt;
  if (r.first == r.second) {
    const size_t at = r.first < normalized_.size() ? alignment(r.first).begin : orig_end_;
    return Offsets{at, at};
  }
  return Offsets{alignment(r.first).begin, alignment(r.second - 1).end};
}

NormalizedString NormalizedString::slice(Offsets r) const {
  NormalizedString out;
  r.second = std::min(r.second, normalized_.size());
  r.first = std::min(r.first, r.second);
  out.normalized_.assign(normalized_, r.first, r.second - r.first);
  const Offsets o = *to_original(r);
  out.orig_begin_ = o.first;
  out.orig_end_ = o.second;
  const auto on_boundary = [&](size_t k) { return k == normalized_.size() || !is_continuation(normalized_[k]); };
  if (positional_ ? on_boundary(r.first) && on_boundary(r.second)
                  : implied_by_positions(alignments_.data() + r.first, out.normalized_, o.first))
    return out;  // the piece's chars sit at their original positions too: nothing to store
  out.positional_ = false;
  out.alignments_.resize(r.second - r.first);
  for (size_t k = r.first; k < r.second; ++k) out.alignments_[k - r.first] = alignment(k);
  return out;
}

void NormalizedString::transform_range(Offsets range, const std::vector<Change>& dest, size_t initial_offset) {
  const size_t rb = std::min(range.first, normalized_.size());
  const size_t re = std::min(std::max(range.second, rb), normalized_.size());
  if (initial_offset == 0 && rewrite_in_place(rb, re, dest)) return;
  materialize();
  // the chars being replaced, consumed in order as `dest` says
  size_t cursor = rb;  // byte position in the old string of the next replaced char
  auto consume = [&](size_t n_chars) {
    for (size_t k = 0; k < n_chars && cursor < re; ++k) {
      size_t len = 0;
      decode_utf8(normalized_, cursor, &len);
      cursor += len;
    }
  };
  consume(initial_offset);
  std::string out;
  std::vector<Alignment> out_align;
  out.reserve(re - rb + 8);
  out_align.reserve(re - rb + 8);
  const Alignment before_start{orig_begin_, orig_begin_};  // HF's (0, 0) for a char inserted at index 0
  for (const auto& [c, change] : dest) {
    const size_t idx = cursor;
    Alignment align;
    if (change > 0) {
      align = idx < 1 ? before_start : alignments_[std::min(idx, alignments_.size()) - 1];
    } else {
      align = idx < alignments_.size() ? alignments_[idx] : (alignments_.empty() ? before_start : alignments_.back());
      consume(1);
      if (change < 0) consume(static_cast<size_t>(-change));
    }
    const size_t before = out.size();
    append_utf8(out, c);
    out_align.insert(out_align.end(), out.size() - before, align);
  }
  if (rb == 0 && re == normalized_.size()) {
    normalized_ = std::move(out);
    alignments_ = std::move(out_align);
    return;
  }
  normalized_.replace(rb, re - rb, out);
  alignments_.erase(alignments_.begin() + static_cast<std::ptrdiff_t>(rb),
                    alignments_.begin() + static_cast<std::ptrdiff_t>(re));
  alignments_.insert(alignments_.begin() + static_cast<std::ptrdiff_t>(rb), out_align.begin(), out_align.end());
}

// Every char of normalized_[rb, re) replaced by one char of the same byte length (change 0): each new char
// takes its old char's alignment, which every byte of a char shares, so only the bytes change.
bool NormalizedString::rewrite_in_place(size_t rb, size_t re, const std::vector<Change>& dest) {
  size_t pos = rb, len = 0;
  for (const auto& [c, change] : dest) {
    if (change != 0 || pos >= re) return false;
    decode_utf8(normalized_, pos, &len);
    if (utf8_len(c) != len) return false;
    pos += len;
  }
  if (pos != re) return false;
  std::string bytes;
  pos = rb;
  for (const auto& [c, change] : dest) {
    bytes.clear();
    append_utf8(bytes, c);
    normalized_.replace(pos, bytes.size(), bytes);
    pos += bytes.size();
  }
  return true;
}

static bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

void NormalizedString::normalize(NormForm form) {
  if (is_ascii(normalized_)) return;  // every normal form is the identity on ASCII
  transform(normalize_with_changes(to_chars(normalized_), form), 0);
}

void NormalizedString::filter(const std::function<bool(char32_t)>& keep) {
  size_t len = 0, first_removed = 0;
  while (first_removed < normalized_.size() && keep(decode_utf8(normalized_, first_removed, &len)))
    first_removed += len;
  if (first_removed == normalized_.size()) return;  // every char kept
  std::vector<Change> dest;
  dest.reserve(normalized_.size());
  size_t leading_removed = 0;
  for (size_t i = 0; i < normalized_.size(); i += len) {
    const char32_t c = decode_utf8(normalized_, i, &len);
    if (i < first_removed || (i > first_removed && keep(c))) {
      dest.emplace_back(c, 0);
    } else if (dest.empty()) {
      ++leading_removed;
    } else {
      dest.back().second -= 1;  // the previous kept char removes the chars following it
    }
  }
  transform(dest, leading_removed);
}

void NormalizedString::map(const std::function<char32_t(char32_t)>& f) {
  size_t len = 0, first_changed = 0;
  while (first_changed < normalized_.size()) {
    const char32_t c = decode_utf8(normalized_, first_changed, &len);
    if (f(c) != c) break;
    first_changed += len;
  }
  if (first_changed == normalized_.size()) return;  // f is the identity on this string
  std::vector<Change> dest;
  dest.reserve(normalized_.size());
  for (size_t i = 0; i < normalized_.size(); i += len) {
    const char32_t c = decode_utf8(normalized_, i, &len);
    dest.emplace_back(i < first_changed ? c : f(c), 0);
  }
  transform(dest, 0);
}

void NormalizedString::lowercase() {
  if (is_ascii(normalized_)) {  // byte-for-byte: alignments unchanged
    for (char& ch : normalized_)
      if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch + 32);
    return;
  }
  std::vector<Change> dest;
  dest.reserve(normalized_.size());
  size_t len = 0;
  for (size_t i = 0; i < normalized_.size(); i += len) append_lowercase(decode_utf8(normalized_, i, &len), dest);
  transform(dest, 0);
}

void NormalizedString::map_bytes(const std::array<char32_t, 256>& table) {
  const auto unchanged = [&](char ch) {
    const auto b = static_cast<unsigned char>(ch);
    return b < 0x80 && table[b] == b;
  };
  if (std::all_of(normalized_.begin(), normalized_.end(), unchanged)) return;
  std::string out;
  std::vector<Alignment> out_align;
  out.reserve(2 * normalized_.size());
  out_align.reserve(2 * normalized_.size());
  size_t len = 0;
  for (size_t i = 0; i < normalized_.size(); i += len) {
    decode_utf8(normalized_, i, &len);
    const size_t before = out.size();
    for (size_t k = i; k < i + len; ++k) append_utf8(out, table[static_cast<unsigned char>(normalized_[k])]);
    out_align.insert(out_align.end(), out.size() - before, alignment(i));
  }
  normalized_ = std::move(out);
  alignments_ = std::move(out_align);
  positional_ = false;
}

void NormalizedString::prepend(std::string_view s) {
  if (normalized_.empty()) return;
  size_t len = 0;
  const char32_t next = decode_utf8(normalized_, 0, &len);
  std::vector<Change> dest;
  size_t i = 0;
  for (char32_t c : to_chars(s)) dest.emplace_back(c, i++ == 0 ? 0 : 1);
  dest.emplace_back(next, 1);
  transform_range({0, len}, dest, 0);
}

void NormalizedString::append(std::string_view s) {
  if (normalized_.empty()) return;
  size_t b = normalized_.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(normalized_[b]) & 0xC0) == 0x80) --b;
  size_t len = 0;
  std::vector<Change> dest{{decode_utf8(normalized_, b, &len), 0}};
  for (char32_t c : to_chars(s)) dest.emplace_back(c, 1);
  transform_range({b, normalized_.size()}, dest, 0);
}

// HF replaces match by match (each a transform_range removing the matched chars, then inserting `content`
// as new chars aligned like the last removed one). Done here in one pass over the string: identical result,
// linear time instead of one splice per match.
void NormalizedString::replace(const Pattern& pattern, std::string_view content) {
  const std::vector<Match> matches = pattern.find_matches(normalized_);
  if (std::none_of(matches.begin(), matches.end(), [](const Match& m) { return m.second; })) return;
  materialize();
  std::string out;
  std::vector<Alignment> out_align;
  out.reserve(normalized_.size());
  out_align.reserve(normalized_.size());
  const Alignment before_start{orig_begin_, orig_begin_};
  for (const auto& [r, is_match] : matches) {
    if (!is_match) {
      out.append(normalized_, r.first, r.second - r.first);
      out_align.insert(out_align.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(r.first),
                       alignments_.begin() + static_cast<std::ptrdiff_t>(r.second));
      continue;
    }
    Alignment align;
    if (r.second > r.first)
      align = alignments_[r.second - 1];
    else
      align = out_align.empty() ? before_start : out_align.back();
    const size_t before = out.size();
    out.append(content);
    out_align.insert(out_align.end(), out.size() - before, align);
  }
  normalized_ = std::move(out);
  alignments_ = std::move(out_align);
}

void NormalizedString::lrstrip(bool left, bool right) {
  const std::vector<char32_t> chars = to_chars(normalized_);
  const size_t n = chars.size();
  size_t leading = 0, trailing = 0;
  if (left)
    while (leading < n && is_whitespace(chars[leading])) ++leading;
  if (right)
    while (trailing < n && is_whitespace(chars[n - 1 - trailing])) ++trailing;
  if (leading == 0 && trailing == 0) return;
  std::vector<Change> dest;
  for (size_t i = 0; i < n; ++i) {
    if (i < leading || i >= n - trailing) continue;
    dest.emplace_back(chars[i], i == n - trailing - 1 ? -static_cast<int>(trailing) : 0);
  }
  transform(dest, leading);
}

void NormalizedString::split(const Pattern& pattern, SplitBehavior behavior, std::vector<NormalizedString>& out) const {
  std::vector<Match> matches = pattern.find_matches(normalized_);
  std::vector<Match> splits;  // (offsets, remove)
  splits.reserve(matches.size());
  switch (behavior) {
    case SplitBehavior::isolated:
      for (auto& m : matches) splits.push_back({m.first, false});
      break;
    case SplitBehavior::removed:
      splits = std::move(matches);
      break;
    case SplitBehavior::contiguous: {
      bool prev_match = false;
      for (auto& [o, is_match] : matches) {
        if (is_match == prev_match && !splits.empty())
          splits.back().first.second = o.second;
        else
          splits.push_back({o, false});
        prev_match = is_match;
      }
      break;
    }
    case SplitBehavior::merged_with_previous: {
      bool prev_match = false;
      for (auto& [o, is_match] : matches) {
        if (is_match && !prev_match && !splits.empty())
          splits.back().first.second = o.second;
        else
          splits.push_back({o, false});
        prev_match = is_match;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool prev_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        const auto& [o, is_match] = *it;
        if (is_match && !prev_match && !splits.empty())
          splits.back().first.first = o.first;
        else
          splits.push_back({o, false});
        prev_match = is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  for (const auto& [o, remove] : splits)
    if (!remove) out.push_back(slice(o));
}

}  // namespace encore::tok
