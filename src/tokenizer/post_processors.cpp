// Post-processors: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence. They receive
// the (1 or 2) encodings after truncation, each already tagged with its sequence id, and add special tokens
// (offsets (0, 0), special_tokens_mask 1, sequence id -1) and type ids; the caller concatenates them.
#include <algorithm>
#include <array>
#include <iterator>
#include <map>
#include <memory>

#include "tokenizer/components.hpp"
#include "tokenizer/json_util.hpp"

namespace encore::tok {

void trim_byte_level_offsets(Encoding& e, bool add_prefix_space, std::string_view text) {
  constexpr char32_t kSpace = 0x120;  // 'Ġ', the byte-level char of ' '
  // char index of each byte (an invalid UTF-8 run is one char) and byte start of each char; ASCII text is its
  // own index
  const bool ascii = std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  std::vector<int64_t> char_of, start_of;
  if (!ascii) {
    char_of.resize(text.size() + 1);
    bool valid = true;
    for (size_t i = 0; i < text.size();) {
      const size_t n = utf8_scan(text, i, &valid);
      for (size_t k = 0; k < n; ++k) char_of[i + k] = static_cast<int64_t>(start_of.size());
      start_of.push_back(static_cast<int64_t>(i));
      i += n;
    }
    char_of[text.size()] = static_cast<int64_t>(start_of.size());
  }
  const auto nbytes = static_cast<int64_t>(text.size());
  const auto nchars = ascii ? nbytes : static_cast<int64_t>(start_of.size());
  if (!ascii) start_of.push_back(nbytes);
  const auto char_at = [&](int64_t byte) { return ascii ? byte : char_of[static_cast<size_t>(byte)]; };
  const auto start_at = [&](int64_t c) { return ascii ? c : start_of[static_cast<size_t>(c)]; };
  auto space = [](char32_t c) { return c == kSpace || is_whitespace(c); };
  for (size_t i = 0; i < e.size(); ++i) {
    const std::string& t = e.tokens[i];
    if (!is_valid_utf8(t)) continue;
    // leading and trailing space chars; a token of spaces only counts them both ways
    int64_t leading = 0, trailing = 0;
    bool in_lead = true;
    size_t len = 0;
    for (size_t k = 0; k < t.size(); k += len) {
      const bool sp = space(decode_utf8(t, k, &len));
      in_lead = in_lead && sp;
      leading += in_lead;
      trailing = sp ? trailing + 1 : 0;
    }
    if (leading == 0 && trailing == 0) continue;
    auto& [bb, eb] = e.offsets[i];
    if (bb < 0 || eb < bb || eb > nbytes) continue;
    int64_t b = char_at(bb), en = char_at(eb);
    if (leading > 0) {
      const bool is_first = i == 0 || b == 0;
      // the one space ByteLevel(add_prefix_space) added to the first word is kept; more were in the text
      if (is_first && add_prefix_space && leading == 1) leading = 0;
      b = std::min(b + leading, en);
    }
    if (trailing > 0 && en >= trailing) en = std::max(en - trailing, b);
    bb = start_at(std::min(b, nchars));
    eb = start_at(std::min(en, nchars));
  }
}

void reserve_tokens(Encoding& e, size_t n) {
  for_each_token_field(e, e, [n](auto& field, auto&) { field.reserve(n); });
}

void append_encoding(Encoding& out, Encoding&& e) {
  // no tokens yet (every per-token field is empty) and no room reserved for more: take e's fields whole
  if (out.size() == 0 && out.ids.capacity() < e.size()) {
    out = std::move(e);
    return;
  }
  for_each_token_field(out, e, [](auto& dst, auto& src) {
    dst.insert(dst.end(), std::make_move_iterator(src.begin()), std::make_move_iterator(src.end()));
  });
}

Encoding concatenate(std::vector<Encoding>&& encs) {
  if (encs.size() == 1) return std::move(encs[0]);
  size_t n = 0;
  for (const Encoding& e : encs) n += e.size();
  Encoding out;
  reserve_tokens(out, n);
  for (Encoding& e : encs) append_encoding(out, std::move(e));
  return out;
}

namespace {

// A type id in a template piece ("$A:1", "$1"): digits only (checked by the caller), at most 9 of them.
int64_t small_int(const std::string& digits, const std::string& piece) {
  if (digits.size() > 9) throw ModelFormatError("template piece \"" + piece + "\": type id " + digits + " is too large");
  return std::stoll(digits);
}

// Appends `n` special tokens.
void push_special(Encoding& out, int64_t id, const std::string& token, int64_t type_id) {
  out.ids.push_back(id);
  out.type_ids.push_back(type_id);
  out.tokens.push_back(token);
  out.offsets.emplace_back(0, 0);
  out.special_tokens_mask.push_back(1);
  out.attention_mask.push_back(1);
  out.sequence_ids.push_back(-1);
  out.word_ids.push_back(-1);
}

void set_type_ids(Encoding& e, int64_t t) { e.type_ids.assign(e.size(), t); }

std::pair<std::string, int64_t> token_and_id(const json& j, const std::string& path) {
  if (!j.is_array() || j.size() != 2) throw Error(path + ": expected [token, id], got " + j.dump().substr(0, 80));
  return {as_string(j[0], path + "[0]"), as_int(j[1], path + "[1]")};
}

class TemplateProcessing final : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence;
    int seq;             // 0 = A, 1 = B
    std::string special; // special token name
    int64_t type_id;
  };
  struct Special {
    std::vector<int64_t> ids;
    std::vector<std::string> tokens;
  };

