// BPE: chars (or bytes, after ByteLevel) of a word are merged pairwise by merge rank. As HF's Word::merge_all:
// a min-heap of candidate merges keyed (rank, position), stale entries skipped when popped, so a word of
// n symbols costs O(n log n), not the O(n^2) of repeated rescans.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <memory>
#include <queue>

#include "tokenizer/json_util.hpp"
#include "tokenizer/models.hpp"
#include "tokenizer/word_cache.hpp"

namespace encore::tok {

namespace {

struct MergeInfo {
  uint32_t rank;
  int64_t new_id;
};

// (left id, right id) -> merge: open addressing (linear probing, load <= 1/2), one multiply to hash, so the
// merge loop's lookups touch one or two slots of a flat array.
class MergeMap {
 public:
  explicit MergeMap(size_t n) : slots_(std::bit_ceil(std::max<size_t>(2 * n, 16))), mask_(slots_.size() - 1) {}
  // A pair given again keeps its last merge.
  void assign(int64_t left, int64_t right, MergeInfo m) {
    const uint64_t k = key(left, right);
    size_t i = slot(k);
    while (slots_[i].used && slots_[i].key != k) i = (i + 1) & mask_;
    slots_[i] = Slot{k, m, true};
  }
  const MergeInfo* find(int64_t left, int64_t right) const {
    const uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.key == k) return &s.merge;
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    MergeInfo merge{};
    bool used = false;
  };
  std::vector<Slot> slots_;
  size_t mask_;
  static uint64_t key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 32) & mask_; }
};

class BPE final : public Model {
 public:
  BPE(Vocab vocab, MergeMap merges, std::optional<std::string> unk,
      std::optional<std::string> prefix, std::optional<std::string> suffix, bool fuse_unk, bool byte_fallback,
      bool ignore_merges)
      : vocab_(std::move(vocab)), merges_(std::move(merges)), unk_(std::move(unk)), prefix_(std::move(prefix)),
        suffix_(std::move(suffix)), fuse_unk_(fuse_unk), byte_fallback_(byte_fallback), ignore_merges_(ignore_merges) {
    std::string c;
    for (char32_t cp = 0; cp < char_ids_.size(); ++cp) {
      c.clear();
      append_utf8(c, cp);
      char_ids_[cp] = vocab_.find(c).value_or(-1);
    }
  }

  void tokenize(std::string_view word, std::vector<Token>& out) const override {
    if (word.empty()) return;
    if (ignore_merges_)
      if (auto id = vocab_.find(word)) {
        out.push_back(Token{*id, std::string(word), {0, word.size()}});
        return;
      }
    std::vector<Piece> scratch;
    size_t offset = 0;
    for (const Piece& piece : cache_.get(word, [this](std::string_view w) { return merge_word(w); }, scratch)) {
      const std::string* tok = vocab_.token_ref(piece.id);
      out.push_back(Token{piece.id, tok ? *tok : std::string(), {offset, offset + piece.len}});
      offset += piece.len;
    }
  }

