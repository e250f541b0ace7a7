// encore::Tokenizer against expected values computed by the Python `tokenizers` library.
//
// Oracle: tests/data/tokenizer_cases.json, written by tests/tools/gen_tokenizer_cases.py (regenerable; nothing
// in it comes from encore). It holds 15 small tokenizer.json files (WordPiece with four BertNormalizer
// settings, char-level Unigram probes of NFC/NFD/NFKC/NFKD/StripAccents/Lowercase/Strip/Replace/Prepend and of
// Whitespace/Punctuation/Digits/Metaspace, byte-level BPE with RobertaProcessing, a SentencePiece-style
// Unigram), ~345 encode cases with every Encoding field and the decoded text, regex matches (Oniguruma, via
// the library's Split), and GPT-2 pre-tokenizer pieces. Tolerance: exact equality.
// Also here: invalid UTF-8 policy, char offsets, truncation/padding settings on copies, concurrent encode,
// near-linear time on 1 MB inputs, and error messages for broken tokenizer.json files.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "encore/error.hpp"
#include "encore/runtime.hpp"
#include "encore/tokenizer.hpp"
#include "tokenizer/components.hpp"
#include "tokenizer/json_reader.hpp"
#include "tokenizer/normalized_string.hpp"
#include "tokenizer/regex.hpp"
#include "tokenizer/trie.hpp"
#include "tokenizer/unicode.hpp"

namespace {

using nlohmann::json;
using Offsets = std::vector<std::pair<int64_t, int64_t>>;

const json& cases() {
  static const json j = [] {
    const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "tokenizer_cases.json";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "missing " << path << " (python3 tests/tools/gen_tokenizer_cases.py)";
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
  }();
  return j;
}

const encore::Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, encore::Tokenizer> cache;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, encore::Tokenizer::from_json(cases()["tokenizers"][name].dump())).first;
  return it->second;
}

Offsets json_offsets(const json& j) {
  Offsets out;
  for (const auto& o : j) out.emplace_back(o[0].get<int64_t>(), o[1].get<int64_t>());
  return out;
}

// Byte offsets of an Encoding -> char offsets, each sequence against its own text.
Offsets to_char_offsets(const encore::Encoding& e, const std::string& a, const std::string& b) {
  Offsets first, second;
  for (size_t i = 0; i < e.size(); ++i) (e.sequence_ids[i] == 1 ? second : first).push_back(e.offsets[i]);
  first = encore::Tokenizer::char_offsets(a, first);
  second = encore::Tokenizer::char_offsets(b, second);
  Offsets out;
  size_t ia = 0, ib = 0;
  for (size_t i = 0; i < e.size(); ++i) out.push_back(e.sequence_ids[i] == 1 ? second[ib++] : first[ia++]);
  return out;
}