  TemplateProcessing(std::vector<Piece> single, std::vector<Piece> pair, std::map<std::string, Special> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {
    for (const Piece& p : single_)
      if (p.is_sequence && p.seq >= 0 && p.seq < 2) ++single_uses_[static_cast<size_t>(p.seq)];
    for (const Piece& p : pair_)
      if (p.is_sequence && p.seq >= 0 && p.seq < 2) ++pair_uses_[static_cast<size_t>(p.seq)];
  }

  int64_t added_tokens(bool is_pair) const override {
    int64_t n = 0;
    for (const Piece& p : is_pair ? pair_ : single_)
      if (!p.is_sequence) n += static_cast<int64_t>(specials_.at(p.special).ids.size());
    return n;
  }

  void process_encodings(std::vector<Encoding>& encs, bool add_special_tokens,
                         const std::vector<std::string_view>& texts) const override {
    const std::vector<Piece>& tmpl = encs.size() == 2 ? pair_ : single_;
    const std::array<int, 2>& uses = encs.size() == 2 ? pair_uses_ : single_uses_;
    std::vector<Encoding> out;
    for (const Piece& p : tmpl) {
      if (p.is_sequence) {
        const auto seq = static_cast<size_t>(p.seq);
        if (seq >= encs.size()) continue;
        Encoding e = uses[seq] == 1 ? std::move(encs[seq]) : encs[seq];
        set_type_ids(e, p.type_id);
        e.sequence_ids.assign(e.size(), p.seq);
        out.push_back(std::move(e));
      } else if (add_special_tokens) {
        const Special& s = specials_.at(p.special);
        Encoding e;
        for (size_t k = 0; k < s.ids.size(); ++k) push_special(e, s.ids[k], s.tokens[k], p.type_id);
        out.push_back(std::move(e));
      }
    }
    encs = std::move(out);
  }

 private:
  std::vector<Piece> single_, pair_;
  std::map<std::string, Special> specials_;
  std::array<int, 2> single_uses_{}, pair_uses_{};  // how often each template names $A and $B
};

class BertProcessing final : public PostProcessor {
 public:
  BertProcessing(std::pair<std::string, int64_t> sep, std::pair<std::string, int64_t> cls)
      : sep_(std::move(sep)), cls_(std::move(cls)) {}
  int64_t added_tokens(bool is_pair) const override { return is_pair ? 3 : 2; }
  void process_encodings(std::vector<Encoding>& encs, bool add_special_tokens,
                         const std::vector<std::string_view>& texts) const override {
    if (!add_special_tokens) return;
    for (size_t i = 0; i < encs.size(); ++i) {
      Encoding e;
      reserve_tokens(e, encs[i].size() + 2);
      if (i == 0) push_special(e, cls_.second, cls_.first, 0);
      append_encoding(e, std::move(encs[i]));
      push_special(e, sep_.second, sep_.first, i == 0 ? 0 : 1);
      encs[i] = std::move(e);
    }
  }

