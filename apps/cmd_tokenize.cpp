// encore tokenize: encode texts with a Hugging Face tokenizer (tokenizer.json or a BERT vocab.txt directory)
// and print one JSON object per text:
//   {"ids": [...], "type_ids": [...], "tokens": [...], "offsets": [[b, e], ...], "attention_mask": [...],
//    "special_tokens_mask": [...]}
// Offsets are byte offsets into the text (into each member of a pair), or code-point offsets with
// --char-offsets (what the Python `tokenizers` library reports).
//
//   encore tokenize "Hello world!" --tokenizer path/to/model_dir
//   echo "Hello world!" | encore tokenize                     # standard input, one text per line
//   encore tokenize -i texts.jsonl --tokenizer tokenizer.json --char-offsets
// Input as `encore embed` takes it: texts as arguments, or -i FILE ('-' or a pipe: standard input) as text lines,
// JSONL or CSV (--input-format, --field; the pair in "pair"). JSONL lines may also be a JSON string or a
// [first, second] pair. --jsonl-in FILE is the old spelling of -i FILE --input-format jsonl. An input that cannot
// be encoded (truncation impossible) prints {"error": "..."} on its line; the others are still encoded.
// Padding: none unless asked (--padding, --pad-to-multiple-of, --padding-side, or --tokenizer-padding for the
// padding tokenizer.json configures, which Hugging Face tokenizers' encode applies); truncation: tokenizer.json's.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/common.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/error.hpp"
#include "encore/files.hpp"
#include "encore/records.hpp"
#include "encore/tokenizer.hpp"

