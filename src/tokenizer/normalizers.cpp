// Normalizers: BertNormalizer, NFC/NFD/NFKC/NFKD, Lowercase, StripAccents, Strip, Replace, Prepend, Nmt,
// ByteLevel, Sequence (Precompiled lives in precompiled.cpp). Each is HF's, step for step, so the
// alignments (hence offsets) come out the same.
#include <memory>

#include "tokenizer/components.hpp"
#include "tokenizer/json_util.hpp"

namespace encore::tok {

namespace {

// BERT's "Chinese character": the CJK Unified Ideographs blocks, not all CJK scripts.
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool bert_is_whitespace(char32_t c) { return c == U'\t' || c == U'\n' || c == U'\r' || is_whitespace(c); }
bool bert_is_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  return is_other(c);
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(handle_chinese_chars), strip_accents_(strip_accents), lowercase_(lowercase) {}
  void normalize(NormalizedString& s) const override {
    if (clean_text_) {
      s.filter([](char32_t c) { return !(c == 0 || c == 0xFFFD || bert_is_control(c)); });
      s.map([](char32_t c) { return bert_is_whitespace(c) ? U' ' : c; });
    }
    if (chinese_) {
      bool any = false;
      std::vector<Change> dest;
      dest.reserve(s.size());
      size_t len = 0;
      const std::string& t = s.get();
      for (size_t i = 0; i < t.size(); i += len) {
        const char32_t c = decode_utf8(t, i, &len);
        if (is_chinese_char(c)) {
          any = true;
          dest.insert(dest.end(), {{U' ', 1}, {c, 0}, {U' ', 1}});
        } else {
          dest.emplace_back(c, 0);
        }
      }
      if (any) s.transform(dest, 0);
    }
    if (strip_accents_) {
      s.normalize(NormForm::NFD);
      s.filter([](char32_t c) { return !is_mark_nonspacing(c); });
    }
    if (lowercase_) s.lowercase();
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormForm f) : form_(f) {}
  void normalize(NormalizedString& s) const override { s.normalize(form_); }

 private:
  NormForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override { s.lowercase(); }
};

// Removes every combining mark (Mn, Mc, Me), unlike BertNormalizer's strip_accents which removes Mn only.
class StripAccents final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) { return !is_combining_mark(c); });
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedString& s) const override { s.lrstrip(left_, right_); }

 private:
  bool left_, right_;
};

class Replace final : public Normalizer {
 public:
  Replace(std::shared_ptr<const Pattern> p, std::string content) : p_(std::move(p)), content_(std::move(content)) {}
  void normalize(NormalizedString& s) const override { s.replace(*p_, content_); }

 private:
  std::shared_ptr<const Pattern> p_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  void normalize(NormalizedString& s) const override {
    if (!s.empty()) s.prepend(p_);
  }

 private:
  std::string p_;
};

// SentencePiece's NMT normalisation: drop C0 controls, map odd spaces to ' '.
class Nmt final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) {
      return !((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F);
    });
    s.map([](char32_t c) -> char32_t {
      switch (c) {
        case 0x9: case 0xA: case 0xC: case 0xD: case 0x1680: case 0x200B: case 0x200C: case 0x200D: case 0x200E:
        case 0x200F: case 0x2028: case 0x2029: case 0x2581: case 0xFEFF: case 0xFFFD:
          return U' ';
        default:
          return c;
      }
    });
  }
};

// The byte-level mapping as a normalizer: every byte of every char becomes its printable char.
class ByteLevelNormalizer final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override { byte_level_map(s); }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(NormalizedString& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& path) {
  const std::string type = type_of(j, path);
  if (type == "BertNormalizer") {
    const bool lowercase = get_bool(j, path, "lowercase", true);
    // strip_accents: null means "follow lowercase" (HF and BERT's original tokenizer)
    const bool strip = has(j, "strip_accents") ? as_bool(j["strip_accents"], path + ".strip_accents") : lowercase;
    return std::make_unique<BertNormalizer>(get_bool(j, path, "clean_text", true),
                                            get_bool(j, path, "handle_chinese_chars", true), strip, lowercase);
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip")
    return std::make_unique<Strip>(get_bool(j, path, "strip_left", true), get_bool(j, path, "strip_right", true));
  if (type == "Replace")
    return std::make_unique<Replace>(make_pattern(field(j, path, "pattern"), path + ".pattern"),
                                     as_string(field(j, path, "content"), path + ".content"));
  if (type == "Prepend") return std::make_unique<Prepend>(as_string(field(j, path, "prepend"), path + ".prepend"));
  if (type == "Nmt") return std::make_unique<Nmt>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Precompiled") {
    const json& cm = field(j, path, "precompiled_charsmap");
    if (cm.is_null()) return std::make_unique<SequenceNormalizer>(std::vector<std::unique_ptr<Normalizer>>{});
    return make_precompiled(as_string(cm, path + ".precompiled_charsmap"), path + ".precompiled_charsmap");
  }
  if (type == "Sequence") {
    const json& list = field(j, path, "normalizers");
    if (!list.is_array()) throw Error(path + ".normalizers: expected an array, got " + json_kind(list));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(make_normalizer(list[i], path + ".normalizers[" + std::to_string(i) + "]"));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  unsupported(path, "normalizer", type,
              {"BertNormalizer", "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Strip", "Replace",
               "Prepend", "Nmt", "ByteLevel", "Precompiled", "Sequence"});
}

}  // namespace encore::tok