 private:
  std::pair<std::string, int64_t> sep_, cls_;
};

class RobertaProcessing final : public PostProcessor {
 public:
  RobertaProcessing(std::pair<std::string, int64_t> sep, std::pair<std::string, int64_t> cls, bool trim_offsets,
                    bool add_prefix_space)
      : sep_(std::move(sep)), cls_(std::move(cls)), trim_(trim_offsets), add_prefix_space_(add_prefix_space) {}
  int64_t added_tokens(bool is_pair) const override { return is_pair ? 4 : 2; }
  void process_encodings(std::vector<Encoding>& encs, bool add_special_tokens,
                         const std::vector<std::string_view>& texts) const override {
    for (size_t i = 0; i < encs.size(); ++i) {
      Encoding& e = encs[i];
      if (trim_) trim_byte_level_offsets(e, add_prefix_space_, texts[i]);
      set_type_ids(e, 0);  // RoBERTa: every type id is 0
    }
    if (!add_special_tokens) return;
    for (size_t i = 0; i < encs.size(); ++i) {
      Encoding e;
      reserve_tokens(e, encs[i].size() + 2);
      if (i == 0)
        push_special(e, cls_.second, cls_.first, 0);
      else
        push_special(e, sep_.second, sep_.first, 0);
      append_encoding(e, std::move(encs[i]));
      push_special(e, sep_.second, sep_.first, 0);
      encs[i] = std::move(e);
    }
  }

 private:
  std::pair<std::string, int64_t> sep_, cls_;
  bool trim_, add_prefix_space_;
};

class ByteLevelProcessor final : public PostProcessor {
 public:
  ByteLevelProcessor(bool trim_offsets, bool add_prefix_space) : trim_(trim_offsets), add_prefix_space_(add_prefix_space) {}
  int64_t added_tokens(bool) const override { return 0; }
  void process_encodings(std::vector<Encoding>& encs, bool,
                         const std::vector<std::string_view>& texts) const override {
    if (trim_)
      for (size_t i = 0; i < encs.size(); ++i) trim_byte_level_offsets(encs[i], add_prefix_space_, texts[i]);
  }

