// AddedVocabulary: see added_vocabulary.hpp.
#include "tokenizer/added_vocabulary.hpp"

namespace encore::tok {

static constexpr size_t kNone = static_cast<size_t>(-1);

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  for (AddedToken& t : tokens) {
    if (t.content.empty() || by_content_.count(t.content)) continue;
    by_content_[t.content] = tokens_.size();
    by_id_[t.id] = tokens_.size();
    tokens_.push_back(std::move(t));
  }
  // HF orders the patterns special tokens first, then the others; with distinct contents and
  // leftmost-longest matching the order does not change the result.
  std::vector<std::string> raw_keys, norm_keys;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (!t.normalized) {
      raw_keys.push_back(t.content);
      raw_.token_index.push_back(i);
    } else {
      NormalizedString s(t.content);
      if (normalizer) normalizer->normalize(s);
      norm_keys.push_back(s.get());
      normalized_.token_index.push_back(i);
    }
  }
  raw_.trie = ByteTrie(raw_keys);
  normalized_.trie = ByteTrie(norm_keys);
}

std::optional<int64_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

const AddedToken* AddedVocabulary::by_id(int64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::is_special_id(int64_t id) const {
  const AddedToken* t = by_id(id);
  return t && t->special;
}

namespace {

char32_t char_before(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  size_t len = 0;
  return decode_utf8(s, b, &len);
}

}  // namespace

std::vector<std::pair<Offsets, size_t>> AddedVocabulary::find_matches(std::string_view s, const MatchSet& set) const {
  if (s.empty()) return {{{0, 0}, kNone}};
  std::vector<std::pair<Offsets, size_t>> out;
  size_t start_offset = 0;
  size_t i = 0;
  while (i < s.size()) {
    if (!set.trie.can_start(static_cast<uint8_t>(s[i]))) {  // also skips continuation bytes: no key starts so
      ++i;
      continue;
    }
    // leftmost-longest: the longest key starting at the first position where any key starts
    size_t best_end = 0;
    uint32_t best_key = 0;
    set.trie.prefixes(s, i, [&](size_t end, uint32_t key) {
      best_end = end;
      best_key = key;
    });
    if (best_end == 0) {
      size_t len = 0;
      decode_utf8(s, i, &len);
      i += len;
      continue;
    }
    size_t start = i, stop = best_end;
    i = best_end;  // the search resumes after this match even if it is rejected below
    const size_t index = set.token_index[best_key];
    const AddedToken& t = tokens_[index];
    if (t.single_word) {
      const bool start_space = start == 0 || !is_rust_word_char(char_before(s, start));
      size_t len = 0;
      const bool stop_space = stop == s.size() || !is_rust_word_char(decode_utf8(s, stop, &len));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t ns = start;
      while (ns > 0 && is_whitespace(char_before(s, ns))) {
        const char32_t c = char_before(s, ns);
        ns -= utf8_len(c);
      }
      start = std::max(ns, start_offset);
    }
    if (t.rstrip) {
      size_t len = 0;
      while (stop < s.size() && is_whitespace(decode_utf8(s, stop, &len))) stop += len;
      // The search still resumes at the match end, so the next match may start inside the whitespace taken
      // here and the two splits overlap: HF's behaviour (aho-corasick iterates on the unstripped matches).
    }
    if (start_offset < start) out.push_back({{start_offset, start}, kNone});
    out.push_back({{start, stop}, index});
    start_offset = stop;
  }
  if (start_offset != s.size()) out.push_back({{start_offset, s.size()}, kNone});
  return out;
}

std::vector<Split> AddedVocabulary::split_with_indices(NormalizedString s, const MatchSet& set) const {
  // Even without any match the text is re-sliced, as HF does: the slice's original start becomes that of its
  // first normalized char (which Metaspace's prepend_scheme "first" looks at).
  std::vector<Split> out;
  for (const auto& [range, index] : find_matches(s.get(), set)) {
    NormalizedString piece = s.slice(range);
    if (index == kNone) {
      out.push_back(Split{std::move(piece), std::nullopt});
    } else {
      const size_t len = piece.size();
      std::string value = piece.get();
      out.push_back(Split{std::move(piece), std::vector<Token>{Token{tokens_[index].id, std::move(value), {0, len}}}});
    }
  }
  return out;
}

PreTokenizedString AddedVocabulary::extract_and_normalize(const Normalizer* normalizer, std::string_view text) const {
  PreTokenizedString p;
  std::vector<Split> first = split_with_indices(NormalizedString(text), raw_);
  for (Split& s : first) {
    if (s.normalized.empty()) continue;
    if (s.tokens) {
      p.splits.push_back(std::move(s));
      continue;
    }
    if (normalizer) normalizer->normalize(s.normalized);
    for (Split& t : split_with_indices(std::move(s.normalized), normalized_))
      if (!t.normalized.empty()) p.splits.push_back(std::move(t));
  }
  return p;
}

}  // namespace encore::tok
