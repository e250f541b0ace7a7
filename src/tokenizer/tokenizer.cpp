// encore::Tokenizer: the pipeline (added tokens, normalizer, pre-tokenizer, model, post-processor), truncation
// and padding, decoding, and loading from tokenizer.json or a BERT vocab.txt directory.
#include "encore/tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>
#include <sstream>

#include "encore/error.hpp"
#include "encore/files.hpp"
#include "runtime/parallel.hpp"
#include "tokenizer/added_vocabulary.hpp"
#include "tokenizer/components.hpp"
#include "tokenizer/json_reader.hpp"
#include "tokenizer/json_util.hpp"

namespace encore {

using tok::json;
using tok::parse_json;

// The immutable part: shared between copies of a Tokenizer.
struct Pipeline {
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::Model> model;
  std::unique_ptr<tok::PostProcessor> post_processor;
  std::unique_ptr<tok::Decoder> decoder;
  tok::AddedVocabulary added;
};

class TokenizerImpl {
 public:
  std::shared_ptr<const Pipeline> p;
  std::optional<TruncationOptions> truncation;
  std::optional<PaddingOptions> padding;

  Encoding encode_single(std::string_view text, int64_t type_id) const {
    tok::PreTokenizedString pts = p->added.extract_and_normalize(p->normalizer.get(), text);
    if (p->pre_tokenizer) p->pre_tokenizer->pre_tokenize(pts);
    Encoding e;
    e.ids.reserve(pts.splits.size());
    e.tokens.reserve(pts.splits.size());
    e.offsets.reserve(pts.splits.size());
    e.word_ids.reserve(pts.splits.size());
    std::vector<tok::Token> tokens;  // one split's, reused
    for (size_t word = 0; word < pts.splits.size(); ++word) {  // a word is a pre-tokenizer split (HF's word index)
      tok::Split& s = pts.splits[word];
      tokens.clear();
      if (s.tokens)
        tokens = std::move(*s.tokens);
      else
        p->model->tokenize(s.normalized.get(), tokens);
      for (tok::Token& t : tokens) {
        const auto o = s.normalized.to_original(t.offsets).value_or(t.offsets);
        e.ids.push_back(t.id);
        e.tokens.push_back(std::move(t.value));
        e.offsets.emplace_back(static_cast<int64_t>(o.first), static_cast<int64_t>(o.second));
        e.word_ids.push_back(static_cast<int64_t>(word));
      }
    }
    e.type_ids.assign(e.ids.size(), type_id);
    e.special_tokens_mask.assign(e.ids.size(), 0);
    e.attention_mask.assign(e.ids.size(), 1);
    e.sequence_ids.assign(e.ids.size(), 0);
    return e;
  }

  // texts: the input(s) the encodings came from.
  Encoding post_process(Encoding first, std::optional<Encoding> pair, bool add_special_tokens,
                        const std::vector<std::string_view>& texts) const {
    if (truncation) {
      const int64_t n_added =
          p->post_processor && add_special_tokens ? p->post_processor->added_tokens(pair.has_value()) : 0;
      // HF computes max_length - n_added in usize: when the special tokens alone exceed max_length it wraps
      // around to a huge limit, i.e. nothing is truncated. Same here.
      if (n_added <= truncation->max_length) {
        TruncationOptions t = *truncation;
        t.max_length -= n_added;
        const bool only_one = t.strategy == TruncationStrategy::only_first || t.strategy == TruncationStrategy::only_second;
        if (t.return_overflowing && !pair && t.strategy != TruncationStrategy::only_second)
          split_with_overflow(first, t.max_length, t.stride, t.direction);
        else if (t.return_overflowing && pair && only_one && t.max_length > 0)
          split_pair_with_overflow(first, *pair, t);
        else
          truncate(first, pair, t);
      }
    }
    // The windows past the first are finished as sequences of their own (special tokens, padding), as HF's
    // post-processors finish each overflowing encoding; a pair's windows of one member each go with the whole other
    // member (HF's Encoding::merge_with of the processed encodings).
    std::vector<Encoding> first_windows = std::move(first.overflowing), pair_windows;
    first.overflowing.clear();
    if (pair) {
      pair_windows = std::move(pair->overflowing);
      pair->overflowing.clear();
    }
    const Encoding first_whole = pair_windows.empty() ? Encoding() : first;
    const std::optional<Encoding> pair_whole = first_windows.empty() ? std::nullopt : pair;
    Encoding out = finish(std::move(first), std::move(pair), add_special_tokens, texts);
    for (Encoding& window : first_windows)
      out.overflowing.push_back(finish(std::move(window), pair_whole, add_special_tokens, texts));
    for (Encoding& window : pair_windows)
      out.overflowing.push_back(finish(first_whole, std::move(window), add_special_tokens, texts));
    return out;
  }