  std::optional<int64_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string> id_to_token(int64_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.to_id.size()); }
  std::string type() const override { return "BPE"; }
  std::optional<std::string> continuing_subword_prefix() const override { return prefix_; }
  std::optional<int64_t> unk_token_id() const override { return unk_ ? vocab_.find(*unk_) : std::nullopt; }

 private:
  struct Piece {  // a token of a merged word: its id and its byte length in the word
    int64_t id;
    size_t len;
  };
  struct Symbol {
    int64_t id;
    int prev, next;  // -1 = none
    size_t len;      // bytes of the word; 0 = merged away
  };
  struct Candidate {
    uint32_t rank;
    int pos;
    int64_t new_id;
    bool operator<(const Candidate& o) const {  // priority_queue pops the "largest": lowest rank, then pos
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  Vocab vocab_;
  MergeMap merges_;
  std::optional<std::string> unk_, prefix_, suffix_;
  bool fuse_unk_, byte_fallback_, ignore_merges_;
  std::array<int64_t, 0x800> char_ids_{};  // id of each one-char token below U+0800 (-1: none), for step 1
  WordCache<std::vector<Piece>> cache_;

  std::vector<Piece> merge_word(std::string_view word) const {
    // 1. initial symbols: one per char (with prefix/suffix), byte fallback, or (fused) unk
    std::vector<Symbol> syms;
    syms.reserve(word.size());
    auto add = [&](int64_t id, size_t len) {
      const int idx = static_cast<int>(syms.size());
      syms.push_back(Symbol{id, idx - 1, idx + 1, len});
    };
    struct PendingUnk {
      int64_t id = -1;  // -1: none pending
      size_t len = 0;   // bytes it covers
    } unk;
    auto flush_unk = [&] {
      if (unk.id >= 0) add(unk.id, unk.len);
      unk.id = -1;
    };
    std::string s;
    size_t len = 0;
    for (size_t i = 0; i < word.size(); i += len) {
      const char32_t c = decode_utf8(word, i, &len);
      const bool is_first = i == 0, is_last = i + len >= word.size();
      const bool bare = (is_first || !prefix_) && (!is_last || !suffix_);  // the token is the char alone
      std::optional<int64_t> id;
      if (bare && c < char_ids_.size()) {
        if (char_ids_[c] >= 0)
          id = char_ids_[c];
        else
          s.assign(word.substr(i, len));  // the byte fallback below reads s
      } else {
        s.assign(word.substr(i, len));
        if (!is_first && prefix_) s = *prefix_ + s;
        if (is_last && suffix_) s += *suffix_;
        id = vocab_.find(s);
      }
      if (id) {
        flush_unk();
        add(*id, len);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int64_t> ids;
        char code[8];
        for (unsigned char b : s) {
          std::snprintf(code, sizeof code, "<0x%02X>", b);
          auto id = vocab_.find(code);
          if (!id) break;
          ids.push_back(*id);
        }
        if (ids.size() == s.size()) {
          // HF flushes no pending unk here: the byte tokens go in first, as in its merge_word
          for (int64_t id : ids) add(id, 1);
          continue;
        }
      }
      if (unk_) {
        const auto unk_id = vocab_.find(*unk_);
        if (!unk_id) throw Error("BPE: the unk_token \"" + *unk_ + "\" is not in the vocabulary");
        if (unk.id >= 0 && fuse_unk_) {
          unk.len += len;
        } else {
          flush_unk();
          unk = PendingUnk{*unk_id, len};
        }
      }
    }
    flush_unk();
    if (!syms.empty()) syms.back().next = -1;

    // 2. merges, lowest rank first (ties: leftmost)
    merge_all(syms);

    std::vector<Piece> pieces;
    for (const Symbol& sym : syms)
      if (sym.len != 0) pieces.push_back(Piece{sym.id, sym.len});
    return pieces;
  }

  const MergeInfo* find_merge(int64_t a, int64_t b) const { return merges_.find(a, b); }

  void merge_all(std::vector<Symbol>& syms) const {
    std::vector<Candidate> initial;
    for (size_t i = 0; i + 1 < syms.size(); ++i)
      if (const MergeInfo* m = find_merge(syms[i].id, syms[i + 1].id))
        initial.push_back({m->rank, static_cast<int>(i), m->new_id});
    std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(initial));
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& cur = syms[static_cast<size_t>(top.pos)];
      if (cur.len == 0 || cur.next < 0) continue;
      const auto next_pos = static_cast<size_t>(cur.next);
      const Symbol right = syms[next_pos];
      const MergeInfo* m = find_merge(cur.id, right.id);
      if (!m || m->new_id != top.new_id) continue;  // stale entry
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[next_pos].len = 0;
      if (right.next >= 0 && static_cast<size_t>(right.next) < syms.size()) syms[static_cast<size_t>(right.next)].prev = top.pos;
      if (cur.prev >= 0)
        if (const MergeInfo* pm = find_merge(syms[static_cast<size_t>(cur.prev)].id, cur.id))
          queue.push({pm->rank, cur.prev, pm->new_id});
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < syms.size())
        if (const MergeInfo* nm = find_merge(cur.id, syms[static_cast<size_t>(cur.next)].id))
          queue.push({nm->rank, top.pos, nm->new_id});
    }
  }
};

std::optional<std::string> optional_string(const json& j, const std::string& path, const char* key) {
  if (!has(j, key)) return std::nullopt;
  return as_string(j[key], path + "." + key);
}

}  // namespace

std::unique_ptr<Model> make_bpe(const json& j, const std::string& path, const VocabEntries* flat_vocab) {
  if (has(j, "dropout")) {
    const double d = as_number(j["dropout"], path + ".dropout");
    if (d > 0.0 && d < 1.0)
      throw Error(path + ".dropout: BPE dropout " + std::to_string(d) +
                  " is random at inference; only null/0 (deterministic) is supported");
  }
  Vocab vocab = flat_vocab ? read_vocab(*flat_vocab) : read_vocab(field(j, path, "vocab"), path + ".vocab");
  auto prefix = optional_string(j, path, "continuing_subword_prefix");
  const size_t prefix_len = prefix ? prefix->size() : 0;
  const json& merges = field(j, path, "merges");
  if (!merges.is_array()) throw Error(path + ".merges: expected an array, got " + json_kind(merges));
  MergeMap map(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string mp = path + ".merges[" + std::to_string(i) + "]";
    const json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {  // legacy "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw Error(mp + ": expected \"left right\" with one space, got \"" + s + "\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = as_string(m[0], mp + "[0]");
      b = as_string(m[1], mp + "[1]");
    } else {
      throw Error(mp + ": expected \"left right\" or [left, right], got " + m.dump().substr(0, 80));
    }
    auto ia = vocab.find(a);
    auto ib = vocab.find(b);
    if (!ia) throw Error(mp + ": merge token \"" + a + "\" is not in the vocabulary");
    if (!ib) throw Error(mp + ": merge token \"" + b + "\" is not in the vocabulary");
    const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : std::string());
    auto in = vocab.find(merged);
    if (!in) throw Error(mp + ": merged token \"" + merged + "\" is not in the vocabulary");
    map.assign(*ia, *ib, MergeInfo{static_cast<uint32_t>(i), *in});
  }
  return std::make_unique<BPE>(std::move(vocab), std::move(map), optional_string(j, path, "unk_token"),
                               std::move(prefix), optional_string(j, path, "end_of_word_suffix"),
                               get_bool(j, path, "fuse_unk", false), get_bool(j, path, "byte_fallback", false),
                               get_bool(j, path, "ignore_merges", false));
}

}  // namespace encore::tok
