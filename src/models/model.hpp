// Shared plumbing for the architecture files: the base class every family implements, the weight loader
// that maps Hugging Face names onto encore's layers, config.json access, and the family registry.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "encore/model.hpp"
#include "encore/nn.hpp"
#include "io/safetensors.hpp"
#include "kernels/kernels.hpp"
#include "runtime/parallel.hpp"

namespace encore::models {

// config.json with typed, validated accessors; errors name the field and the file.
class HfConfig {
 public:
  static HfConfig load(const std::string& model_dir);
  explicit HfConfig(nlohmann::json j, std::string source) : json_(std::move(j)), source_(std::move(source)) {}
  bool has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }
  // Integer field within [lo, hi]; fallback when absent (no fallback: required).
  int64_t get_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt, int64_t lo = 0,
                  int64_t hi = int64_t{1} << 40) const;
  double get_double(const std::string& key, std::optional<double> fallback = std::nullopt) const;
  std::string get_string(const std::string& key, std::optional<std::string> fallback = std::nullopt) const;
  const nlohmann::json& json() const { return json_; }
  const std::string& source() const { return source_; }

 private:
  nlohmann::json json_;
  std::string source_;
};

// Takes tensors by Hugging Face name (prefix + name), checks each shape against what the config implies,
// and collects every missing name so the error lists them all.
class Weights {
 public:
  Weights(const io::WeightStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  Tensor take(const std::string& name, const Shape& expected);
  std::optional<Tensor> take_optional(const std::string& name, const Shape& expected);
  bool has(const std::string& name) const { return store_.contains(prefix_ + name); }
  std::string full_name(const std::string& name) const { return prefix_ + name; }
  Weights sub(const std::string& more) const { return Weights(store_, prefix_ + more, shared_); }
  void finish() const;  // throws listing every missing tensor

 private:
  struct Shared {
    std::vector<std::string> missing;
    int64_t placeholder_bytes = 0;  // zeros standing in for missing tensors until finish() refuses the model
  };
  Weights(const io::WeightStore& store, std::string prefix, std::shared_ptr<Shared> shared)
      : store_(store), prefix_(std::move(prefix)), shared_(std::move(shared)) {}
  const io::WeightStore& store_;
  std::string prefix_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

// Rows stacked: cat([a; b; c], dim 0) for packing Q, K, V projections into one GEMM. The result is a copy, so
// the parts' pages in a checkpoint's file mapping are released (Tensor::release_resident_pages) once copied.
Tensor cat_rows(const std::vector<Tensor>& parts);

// hidden_act of config.json -> encore activation name (gelu = erf; gelu_new and gelu_pytorch_tanh = tanh).
std::string activation_from_hf(const std::string& hidden_act, const std::string& source);

// How a checkpoint names the parts of one Post-LN encoder layer (BERT's shape), relative to the layer's prefix
// ("encoder.layer.3."): the Hugging Face module names (without ".weight") that nn::TransformerEncoderLayer's
// parameters are built from. Loading and export both go through hf_names(), so they agree by construction.
struct LayerNames {
  std::string q, k, v, o, attn_norm, ffn_in, ffn_out, ffn_norm;
  // The checkpoint tensors (relative to the layer prefix) a layer parameter stands for, given its name as
  // nn::TransformerEncoderLayer lists it: self_attn.in_proj_weight/bias -> q, k, v stacked by rows (three names),
  // everything else one name. Throws for a parameter the table does not know.
  std::vector<std::string> hf_names(const std::string& local) const;
};
// BERT's (also RoBERTa's, XLM-R's, ELECTRA's): attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
// intermediate.dense, output.{dense,LayerNorm}.
LayerNames bert_layer_names();

// One Post-LN layer with every parameter taken from prefix + names.hf_names(...) (shapes from the config);
// adds its parameter count to num_parameters (counted here: listing the layer's parameters later would stack
// the Q/K/V rows it keeps apart, MultiheadAttention::use_in_proj_rows).
nn::TransformerEncoderLayer load_post_ln_layer(Weights& w, const std::string& prefix, const LayerNames& names,
                                               int64_t hidden, int64_t heads, int64_t intermediate,
                                               const std::string& activation, double eps, int64_t& num_parameters);

// (B, T) int64 1/0 attention mask -> additive float (B, T) key padding mask (0 or -inf); undefined if none.
Tensor key_padding_from_attention_mask(const Tensor& attention_mask, int64_t B, int64_t T);
// Checks ids (B, T) int64 and the optional masks; returns B and T.
std::pair<int64_t, int64_t> check_inputs(const Tensor& input_ids, const Tensor& attention_mask,
                                         const Tensor& token_type_ids);

class StackedEncoder;

// Every family is an nn::Module: its parameters (Hugging Face names, except each layer's packed
// self_attn.in_proj_weight/bias standing for query/key/value) and gradients are what optimisers see.
// Training mode: forward() saves what backward() needs; backward() takes the gradients of the outputs used.
class EncoderModel : public nn::Module {
 public:
  virtual ModelOutput forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                              const ForwardOptions& options) const = 0;
  // d(loss)/d(last_hidden_state), d(loss)/d(pooler_output), d(loss)/d(logits); any may be undefined.
  virtual void backward(const Tensor& d_last_hidden, const Tensor& d_pooler, const Tensor& d_logits) = 0;
  // Weights mapped read-only from safetensors are copied to owned memory before training writes to them.
  void materialize();
  // Adds a freshly initialised sequence-classification head (as transformers' *ForSequenceClassification
  // initialises it: normal(0, 0.02) weights, zero bias) when the checkpoint has none.
  virtual void add_sequence_classifier(int64_t num_labels, uint64_t seed) = 0;
  // The same for a token-classification head (*ForTokenClassification's "classifier" on every token).
  virtual void add_token_classifier(int64_t num_labels, uint64_t seed) {
    throw Error("add_token_classifier: not supported for model_type '" + info.model_type + "'");
  }
  virtual int64_t max_sequence_length() const { return info.max_position_embeddings; }
  // One dropout probability for every site the training forward has (see AutoModel::set_dropout).
  virtual void set_dropout(double p) = 0;
  // Training: keep only each layer's input and recompute its forward during backward (see
  // nn::TransformerEncoder::set_gradient_checkpointing); gradients are bitwise the same.
  void set_gradient_checkpointing(bool enabled) { gradient_checkpointing = enabled; }
  bool gradient_checkpointing = false;
  // Every encoder layer the model runs (shared ALBERT layers once each).
  virtual void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) = 0;
  // Prepares the weights the inference forward reads through prepared GEMMs (f32/bf16/int8, see
  // nn::Module::prepare_inference): every encoder layer, layers in parallel (model.cpp), unless a family whose layers
  // are its own says which (those prepare their layers in parallel too).
  virtual void prepare_inference_weights(DType dtype);
  // The parameters under transformers' names for the task model: see AutoModel::export_hf.
  virtual HfExport export_hf() = 0;
  // The checkpoint names (with the checkpoint's prefix) of the encoder layers' Linear weights: query, key, value,
  // attention output, FFN in and out (what an int8 checkpoint quantizes; quantize.cpp).
  virtual std::vector<std::string> layer_linear_weight_names() = 0;
  // The encoder layers' prepared GEMMs (set by prepare_inference_weights), each with the checkpoint names of the
  // weights it computes (query, key and value share one): where static int8 records and applies input ranges
  // (quantize.cpp). Empty: the family does not list them (static int8 is refused for it).
  struct LinearSlot {
    std::vector<std::string> names;
    std::shared_ptr<const kernels::PackedLinear>* packed;
  };
  virtual std::vector<LinearSlot> layer_linear_slots() { return {}; }
  ModelInfo info;
  // Whether the inference forward runs attention's matmuls in bf16 (AutoModel::forward opens an
  // ops::AttentionPrecisionScope from it); load_model decides, from the dtype.
  bool bf16_attention = false;
};