  // only_first / only_second truncation of a pair with overflow (HF's truncate_encodings with a stride): the member
  // to truncate is cut into windows of (its length - the excess) tokens, overlapping by t.stride.
  static void split_pair_with_overflow(Encoding& a, Encoding& b, const TruncationOptions& t) {
    const int64_t total = static_cast<int64_t>(a.size() + b.size());
    if (total <= t.max_length) return;
    const int64_t to_remove = total - t.max_length;
    Encoding& target = t.strategy == TruncationStrategy::only_second ? b : a;
    const int64_t n = static_cast<int64_t>(target.size());
    if (n <= to_remove)
      throw Error(detail::concat("truncation: the sequence to truncate has ", n, " tokens, too short to remove ",
                                 to_remove, " and respect max_length ", t.max_length));
    split_with_overflow(target, n - to_remove, t.stride, t.direction);
  }

  Encoding finish(Encoding first, std::optional<Encoding> pair, bool add_special_tokens,
                  const std::vector<std::string_view>& texts) const {
    std::vector<Encoding> encs;
    encs.push_back(std::move(first));
    if (pair) encs.push_back(std::move(*pair));
    for (size_t i = 0; i < encs.size(); ++i) encs[i].sequence_ids.assign(encs[i].size(), static_cast<int64_t>(i));
    if (p->post_processor) p->post_processor->process_encodings(encs, add_special_tokens, texts);
    Encoding out = tok::concatenate(std::move(encs));
    if (padding) {
      std::vector<Encoding> one{std::move(out)};
      pad(one, *padding);
      out = std::move(one[0]);
    }
    return out;
  }

  // HF's Encoding::truncate with its overflow: windows of max_len tokens, each starting max_len - stride tokens
  // after the one before (right truncation; left: counted back from the end), until one reaches the end. The first
  // window stays in e, the others go to e.overflowing in order. stride < max_len (HF asserts it).
  static void split_with_overflow(Encoding& e, int64_t max_len, int64_t stride, Side direction) {
    const int64_t n = static_cast<int64_t>(e.size());
    if (max_len >= n) return;
    if (max_len == 0) {  // HF: everything overflows
      Encoding all = std::move(e);
      e = Encoding();
      e.overflowing.push_back(std::move(all));
      return;
    }
    if (stride >= max_len)
      throw UsageError(detail::concat("truncation stride ", stride, " must be less than the tokens a window holds, ",
                                      max_len, " (max_length less the special tokens)"));
    const int64_t step = max_len - stride;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    if (direction == Side::right) {
      for (int64_t start = 0; start < n; start += step) {
        const int64_t stop = std::min(start + max_len, n);
        ranges.emplace_back(start, stop);
        if (stop == n) break;
      }
    } else {
      for (int64_t last = n - 1; last >= 0; last -= step) {
        const int64_t stop = last + 1, start = std::max<int64_t>(0, stop - max_len);
        ranges.emplace_back(start, stop);
        if (start == 0) break;
      }
    }
    auto window = [&](int64_t start, int64_t stop) {
      Encoding w;
      tok::for_each_token_field(w, std::as_const(e),
                                [&](auto& to, const auto& from) { to.assign(from.begin() + start, from.begin() + stop); });
      return w;
    };
    Encoding kept = window(ranges[0].first, ranges[0].second);
    for (size_t i = 1; i < ranges.size(); ++i) kept.overflowing.push_back(window(ranges[i].first, ranges[i].second));
    e = std::move(kept);
  }

