// TokenIndex: token string -> id, the lookup every model makes per probe (WordPiece tries a word's prefixes,
// BPE its chars). Open addressing (linear probing, load <= 1/2) over one byte arena holding the tokens: a
// lookup hashes the key once and compares bytes in place, with no node to chase and no std::string built.
// Reads (find, for_each) are safe from many threads while nothing assigns.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace encore::tok {

class TokenIndex {
 public:
  // token -> id; a token given again keeps its last id (as assigning into a map).
  void assign(std::string_view token, int64_t id);
  std::optional<int64_t> find(std::string_view token) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = hash(token);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.length == kEmpty) return std::nullopt;
      if (s.hash == h && s.length == token.size() && std::memcmp(arena_.data() + s.offset, token.data(), token.size()) == 0)
        return s.id;
    }
  }
  size_t size() const { return size_; }
  // Room for n tokens without rehashing (a load of at most 1/2), and for `bytes` of token text.
  void reserve(size_t n, size_t bytes = 0);
  // f(token, id) for every token, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.length != kEmpty) f(std::string_view(arena_.data() + s.offset, s.length), s.id);
  }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = kEmpty;
    int64_t id = 0;
  };
  std::string arena_;
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;

  // 8 bytes at a time, each folded in by a multiply-xorshift (splitmix64's finaliser constants).
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    }
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
  }
  void grow();
  void rehash(size_t n_slots);  // n_slots: a power of two above 2 x size_
};

}  // namespace encore::tok