// prepare(layer) for every layer of `layers`, whole layers per thread in one parallel region: what every family's
// prepare_inference_weights does (why, and what it measured: EncoderModel::prepare_inference_weights in model.cpp).
// The lowest failing layer's error is rethrown, as a serial loop would throw it.
template <class Layers, class Prepare>
void prepare_layers_in_parallel(Layers& layers, Prepare&& prepare) {
  runtime::parallel_for_each(0, static_cast<int64_t>(layers.size()), 1,
                             [&](int64_t i) { prepare(layers[static_cast<size_t>(i)]); });
}

using Loader = std::unique_ptr<EncoderModel> (*)(const HfConfig&, const io::WeightStore&);
// The model_type -> loader table (registry.cpp); a family file defines its loader.
const std::map<std::string, Loader>& registry();
// What each family runs, in registry order (registry.cpp's third and fourth columns).
struct FamilyDescription {
  std::string model_type, heads, attention;
};
const std::vector<FamilyDescription>& family_descriptions();
std::unique_ptr<EncoderModel> load_model(const std::string& model_dir, DType dtype = DType::f32);
// Quantized checkpoints (quantize.cpp, docs/quantization.md). The full names of the encoder layers' Linear
// weights (query, key, value, attention output, FFN in and out) of model_dir's model, as its family loads them:
std::vector<std::string> encoder_linear_weight_names(const std::string& model_dir);
// For Weights::take: an int8 weight of a quantized checkpoint, dequantized to f32 (nullopt: not one).
std::optional<Tensor> take_int8_weight(const io::WeightStore& store, const std::string& name);
// Validates config.json's "encore_quantization" entry; true for a quantized checkpoint.
bool read_quantization_marker(const HfConfig& cfg);
// A static-int8 checkpoint (its marker says "activations": "static"): validates every stored input range and, for
// dtype int8, makes the model's int8 Linears use them (after prepare_inference_weights). No-op for other checkpoints.
void apply_static_int8_ranges(EncoderModel& model, const HfConfig& cfg, const io::WeightStore& store, DType dtype);
std::vector<std::string> registered_families();