TEST(Tokenizer, MatchesTokenizersLibraryOnGeneratedCases) {
  int n = 0;
  for (const json& c : cases()["cases"]) {
    const std::string name = c["tokenizer"], text = c["text"];
    const bool special = c["add_special_tokens"];
    const std::string pair = c["pair"].is_null() ? "" : c["pair"].get<std::string>();
    SCOPED_TRACE(name + " | " + json(text).dump() + (c["pair"].is_null() ? "" : " + " + json(pair).dump()) +
                 (special ? "" : " | no special tokens"));
    const encore::Tokenizer& tok = tokenizer(name);
    const encore::Encoding e = c["pair"].is_null() ? tok.encode(text, special) : tok.encode_pair(text, pair, special);
    EXPECT_EQ(e.ids, c["ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(e.tokens, c["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(e.type_ids, c["type_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(e.special_tokens_mask, c["special_tokens_mask"].get<std::vector<int64_t>>());
    EXPECT_EQ(e.attention_mask, c["attention_mask"].get<std::vector<int64_t>>());
    EXPECT_EQ(e.sequence_ids, c["sequence_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(to_char_offsets(e, text, pair), json_offsets(c["char_offsets"]));
    EXPECT_EQ(tok.decode(e.ids), c["decoded"].get<std::string>());
    ++n;
  }
  EXPECT_GT(n, 300);
}

// Matches, and the gaps between them that a Split with behavior Removed keeps: the gaps show which empty matches
// the iteration yields (an empty match splits the text).
TEST(Tokenizer, RegexMatchesOniguruma) {
  for (const json& c : cases()["regex_cases"]) {
    const std::string pattern = c["pattern"], text = c["text"];
    SCOPED_TRACE("/" + pattern + "/ on " + json(text).dump());
    const auto re = std::make_shared<const encore::tok::Regex>(pattern);
    Offsets found;
    for (const auto& [b, e] : re->find_all(text))
      if (e > b) found.emplace_back(static_cast<int64_t>(b), static_cast<int64_t>(e));  // the oracle drops empty ones
    EXPECT_EQ(encore::Tokenizer::char_offsets(text, found), json_offsets(c["char_matches"]));
    Offsets gaps;
    for (const auto& [o, is_match] : encore::tok::RegexPattern(re).find_matches(text))
      if (!is_match && o.second > o.first) gaps.emplace_back(static_cast<int64_t>(o.first), static_cast<int64_t>(o.second));
    EXPECT_EQ(encore::Tokenizer::char_offsets(text, gaps), json_offsets(c["char_gaps"]));
  }
}

TEST(Tokenizer, Gpt2SplitMatchesByteLevelPreTokenizer) {
  for (const json& c : cases()["gpt2_cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(json(text).dump());
    Offsets pieces;
    for (const auto& [b, e] : encore::tok::gpt2_split(text)) pieces.emplace_back(static_cast<int64_t>(b), static_cast<int64_t>(e));
    EXPECT_EQ(encore::Tokenizer::char_offsets(text, pieces), json_offsets(c["char_pieces"]));
  }
}

// The hand-written GPT-2 split (the ByteLevel pre-tokenizer's fast path) equals Oniguruma running kGpt2Pattern on
// the tokenizer corpus (tests/data/tokenizer_corpus.jsonl, 413 strings), on random mixes of pieces that sit on the
// pattern's edges (fixed seed), and on every code point of planes 0 and 1, each in a run and next to a space, an
// apostrophe, a newline and a digit. The split reads three char classes, \p{L}, \p{N} and \s: the fast path takes
// them from utf8proc, Oniguruma from its own tables, and the two libraries may carry different Unicode versions
// (Debian 12: utf8proc 15.0, Oniguruma 6.9.8 with 14.0). Code points the two classify differently are left out of
// the sweep, counted, and must stay few and outside the BMP (chars assigned by a newer Unicode version).
TEST(Tokenizer, Gpt2SplitEqualsOniguruma) {
  namespace tk = encore::tok;
  const tk::Regex re(tk::kGpt2Pattern);
  auto same = [&](const std::string& text) {
    const auto fast = tk::gpt2_split(text), onig = re.find_all(text);
    if (fast == onig) return true;
    size_t i = 0;
    while (i < fast.size() && i < onig.size() && fast[i] == onig[i]) ++i;
    const size_t at = i < fast.size() ? fast[i].first : i < onig.size() ? onig[i].first : text.size();
    ADD_FAILURE() << "gpt2_split differs from Oniguruma at byte " << at << " of " << json(text).dump().substr(0, 200)
                  << ": near " << json(text.substr(at > 8 ? at - 8 : 0, 24)).dump();
    return false;
  };
  size_t texts = 0;
  std::ifstream in(std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "tokenizer_corpus.jsonl");
  ASSERT_TRUE(in.good());
  for (std::string line; std::getline(in, line);)  // '\n' only: the corpus holds raw U+2028 inside strings
    if (!line.empty()) texts += same(json::parse(line).get<std::string>());
  EXPECT_GT(texts, 400u);

  const std::vector<std::string> pieces = {
      "a", "Z", "\xc3\xa9", "e\xcc\x81", " ", "  ", "\t", "\n", "\r\n", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\xa8",
      "\xc2\x85", "\xe2\x80\x8b", "'", "'s", "'S", "'re", "'ll", "'d", "'x", "1", "42", "\xd9\xa3", "\xe2\x85\xa0",
      "\xc2\xbd", "!", "?!", "...", "-", "_", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
      "\xe2\x84\xa2", "\x01", "\x7f", "\xef\xbf\xbd", "\xe0\xa4\xa8\xe0\xa5\x8d"};
  std::mt19937 rng(7);
  for (int n = 0; n < 3000; ++n) {
    std::string t;
    for (uint32_t k = rng() % 30; k > 0; --k) t += pieces[rng() % pieces.size()];
    texts += same(t);
  }
  EXPECT_GT(texts, 3400u);

  const tk::Regex letter(R"(\A\p{L}\z)"), number(R"(\A\p{N}\z)"), space(R"(\A\s\z)");
  size_t swept = 0, version_skew = 0;
  for (char32_t block = 0; block < 0x20000; block += 256) {
    std::string t;
    for (char32_t c = block; c < block + 256; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;  // surrogates are not chars
      std::string ch;
      tk::append_utf8(ch, c);
      if (tk::is_letter(c) != !letter.find_all(ch).empty() || tk::is_number(c) != !number.find_all(ch).empty() ||
          tk::is_whitespace(c) != !space.find_all(ch).empty()) {
        ++version_skew;
        EXPECT_GE(c, 0x10000u) << "utf8proc and Oniguruma classify U+" << std::hex << static_cast<uint32_t>(c)
                               << " differently";
        continue;
      }
      t += ch + ch + " " + ch + "'" + ch + "\n" + ch + "1";
      ++swept;
    }
    same(t);
  }
  std::cout << "gpt2_split == Oniguruma: " << texts << " texts, " << swept << " code points swept, " << version_skew
            << " left out (Unicode version skew)\n";
  EXPECT_GT(swept, 120000u);
  EXPECT_LT(version_skew, 1000u);
}

// Invalid UTF-8: each maximal invalid subsequence is one U+FFFD (as Python's errors="replace"), aligned to
// exactly its bytes. Expected counts: bytes.decode("utf-8", "replace") of the same inputs.
TEST(Tokenizer, InvalidUtf8IsReplacementCharsAlignedToTheirBytes) {
  struct Case {
    std::string bytes;
    size_t replacements;
  };
  const std::vector<Case> table = {
      {"\xff", 1}, {"a\xc3", 1}, {"\xe2\x82", 1}, {"\xf0\x9f\x98", 1}, {"\xed\xa0\x80", 3}, {"\xc0\xaf", 2},
      {"\xf4\x90\x80\x80", 4}, {"\x80\x80", 2}, {"ok\xe2\x82\xac", 0}, {"\xe0\x80\x80", 3}, {"\xf0\x80", 2},
  };
  for (const Case& c : table) {
    encore::tok::NormalizedString s(c.bytes);
    size_t fffd = 0;
    for (size_t p = s.get().find("\xEF\xBF\xBD"); p != std::string::npos; p = s.get().find("\xEF\xBF\xBD", p + 3)) {
      ++fffd;
      const auto o = s.to_original({p, p + 3});
      ASSERT_TRUE(o.has_value());
      EXPECT_LT(o->first, o->second);
      EXPECT_LE(o->second, c.bytes.size());
    }
    EXPECT_EQ(fffd, c.replacements) << json(c.bytes).dump(-1, ' ', false, json::error_handler_t::replace);
    EXPECT_TRUE(encore::tok::is_valid_utf8(s.get()));
  }
  // Through a whole tokenizer: offsets are bytes of the input, and cover the bad bytes.
  const encore::Tokenizer& tok = tokenizer("bert_cased");
  const std::string bad = "hello \xff\xfe world \xe2\x82";
  const encore::Encoding e = tok.encode(bad);
  for (const auto& [b, en] : e.offsets) {
    EXPECT_LE(0, b);
    EXPECT_LE(b, en);
    EXPECT_LE(en, static_cast<int64_t>(bad.size()));
  }
  EXPECT_EQ(tok.encode(bad).ids, tok.encode("hello \xEF\xBF\xBD\xEF\xBF\xBD world \xEF\xBF\xBD").ids);
}

TEST(Tokenizer, CharOffsetsFollowPythonConverter) {
  // "aé😀" is 1 + 2 + 4 bytes; a byte inside a char maps to that char; an end at the text's end maps past it.
  const std::string t = "a\xc3\xa9\xf0\x9f\x98\x80";
  const Offsets bytes = {{0, 1}, {1, 3}, {3, 7}, {0, 0}, {4, 5}, {7, 7}};
  const Offsets chars = {{0, 1}, {1, 2}, {2, 3}, {0, 0}, {2, 2}, {3, 3}};
  EXPECT_EQ(encore::Tokenizer::char_offsets(t, bytes), chars);
}

TEST(Tokenizer, TruncationAndPaddingSettingsBelongToEachCopy) {
  encore::Tokenizer a = tokenizer("bert_uncased");
  encore::Tokenizer b = a;
  encore::TruncationOptions t;
  t.max_length = 4;
  b.set_truncation(t);
  encore::PaddingOptions p;
  p.to_longest = false;
  p.length = 8;
  b.set_padding(p);
  EXPECT_FALSE(a.truncation().has_value());
  EXPECT_FALSE(a.padding().has_value());
  const encore::Encoding eb = b.encode("hello world hello world hello world");
  EXPECT_EQ(eb.size(), 8u);
  EXPECT_EQ(eb.ids[0], 2);  // [CLS]
  EXPECT_EQ(eb.ids[3], 3);  // [SEP] after two words: 4 = 2 + the 2 special tokens
  EXPECT_EQ(std::vector<int64_t>(eb.attention_mask.begin() + 4, eb.attention_mask.end()), std::vector<int64_t>(4, 0));
  EXPECT_EQ(a.encode("hello world hello world hello world").size(), 8u);  // 6 words + 2, untouched by b's settings
  EXPECT_EQ(b.num_special_tokens_to_add(false), 2);
  EXPECT_EQ(b.num_special_tokens_to_add(true), 3);
  EXPECT_EQ(b.model_type(), "WordPiece");
  EXPECT_EQ(b.token_to_id("[MASK]"), 4);
  EXPECT_EQ(b.id_to_token(5), "hello");
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  const encore::Tokenizer& tok = tokenizer("bytelevel_bpe");
  std::vector<std::string> texts;
  for (const json& c : cases()["cases"])
    if (c["tokenizer"] == "bytelevel_bpe") texts.push_back(c["text"]);
  std::vector<std::vector<int64_t>> serial;
  for (const auto& t : texts) serial.push_back(tok.encode(t).ids);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) mismatches[w] += tok.encode(texts[i]).ids != serial[i];
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// BPE and Unigram keep a per-thread word cache for one model at a time. Encoding the same words with three cached
// models in turn on one thread, twice (the second pass is served from the caches), must give each model's own
// ids, as the Python library computed them: "Hello world" is 262 268 in bytelevel_bpe and 267 269 ("ĠHello
// Ġworld": it adds a prefix space) in bytelevel_bpe_prefix, other pieces again in unigram_sp.
TEST(Tokenizer, WordCacheKeepsEachModelsOwnResults) {
  const std::vector<std::string> names = {"bytelevel_bpe", "bytelevel_bpe_prefix", "unigram_sp"};
  std::map<std::string, std::vector<const json*>> by_name;
  for (const json& c : cases()["cases"])
    if (c["pair"].is_null() && std::find(names.begin(), names.end(), c["tokenizer"]) != names.end())
      by_name[c["tokenizer"]].push_back(&c);
  size_t checked = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < by_name[names[0]].size(); ++i)
      for (const std::string& name : names) {
        if (i >= by_name[name].size()) continue;
        const json& c = *by_name[name][i];
        SCOPED_TRACE(name + " | pass " + std::to_string(pass) + " | " + json(c["text"]).dump());
        EXPECT_EQ(tokenizer(name).encode(c["text"].get<std::string>(), c["add_special_tokens"].get<bool>()).ids,
                  c["ids"].get<std::vector<int64_t>>());
        ++checked;
      }
  EXPECT_GT(checked, 100u);
}

// encode_batch runs on encore's threads: same encodings, same order as encode one by one; and the error of a
// failing text (here Oniguruma's backtracking limit, (a|a)*\z(?<=b) on 40 a's: the Python library panics with
// "retry-limit-in-match over") comes out of the batch as encore::Error.
TEST(Tokenizer, ParallelBatchMatchesSerialAndRethrows) {
  const int saved = encore::get_num_threads();
  encore::set_num_threads(2);
  const encore::Tokenizer& tok = tokenizer("bytelevel_bpe");
  std::vector<std::string> texts;
  for (const json& c : cases()["cases"]) texts.push_back(c["text"]);
  const std::vector<encore::Encoding> batch = tok.encode_batch(texts);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const encore::Encoding one = tok.encode(texts[i]);
    EXPECT_EQ(batch[i].ids, one.ids) << i;
    EXPECT_EQ(batch[i].offsets, one.offsets) << i;
    EXPECT_EQ(batch[i].tokens, one.tokens) << i;
  }
  const encore::Tokenizer slow = encore::Tokenizer::from_json(
      R"J({"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}, "pre_tokenizer": {"type": "Split",
          "pattern": {"Regex": "(a|a)*\\z(?<=b)"}, "behavior": "Isolated", "invert": false}})J");
  std::vector<std::string> mixed(16, "a b");
  mixed[11] = std::string(40, 'a');
  try {
    slow.encode_batch(mixed);
    ADD_FAILURE() << "no error from the backtracking limit";
  } catch (const encore::Error& e) {
    EXPECT_NE(std::string(e.what()).find("retry-limit-in-match"), std::string::npos) << e.what();
  }
  encore::set_num_threads(saved);
}

// A quadratic algorithm anywhere (BPE merging, Viterbi, replace, split) would take minutes on 1 MB.
TEST(Tokenizer, MegabyteInputsStayFast) {
  const std::vector<std::string> inputs = {std::string(1 << 20, 'a'), std::string(1 << 20, ' '),
                                           [] {
                                             std::string s;
                                             while (s.size() < (1u << 20)) s += "hello\xc3\xa9world";
                                             return s;
                                           }()};
  for (const char* name : {"bert_uncased", "bytelevel_bpe", "unigram_sp", "probe_strip_replace_prepend"}) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const encore::Encoding e = tokenizer(name).encode(inputs[i]);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(s, 15.0) << name << " input " << i << ": " << s << " s";
      if (std::string(name) != "probe_strip_replace_prepend") {  // the probe strips all spaces
        EXPECT_GE(e.size(), 2u);
      }
    }
  }
}

// read_tokenizer_json reads model.vocab flat (json_reader.hpp); the oracle is the DOM read (parse_json, then
// read_vocab of the object): the same ids both ways, token -> id and id -> token, and the same error when a
// member is not a valid id (the reader falls back to the DOM there). `flat` says which form the reader must take,
// so the fast path cannot silently go unused.
TEST(Tokenizer, FlatVocabularyReadsAsTheDom) {
  struct Case {
    const char* name;
    std::string json_text;
    bool flat;
  };
  auto wp = [](const std::string& vocab) {
    return R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": )" + vocab + "}}";
  };
  const std::vector<Case> table = {
      {"plain", wp(R"({"[UNK]": 0, "a": 1, "##b": 2, "c": 3})"), true},
      {"token-repeated", wp(R"({"[UNK]": 0, "a": 1, "b": 2, "a": 3})"), true},
      {"id-shared", wp(R"({"[UNK]": 0, "b": 1, "a": 1, "c": 1, "d": 2})"), true},
      {"unsigned-id", wp(R"({"[UNK]": 0, "a": 9223372036854775807})"), true},
      {"string-id", wp(R"({"[UNK]": 0, "a": 1, "b": "two", "c": 3})"), false},
      {"negative-id", wp(R"({"[UNK]": 0, "a": 1, "b": -2})"), false},
      {"id-over-int64", wp(R"({"[UNK]": 0, "a": 18446744073709551615})"), false},
      {"float-id", wp(R"({"[UNK]": 0, "a": 1.5})"), false},
      {"object-id", wp(R"({"[UNK]": 0, "a": {"b": 1}})"), false},
      {"vocab-twice", R"({"model": {"type": "WordLevel", "unk_token": "x", "vocab": {"x": 0}, "vocab": {"x": 1, "y": 0}}})", true},
      {"vocab-then-array", R"({"model": {"type": "WordLevel", "unk_token": "x", "vocab": {"x": 0}, "vocab": ["x"]}})", false},
      {"model-twice", R"({"model": {"type": "WordLevel", "vocab": {"x": 0}}, "model": {"type": "WordLevel"}})", false},
      {"nested-vocab-not-model", R"({"model": {"type": "WordLevel", "unk_token": "x", "vocab": {"x": 0}}, "decoder": {"vocab": {"y": 1}}})", true},
      {"bpe", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})", true},
  };
  for (const Case& c : table) {
    SCOPED_TRACE(c.name);
    const encore::tok::TokenizerJson t = encore::tok::read_tokenizer_json(c.json_text, "t");
    const nlohmann::json dom = encore::tok::parse_json(c.json_text, "t");
    EXPECT_EQ(t.flat_vocab, c.flat);
    std::string dom_error, flat_error;
    std::unique_ptr<encore::tok::Model> from_dom, from_flat;
    try {
      from_dom = encore::tok::make_model(dom["model"], "t model");
    } catch (const encore::Error& e) {
      dom_error = e.what();
    }
    try {
      from_flat = encore::tok::make_model(t.doc["model"], "t model", t.flat_vocab ? &t.vocab : nullptr);
    } catch (const encore::Error& e) {
      flat_error = e.what();
    }
    EXPECT_EQ(flat_error, dom_error);
    if (!from_dom || !from_flat) continue;
    EXPECT_EQ(from_flat->vocab_size(), from_dom->vocab_size());
    const nlohmann::json& members = dom["model"]["vocab"];
    for (auto it = members.begin(); it != members.end(); ++it) {
      EXPECT_EQ(from_flat->token_to_id(it.key()), from_dom->token_to_id(it.key())) << it.key();
      const int64_t id = it.value().get<int64_t>();
      EXPECT_EQ(from_flat->id_to_token(id), from_dom->id_to_token(id)) << id;
    }
  }
}

// ByteTrie against a brute-force scan of its keys (the oracle: for each key, is it text[pos, pos + size)? for
// duplicates the last index). The key sets stress what its radix sort must order as std::string's < does: bytes
// above 0x7F (unsigned), NUL bytes (a short key and the same key padded with NULs share a radix prefix), keys
// sharing 8 or more leading bytes, the empty key, and repeated keys.
TEST(Tokenizer, ByteTrieMatchesBruteForce) {
  struct Case {
    const char* name;
    std::string alphabet;
    size_t max_len;
    size_t n_keys;
  };
  const std::vector<Case> table = {
      {"ascii", "abc", 4, 40},
      {"high-bytes-and-nul", std::string("a\x00\xff\x80", 4), 11, 300},
      {"long-shared-prefixes", "ab", 14, 2000},
      {"single-byte", "z", 20, 30},
  };
  std::mt19937 rng(7);
  for (const Case& c : table) {
    SCOPED_TRACE(c.name);
    auto random_string = [&](size_t max_len) {
      std::string s(std::uniform_int_distribution<size_t>(0, max_len)(rng), ' ');
      for (char& ch : s) ch = c.alphabet[std::uniform_int_distribution<size_t>(0, c.alphabet.size() - 1)(rng)];
      return s;
    };
    std::vector<std::string> keys;
    for (size_t i = 0; i < c.n_keys; ++i) keys.push_back(random_string(c.max_len));
    for (size_t i = 0; i < c.n_keys / 10; ++i) keys.push_back(keys[rng() % keys.size()]);  // repeats
    const encore::tok::ByteTrie trie(keys);
    std::map<std::string, int32_t, std::less<>> last_index;  // key -> its last index in keys
    for (size_t i = 0; i < keys.size(); ++i) last_index[keys[i]] = static_cast<int32_t>(i);
    auto value_of = [&](std::string_view k) {
      auto it = last_index.find(k);
      return it == last_index.end() ? -1 : it->second;
    };
    for (int t = 0; t < 30; ++t) {
      const std::string text = random_string(2 * c.max_len);
      for (size_t pos = 0; pos <= text.size(); ++pos) {
        std::vector<std::pair<size_t, uint32_t>> want, got;
        for (size_t end = pos + 1; end <= text.size(); ++end)
          if (const int32_t v = value_of(std::string_view(text).substr(pos, end - pos)); v >= 0)
            want.emplace_back(end, static_cast<uint32_t>(v));
        trie.prefixes(text, pos, [&](size_t end, uint32_t v) { got.emplace_back(end, v); });
        ASSERT_EQ(got, want) << "pos " << pos;
        const auto [end, v] = trie.longest(text, pos);
        if (want.empty()) {
          EXPECT_EQ(v, -1);
        } else {
          EXPECT_EQ(end, want.back().first);
          EXPECT_EQ(v, static_cast<int32_t>(want.back().second));
        }
        // walk + longest from the node after text[0, pos): the longest key with that prefix
        const uint32_t node = trie.walk(std::string_view(text).substr(0, pos));
        if (node == encore::tok::ByteTrie::kNone) continue;
        int32_t want_v = -1;
        size_t want_end = pos;
        for (size_t e = pos + 1; e <= text.size(); ++e)
          if (const int32_t w = value_of(std::string_view(text).substr(0, e)); w >= 0) want_v = w, want_end = e;
        const auto [end2, v2] = trie.longest(text, pos, node);
        EXPECT_EQ(v2, want_v);
        EXPECT_EQ(end2, want_end);
      }
    }
  }
}

TEST(Tokenizer, BrokenTokenizerJsonNamesTheProblem) {
  struct Case {
    std::string json_text, expected;
  };
  const std::vector<Case> table = {
      {"[1, 2", "not valid JSON"},
      {"{}", "model"},
      {R"({"model": {"type": "WordPiece", "vocab": {"a": "zero"}}})", "model.vocab[\"a\"]: expected an integer"},
      {R"({"model": {"type": "Nope"}})", "unsupported model type \"Nope\" (supported: WordPiece, BPE, Unigram, WordLevel)"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", "merged token \"ab\""},
      {R"({"model": {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 3}})", "model.unk_id"},
      // a Unigram entry that is not [piece, score], after good ones: named by its index
      {R"({"model": {"type": "Unigram", "vocab": [["a", -1.0], ["b"]]}})", "model.vocab[1]: expected [piece, score]"},
      {R"({"model": {"type": "Unigram", "vocab": [["a", -1.0], [5, -2.0]]}})", "model.vocab[1][0]: expected a string"},
      {R"({"model": {"type": "Unigram", "vocab": [["a", -1.0], ["b", -2.0], ["c", "low"]]}})",
       "model.vocab[2][1]: expected a number"},
      {R"({"model": {"type": "WordLevel", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[a-"}, "behavior": "Isolated"}})",
       "pre_tokenizer.pattern.Regex"},
      {R"({"model": {"type": "WordLevel", "vocab": {"a": 0}}, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Fancy"}]}})",
       "normalizer.normalizers[1]: unsupported normalizer type \"Fancy\""},
      {R"({"model": {"type": "WordLevel", "vocab": {"a": 0}}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[X]", "type_id": 0}}], "special_tokens": {}}})",
       "[X]"},
      {R"({"model": {"type": "WordLevel", "vocab": {"a": 0}}, "truncation": {"max_length": 5, "strategy": "Middle"}})",
       "truncation.strategy"},
  };
  for (const Case& c : table) {
    try {
      encore::Tokenizer::from_json(c.json_text);
      ADD_FAILURE() << "no error for " << c.json_text;
    } catch (const encore::Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what() << "\n  lacks: " << c.expected;
    }
  }
  EXPECT_THROW(encore::Tokenizer::from_file("/nonexistent/tokenizer.json"), encore::Error);
  EXPECT_THROW(encore::Tokenizer::load("/nonexistent/dir"), encore::Error);
}

}  // namespace