  // Keeps max_len tokens: the first ones (right truncation) or the last ones (left).
  static void truncate_one(Encoding& e, int64_t max_len, Side direction) {
    const size_t n = e.size(), keep = static_cast<size_t>(std::max<int64_t>(0, max_len));
    if (keep >= n) return;
    tok::for_each_token_field(e, e, [&](auto& v, auto&) {
      if (direction == Side::right)
        v.resize(keep);
      else
        v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n - keep));
    });
  }

  // HF's truncate_encodings (stride/overflow not kept).
  static void truncate(Encoding& a, std::optional<Encoding>& b, const TruncationOptions& t) {
    if (t.max_length == 0) {
      truncate_one(a, 0, t.direction);
      if (b) truncate_one(*b, 0, t.direction);
      return;
    }
    const int64_t total = static_cast<int64_t>(a.size() + (b ? b->size() : 0));
    if (total <= t.max_length) return;
    const int64_t to_remove = total - t.max_length;
    switch (t.strategy) {
      case TruncationStrategy::longest_first: {
        if (!b) {
          truncate_one(a, total - to_remove, t.direction);
          return;
        }
        int64_t n1 = static_cast<int64_t>(a.size()), n2 = static_cast<int64_t>(b->size());
        const bool swap = n1 > n2;
        if (swap) std::swap(n1, n2);
        n2 = n1 > t.max_length ? n1 : std::max(n1, t.max_length - n1);
        if (n1 + n2 > t.max_length) {
          n1 = t.max_length / 2;
          n2 = n1 + t.max_length % 2;
        }
        if (swap) std::swap(n1, n2);
        truncate_one(a, n1, t.direction);
        truncate_one(*b, n2, t.direction);
        return;
      }
      case TruncationStrategy::only_first:
      case TruncationStrategy::only_second: {
        Encoding* target = &a;
        if (t.strategy == TruncationStrategy::only_second) {
          if (!b) throw Error("truncation: strategy only_second but no second sequence was given");
          target = &*b;
        }
        const int64_t n = static_cast<int64_t>(target->size());
        if (n <= to_remove)
          throw Error(detail::concat("truncation: the sequence to truncate has ", n, " tokens, too short to remove ",
                                     to_remove, " and respect max_length ", t.max_length));
        truncate_one(*target, n - to_remove, t.direction);
        return;
      }
    }
  }

  static void pad(std::vector<Encoding>& encs, const PaddingOptions& o) {
    if (encs.empty()) return;
    int64_t target = o.length;
    if (o.to_longest) {
      target = 0;
      for (const Encoding& e : encs) target = std::max<int64_t>(target, static_cast<int64_t>(e.size()));
    }
    if (o.pad_to_multiple_of > 0 && target % o.pad_to_multiple_of != 0)
      target += o.pad_to_multiple_of - target % o.pad_to_multiple_of;
    for (Encoding& e : encs) {
      const int64_t n = static_cast<int64_t>(e.size());
      if (n >= target) continue;
      const auto k = static_cast<size_t>(target - n);
      auto grow = [&](auto& v, auto value) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        if (o.direction == Side::right)
          v.insert(v.end(), k, T(value));
        else
          v.insert(v.begin(), k, T(value));
      };
      grow(e.ids, o.pad_id);
      grow(e.type_ids, o.pad_type_id);
      grow(e.tokens, o.pad_token);
      grow(e.offsets, std::pair<int64_t, int64_t>{0, 0});
      grow(e.special_tokens_mask, int64_t{1});
      grow(e.attention_mask, int64_t{0});
      grow(e.sequence_ids, int64_t{-1});
      grow(e.word_ids, int64_t{-1});
    }
  }
};

// --- loading --------------------------------------------------------------------------------------------