 private:
  bool trim_, add_prefix_space_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  int64_t added_tokens(bool is_pair) const override {
    int64_t n = 0;
    for (const auto& p : parts_) n += p->added_tokens(is_pair);
    return n;
  }
  void process_encodings(std::vector<Encoding>& encs, bool add_special_tokens,
                         const std::vector<std::string_view>& texts) const override {
    for (const auto& p : parts_) p->process_encodings(encs, add_special_tokens, texts);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::vector<TemplateProcessing::Piece> read_template(const json& j, const std::string& path) {
  std::vector<TemplateProcessing::Piece> out;
  if (j.is_string()) {  // "[CLS] $A [SEP]" string form (as the Python constructor accepts)
    const std::string s = j.get<std::string>();
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && s[i] == ' ') ++i;
      if (i >= s.size()) break;
      size_t e = s.find(' ', i);
      if (e == std::string::npos) e = s.size();
      std::string piece = s.substr(i, e - i);
      i = e;
      int64_t type_id = 0;
      const size_t colon = piece.rfind(':');
      if (colon != std::string::npos && colon + 1 < piece.size() &&
          piece.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
        type_id = small_int(piece.substr(colon + 1), piece);
        piece = piece.substr(0, colon);
      }
      if (piece == "$A" || piece == "$") {
        out.push_back({true, 0, {}, type_id});
      } else if (piece == "$B") {
        out.push_back({true, 1, {}, type_id});
      } else if (piece.size() > 1 && piece[0] == '$' &&
                 piece.find_first_not_of("0123456789", 1) == std::string::npos) {
        out.push_back({true, 0, {}, small_int(piece.substr(1), piece)});  // "$1": sequence A with type id 1
      } else {
        out.push_back({false, 0, piece, type_id});
      }
    }
    return out;
  }
  if (!j.is_array()) throw Error(path + ": expected an array of template pieces, got " + json_kind(j));
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    const json& piece = j[i];
    if (piece.is_object() && piece.contains("Sequence")) {
      const json& s = piece["Sequence"];
      const std::string id = as_string(field(s, p + ".Sequence", "id"), p + ".Sequence.id");
      if (id != "A" && id != "B") throw Error(p + ".Sequence.id: expected \"A\" or \"B\", got \"" + id + "\"");
      out.push_back({true, id == "B" ? 1 : 0, {}, get_int(s, p + ".Sequence", "type_id", 0)});
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const json& s = piece["SpecialToken"];
      out.push_back({false, 0, as_string(field(s, p + ".SpecialToken", "id"), p + ".SpecialToken.id"),
                     get_int(s, p + ".SpecialToken", "type_id", 0)});
    } else {
      throw Error(p + ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + piece.dump().substr(0, 80));
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const std::string& path) {
  const std::string type = type_of(j, path);
  if (type == "TemplateProcessing") {
    std::map<std::string, TemplateProcessing::Special> specials;
    if (has(j, "special_tokens")) {
      const json& st = j["special_tokens"];
      if (!st.is_object()) throw Error(path + ".special_tokens: expected an object, got " + json_kind(st));
      for (auto it = st.begin(); it != st.end(); ++it) {
        const std::string p = path + ".special_tokens[\"" + it.key() + "\"]";
        TemplateProcessing::Special s;
        const json& ids = field(it.value(), p, "ids");
        const json& toks = field(it.value(), p, "tokens");
        if (!ids.is_array() || !toks.is_array() || ids.size() != toks.size())
          throw Error(p + ": ids and tokens must be arrays of the same length");
        for (size_t k = 0; k < ids.size(); ++k) {
          s.ids.push_back(as_int(ids[k], p + ".ids[" + std::to_string(k) + "]"));
          s.tokens.push_back(as_string(toks[k], p + ".tokens[" + std::to_string(k) + "]"));
        }
        specials[it.key()] = std::move(s);
      }
    }
    auto single = read_template(field(j, path, "single"), path + ".single");
    auto pair = has(j, "pair") ? read_template(j["pair"], path + ".pair") : single;
    for (const auto* t : {&single, &pair})
      for (const auto& p : *t)
        if (!p.is_sequence && !specials.count(p.special))
          throw Error(path + ": template uses special token \"" + p.special + "\" missing from special_tokens");
    return std::make_unique<TemplateProcessing>(std::move(single), std::move(pair), std::move(specials));
  }
  if (type == "BertProcessing")
    return std::make_unique<BertProcessing>(token_and_id(field(j, path, "sep"), path + ".sep"),
                                            token_and_id(field(j, path, "cls"), path + ".cls"));
  if (type == "RobertaProcessing")
    return std::make_unique<RobertaProcessing>(token_and_id(field(j, path, "sep"), path + ".sep"),
                                               token_and_id(field(j, path, "cls"), path + ".cls"),
                                               get_bool(j, path, "trim_offsets", true),
                                               get_bool(j, path, "add_prefix_space", true));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelProcessor>(get_bool(j, path, "trim_offsets", true),
                                                get_bool(j, path, "add_prefix_space", true));
  if (type == "Sequence") {
    const json& list = field(j, path, "processors");
    if (!list.is_array()) throw Error(path + ".processors: expected an array, got " + json_kind(list));
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(make_post_processor(list[i], path + ".processors[" + std::to_string(i) + "]"));
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  unsupported(path, "post_processor", type,
              {"TemplateProcessing", "BertProcessing", "RobertaProcessing", "ByteLevel", "Sequence"});
}

}  // namespace encore::tok
