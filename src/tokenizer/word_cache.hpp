// WordCache<V>: a memo of word -> V (a model's result for a pre-tokenized word), as Hugging Face tokenizers'
// BPE and Unigram keep one: running text repeats its words, so most are looked up rather than recomputed. The
// lookup is a TokenIndex probe (a flat table), not a node-based map's bucket chain.
//
// Contract: one cache per model object; get() is const and thread-safe because every thread has its own
// table (thread_local, no lock on the hot path). A thread's table serves one model at a time: a thread that
// switches to another model starts that model's table afresh. At most kMaxWords words of at most kMaxWordBytes
// bytes each are kept per thread (then it stops inserting, as HF's cache does): at most a few MB per thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token_index.hpp"

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
  // reference is to the table's entry or, for a word not kept, to `scratch`; valid until this thread's next get.
  template <class F>
  const V& get(std::string_view word, F&& compute, V& scratch) const {
    Table& t = table();
    if (word.size() <= kMaxWordBytes) {
      if (auto i = t.index.find(word)) return t.values[static_cast<size_t>(*i)];
      if (t.values.size() < kMaxWords) {
        t.values.push_back(compute(word));
        t.index.assign(word, static_cast<int64_t>(t.values.size() - 1));
        return t.values.back();
      }
    }
    scratch = compute(word);
    return scratch;
  }

 private:
  struct Table {
    uint64_t owner = 0;
    TokenIndex index;       // word -> position in values
    std::vector<V> values;
  };
  uint64_t owner_;  // unique per cache object, never reused (an address could be)

  static uint64_t next_owner() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
  }
  Table& table() const {
    thread_local Table t;
    if (t.owner != owner_) {
      t.index = TokenIndex();
      t.values.clear();
      t.owner = owner_;
    }
    return t;
  }
};

}  // namespace encore::tok
