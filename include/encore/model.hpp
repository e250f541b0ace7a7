// encore::AutoModel - a Hugging Face encoder checkpoint (config.json + safetensors) loaded for inference.
//
//   encore::AutoModel model = encore::AutoModel::load("/path/to/bert-base-uncased");
//   encore::ModelOutput out = model.forward(input_ids, attention_mask);   // (B, T) int64 each
//   out.last_hidden_state;                                               // (B, T, hidden_size) float32
//
// Supported model_type values: bert (also MiniLM, BGE, E5, GTE-base), roberta, xlm-roberta, distilbert,
// albert, electra, mpnet, modernbert. Weights are read from model.safetensors (or the shards of
// model.safetensors.index.json), mmapped; pytorch_model.bin is refused. A checkpoint saved from a task model
// (BertForSequenceClassification...) loads too: the base weights are found under their prefix and the
// sequence- or token-classification head, when present, fills ModelOutput::logits.
// Thread safety: forward() is const and may run concurrently.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "encore/nn.hpp"
#include "encore/tensor.hpp"

namespace encore {

namespace models {
class EncoderModel;
}

struct ForwardOptions {
  bool output_hidden_states = false;  // embeddings output, then every layer's output
  bool output_attentions = false;     // per layer (B, heads, T, T)
  bool compute_logits = true;         // run the classification head when the checkpoint has one
  // Padding-free inference: the real tokens of a right-padded batch run as one packed sequence set (attention
  // per sequence), so no work is spent on padding; last_hidden_state and hidden_states are 0 at padded
  // positions (as torch's nested-tensor fast path gives) instead of what a padded forward computes there.
  // Real positions, pooled and sequence-level outputs are unchanged (within f32 rounding). Not applied with
  // output_attentions, in training, or to masks that are not 1...1 0...0 rows with at least one token.
  bool skip_padding = true;
};

struct ModelOutput {
  Tensor last_hidden_state;           // (B, T, hidden)
  Tensor pooler_output;               // (B, hidden) when the model has a pooler, else undefined
  Tensor logits;                      // (B, labels) or (B, T, labels) when a head is present
  std::vector<Tensor> hidden_states;  // when requested
  std::vector<Tensor> attentions;     // when requested
};

struct ModelInfo {
  // head: "", "sequence_classification", "token_classification", "question_answering" (logits (B, T, 2): start and
  // end logits per token), "masked_lm"
  std::string model_type, architecture, hidden_act, head, dtype = "float32";
  std::string stored_dtype = "float32";  // the checkpoint's weights: "int8" for an `encore quantize` directory
                                         // (its encoder Linear weights; the rest stays float32)
  int64_t hidden_size = 0, num_layers = 0, num_heads = 0, intermediate_size = 0, vocab_size = 0;
  int64_t max_position_embeddings = 0, num_parameters = 0, num_labels = 0, pad_token_id = 0;
  std::vector<std::string> id2label;
};

// A model's parameters under the names transformers gives them (see AutoModel::export_hf).
struct HfExport {
  std::string architecture;                             // e.g. "BertForSequenceClassification"
  std::vector<std::pair<std::string, Tensor>> tensors;  // float32, contiguous, state_dict names
};

class AutoModel {
 public:
  // dtype: float32 (default), bfloat16 or int8 for the encoder layers' GEMMs (activations, accumulation,
  // LayerNorm and softmax stay float32; int8 quantizes the activations per token at run time, see
  // docs/quantization.md). Weights are prepared (reordered, converted, quantized) once here.
  static AutoModel load(const std::string& model_dir, DType dtype = DType::f32);
  static std::vector<std::string> supported_model_types();
  // Every family in registry order: its model_type, the task heads it runs and its attention/positions (what
  // `encore info --families` prints). Every family also runs padding-free, in fp32/bf16/int8, and trains.
  struct Family {
    std::string model_type, heads, attention;
  };
  static std::vector<Family> supported_families();

  // input_ids (B, T) int64; attention_mask (B, T) int64 1 = token, 0 = padding (undefined = all tokens);
  // token_type_ids (B, T) int64 or undefined (zeros).
  ModelOutput forward(const Tensor& input_ids, const Tensor& attention_mask = Tensor(),
                      const Tensor& token_type_ids = Tensor(), const ForwardOptions& options = {}) const;
  const ModelInfo& info() const;