namespace {

std::string read_file(const std::string& path) { return read_text_file(path, "tokenizer file"); }


Side read_side(const json& j, const std::string& path) {
  const std::string s = tok::as_string(j, path);
  if (s == "Right" || s == "right") return Side::right;
  if (s == "Left" || s == "left") return Side::left;
  throw Error(path + ": expected \"Right\" or \"Left\", got \"" + s + "\"");
}

TruncationOptions read_truncation(const json& j, const std::string& path) {
  TruncationOptions t;
  t.max_length = tok::as_int(tok::field(j, path, "max_length"), path + ".max_length");
  if (tok::has(j, "direction")) t.direction = read_side(j["direction"], path + ".direction");
  t.stride = tok::get_int(j, path, "stride", 0);
  if (tok::has(j, "strategy")) {
    const std::string s = tok::as_string(j["strategy"], path + ".strategy");
    if (s == "LongestFirst" || s == "longest_first")
      t.strategy = TruncationStrategy::longest_first;
    else if (s == "OnlyFirst" || s == "only_first")
      t.strategy = TruncationStrategy::only_first;
    else if (s == "OnlySecond" || s == "only_second")
      t.strategy = TruncationStrategy::only_second;
    else
      throw Error(path + ".strategy: unknown value \"" + s + "\" (supported: LongestFirst, OnlyFirst, OnlySecond)");
  }
  return t;
}

PaddingOptions read_padding(const json& j, const std::string& path) {
  PaddingOptions o;
  if (tok::has(j, "strategy")) {
    const json& s = j["strategy"];
    if (s.is_string() && s.get<std::string>() == "BatchLongest") {
      o.to_longest = true;
    } else if (s.is_object() && s.contains("Fixed")) {
      o.to_longest = false;
      o.length = tok::as_int(s["Fixed"], path + ".strategy.Fixed");
    } else {
      throw Error(path + ".strategy: expected \"BatchLongest\" or {\"Fixed\": n}, got " + s.dump().substr(0, 80));
    }
  }
  if (tok::has(j, "direction")) o.direction = read_side(j["direction"], path + ".direction");
  o.pad_to_multiple_of = tok::get_int(j, path, "pad_to_multiple_of", 0);
  if (o.length < 0 || o.length > kMaxTokens)
    throw ModelFormatError(detail::concat(path, ".strategy.Fixed: expected 0..", kMaxTokens, " tokens, got ", o.length));
  if (o.pad_to_multiple_of < 0 || o.pad_to_multiple_of > kMaxTokens)
    throw ModelFormatError(detail::concat(path, ".pad_to_multiple_of: expected 0..", kMaxTokens, ", got ",
                                          o.pad_to_multiple_of));
  o.pad_id = tok::get_int(j, path, "pad_id", 0);
  o.pad_type_id = tok::get_int(j, path, "pad_type_id", 0);
  o.pad_token = tok::get_string(j, path, "pad_token", "[PAD]");
  return o;
}

std::vector<tok::AddedToken> read_added_tokens(const json& j, const std::string& path) {
  if (!j.is_array()) throw Error(path + ": expected an array, got " + tok::json_kind(j));
  std::vector<tok::AddedToken> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    const json& t = j[i];
    tok::AddedToken a;
    a.id = tok::as_int(tok::field(t, p, "id"), p + ".id");
    a.content = tok::as_string(tok::field(t, p, "content"), p + ".content");
    a.single_word = tok::get_bool(t, p, "single_word", false);
    a.lstrip = tok::get_bool(t, p, "lstrip", false);
    a.rstrip = tok::get_bool(t, p, "rstrip", false);
    a.special = tok::get_bool(t, p, "special", false);
    a.normalized = tok::get_bool(t, p, "normalized", !a.special);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
// Copies share the immutable pipeline but own their truncation/padding settings.
Tokenizer::Tokenizer(const Tokenizer& o) : impl_(std::make_shared<TokenizerImpl>(*o.impl_)) {}
Tokenizer& Tokenizer::operator=(const Tokenizer& o) {
  if (this != &o) impl_ = std::make_shared<TokenizerImpl>(*o.impl_);
  return *this;
}
Tokenizer::~Tokenizer() = default;

static std::shared_ptr<TokenizerImpl> from_json_value(const json& j, const std::string& source,
                                                     const tok::VocabEntries* flat_vocab = nullptr) {
  if (!j.is_object()) throw Error(source + ": expected a JSON object at the top level, got " + tok::json_kind(j));
  auto pipeline = std::make_shared<Pipeline>();
  const std::string root = source + ":";
  auto sub = [&](const char* key) { return root + " " + key; };
  try {
    if (!j.contains("model")) throw Error(sub("model") + ": missing (every tokenizer.json has a model)");
    pipeline->model = tok::make_model(j["model"], sub("model"), flat_vocab);
    if (tok::has(j, "normalizer")) pipeline->normalizer = tok::make_normalizer(j["normalizer"], sub("normalizer"));
    if (tok::has(j, "pre_tokenizer"))
      pipeline->pre_tokenizer = tok::make_pre_tokenizer(j["pre_tokenizer"], sub("pre_tokenizer"));
    if (tok::has(j, "post_processor"))
      pipeline->post_processor = tok::make_post_processor(j["post_processor"], sub("post_processor"));
    if (tok::has(j, "decoder")) pipeline->decoder = tok::make_decoder(j["decoder"], sub("decoder"));
    std::vector<tok::AddedToken> added;
    if (tok::has(j, "added_tokens")) added = read_added_tokens(j["added_tokens"], sub("added_tokens"));
    pipeline->added = tok::AddedVocabulary(std::move(added), pipeline->normalizer.get());
    auto impl = std::make_shared<TokenizerImpl>();
    if (tok::has(j, "truncation")) impl->truncation = read_truncation(j["truncation"], sub("truncation"));
    if (tok::has(j, "padding")) impl->padding = read_padding(j["padding"], sub("padding"));
    impl->p = std::move(pipeline);
    return impl;
  } catch (const json::exception& e) {  // a type error nlohmann caught before our checks did
    throw ModelFormatError(source + ": malformed tokenizer.json: " + e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json) {
  const tok::TokenizerJson t = tok::read_tokenizer_json(tokenizer_json, "tokenizer JSON");
  return Tokenizer(from_json_value(t.doc, "tokenizer JSON", t.flat_vocab ? &t.vocab : nullptr));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  const tok::TokenizerJson t = tok::read_tokenizer_json(read_file(path), path);
  return Tokenizer(from_json_value(t.doc, path, t.flat_vocab ? &t.vocab : nullptr));
}

// vocab.txt (+ tokenizer_config.json) as transformers' BertTokenizerFast builds it.
static std::shared_ptr<TokenizerImpl> from_bert_vocab(const std::filesystem::path& dir) {
  const std::string vocab_path = (dir / "vocab.txt").string();
  std::vector<std::string> vocab;
  {
    std::istringstream in(read_file(vocab_path));
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
      vocab.push_back(line);
    }
  }
  if (vocab.empty()) throw Error(vocab_path + ": empty vocabulary");
  json cfg = json::object();
  const auto cfg_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) cfg = parse_json(read_file(cfg_path.string()), cfg_path.string());
  auto token_of = [&](const char* key, const char* dflt) -> std::string {
    if (!tok::has(cfg, key)) return dflt;
    const json& v = cfg[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return dflt;
  };
  const std::string cp = cfg_path.string();
  const bool lower = tok::get_bool(cfg, cp, "do_lower_case", true);
  json norm = {{"type", "BertNormalizer"},
               {"clean_text", true},
               {"handle_chinese_chars", tok::get_bool(cfg, cp, "tokenize_chinese_chars", true)},
               {"strip_accents", tok::has(cfg, "strip_accents") ? cfg["strip_accents"] : json(nullptr)},
               {"lowercase", lower}};
  const std::string unk = token_of("unk_token", "[UNK]"), sep = token_of("sep_token", "[SEP]"),
                    cls = token_of("cls_token", "[CLS]"), pad = token_of("pad_token", "[PAD]"),
                    mask = token_of("mask_token", "[MASK]");
  auto pipeline = std::make_shared<Pipeline>();
  pipeline->normalizer = tok::make_normalizer(norm, cp + " (BertNormalizer)");
  pipeline->pre_tokenizer = tok::make_pre_tokenizer(json{{"type", "BertPreTokenizer"}}, "pre_tokenizer");
  pipeline->model = tok::make_wordpiece(vocab, unk, "##", 100);
  const auto cls_id = pipeline->model->token_to_id(cls), sep_id = pipeline->model->token_to_id(sep);
  if (!cls_id || !sep_id) throw Error(vocab_path + ": the vocabulary lacks " + cls + " or " + sep);
  json tmpl = {{"type", "TemplateProcessing"},
               {"single", cls + " $A:0 " + sep + ":0"},
               {"pair", cls + " $A:0 " + sep + ":0 $B:1 " + sep + ":1"},
               {"special_tokens",
                {{cls, {{"id", cls}, {"ids", {*cls_id}}, {"tokens", {cls}}}},
                 {sep, {{"id", sep}, {"ids", {*sep_id}}, {"tokens", {sep}}}}}}};
  pipeline->post_processor = tok::make_post_processor(tmpl, "post_processor");
  pipeline->decoder = tok::make_decoder(json{{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}, "decoder");
  std::vector<tok::AddedToken> added;
  for (const std::string& s : {pad, unk, cls, sep, mask})
    if (auto id = pipeline->model->token_to_id(s)) {
      tok::AddedToken a;
      a.id = *id;
      a.content = s;
      a.special = true;
      a.normalized = false;
      added.push_back(a);
    }
  std::sort(added.begin(), added.end(), [](const tok::AddedToken& a, const tok::AddedToken& b) { return a.id < b.id; });
  pipeline->added = tok::AddedVocabulary(std::move(added), pipeline->normalizer.get());
  auto impl = std::make_shared<TokenizerImpl>();
  impl->p = std::move(pipeline);
  return impl;
}

Tokenizer Tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path p(model_dir);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return from_file(model_dir);  // special files and loops refused by name there
  if (fs::exists(fs::symlink_status(p / "tokenizer.json"))) return from_file((p / "tokenizer.json").string());
  if (fs::exists(fs::symlink_status(p / "vocab.txt"))) return Tokenizer(from_bert_vocab(p));
  throw Error("tokenizer: " + model_dir + " has neither tokenizer.json nor vocab.txt");
}

// --- encoding -------------------------------------------------------------------------------------------

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->post_process(impl_->encode_single(text, 0), std::nullopt, add_special_tokens, {text});
}

Encoding Tokenizer::encode_pair(std::string_view first, std::string_view second, bool add_special_tokens) const {
  return impl_->post_process(impl_->encode_single(first, 0), impl_->encode_single(second, 1), add_special_tokens,
                             {first, second});
}

namespace {

// out[i] = encode_one(i) for i in [0, n), on the engine's threads (runtime::parallel_for_each: serial with one
// thread or inside another parallel region; the error of the lowest failing index is rethrown).
template <typename EncodeOne>
std::vector<Encoding> encode_each(size_t n, EncodeOne&& encode_one) {
  std::vector<Encoding> out(n);
  runtime::parallel_for_each(0, static_cast<int64_t>(n), 4,
                             [&](int64_t i) { out[static_cast<size_t>(i)] = encode_one(static_cast<size_t>(i)); });
  return out;
}

}  // namespace

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens) const {
  std::vector<Encoding> out = encode_each(texts.size(), [&](size_t i) { return encode(texts[i], add_special_tokens); });
  if (impl_->padding) TokenizerImpl::pad(out, *impl_->padding);
  return out;
}

std::vector<Encoding> Tokenizer::encode_pair_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                   bool add_special_tokens) const {
  std::vector<Encoding> out = encode_each(
      pairs.size(), [&](size_t i) { return encode_pair(pairs[i].first, pairs[i].second, add_special_tokens); });
  if (impl_->padding) TokenizerImpl::pad(out, *impl_->padding);
  return out;
}

