// WordCache<V>: a memo of word -> V (a model's result for a pre-tokenized word), as Hugging Face tokenizers'
// BPE and Unigram keep one: running text repeats its words, so most are looked up rather than recomputed.
//
// Contract: one cache per model object; find/insert are const and thread-safe because every thread has its own
// table (thread_local, no lock on the hot path). A thread's table serves one model at a time: a thread that
// switches to another model starts that model's table afresh. At most kMaxWords words of at most kMaxWordBytes
// bytes each are kept per thread (then it stops inserting, as HF's cache does): about a megabyte per thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace encore::tok {

template <class V>
class WordCache {
 public:
  static constexpr size_t kMaxWords = 10000;
  static constexpr size_t kMaxWordBytes = 256;

  WordCache() : owner_(next_owner()) {}
  WordCache(const WordCache&) = delete;
  WordCache& operator=(const WordCache&) = delete;

  // compute(word), from this thread's table when it is there (and stored there when there is room). The
  // reference is to the table's entry (valid until this thread uses the cache of another model) or, for a
  // word not kept, to `scratch`.
  template <class F>
  const V& get(std::string_view word, F&& compute, V& scratch) const {
    Table& t = table();
    if (word.size() <= kMaxWordBytes) {
      if (auto it = t.words.find(word); it != t.words.end()) return it->second;
      if (t.words.size() < kMaxWords) return t.words.emplace(std::string(word), compute(word)).first->second;
    }
    scratch = compute(word);
    return scratch;
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Table {
    uint64_t owner = 0;
    std::unordered_map<std::string, V, Hash, std::equal_to<>> words;
  };
  uint64_t owner_;  // unique per cache object, never reused (an address could be)

  static uint64_t next_owner() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
  }
  Table& table() const {
    thread_local Table t;
    if (t.owner != owner_) {
      t.words.clear();
      t.owner = owner_;
    }
    return t;
  }
};

}  // namespace encore::tok