// Which prefix the base model's weights use in a checkpoint: "" (a base-model checkpoint) or base_prefix (a
// task model's, e.g. "bert."), found by probing probe_name.
std::string detect_prefix(const io::WeightStore& store, const std::string& base_prefix, const std::string& probe_name);

// A right-padded batch run padding-free (ForwardOptions::skip_padding): the real tokens of x (B, T, C) gathered
// into (1, N, C), sequence b in rows [cu_seqlens[b], cu_seqlens[b+1]).
struct PackedBatch {
  int64_t B = 0, T = 0;
  std::vector<int64_t> cu_seqlens;
  // A plan when the batch qualifies: inference, skip_padding, no attention weights, and a key padding mask
  // (0 / -inf, from key_padding_from_attention_mask) whose every row is 0...0 -inf...-inf with at least one 0
  // and some row with padding. Otherwise nullopt: the padded path.
  static std::optional<PackedBatch> plan(const Tensor& key_padding, const ForwardOptions& options, bool training);
  Tensor gather(const Tensor& x) const;   // (B, T, C) -> (1, N, C)
  Tensor scatter(const Tensor& x) const;  // (1, N, C) -> (B, T, C), zeros at padded positions
};

// Runs a stack of Post-LN layers over x (B, T, C) batch-first, filling hidden_states/attentions on request;
// padding-free when PackedBatch::plan allows (outputs then 0 at padded positions).
Tensor run_layers(const std::vector<const nn::TransformerEncoderLayer*>& layers, Tensor x, const Tensor& attn_mask,
                  const Tensor& key_padding, const ForwardOptions& options, ModelOutput& out);

// word + position (+ token type) embeddings, summed, then LayerNorm and dropout: the "embeddings.*" module BERT,
// RoBERTa, ELECTRA, ALBERT, DistilBERT and MPNet share (token types absent in DistilBERT and MPNet), composed of
// nn::Embedding and nn::LayerNorm under Hugging Face's names (word_embeddings, position_embeddings,
// token_type_embeddings, LayerNorm). Training mode saves what backward needs.
class TokenEmbeddings : public nn::Module {
 public:
  nn::Embedding word_embeddings, position_embeddings;  // padding_idx: RoBERTa and MPNet set the position one too
  std::optional<nn::Embedding> token_type_embeddings;
  nn::LayerNorm norm;    // "LayerNorm"
  double dropout = 0.0;  // after the LayerNorm, training only (hidden_dropout_prob; DistilBERT's dropout)
  static TokenEmbeddings load(Weights& w, const HfConfig& cfg, int64_t dim, bool with_token_types);
  // position_ids (B, T) int64; token_type_ids may be undefined (zeros).
  Tensor forward(const Tensor& input_ids, const Tensor& position_ids, const Tensor& token_type_ids) const;
  void backward(const Tensor& grad_output);  // accumulates the tables' and the norm's gradients