namespace encore::cli {

namespace {

struct TokenizeOptions {
  std::vector<std::string> texts;
  std::string tokenizer;
  std::string input, input_format, field = "text";
  std::string jsonl_in;
  std::string text_file;
  bool tokenizer_padding = false;
  bool pair = false;
  bool no_special = false;
  bool char_offsets = false;
  bool batch = false;
  bool no_truncation = false;
  bool no_padding = false;
  int64_t max_length = -1;
  std::string strategy;
  std::string truncation_side;
  std::string padding;  // "longest" or a length
  int64_t pad_to_multiple_of = -1;
  std::string padding_side;
  bool decode = false;
};

struct Input {
  std::string first;
  std::optional<std::string> second;
};

std::string read_all(const std::string& path) { return read_text_file(path, "tokenize: input file"); }

std::vector<Input> read_inputs(const TokenizeOptions& o, RecordFormat format) {
  std::vector<Input> in;
  if (o.pair) {
    if (o.texts.size() % 2) throw Error("tokenize --pair: give texts two by two (first second first second ...)");
    for (size_t i = 0; i < o.texts.size(); i += 2) in.push_back({o.texts[i], o.texts[i + 1]});
  } else {
    for (const auto& t : o.texts) in.push_back({t, std::nullopt});
  }
  if (!o.text_file.empty()) in.push_back({read_all(o.text_file), std::nullopt});
  if (o.input.empty()) return in;
  RecordReader reader(o.input, format, {.allow_non_objects = true, .what = "input file", .allow_pipe = true});
  for (Record r; reader.next(r);) {
    if (r.is_object) {
      const RecordField* pair = r.find("pair");
      in.push_back({reader.field(r, o.field), pair && pair->kind == RecordField::Kind::string
                                                  ? std::optional<std::string>(pair->value)
                                                  : std::nullopt});
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(r.json);
    if (j.is_string())
      in.push_back({j.get<std::string>(), std::nullopt});
    else if (j.is_array() && j.size() == 2 && j[0].is_string() && j[1].is_string())
      in.push_back({j[0].get<std::string>(), j[1].get<std::string>()});
    else
      reader.fail(r, "expected a string, [first, second] or {\"" + o.field + "\": ...}");
  }
  return in;
}

Tokenizer load_tokenizer(const TokenizeOptions& o) {
  if (!o.tokenizer.empty()) return Tokenizer::load(o.tokenizer);
  return Tokenizer::load(default_model_dir());  // $ENCORE_MODEL, else the packaged all-MiniLM-L6-v2
}

void configure(Tokenizer& tok, const TokenizeOptions& o) {
  // tokenizer.json's padding (e.g. a fixed 128) only when asked for: unpadded ids are what a reader wants to see
  const bool padding_asked = !o.padding.empty() || o.pad_to_multiple_of >= 0 || !o.padding_side.empty();
  if (!o.tokenizer_padding && !padding_asked) tok.set_padding(std::nullopt);
  if (o.no_truncation) tok.set_truncation(std::nullopt);
  if (o.max_length >= 0 || !o.strategy.empty() || !o.truncation_side.empty()) {
    TruncationOptions t = tok.truncation().value_or(TruncationOptions{});
    if (o.max_length >= 0) t.max_length = o.max_length;
    if (o.strategy == "longest_first") t.strategy = TruncationStrategy::longest_first;
    if (o.strategy == "only_first") t.strategy = TruncationStrategy::only_first;
    if (o.strategy == "only_second") t.strategy = TruncationStrategy::only_second;
    if (!o.truncation_side.empty()) t.direction = o.truncation_side == "left" ? Side::left : Side::right;
    tok.set_truncation(t);
  }
  if (o.no_padding) tok.set_padding(std::nullopt);
  if (!o.padding.empty() || o.pad_to_multiple_of >= 0 || !o.padding_side.empty()) {
    PaddingOptions p = tok.padding().value_or(PaddingOptions{});
    if (!p.pad_token.empty() && !tok.padding()) {
      // new padding: take the pad token from the vocabulary when it has [PAD] or <pad>
      for (const char* cand : {"[PAD]", "<pad>"})
        if (auto id = tok.token_to_id(cand)) {
          p.pad_token = cand;
          p.pad_id = *id;
          break;
        }
    }
    if (o.padding == "longest") {
      p.to_longest = true;
    } else if (!o.padding.empty()) {
      p.to_longest = false;
      const bool digits = o.padding.size() <= 18 && o.padding.find_first_not_of("0123456789") == std::string::npos;
      ENCORE_CHECK_AS(UsageError, digits && std::stoll(o.padding) <= kMaxTokens,
                      "tokenize --padding: expected \"longest\" or a length 0..", kMaxTokens, ", got \"", o.padding,
                      "\"");
      p.length = std::stoll(o.padding);
    }
    if (o.pad_to_multiple_of >= 0) p.pad_to_multiple_of = o.pad_to_multiple_of;
    if (!o.padding_side.empty()) p.direction = o.padding_side == "left" ? Side::left : Side::right;
    tok.set_padding(p);
  }
}

nlohmann::json to_json(const Encoding& e, const Input& in, bool char_offsets) {
  nlohmann::json offsets = nlohmann::json::array();
  std::vector<std::pair<int64_t, int64_t>> offs = e.offsets;
  if (char_offsets) {
    // offsets index the sequence each token came from
    std::vector<std::pair<int64_t, int64_t>> a, b;
    for (size_t i = 0; i < e.size(); ++i) (e.sequence_ids[i] == 1 ? b : a).push_back(e.offsets[i]);
    a = Tokenizer::char_offsets(in.first, a);
    if (in.second) b = Tokenizer::char_offsets(*in.second, b);
    size_t ia = 0, ib = 0;
    for (size_t i = 0; i < e.size(); ++i) offs[i] = e.sequence_ids[i] == 1 ? b[ib++] : a[ia++];
  }
  for (const auto& [b, en] : offs) offsets.push_back({b, en});
  return {{"ids", e.ids},
          {"type_ids", e.type_ids},
          {"tokens", e.tokens},
          {"offsets", offsets},
          {"attention_mask", e.attention_mask},
          {"special_tokens_mask", e.special_tokens_mask},
          {"sequence_ids", e.sequence_ids}};
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "encode texts with a Hugging Face tokenizer, one JSON line per text");
  static TokenizeOptions o;
  cmd->add_option("texts", o.texts, "texts to encode (pairs with --pair)");
  cmd->add_option("--tokenizer,--model", o.tokenizer,
                  "tokenizer.json, or a model directory (tokenizer.json, else vocab.txt); default: $ENCORE_MODEL, else all-MiniLM-L6-v2");
  add_input_options(*cmd, o.input, o.input_format, o.field, nullptr);
  auto* jsonl_in = cmd->add_option("--jsonl-in", o.jsonl_in, "the same as -i FILE --input-format jsonl (lines: "
                                   "\"text\", [first, second] or {\"text\", \"pair\"})");
  jsonl_in->excludes("--input")->excludes("--input-format");
  cmd->add_option("--text-file", o.text_file, "encode this file's raw bytes as one text (any bytes, even invalid UTF-8)");
  cmd->add_flag("--pair", o.pair, "positional texts are pairs: first second first second ...");
  cmd->add_flag("--no-special-tokens", o.no_special, "do not add [CLS]/[SEP]-style special tokens");
  cmd->add_flag("--char-offsets", o.char_offsets, "offsets in code points instead of bytes");
  cmd->add_flag("--batch", o.batch, "pad all texts as one batch (padding to the longest applies across texts)");
  cmd->add_flag("--no-truncation", o.no_truncation, "ignore the tokenizer's truncation settings");
  cmd->add_flag("--no-padding", o.no_padding, "no padding (the default unless a padding option is given)");
  cmd->add_flag("--tokenizer-padding", o.tokenizer_padding, "pad as tokenizer.json configures (what Hugging Face "
                "tokenizers' encode does), e.g. to a fixed 128")
      ->excludes("--no-padding");
  cmd->add_option("--max-length", o.max_length, "truncate to this many tokens (special tokens included)")
      ->check(CLI::Range(int64_t{0}, kMaxTokens));
  cmd->add_option("--truncation-strategy", o.strategy, "longest_first, only_first or only_second")
      ->check(CLI::IsMember({"longest_first", "only_first", "only_second"}));
  cmd->add_option("--truncation-side", o.truncation_side, "right or left")->check(CLI::IsMember({"right", "left"}));
  cmd->add_option("--padding", o.padding, "\"longest\" or a fixed length");
  cmd->add_option("--pad-to-multiple-of", o.pad_to_multiple_of, "round padded lengths up to a multiple of this")
      ->check(CLI::Range(int64_t{0}, kMaxTokens));
  cmd->add_option("--padding-side", o.padding_side, "right or left")->check(CLI::IsMember({"right", "left"}));
  cmd->add_flag("--decode", o.decode, "also print \"decoded\": the text decoded back from the ids");
  cmd->callback([cmd] {
    if (!o.jsonl_in.empty()) o.input = o.jsonl_in, o.input_format = "jsonl";
    const bool implicit_stdin = o.texts.empty() && o.input.empty() && o.text_file.empty();
    if (implicit_stdin) {
      ENCORE_CHECK_AS(UsageError, !isatty(STDIN_FILENO), "nothing to tokenize: give texts as arguments, with -i FILE, "
                      "or on standard input");
      o.input = "-";
    }
    const RecordFormat format = checked_input_format(*cmd, o.input, o.input_format, o.field);
    Tokenizer tok = load_tokenizer(o);
    configure(tok, o);
    const std::vector<Input> inputs = read_inputs(o, format);
    ENCORE_CHECK_AS(UsageError, !inputs.empty() || !implicit_stdin,
                    "nothing to tokenize: give texts as arguments, with -i FILE, or on standard input (it was empty)");
    ENCORE_CHECK_AS(InputError, !inputs.empty(), "input '", o.input == "-" ? std::string("<stdin>") : o.input,
                    "' holds no texts");
    const bool add_special = !o.no_special;
    std::vector<std::optional<Encoding>> encs;  // nullopt: this input failed (message in errors)
    std::vector<std::string> errors(inputs.size());
    if (o.batch) {
      std::vector<std::string> singles;
      std::vector<std::pair<std::string, std::string>> pairs;
      for (const Input& in : inputs) {
        if (in.second)
          pairs.emplace_back(in.first, *in.second);
        else
          singles.push_back(in.first);
      }
      if (!singles.empty() && !pairs.empty()) throw Error("tokenize --batch: do not mix single texts and pairs");
      for (Encoding& e : pairs.empty() ? tok.encode_batch(singles, add_special) : tok.encode_pair_batch(pairs, add_special))
        encs.emplace_back(std::move(e));
    } else {
      // one failing input (e.g. a pair too short for only_first truncation) prints {"error": ...}, not abort
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Input& in = inputs[i];
        try {
          encs.emplace_back(in.second ? tok.encode_pair(in.first, *in.second, add_special) : tok.encode(in.first, add_special));
        } catch (const Error& e) {
          encs.emplace_back(std::nullopt);
          errors[i] = e.what();
        }
      }
    }
    std::string out;
    for (size_t i = 0; i < encs.size(); ++i) {
      if (!encs[i]) {
        out += nlohmann::json{{"error", errors[i]}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        continue;
      }
      nlohmann::json j = to_json(*encs[i], inputs[i], o.char_offsets);
      if (o.decode) j["decoded"] = tok.decode(encs[i]->ids);
      out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out += '\n';
    }
    std::cout << out;
  });
}

}  // namespace encore::cli