std::string Tokenizer::decode_tokens(std::vector<std::string> tokens) const {
  const Pipeline& p = *impl_->p;
  if (p.decoder) tokens = p.decoder->decode_chain(std::move(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i && !p.decoder) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::optional<std::string> Tokenizer::continuing_subword_prefix() const {
  return impl_->p->model->continuing_subword_prefix();
}
std::optional<int64_t> Tokenizer::unk_token_id() const { return impl_->p->model->unk_token_id(); }

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const Pipeline& p = *impl_->p;
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    std::optional<std::string> t;
    if (const tok::AddedToken* a = p.added.by_id(id)) t = a->content;
    if (!t) t = p.model->id_to_token(id);
    if (!t) continue;
    if (skip_special_tokens) {
      auto aid = p.added.token_to_id(*t);
      if (aid && p.added.is_special_id(*aid)) continue;
    }
    tokens.push_back(std::move(*t));
  }
  return decode_tokens(std::move(tokens));
}

void Tokenizer::set_truncation(std::optional<TruncationOptions> options) {
  if (options && (options->max_length < 0 || options->max_length > kMaxTokens))
    throw UsageError(detail::concat("truncation max_length: expected 0..", kMaxTokens, ", got ", options->max_length));
  if (options && (options->stride < 0 || options->stride > kMaxTokens))
    throw UsageError(detail::concat("truncation stride: expected 0..", kMaxTokens, ", got ", options->stride));
  impl_->truncation = std::move(options);
}
void Tokenizer::set_padding(std::optional<PaddingOptions> options) {
  // Padding allocates length ids per text: the limit is checked before any encoding is padded.
  if (options && (options->length < 0 || options->length > kMaxTokens))
    throw UsageError(detail::concat("padding length: expected 0..", kMaxTokens, " tokens, got ", options->length));
  if (options && (options->pad_to_multiple_of < 0 || options->pad_to_multiple_of > kMaxTokens))
    throw UsageError(detail::concat("pad_to_multiple_of: expected 0..", kMaxTokens, ", got ",
                                    options->pad_to_multiple_of));
  impl_->padding = std::move(options);
}
const std::optional<TruncationOptions>& Tokenizer::truncation() const { return impl_->truncation; }
const std::optional<PaddingOptions>& Tokenizer::padding() const { return impl_->padding; }

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->p->added.token_to_id(token)) return id;
  return impl_->p->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (const tok::AddedToken* a = impl_->p->added.by_id(id)) return a->content;
  return impl_->p->model->id_to_token(id);
}