 protected:
  void members(nn::Members& m) override;
};
// position_ids = 0..T-1 for every sequence (BERT).
Tensor absolute_position_ids(int64_t B, int64_t T);
// RoBERTa: padding_idx + cumulative count of non-padding tokens, padding_idx at padding.
Tensor padding_offset_position_ids(const Tensor& input_ids, int64_t padding_idx);

// The encoder sizes BERT-style configs share (hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size, hidden_act, layer_norm_eps), validated before anything is allocated.
struct EncoderDims {
  int64_t hidden = 0, layers = 0, heads = 0, intermediate = 0;
  std::string activation;  // encore's name
  double eps = 1e-12;
};
EncoderDims read_encoder_dims(const HfConfig& cfg, const std::string& default_act = "gelu");
void fill_info(ModelInfo& info, const HfConfig& cfg, const EncoderDims& d);
// x[:, 0, :] as a contiguous (B, C) tensor.
Tensor first_token(const Tensor& x);
bool architecture_ends_with(const HfConfig& cfg, const std::string& suffix);

// The gradient buffer of parameter p: g itself, (re)allocated as zeros of p's shape when it is not one yet.
Tensor* grad_buffer(Tensor& g, const Tensor& p);

// Sequence- or token-classification head: logits = out(dropout_hidden(act(dense(dropout_in(x))))), dense optional.
//   BERT, ALBERT:            dropout -> classifier                                    (pooled output or every token)
//   RoBERTa, ELECTRA, MPNet: dropout -> dense -> tanh|gelu -> dropout -> out_proj     (first token)
//   DistilBERT:              pre_classifier -> relu -> dropout -> classifier           (first token)
// Token-classification heads of every family: dropout -> classifier (every token).
struct ClassificationHead {
  enum class Input { pooled, first_token, every_token };
  Input input = Input::pooled;
  std::optional<nn::Linear> dense;
  nn::Linear out;
  kernels::Act act = kernels::Act::none;
  double dropout_in = 0.0, dropout_hidden = 0.0;  // training only
  bool input_dropout_site = true;                 // false: no dropout before the head (DistilBERT)
  std::string dense_name, out_name;               // Hugging Face module names (without ".weight")
  struct Saved {
    Tensor x, dropped_x, pre, hidden;
    uint64_t seed_in = 0, seed_hidden = 0;
  };
  // x: the pooled output (B, H), the first token (B, H) or every token (B, T, H). saved non-null = training.
  Tensor forward(const Tensor& x, Saved* saved) const;
  Tensor backward(const Saved& saved, const Tensor& dlogits);  // gradient of x; accumulates parameter gradients
  void members(nn::Members& m, const std::string& prefix);
};

// A head's layout without weights (dense_name empty: no dense layer), e.g. RoBERTa's
// head_layout(Input::first_token, "classifier.dense", "classifier.out_proj", tanh, p, p).
ClassificationHead head_layout(ClassificationHead::Input input, const std::string& dense_name,
                               const std::string& out_name, kernels::Act act, double dropout_in, double dropout_hidden);