  // Training (every family: bert, roberta/xlm-roberta, distilbert, albert, electra, mpnet, modernbert, with Hugging Face's
  // dropout placement and probabilities from config.json): train() copies weights mapped from the checkpoint into owned memory (once) and
  // makes forward() save what backward() needs; backward() takes the gradients of the outputs the loss used
  // and accumulates parameter gradients (see module().named_grads()). eval() returns to inference.
  void train(bool mode = true);
  void eval() { train(false); }
  // Overrides every dropout probability of the training forward (the checkpoint's config values otherwise);
  // p in [0, 1). Masks come from encore::nn::manual_seed's generator.
  void set_dropout(double p);
  void backward(const Tensor& d_last_hidden_state, const Tensor& d_pooler_output = Tensor(),
                const Tensor& d_logits = Tensor());  // accumulates into the parameters' gradients
  // Gradient checkpointing: training keeps only each encoder layer's input and recomputes the layer's forward
  // during backward (less activation memory, about one more forward pass of compute; same gradient bits).
  void set_gradient_checkpointing(bool enabled);
  bool gradient_checkpointing() const;
  // Parameters (Hugging Face names; each layer's self_attn.in_proj_* packs query/key/value) and gradients.
  nn::Module& module();
  // A new sequence-classification head for fine-tuning a checkpoint that has none (bert so far).
  void add_sequence_classifier(int64_t num_labels, uint64_t seed = 0);
  // A new token-classification head ("classifier" on every token, as *ForTokenClassification) for fine-tuning.
  void add_token_classifier(int64_t num_labels, uint64_t seed = 0);
  // The parameters as transformers' task model names them (the current values, trained or not): with a
  // sequence-classification head "<Family>ForSequenceClassification" with the base model under its prefix
  // ("bert.") and the head at the root, else the base model "<Family>Model" without prefix; each packed
  // in_proj is split back into query/key/value. Names are the ones the checkpoint used (recorded at load), a
  // head added by add_sequence_classifier keeps encore's name (transformers' too). Shares the tensors' memory.
  HfExport export_hf() const;
  // Token-id positions the model can take: max_position_embeddings less any offset (RoBERTa: padding_idx+1).
  int64_t max_sequence_length() const;

 private:
  explicit AutoModel(std::shared_ptr<models::EncoderModel> impl);
  std::shared_ptr<models::EncoderModel> impl_;
  bool materialized_ = false;
};

// A quantized copy of a checkpoint for int8 inference (`encore quantize`; format in docs/quantization.md):
// out_dir gets config.json (marked "encore_quantization"), the tokenizer and sentence-transformers files, and a
// model.safetensors with the encoder layers' Linear weights in int8 (those weights 4x smaller; all-MiniLM-L6-v2
// as a whole 86.6 -> 56.4 MiB, its embeddings stay float32). AutoModel::load and
// SentenceEncoder read it in any dtype: int8 then computes exactly what int8 on the original does (the stored
// weights are what on-the-fly quantization produces), fp32/bf16 compute with the dequantized weights.
// out_dir must not exist or be empty, and differ from model_dir; it appears complete or not at all.
// Static int8 (docs/quantization.md, "Static int8"): with calibration_texts, the fp32 model runs over them and every
// encoder Linear's input range is stored in the checkpoint; int8 then quantizes each input with that fixed range
// (no per-call range scan; values beyond it saturate) instead of per token. Only for StackedEncoder families
// (bert, roberta, xlm-roberta, distilbert, electra, albert, mpnet).
struct QuantizeOptions {
  std::vector<std::string> calibration_texts;  // empty: dynamic int8
  std::string range_rule = "max";  // "max", or "pX": per batch quantiles X% and (100-X)%, averaged
  double f32_channel_ratio = 4.0;  // input channels with max |x| > ratio x the median channel's (at most 8) stay f32
  int64_t batch_size = 32;         // calibration batches (each gives the percentile rules one sample)
};
struct QuantizeSummary {
  int64_t quantized = 0;                // Linear weights stored int8
  std::vector<std::string> kept_f32;    // Linear weights stored f32 (their requantization would not be exact)
  int64_t bytes_in = 0, bytes_out = 0;  // weight bytes read; model.safetensors bytes written
  int64_t static_ranges = 0;            // Linear weights with a stored input range (static int8)
  int64_t f32_input_channels = 0;       // f32 input channels, summed over those Linear weights
};
QuantizeSummary quantize_checkpoint(const std::string& model_dir, const std::string& out_dir,
                                    DType dtype = DType::i8, const QuantizeOptions& options = {});

}  // namespace encore
