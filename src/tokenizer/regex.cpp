// Oniguruma-backed Regex and the hand-written GPT-2 split: see regex.hpp.
#include "tokenizer/regex.hpp"

#include <oniguruma.h>

#include <memory>
#include <mutex>
#include <optional>

#include "encore/error.hpp"

namespace encore::tok {

// --- Oniguruma ------------------------------------------------------------------------------------------

namespace {

std::string onig_message(int code, OnigErrorInfo* info = nullptr) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  if (info)
    onig_error_code_to_str(buf, code, info);
  else
    onig_error_code_to_str(buf, code);
  return reinterpret_cast<const char*>(buf);
}

// onig_initialize once, and onig_new one at a time (its compiler keeps global state).
std::mutex& compile_mutex() {
  static std::mutex mu;
  return mu;
}

struct RegionFree {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  if (!is_valid_utf8(pattern)) throw Error("regex: pattern is not valid UTF-8");
  std::lock_guard<std::mutex> lock(compile_mutex());
  static const int init = [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    return onig_initialize(encodings, 1);
  }();
  if (init != ONIG_NORMAL) throw Error("regex: Oniguruma failed to initialise: " + onig_message(init));
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern_.data());
  OnigErrorInfo info{};
  // As HF tokenizers' onig::Regex::new: UTF-8, the default (Oniguruma) syntax, no options.
  const int r = onig_new(&re_, p, p + pattern_.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT,
                         &info);
  if (r != ONIG_NORMAL) {
    re_ = nullptr;
    throw Error(detail::concat("regex /", pattern_, "/: ", onig_message(r, &info)));
  }
}

Regex::~Regex() {
  if (re_) onig_free(re_);
}

std::vector<Offsets> Regex::find_all(std::string_view s) const {
  if (!is_valid_utf8(s)) throw Error(detail::concat("regex /", pattern_, "/: the text is not valid UTF-8"));
  const std::unique_ptr<OnigRegion, RegionFree> region(onig_region_new());
  if (!region) throw std::bad_alloc();
  const auto* str = reinterpret_cast<const OnigUChar*>(s.data());
  const OnigUChar* end = str + s.size();
  std::vector<Offsets> out;
  // The onig crate's find_iter: search from last_end (the whole text stays visible to anchors and lookbehind);
  // an empty match ending where the previous match ended is skipped by moving on one char.
  size_t last_end = 0;
  std::optional<size_t> last_match_end;
  while (last_end <= s.size()) {
    onig_region_clear(region.get());
    const int r = onig_search(re_, str, end, str + last_end, end, region.get(), ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) throw Error(detail::concat("regex /", pattern_, "/: ", onig_message(r)));
    const auto b = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
    if (b == e && last_match_end == e) {
      size_t len = 1;
      if (last_end < s.size()) decode_utf8(s, last_end, &len);
      last_end += len;
      continue;
    }
    last_end = e;
    last_match_end = e;
    out.emplace_back(b, e);
  }
  return out;
}

// --- GPT-2 split ----------------------------------------------------------------------------------------

std::vector<Offsets> gpt2_split(std::string_view s) {
  const std::vector<char32_t> cp = to_chars(s);
  const size_t n = cp.size();
  std::vector<Offsets> out;
  size_t byte = 0;  // byte offset of cp[i]
  size_t i = 0;
  auto bytes_of = [&](size_t from, size_t to) {
    size_t b = 0;
    for (size_t k = from; k < to; ++k) b += utf8_len(cp[k]);
    return b;
  };
  auto emit = [&](size_t to) {
    const size_t nb = bytes_of(i, to);
    out.emplace_back(byte, byte + nb);
    byte += nb;
    i = to;
  };
  auto other = [&](char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); };
  while (i < n) {
    const char32_t c = cp[i];
    // 's 't 're 've 'm 'll 'd
    if (c == U'\'' && i + 1 < n) {
      const char32_t a = cp[i + 1];
      if (a == U's' || a == U't' || a == U'm' || a == U'd') {
        emit(i + 2);
        continue;
      }
      if (i + 2 < n && ((a == U'r' && cp[i + 2] == U'e') || (a == U'v' && cp[i + 2] == U'e') ||
                        (a == U'l' && cp[i + 2] == U'l'))) {
        emit(i + 3);
        continue;
      }
    }
    const size_t j = (c == U' ' && i + 1 < n) ? i + 1 : i;  // optional leading space
    //  ?\p{L}+   ?\p{N}+   ?[^\s\p{L}\p{N}]+
    for (auto pred : {+[](char32_t x) { return is_letter(x); }, +[](char32_t x) { return is_number(x); }}) {
      if (j < n && pred(cp[j])) {
        size_t k = j + 1;
        while (k < n && pred(cp[k])) ++k;
        emit(k);
        goto next;
      }
    }
    if (j < n && other(cp[j])) {
      size_t k = j + 1;
      while (k < n && other(cp[k])) ++k;
      emit(k);
      continue;
    }
    if (is_whitespace(c)) {
      size_t k = i + 1;
      while (k < n && is_whitespace(cp[k])) ++k;
      // \s+(?!\S): the run, minus its last char when a non-space follows; else \s+
      if (k < n && k - i > 1)
        emit(k - 1);
      else
        emit(k);
      continue;
    }
    emit(i + 1);  // unreachable: every char is a letter, number, space or other
  next:;
  }
  return out;
}

}  // namespace encore::tok