// Masked-LM head (the *ForMaskedLM models' prediction head), over every token:
//   logits = LayerNorm(act(x·denseᵀ + b))·decoderᵀ + bias      (B, T, H) -> (B, T, vocab)
// dense maps hidden_size to the width E of the word embeddings (E = hidden_size except ALBERT's and ELECTRA's
// generator's embedding_size); the decoder is the word-embedding table (vocab, E) when the checkpoint ties them
// (transformers' tie_word_embeddings, and no decoder weight stored), else the checkpoint's own decoder weight.
//   BERT:                 cls.predictions.transform.{dense, LayerNorm}, hidden_act, cls.predictions.bias
//   RoBERTa, XLM-R, MPNet: lm_head.{dense, layer_norm}, gelu (erf), lm_head.bias
//   DistilBERT:           vocab_transform, config activation, vocab_layer_norm (eps 1e-12), vocab_projector.bias
//   ELECTRA (generator):  generator_predictions.{dense, LayerNorm}, gelu (erf), generator_lm_head.bias
//   ALBERT:               predictions.{dense, LayerNorm}, hidden_act, predictions.bias
// Inference only: the training forward leaves the logits undefined.
struct MaskedLMHead {
  std::string dense_name, norm_name, decoder_name, bias_name;  // Hugging Face names (no ".weight")
  kernels::Act act = kernels::Act::gelu_erf;
  double eps = 1e-12;
  nn::Linear dense;
  Tensor norm_weight, norm_bias, decoder_weight, bias;  // decoder_weight undefined: tied to the word embeddings
  Tensor forward(const Tensor& x, const Tensor& word_embeddings) const;
};
// The layout (names, activation, eps) with its weights taken from root when its dense weight is there (else
// nullopt); `width` is E, `vocab` the word-embedding rows; an untied decoder must be in the checkpoint.
std::optional<MaskedLMHead> take_masked_lm_head(Weights& root, const MaskedLMHead& layout, int64_t hidden,
                                                int64_t width, int64_t vocab, bool tie_word_embeddings);
MaskedLMHead make_masked_lm_layout(const std::string& dense, const std::string& norm, const std::string& decoder,
                              const std::string& bias, kernels::Act act, double eps);
// hidden_act of config.json (as activation_from_hf reads it) -> the pointwise kernel activation.
kernels::Act kernel_activation(const std::string& hidden_act, const std::string& source);

// The shape every family shares, owned here once: token embeddings (+ LayerNorm, dropout) -> optional projection
// to hidden_size -> encoder layers in run order (shared ones repeated) with an optional attention bias ->
// optional tanh pooler over the first token -> optional classification head. Parameters are listed, named,
// exported and run from these members; training forward/backward and gradient checkpointing live here. A family
// file fills them from its checkpoint (its prefixes are the Hugging Face module names) and overrides, if it
// must, its position ids, its attention bias and extra parameters.
class StackedEncoder : public EncoderModel {
 public:
  TokenEmbeddings embeddings;                   // "embeddings."
  std::optional<nn::Linear> project;            // ELECTRA's embeddings_project, ALBERT's embedding_hidden_mapping_in
  std::string project_name;
  std::vector<nn::TransformerEncoderLayer> layers;  // each distinct layer once
  std::vector<std::string> layer_prefixes;          // layer i's module prefix, e.g. "encoder.layer.3."
  LayerNames layer_names;                           // its parts' checkpoint names under that prefix
  std::vector<size_t> run_order;                    // indices into layers; empty = each once, in order
  std::optional<nn::Linear> pooler;
  std::string pooler_name = "pooler.dense";
  std::optional<ClassificationHead> head;
  // The masked-LM head of a *ForMaskedLM (or *ForPreTraining) checkpoint, when select_head found one: the logits'
  // source when there is no classification head (not a parameter: training and export_hf leave it out).
  std::optional<MaskedLMHead> masked_lm;
  MaskedLMHead masked_lm_layout;  // the family's names; empty dense_name: the family has none
  int64_t masked_lm_width = 0;    // E (0: hidden_size)
  // What add_sequence_classifier builds (names, input, activation, dropout of the family's
  // *ForSequenceClassification head); its weights are ignored.
  ClassificationHead sequence_head_layout;
  // *ForQuestionAnswering's head: qa_outputs, Linear(hidden, 2) on every token (start and end logits), no dropout
  // before it (DistilBERT: dropout(qa_dropout)); select_head reads it when the architecture names it.
  ClassificationHead qa_head_layout = [] {
    ClassificationHead h = head_layout(ClassificationHead::Input::every_token, "", "qa_outputs", kernels::Act::none,
                                       0.0, 0.0);
    h.input_dropout_site = false;
    return h;
  }();
  // transformers' class-name stem ("Bert", "XLMRoberta"), the base model's prefix in task checkpoints ("bert.")
  // and the prefix this checkpoint used ("" or that).
  std::string hf_class_stem, hf_base_prefix, hf_checkpoint_prefix;

  // Loads layers i = 0..count-1 from prefix(i) + layer_names (see LayerNames); layer i is named like its prefix.
  void load_layers(Weights& w, const EncoderDims& d, int64_t count, const std::function<std::string(int64_t)>& prefix);

