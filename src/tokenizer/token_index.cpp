// TokenIndex: see token_index.hpp.
#include "tokenizer/token_index.hpp"

#include "encore/error.hpp"

namespace encore::tok {

void TokenIndex::assign(std::string_view token, int64_t id) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash(token);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.length == kEmpty) {
      if (arena_.size() + token.size() >= kEmpty) throw Error("tokenizer vocabulary: more than 4 GB of token text");
      s = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size()), id};
      arena_.append(token);
      ++size_;
      return;
    }
    if (s.hash == h && s.length == token.size() && std::memcmp(arena_.data() + s.offset, token.data(), token.size()) == 0) {
      s.id = id;
      return;
    }
  }
}

void TokenIndex::reserve(size_t n, size_t bytes) {
  size_t want = slots_.empty() ? 64 : slots_.size();
  while (want < 2 * n) want *= 2;
  if (want > slots_.size()) rehash(want);
  arena_.reserve(bytes);
}

void TokenIndex::grow() { rehash(slots_.empty() ? 64 : slots_.size() * 2); }

void TokenIndex::rehash(size_t n_slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(n_slots, Slot{});
  mask_ = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.length == kEmpty) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].length != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

}  // namespace encore::tok
