// Shared pieces of the model implementations (models.cpp, bpe.cpp, unigram.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tokenizer/components.hpp"

namespace encore::tok {

// Hash that lets unordered_map<std::string, ...> be searched with a string_view, without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

struct Vocab {
  StringMap<int64_t> to_id;
  std::unordered_map<int64_t, std::string> to_token;
  std::optional<int64_t> find(std::string_view token) const;
  std::optional<std::string> token(int64_t id) const;
};

// {"token": id, ...}
Vocab read_vocab(const json& j, const std::string& path);

std::unique_ptr<Model> make_bpe(const json& j, const std::string& path);
std::unique_ptr<Model> make_unigram(const json& j, const std::string& path);

}  // namespace encore::tok
