// Decoders: tokens -> text. WordPiece, ByteLevel, Metaspace, BPEDecoder, ByteFallback, Fuse, Strip, Replace,
// CTC, Sequence. Each works on the list of token strings (decode_chain); the Tokenizer joins the result.
#include <memory>

#include "tokenizer/components.hpp"
#include "tokenizer/json_util.hpp"

namespace encore::tok {

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t f = s.find(from); f != std::string::npos; f = s.find(from, pos)) {
    out.append(s, pos, f - pos);
    out.append(to);
    pos = f + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// BERT's clean_up_tokenization: " ." -> "." and friends.
std::string cleanup(std::string s) {
  for (auto [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
                          {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}})
    replace_all(s, from, to);
  return s;
}

class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t = " " + t;
      }
      if (cleanup_) t = cleanup(std::move(t));
    }
    return tokens;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

// Byte-level chars -> bytes; one string for all tokens (a char may span tokens), invalid UTF-8 -> U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string tb;
      bool ok = is_valid_utf8(t);
      if (ok)
        for (char32_t c : to_chars(t)) {
          const int b = char_to_byte(c);
          if (b < 0) {
            ok = false;
            break;
          }
          tb.push_back(static_cast<char>(b));
        }
      bytes += ok ? tb : t;
    }
    return {lossy(bytes)};
  }
  static std::string lossy(std::string_view s) {
    std::string out;
    bool valid = true;
    for (size_t i = 0; i < s.size();) {
      const size_t n = utf8_scan(s, i, &valid);
      out.append(valid ? s.substr(i, n) : std::string_view("\xEF\xBF\xBD"));
      i += n;
    }
    return out;
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepend) : rep_(replacement), prepend_(prepend) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (!is_valid_utf8(tokens[i])) continue;
      std::string out;
      for (char32_t c : to_chars(tokens[i])) {
        if (c == rep_) {
          if (!(i == 0 && prepend_)) out.push_back(' ');
        } else {
          append_utf8(out, c);
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t rep_;
  bool prepend_;
};

class BPEDecoder final : public Decoder {
 public:
  explicit BPEDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
    return tokens;
  }

 private:
  std::string suffix_;
};

// "<0x41>" tokens -> the bytes; a run of them that is not valid UTF-8 becomes one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending))
        out.push_back(pending);
      else
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) {
          return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        };
        const int h = hex(t[3]), l = hex(t[4]);
        if (h >= 0 && l >= 0) byte = h * 16 + l;
      }
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of one char from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      if (!is_valid_utf8(t)) continue;
      std::vector<char32_t> cs = to_chars(t);
      size_t b = 0, e = cs.size();
      while (b < start_ && b < e && cs[b] == content_) ++b;
      size_t removed = 0;
      while (removed < stop_ && e > b && cs[e - 1] == content_) {
        --e;
        ++removed;
      }
      t = to_utf8(std::vector<char32_t>(cs.begin() + static_cast<std::ptrdiff_t>(b), cs.begin() + static_cast<std::ptrdiff_t>(e)));
    }
    return tokens;
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::shared_ptr<const Pattern> p, std::string content) : p_(std::move(p)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      if (!is_valid_utf8(t)) continue;
      NormalizedString s(t);
      s.replace(*p_, content_);
      t = s.get();
    }
    return tokens;
  }

 private:
  std::shared_ptr<const Pattern> p_;
  std::string content_;
};

// CTC: collapse repeats, drop the pad token, word delimiter -> ' '.
class CTCDecoder final : public Decoder {
 public:
  CTCDecoder(std::string pad, std::string delim, bool cleanup) : pad_(std::move(pad)), delim_(std::move(delim)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      std::string t = tokens[i];
      replace_all(t, pad_, "");
      if (cleanup_) {
        t = cleanup(std::move(t));
        replace_all(t, delim_, " ");
      }
      if (!t.empty()) out.push_back(std::move(t));
    }
    return out;
  }

 private:
  std::string pad_, delim_;
  bool cleanup_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

char32_t one_char(const json& j, const std::string& path) {
  const std::string s = as_string(j, path);
  if (!is_valid_utf8(s) || count_chars(s) != 1) throw Error(path + ": expected a single character, got \"" + s + "\"");
  return to_chars(s)[0];
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& path) {
  const std::string type = type_of(j, path);
  if (type == "WordPiece")
    return std::make_unique<WordPieceDecoder>(get_string(j, path, "prefix", "##"), get_bool(j, path, "cleanup", true));
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    const char32_t rep = has(j, "replacement") ? one_char(j["replacement"], path + ".replacement") : U'\u2581';
    bool prepend = get_bool(j, path, "add_prefix_space", true);
    if (has(j, "prepend_scheme")) prepend = as_string(j["prepend_scheme"], path + ".prepend_scheme") != "never";
    return std::make_unique<MetaspaceDecoder>(rep, prepend);
  }
  if (type == "BPEDecoder") return std::make_unique<BPEDecoder>(get_string(j, path, "suffix", "</w>"));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(one_char(field(j, path, "content"), path + ".content"),
                                          static_cast<size_t>(std::max<int64_t>(0, get_int(j, path, "start", 0))),
                                          static_cast<size_t>(std::max<int64_t>(0, get_int(j, path, "stop", 0))));
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(make_pattern(field(j, path, "pattern"), path + ".pattern"),
                                            as_string(field(j, path, "content"), path + ".content"));
  if (type == "CTC")
    return std::make_unique<CTCDecoder>(get_string(j, path, "pad_token", "<pad>"),
                                        get_string(j, path, "word_delimiter_token", "|"), get_bool(j, path, "cleanup", true));
  if (type == "Sequence") {
    const json& list = field(j, path, "decoders");
    if (!list.is_array()) throw Error(path + ".decoders: expected an array, got " + json_kind(list));
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(make_decoder(list[i], path + ".decoders[" + std::to_string(i) + "]"));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  unsupported(path, "decoder", type,
              {"WordPiece", "ByteLevel", "Metaspace", "BPEDecoder", "ByteFallback", "Fuse", "Strip", "Replace", "CTC",
               "Sequence"});
}

}  // namespace encore::tok