int64_t Tokenizer::vocab_size() const {
  int64_t n = impl_->p->model->vocab_size();
  for (const tok::AddedToken& a : impl_->p->added.tokens())
    if (!impl_->p->model->token_to_id(a.content)) ++n;
  return n;
}

int64_t Tokenizer::num_special_tokens_to_add(bool pair) const {
  return impl_->p->post_processor ? impl_->p->post_processor->added_tokens(pair) : 0;
}

std::string Tokenizer::model_type() const { return impl_->p->model->type(); }

std::vector<std::pair<int64_t, int64_t>> Tokenizer::char_offsets(std::string_view text,
                                                                 const std::vector<std::pair<int64_t, int64_t>>& byte_offsets) {
  // As the Python library's BytesToCharOffsetConverter: each byte maps to the index of the char containing it
  // (an invalid UTF-8 run counts as one char, the U+FFFD it is read as); an end at the text's end maps to
  // (char of the last byte) + 1; a begin past the end leaves the offsets as they are. ASCII text is its own
  // char index.
  const bool ascii = std::all_of(text.begin(), text.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; });
  std::vector<int64_t> char_of(ascii ? 0 : text.size());
  int64_t c = ascii ? static_cast<int64_t>(text.size()) : 0;
  bool valid = true;
  for (size_t i = 0; !ascii && i < text.size();) {
    const size_t n = tok::utf8_scan(text, i, &valid);
    for (size_t k = 0; k < n; ++k) char_of[i + k] = c;
    i += n;
    ++c;
  }
  const auto char_at = [&](int64_t byte) { return ascii ? byte : char_of[static_cast<size_t>(byte)]; };
  const auto n = static_cast<int64_t>(text.size());
  std::vector<std::pair<int64_t, int64_t>> out;
  out.reserve(byte_offsets.size());
  for (const auto& [b, e] : byte_offsets) {
    if (b < 0 || b > n) {
      out.emplace_back(b, e);
      continue;
    }
    const int64_t cb = b == n ? c : char_at(b);  // b == n: an empty token at the end
    int64_t ce;
    if (e >= 0 && e < n)
      ce = char_at(e);
    else
      ce = e == n ? c : (e - 1 >= 0 && e - 1 < n) ? char_at(e - 1) + 1 : cb + 1;
    out.emplace_back(cb, ce);
  }
  return out;
}

}  // namespace encore
