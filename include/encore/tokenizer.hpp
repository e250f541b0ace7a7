// encore::Tokenizer - Hugging Face `tokenizers` pipelines (tokenizer.json) in C++: normalizer, pre-tokenizer,
// model (WordPiece, BPE, Unigram), post-processor, truncation and padding, with the same ids and offsets.
//
//   encore::Tokenizer tok = encore::Tokenizer::load("/path/to/model_dir");   // tokenizer.json, else vocab.txt
//   encore::Encoding e = tok.encode("Hello world!");
//   // e.ids = {101, 7592, 2088, 999, 102}; e.offsets[1] = {0, 5} (byte offsets into the input)
//
// Text is UTF-8. Invalid UTF-8 policy: each maximal invalid subsequence is read as U+FFFD (as Python's
// errors="replace" and Rust's from_utf8_lossy do); offsets still index the original bytes. No input makes
// the tokenizer read out of bounds, and time stays near-linear in the input length.
// Thread safety: encode* are const and may run concurrently; set_* may not run concurrently with encode*.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace encore {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<int64_t> type_ids;
  std::vector<std::string> tokens;
  std::vector<std::pair<int64_t, int64_t>> offsets;  // [begin, end) byte offsets into the sequence's own text
  std::vector<int64_t> special_tokens_mask;          // 1 for added special tokens (CLS, SEP, PAD...)
  std::vector<int64_t> attention_mask;               // 1 for real tokens, 0 for padding
  std::vector<int64_t> sequence_ids;                 // 0 or 1 for the pair member a token came from, -1 special
  // The word (pre-tokenizer split) of its sequence each token came from, counted from 0 in each pair member; -1 for
  // special tokens and padding (HF's Encoding.word_ids, None there).
  std::vector<int64_t> word_ids;
  // With TruncationOptions::return_overflowing, the windows truncation cut off (HF's Encoding.overflowing), each
  // a whole sequence with its special tokens; empty otherwise.
  std::vector<Encoding> overflowing;
  size_t size() const { return ids.size(); }
};

enum class TruncationStrategy { longest_first, only_first, only_second };
enum class Side { right, left };

// The longest encoding padding or truncation settings may ask for (padding allocates that many ids per text):
// set_padding/set_truncation and tokenizer.json refuse larger lengths (encore::UsageError / ModelFormatError).
inline constexpr int64_t kMaxTokens = int64_t{1} << 20;

struct TruncationOptions {
  int64_t max_length = 512;
  TruncationStrategy strategy = TruncationStrategy::longest_first;
  Side direction = Side::right;
  int64_t stride = 0;  // tokens each overflowing window repeats from the window before it
  // Keep what a single sequence loses to truncation as Encoding::overflowing (HF always does; off by default here,
  // so truncating a long text costs no copies of its tail). A pair keeps its overflow with only_first/only_second
  // (the truncated member in windows, each with the whole other member: question answering's doc stride);
  // longest_first truncates a pair without overflow.
  bool return_overflowing = false;
};

struct PaddingOptions {
  bool to_longest = true;           // pad a batch to its longest member; false: to `length`
  int64_t length = 0;               // fixed length when !to_longest
  int64_t pad_to_multiple_of = 0;   // 0 = off
  Side direction = Side::right;
  int64_t pad_id = 0;
  int64_t pad_type_id = 0;
  std::string pad_token = "[PAD]";
};

class TokenizerImpl;

class Tokenizer {
 public:
  // A tokenizer.json file.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  static Tokenizer from_json(std::string_view tokenizer_json);
  // A model directory: tokenizer.json if present, else vocab.txt (+ tokenizer_config.json) as a BERT WordPiece
  // tokenizer. Truncation/padding come from tokenizer.json when it sets them.
  static Tokenizer load(const std::string& model_dir);

  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  Encoding encode_pair(std::string_view first, std::string_view second, bool add_special_tokens = true) const;
  // Encodes each text (truncated as configured) on encore's threads (encore::set_num_threads; serial inside another
  // parallel region) and pads the batch as configured. Order is kept; an error is the first failing text's.
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens = true) const;
  // Pairs (e.g. for cross-encoders), truncated and padded as a batch like encode_batch.
  std::vector<Encoding> encode_pair_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                          bool add_special_tokens = true) const;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;
  // Token strings (as Encoding::tokens holds them) through the decoder, joined: tokenizers' Decoder.decode and
  // transformers' convert_tokens_to_string; " ".join(tokens) when the tokenizer has no decoder. A string that is
  // no vocabulary token goes through the decoder as it is (ByteLevel keeps its bytes when a char is unmapped).
  std::string decode_tokens(std::vector<std::string> tokens) const;
  // The model's continuing-subword prefix ("##" for WordPiece; BPE's when tokenizer.json sets one), as the Python
  // model's `continuing_subword_prefix`; nullopt for Unigram, WordLevel and BPE without one.
  std::optional<std::string> continuing_subword_prefix() const;
  // The id of the model's unknown token (WordPiece/WordLevel/BPE unk_token, Unigram unk_id), when it has one.
  std::optional<int64_t> unk_token_id() const;

  void set_truncation(std::optional<TruncationOptions> options);
  void set_padding(std::optional<PaddingOptions> options);
  const std::optional<TruncationOptions>& truncation() const;
  const std::optional<PaddingOptions>& padding() const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  int64_t vocab_size() const;  // including added tokens
  // Number of special tokens the post-processor adds for a single sequence (or a pair).
  int64_t num_special_tokens_to_add(bool pair) const;
  std::string model_type() const;  // "WordPiece", "BPE", "Unigram", "WordLevel"

  // Byte offsets -> offsets in Unicode code points of text (what the Python `tokenizers` library reports).
  static std::vector<std::pair<int64_t, int64_t>> char_offsets(std::string_view text,
                                                               const std::vector<std::pair<int64_t, int64_t>>& byte_offsets);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);
  ~Tokenizer();

 private:
  explicit Tokenizer(std::shared_ptr<TokenizerImpl> impl);
  std::shared_ptr<TokenizerImpl> impl_;
};

}  // namespace encore