  // The head the checkpoint's architecture names, taken from root (the checkpoint's top level) with read_labels:
  // *ForSequenceClassification -> sequence_head_layout, *ForTokenClassification -> dropout(token_dropout) +
  // "classifier" on every token, *ForQuestionAnswering -> qa_head_layout (logits (B, T, 2): start, end);
  // *ForMaskedLM / *ForPreTraining -> masked_lm; none when the architecture has no head or its weights are absent.
  void select_head(const HfConfig& cfg, Weights& root, double token_dropout);
  // A new head laid out as sequence_head_layout, initialised as transformers does: normal(0, 0.02) weights, zero
  // biases (the output weights drawn first from mt19937_64(seed), then the dense ones).
  void add_sequence_classifier(int64_t num_labels, uint64_t seed) override;
  // A new "classifier" on every token behind dropout(token_head_dropout), initialised the same way.
  void add_token_classifier(int64_t num_labels, uint64_t seed) override;
  double token_head_dropout = 0.1;  // the family's *ForTokenClassification dropout (select_head records it)
  ModelOutput forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                      const ForwardOptions& options) const override;
  void backward(const Tensor& d_last_hidden, const Tensor& d_pooler, const Tensor& d_logits) override;
  // p at every site the family's Hugging Face model has (layer_sites, the embeddings, the head's), 0 elsewhere.
  void set_dropout(double p) override;
  // Which layer sites exist (1) in the family (BERT's placement; DistilBERT has no attention-output dropout).
  nn::EncoderLayerDropout layer_sites = nn::EncoderLayerDropout::hugging_face(1.0, 1.0);
  // Hugging Face dropout probabilities from config.json onto the embeddings and every layer (BERT's names:
  // hidden_dropout_prob, attention_probs_dropout_prob).
  void set_hf_dropout(double hidden, double attention_probs);

  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) override;
  HfExport export_hf() override;
  std::vector<std::string> layer_linear_weight_names() override;
  std::vector<LinearSlot> layer_linear_slots() override;

 protected:
  void members(nn::Members& m) override;
  std::vector<const nn::TransformerEncoderLayer*> layer_order() const;  // the layers in run order
  std::vector<nn::TransformerEncoderLayer*> layer_order();
  virtual Tensor position_ids(const Tensor& input_ids) const;  // 0..T-1 (absolute)
  // A float bias added to every layer's scores, (B*H, T, T), or undefined; and its gradient's consumer
  // (Σ over layers of (B, H, T, T)).
  virtual Tensor attention_bias(int64_t B, int64_t T) const { return Tensor(); }
  virtual void attention_bias_backward(const Tensor& d_bias) {}
  // Parameters of the base model beyond the shared shape (MPNet's relative bias), listed after the layers.
  virtual void extra_members(nn::Members& m) {}

 private:
  struct Saved;
};
// The layout with its weights taken from the checkpoint.
ClassificationHead take_head(Weights& w, const ClassificationHead& layout, int64_t num_labels, int64_t hidden);
// classifier_dropout when set in config.json, else hidden_dropout_prob (BERT, RoBERTa, ELECTRA).
double classifier_dropout(const HfConfig& cfg);
// name.weight (out, in) and name.bias (out) as an nn::Linear sharing their storage.
nn::Linear take_linear(Weights& w, const std::string& name, int64_t out, int64_t in);
// Fills info.head / num_labels / id2label from config.json.
void read_labels(const HfConfig& cfg, ModelInfo& info);
// What the pipelines read of tokenizer_config.json: model_max_length (nullopt when unset or absurd: transformers then
// uses a huge number, i.e. no limit), and a special token by name ("mask_token", "cls_token"; a string or an
// AddedToken {"content": ...}; else special_tokens_map.json's; "" when neither names it).
std::optional<int64_t> read_model_max_length(const std::string& model_dir);
std::string configured_special_token(const std::string& model_dir, const std::string& name);
// A *ForQuestionAnswering head's outputs: config.json's num_labels (id2label) must be 2, start and end logits, as
// transformers splits them; info.num_labels = 2, id2label left empty.
void read_question_answering_labels(const HfConfig& cfg, ModelInfo& info);

}  // namespace encore::models
