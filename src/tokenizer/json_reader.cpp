// read_tokenizer_json and parse_json: see json_reader.hpp.
#include "tokenizer/json_reader.hpp"

#include <cmath>
#include <limits>

#include "io/json_file.hpp"

namespace encore::tok {

// A float the way serde_json (without its float_roundtrip feature) reads it, which is how the Rust library
// reads tokenizer.json: the first digits that fit a u64 as an integer, converted to double, then one multiply
// or divide by a power of ten. For 17-digit scores that is sometimes 1 ulp off the correctly rounded value;
// Unigram's Viterbi then breaks exact ties differently, so we must read them the same way (707 of 3000 scores
// of a test vocabulary differ).
double serde_f64(std::string_view s) {
  static const std::vector<double> pow10 = [] {
    std::vector<double> p(309);
    for (int i = 0; i <= 308; ++i) p[static_cast<size_t>(i)] = std::strtod(("1e" + std::to_string(i)).c_str(), nullptr);
    return p;
  }();
  size_t i = 0;
  const bool negative = i < s.size() && s[i] == '-';
  if (negative) ++i;
  uint64_t sig = 0;
  int64_t exp = 0;
  bool overflow = false;
  auto digit = [&](char c, bool fractional) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (!overflow && (sig > (UINT64_MAX - d) / 10)) overflow = true;
    if (overflow) {
      if (!fractional) ++exp;  // dropped integer digits still scale; dropped fraction digits do not
      return;
    }
    sig = sig * 10 + d;
    if (fractional) --exp;
  };
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) digit(s[i], false);
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) digit(s[i], true);
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool neg_exp = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg_exp = s[i++] == '-';
    int64_t e = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) e = std::min<int64_t>(e * 10 + (s[i] - '0'), 1 << 30);
    exp += neg_exp ? -e : e;
  }
  double f = static_cast<double>(sig);
  for (;;) {
    const int64_t a = exp < 0 ? -exp : exp;
    if (a <= 308) {
      f = exp >= 0 ? f * pow10[static_cast<size_t>(a)] : f / pow10[static_cast<size_t>(a)];
      break;
    }
    if (f == 0.0 || exp > 0) {
      if (exp > 0) f = HUGE_VAL;
      break;
    }
    f /= 1e308;
    exp += 308;
  }
  return negative ? -f : f;
}

namespace {

// A DOM builder (as nlohmann's json_sax_dom_parser, whose state is private) that reads model.vocab flat while
// its members are valid ids, and floats as serde_json does.
class TokenizerJsonSax {
 public:
  // text_size bounds the number of vocabulary members (each takes at least 5 bytes, `"":0,`), so the flat
  // vocabulary is allocated once instead of growing by doubling.
  TokenizerJsonSax(TokenizerJson& out, bool flat_vocab, size_t text_size)
      : out_(out), want_flat_(flat_vocab), max_members_(text_size / 5 + 1) {}

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(json::number_integer_t v) {
    if (capturing_ && v >= 0) {
      out_.vocab.emplace_back(key_, static_cast<int64_t>(v));
      return true;
    }
    return value(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (capturing_ && v <= static_cast<json::number_unsigned_t>(std::numeric_limits<int64_t>::max())) {
      out_.vocab.emplace_back(key_, static_cast<int64_t>(v));
      return true;
    }
    return value(v);
  }
  bool number_float(json::number_float_t, const json::string_t& text) { return value(serde_f64(text)); }
  bool string(json::string_t& v) { return value(std::move(v)); }
  bool binary(json::binary_t& v) { return value(std::move(v)); }

  bool start_object(std::size_t) {
    const bool is_model = stack_.size() == 1 && stack_.back()->is_object() && key_ == "model";
    const bool is_vocab =
        want_flat_ && stack_.size() == 2 && stack_.back() == model_ && model_->is_object() && key_ == "vocab";
    json* obj = value(json::value_t::object);
    stack_.push_back(obj);
    if (is_model) model_ = obj;
    if (is_vocab) {
      capturing_ = true;
      out_.flat_vocab = true;
      out_.vocab.reserve(max_members_);
      vocab_ = obj;
    }
    return true;
  }
  bool key(json::string_t& k) {
    if (capturing_) {
      key_.assign(k);
      return true;
    }
    // A member given again replaces the earlier one (as the DOM does): so does a flat vocabulary read before.
    if ((stack_.size() == 1 && k == "model") || (stack_.size() == 2 && stack_.back() == model_ && k == "vocab")) {
      out_.flat_vocab = false;
      out_.vocab.clear();
    }
    key_.assign(k);
    element_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() {
    capturing_ = false;  // a complete flat vocabulary: the DOM keeps the empty object
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    stack_.push_back(value(json::value_t::array));
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& ex) {
    throw ex;
  }

 private:
  TokenizerJson& out_;
  bool want_flat_;
  size_t max_members_;
  std::vector<json*> stack_;   // the open objects and arrays, innermost last
  json* element_ = nullptr;    // where the next value of the innermost object goes
  json* model_ = nullptr;      // the root's "model" object
  json* vocab_ = nullptr;      // model.vocab, while capturing_
  bool capturing_ = false;     // reading model.vocab's members into out_.vocab
  std::string key_;            // the last key read

  // A member of model.vocab that is not a valid id: the members read so far go into the DOM, and the rest of
  // the object is read as a DOM too, so make_model reports it as it would have.
  void end_capture() {
    capturing_ = false;
    out_.flat_vocab = false;
    for (auto& [token, id] : out_.vocab) (*vocab_)[token] = id;
    out_.vocab.clear();
    element_ = &(*vocab_)[key_];
  }

  template <class V>
  json* value(V&& v) {
    if (capturing_) end_capture();
    if (stack_.empty()) {
      out_.doc = json(std::forward<V>(v));
      return &out_.doc;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->emplace_back(std::forward<V>(v));
      return &stack_.back()->back();
    }
    *element_ = json(std::forward<V>(v));
    return element_;
  }
};

TokenizerJson read(std::string_view text, const std::string& source, bool flat_vocab) {
  if (const size_t at = json_too_deep_at(text); at != std::string::npos)
    throw ModelFormatError(source + ": " + json_too_deep_message(at));
  try {
    TokenizerJson out;
    TokenizerJsonSax sax(out, flat_vocab, text.size());
    json::sax_parse(text.begin(), text.end(), &sax);
    return out;
  } catch (const json::exception& e) {  // parse errors and numbers out of range (1e999)
    throw ModelFormatError(source + ": not valid JSON: " + e.what());
  }
}

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& source) {
  return read(text, source, true);
}

json parse_json(std::string_view text, const std::string& source) { return read(text, source, false).doc; }

}  // namespace encore::tok
