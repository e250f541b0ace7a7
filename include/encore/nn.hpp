// encore::nn - the Transformer building blocks of torch.nn, in C++, with torch's argument names, defaults,
// shapes, mask semantics and state_dict keys, so code and checkpoints port one to one.
//
//   #include <encore/nn.hpp>
//   encore::nn::TransformerEncoderLayer layer(/*d_model=*/512, /*nhead=*/8);      // post-LN, relu, (T, B, E)
//   encore::nn::TransformerEncoder encoder(layer, /*num_layers=*/6);
//   encoder.eval();
//   encore::Tensor src = encore::Tensor::zeros({/*T=*/10, /*B=*/2, 512});
//   encore::Tensor out = encoder.forward(src);                                      // (10, 2, 512)
//
// Masks follow torch: a bool mask's True means "ignore / may not attend"; a float mask is added to the
// attention scores. attn_mask is (T, S) or (B*nhead, T, S); key_padding_mask is (B, S).
// Deliberate differences from torch are listed in docs/torch_differences.md; the main ones: a fully masked
// attention row gives zero weights (torch: NaN), and is_causal=true without a mask applies a causal mask
// (torch raises).
//
// Thread safety: forward() does not modify the module and may run concurrently on one module from several
// threads; load_state_dict/train/eval may not run concurrently with anything else.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "encore/tensor.hpp"

namespace encore::kernels {
class PackedLinear;  // weights prepared for repeated GEMMs (internal)
}

namespace encore::nn {

using StateDict = std::map<std::string, Tensor>;

// A parameter as its module lists it: torch's state_dict name, the tensor, and its gradient. The gradient is
// undefined (torch: .grad is None) until a backward reaches the parameter, which allocates it as zeros and
// accumulates into it; zero_grad() makes it undefined again (or zeros, with set_to_none = false).
struct ParamRef {
  std::string name;
  Tensor* param;
  Tensor* grad;
};

// Called with every named intermediate activation ("layers.3.self_attn.out") when installed; see ScopedObserver.
using Observer = std::function<void(const std::string& name, const Tensor& value)>;

// Installs an observer for the current thread while in scope (used by `encore trace` and debug dumps).
class ScopedObserver {
 public:
  explicit ScopedObserver(Observer fn);
  ~ScopedObserver();
  ScopedObserver(const ScopedObserver&) = delete;
  ScopedObserver& operator=(const ScopedObserver&) = delete;

 private:
  Observer previous_;
};

class Module;

// Called during a backward when `module`'s parameter gradients are final for that backward: the layer stacks call
// it after each layer's backward (after the last use, in reverse order, of a layer whose parameters are shared).
// Data-parallel training starts the allreduce of those gradients while the rest of backward runs (torch DDP's
// gradient-ready hooks, per layer rather than per parameter). Parameters outside the layer stacks (embeddings,
// pooler, heads) are not announced: their gradients are final when backward returns.
using GradientReadyHook = std::function<void(Module& module)>;

// Installs a gradient-ready hook for the current thread (the one running backward) while in scope.
class ScopedGradientReadyHook {
 public:
  explicit ScopedGradientReadyHook(GradientReadyHook fn);
  ~ScopedGradientReadyHook();
  ScopedGradientReadyHook(const ScopedGradientReadyHook&) = delete;
  ScopedGradientReadyHook& operator=(const ScopedGradientReadyHook&) = delete;

 private:
  GradientReadyHook previous_;
};

// A module's parameter: a Tensor whose copy is a copy of its values (torch's copy.deepcopy of a Parameter), so
// copying a module - member by member, as the compiler does - gives the copy its own weights (`copy = layer`
// then training `copy` leaves `layer` as it was). Moves keep the storage (a checkpoint's mapped weights stay
// mapped). Assigning a Tensor binds the parameter to that tensor's storage (loaders), as Tensor's own assignment.
class Parameter : public Tensor {
 public:
  Parameter() = default;
  explicit Parameter(Tensor t) : Tensor(std::move(t)) {}
  Parameter(const Parameter& other) : Tensor(other.defined() ? other.clone() : Tensor()) {}
  Parameter(Parameter&&) noexcept = default;
  Parameter& operator=(const Parameter& other) {
    if (this != &other) Tensor::operator=(other.defined() ? other.clone() : Tensor());
    return *this;
  }
  Parameter& operator=(Parameter&&) noexcept = default;
  Parameter& operator=(Tensor t) {
    Tensor::operator=(std::move(t));
    return *this;
  }
  ~Parameter() = default;
};

// What a module registers, once, in its members(): its parameters (torch's state_dict name relative to the
// module, the tensor, its gradient slot) and its child modules (name, module), in order. An undefined tensor is
// not a parameter (torch: a parameter registered as None). Everything that walks modules - named_parameters,
// state_dict, load_state_dict, zero_grad, reset_parameters, train/eval, set_name, prepare_inference,
// clear_saved, the Python repr - derives from that one listing; copies are deep through Parameter.
class Members {
 public:
  virtual void parameter(const std::string& name, Tensor& value, Tensor& grad) = 0;
  virtual void child(const std::string& name, Module& module) = 0;
  // Several children in order: m.children({{"linear1", linear1}, {"linear2", linear2}}).
  void children(std::initializer_list<std::pair<const char*, Module&>> list) {
    for (const auto& [name, module] : list) child(name, module);
  }

 protected:
  ~Members() = default;
};

// Members that appends every parameter below (prefix + dotted name, children recursed) to a list.
class ParameterList final : public Members {
 public:
  ParameterList(std::string prefix, std::vector<ParamRef>& out) : prefix_(std::move(prefix)), out_(out) {}
  void parameter(const std::string& name, Tensor& value, Tensor& grad) override;
  void child(const std::string& name, Module& module) override;

 private:
  std::string prefix_;
  std::vector<ParamRef>& out_;
};

class Module {
 public:
  Module() = default;
  Module(const Module& other) : training_(other.training_), name_(other.name_) {}  // saved activations stay behind
  Module& operator=(const Module& other) {
    training_ = other.training_;
    name_ = other.name_;
    saved_.clear();
    return *this;
  }
  // Moves keep the parameters' storage (a checkpoint's mapped weights stay mapped, nothing is copied).
  Module(Module&& other) noexcept
      : saved_(std::move(other.saved_)), training_(other.training_), name_(std::move(other.name_)) {}
  Module& operator=(Module&& other) noexcept {
    training_ = other.training_;
    name_ = std::move(other.name_);
    saved_ = std::move(other.saved_);
    return *this;
  }
  virtual ~Module() = default;
  // Subclasses declare no copy or move of their own: member-wise copies are deep (Parameter), moves keep storage.

  // Parameters with torch's state_dict names, in registration order.
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  // Every parameter with its gradient slot (see ParamRef), in registration order; allocates nothing.
  std::vector<ParamRef> parameter_refs();
  // The gradients that exist, by parameter name: those a backward reached since zero_grad() (torch's
  // `{n: p.grad for n, p in named_parameters() if p.grad is not None}`). backward() accumulates into them.
  std::vector<std::pair<std::string, Tensor*>> named_grads();
  // torch's Module.zero_grad: set_to_none drops every gradient (a parameter no later backward reaches then has
  // none, and optimizers skip it); false fills the existing ones with zeros and keeps their storage.
  void zero_grad(bool set_to_none = true);
  StateDict state_dict();  // tensors share storage with the module
  // Copies every tensor of sd into the parameter of the same name. strict: keys must match exactly.
  // Throws encore::Error naming a missing or unexpected key, a wrong shape or a non-float32 dtype.
  void load_state_dict(const StateDict& sd, bool strict = true);
  int64_t num_parameters();

  // Training mode: forward() saves what backward() needs (one entry per call, used last-in first-out, so a
  // layer applied several times in one forward - shared parameters - is handled); eval mode saves nothing.
  // The public forward() of the module you call clears what an earlier call left. backward(dout) returns the
  // gradient of the input and ACCUMULATES parameter gradients (named_grads()). Not thread-safe in training.
  void train(bool mode = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void clear_saved() const;  // drops saved activations here and below

  // Xavier-uniform for weight matrices, zero biases, unit norm scales, from a seeded RNG.
  void reset_parameters(uint64_t seed);

  // Snapshots the weights for fast inference: reordered once into the GEMM library's preferred layout, in
  // the compute dtype (float32 or bfloat16; bfloat16 keeps activations, accumulation, LayerNorm and softmax
  // in float32). Used by forward() in eval mode only. load_state_dict, train() and reset_parameters drop the
  // snapshot; call it again after changing weights by other means.
  void prepare_inference(DType dtype = DType::f32);
  void drop_prepared();

  // The prefix used in observer names ("layers.3"); set by parents.
  void set_name(const std::string& name);
  const std::string& name() const { return name_; }

 public:
  // A parameter's gradient buffer for a backward to accumulate into: grad itself, allocated as zeros of param's
  // shape when it is not one yet.
  static Tensor& grad_of(Tensor& grad, const Tensor& param);
  // Every parameter below this module as prefix + its dotted name, with its gradient slot, in registration order.
  void collect_parameters(const std::string& prefix, std::vector<ParamRef>& out);
  // This module's direct children with their names, in registration order.
  void for_each_child(const std::function<void(Module&, const std::string&)>& fn);

 protected:
  // The one listing of this module's parameters and children: m.parameter("weight", weight, dweight),
  // m.child("out_proj", out_proj), ... in state_dict order (see Members).
  virtual void members(Members& m) = 0;
  // Called before the parameters are listed (to be read or written): a module that does not hold a parameter
  // (MultiheadAttention's packed in_proj_weight, not built at load or freed after preparation) builds it here.
  virtual void expose_parameters() {}

  template <typename T>
  void push_saved(std::shared_ptr<T> value) const {
    saved_.push_back(std::move(value));
  }
  template <typename T>
  std::shared_ptr<T> pop_saved(const char* who) {
    ENCORE_CHECK(!saved_.empty(), who, ".backward: no saved forward pass (call forward() in training mode first, "
                 "once per backward)");
    auto v = std::static_pointer_cast<T>(saved_.back());
    saved_.pop_back();
    return v;
  }
  mutable std::vector<std::shared_ptr<void>> saved_;
  virtual void prepare_own(DType dtype) {}  // this module's own weights (children are visited by prepare_inference)
  virtual void drop_own() {}
  void observe(const char* what, const Tensor& value) const;

 protected:
  bool training_ = true;
  std::string name_;
};

class Linear : public Module {
 public:
  Linear() = default;
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& input) const;
  Parameter weight, bias;  // (out, in), (out) or undefined
  Tensor dweight, dbias;
  int64_t in_features = 0, out_features = 0;
  std::shared_ptr<const kernels::PackedLinear> packed;  // set by prepare_inference

 protected:
  void prepare_own(DType dtype) override;
  void drop_own() override { packed.reset(); }

 protected:
  void members(Members& m) override;
};

class LayerNorm : public Module {
 public:
  LayerNorm() = default;
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  // Normalises over the trailing dims equal to normalized_shape (weight and bias have that shape), as torch.
  explicit LayerNorm(const Shape& normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  Tensor forward(const Tensor& input) const;
  Tensor backward(const Tensor& grad_output);
  Tensor apply(const Tensor& input) const;  // forward without clearing earlier saves (for use inside layers)
  // apply(x + residual) in one pass (layers' residual connections). x must be contiguous and owned by the
  // caller: it becomes x + residual with keep_sum (the result is then a new tensor), else it holds the result.
  Tensor add_apply(Tensor& x, const Tensor& residual, bool keep_sum) const;
  Parameter weight, bias;
  Tensor dweight, dbias;
  Shape normalized_shape;
  double eps = 1e-5;

 protected:
  void members(Members& m) override;
};

class RMSNorm : public Module {
 public:
  RMSNorm() = default;
  // eps unset = torch's default, the float32 machine epsilon.
  explicit RMSNorm(int64_t normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  explicit RMSNorm(const Shape& normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  Tensor forward(const Tensor& input) const;
  // Gradient of the input for the last training-mode forward; accumulates the weight's gradient (named_grads()).
  Tensor backward(const Tensor& grad_output);
  Tensor apply(const Tensor& input) const;  // forward without clearing earlier saves (for use inside layers)
  Parameter weight;
  Tensor dweight;
  Shape normalized_shape;
  double eps = 0;

 protected:
  void members(Members& m) override;
};

// The normalisation of a Transformer layer or stack: LayerNorm (torch's layers, BERT) or RMSNorm (T5 and LLaMA-style
// layers), chosen at construction. Its parameters are the chosen norm's own - "weight", plus "bias" for a LayerNorm
// with bias - so a layer's state_dict has the names torch gives it after `layer.norm1 = nn.RMSNorm(d_model)`.
// Converts implicitly from a LayerNorm or RMSNorm (copying its parameters), so either can be passed where a
// stack takes its final norm.
enum class NormKind { layer_norm, rms_norm };
NormKind parse_norm(const std::string& name);  // "layer_norm" | "rms_norm"
const char* norm_name(NormKind kind);

class Norm : public Module {
 public:
  Norm() = default;
  // eps as the chosen norm takes it (RMSNorm: unset = float32 machine epsilon); bias only for a LayerNorm.
  Norm(NormKind kind, int64_t normalized_shape, std::optional<double> eps = std::nullopt, bool bias = true);
  Norm(const LayerNorm& layer_norm);  // NOLINT(google-explicit-constructor): a norm is either kind
  Norm(const RMSNorm& rms_norm);      // NOLINT(google-explicit-constructor)
  Tensor forward(const Tensor& input) const;
  Tensor backward(const Tensor& grad_output);
  Tensor apply(const Tensor& input) const;  // forward without clearing earlier saves (for use inside layers)
  // apply(x + residual): LayerNorm::add_apply's contract (one fused pass for a LayerNorm; an add, then the norm,
  // for an RMSNorm, whose result is then a new tensor).
  Tensor add_apply(Tensor& x, const Tensor& residual, bool keep_sum) const;
  NormKind kind = NormKind::layer_norm;
  Parameter weight, bias;  // bias: LayerNorm with bias only
  Tensor dweight, dbias;
  Shape normalized_shape;
  double eps = 1e-5;

 protected:
  void members(Members& m) override;
};

// Activation of the position-wise feed-forward network. Gated kinds (swiglu, geglu) make linear1 produce
// 2*dim_feedforward features [a | b] and use act(a) * b (silu for swiglu, erf-gelu for geglu).
enum class Activation { relu, gelu, gelu_tanh, silu, swiglu, geglu };
Activation parse_activation(const std::string& name);  // torch's "relu"/"gelu" and the names above
const char* activation_name(Activation act);

struct AttentionResult {
  Tensor output;   // like query
  Tensor weights;  // (B, T, S) averaged over heads or (B, H, T, S); undefined unless need_weights
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention() = default;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool add_bias_kv = false, bool add_zero_attn = false, std::optional<int64_t> kdim = std::nullopt,
                     std::optional<int64_t> vdim = std::nullopt, bool batch_first = false);
  // query (T, B, E) or (B, T, E) with batch_first, or unbatched (T, E); key/value likewise with S.
  AttentionResult forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                          const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                          bool is_causal = false) const;
  // Self-attention backward (query = key = value, packed in-projection): the gradient of the query.
  Tensor backward(const Tensor& grad_output);
  // d_attn_mask, when non-null, receives (B, H, T, S): the gradient of a float attn_mask added to the scores.
  // Cross-attention on one memory (key is value, packed in-projection) returns the query's gradient and needs
  // d_key_value, which receives the memory's.
  Tensor backward_batch_first(const Tensor& grad_output, Tensor* d_attn_mask = nullptr,
                              Tensor* d_key_value = nullptr);
  // The same on batch-first 3-D tensors, the form layers use internally.
  // cu_seqlens (inference, self-attention, no weights): query is (1, N, E) holding sequences back to back,
  // sequence b in rows [cu_seqlens[b], cu_seqlens[b+1]), each attending within itself (ops::AttentionMasks).
  AttentionResult forward_batch_first(const Tensor& query, const Tensor& key, const Tensor& value,
                                      const Tensor& key_padding_mask, bool need_weights, const Tensor& attn_mask,
                                      bool average_attn_weights, bool is_causal,
                                      const std::vector<int64_t>* cu_seqlens = nullptr) const;

  int64_t embed_dim = 0, num_heads = 0, head_dim = 0, kdim = 0, vdim = 0;
  double dropout = 0.0;
  bool batch_first = false;
  // torch's layout: packed in_proj_weight (3E, E) when kdim == vdim == E, else separate q/k/v weights.
  Parameter in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  Tensor din_proj_weight, dq_proj_weight, dk_proj_weight, dv_proj_weight, din_proj_bias;
  Linear out_proj;
  uint64_t dropout_seed = 0;
  std::shared_ptr<const kernels::PackedLinear> packed_in_proj;  // set by prepare_inference (packed Q, K, V)

  // For loaders whose checkpoint keeps query, key and value apart (views of its file mapping, each (E, E)):
  // in_proj_weight becomes these rows stacked, without being built. prepare_inference stacks them in a transient
  // copy it prepares from (or, on the lazy fp32 path, keeps until packed; kernels.hpp), and in_proj_weight is
  // built from the rows, exactly, only when anything else needs it (listing parameters, training, dropping the
  // prepared copy). A later preparation frees it again only if it still equals the rows; one that training or
  // load_state_dict changed stays, and the rows are forgotten. Resident memory after load holds one copy of the
  // projection instead of two, and a load for inference never makes the stacked copy of every layer at once.
  void use_in_proj_rows(std::vector<Tensor> query_key_value);

 protected:
  void prepare_own(DType dtype) override;
  void drop_own() override;
  void expose_parameters() override { rebuild_in_proj(); }  // whoever lists the parameters may read or change them

 private:
  std::vector<Tensor> in_proj_rows_;  // use_in_proj_rows; cleared when a preparation finds the weight changed
  bool in_proj_freed_ = false;        // in_proj_weight not held (not built yet, or freed); in_proj_rows_ hold it
  void rebuild_in_proj();             // in_proj_weight from in_proj_rows_ (no-op unless freed)
  bool in_proj_equals_rows() const;   // in_proj_weight bit for bit the stacked in_proj_rows_
  Tensor in_proj_rows(int64_t i0, int64_t i1) const;  // rows [i0·E, i1·E) of in_proj_weight, freed or not

 protected:
  void members(Members& m) override;
};

// Dropout probability at each site of an encoder layer (training only). torch.nn.TransformerEncoderLayer(dropout=p)
// drops at all four sites (torch(p)); Hugging Face BERT-family layers drop the attention probabilities
// (attention_probs_dropout_prob) and the outputs of the attention output dense and the FFN output dense, before
// their residual + LayerNorm (hidden_dropout_prob), but never the FFN hidden (hugging_face(...)).
struct EncoderLayerDropout {
  double attention_probs = 0.0;   // softmax(q·kᵀ) before it weights v (self_attn.dropout)
  double attention_output = 0.0;  // self_attn's output projection, before the residual
  double ffn_hidden = 0.0;        // act(linear1(x)), before linear2
  double ffn_output = 0.0;        // linear2's output, before the residual
  static EncoderLayerDropout torch(double p) { return {p, p, p, p}; }
  static EncoderLayerDropout hugging_face(double attention_probs, double hidden) {
    return {attention_probs, hidden, 0.0, hidden};
  }
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer() = default;
  // norm: "layer_norm" (torch's layer) or "rms_norm" (norm1/norm2 are RMSNorm(d_model, layer_norm_eps), no bias).
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          const std::string& activation = "relu", double layer_norm_eps = 1e-5,
                          bool batch_first = false, bool norm_first = false, bool bias = true,
                          const std::string& norm = "layer_norm");

  Tensor forward(const Tensor& src, const Tensor& src_mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false) const;
  // Batch-first 3-D form; when attn_weights is non-null it receives per-head weights (B, H, T, T).
  // cu_seqlens: a padding-free batch (1, N, d_model), see MultiheadAttention::forward_batch_first.
  Tensor forward_batch_first(const Tensor& x, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                             bool is_causal, Tensor* attn_weights = nullptr,
                             const std::vector<int64_t>* cu_seqlens = nullptr) const;
  Tensor backward(const Tensor& grad_output);  // gradient of src, in src's layout
  // d_src_mask, when non-null, receives the gradient of a float src_mask added to the scores, per sequence
  // and head (B, H, T, T) - for learned attention biases (MPNet's relative positions).
  Tensor backward_batch_first(const Tensor& grad_output, Tensor* d_src_mask = nullptr);

  // Per-site dropout; also sets self_attn.dropout (the attention-probabilities site). Checked to be in [0, 1].
  void set_dropout(const EncoderLayerDropout& sites);
  const EncoderLayerDropout& dropout_sites() const { return dropout_sites_; }

 protected:
  Tensor forward_train(const Tensor& x, const Tensor& src_mask, const Tensor& src_key_padding_mask, bool is_causal,
                       Tensor* attn_weights) const;

 public:

  MultiheadAttention self_attn;
  Linear linear1, linear2;
  Norm norm1, norm2;  // LayerNorm by default; RMSNorm with norm = "rms_norm"
  int64_t d_model = 0, dim_feedforward = 0;
  Activation activation = Activation::relu;
  bool batch_first = false, norm_first = false;

 private:
  EncoderLayerDropout dropout_sites_;  // torch(dropout) from the constructor; change with set_dropout

 protected:
  void members(Members& m) override;
};

// Every layer's output (and, on request, attention weights) besides the final result.
struct EncoderTrace {
  bool want_hidden_states = false, want_attentions = false;
  std::vector<Tensor> hidden_states;  // input embeddings first, then each layer's output (batch-first)
  std::vector<Tensor> attentions;     // per layer (B, H, T, T)
};

class TransformerEncoder : public Module {
 public:
  TransformerEncoder() = default;
  // num_layers deep copies of encoder_layer (as torch does) or, with share_parameters, one layer applied
  // num_layers times (ALBERT's cross-layer sharing).
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::optional<Norm> norm = std::nullopt, bool share_parameters = false);
  Tensor forward(const Tensor& src, const Tensor& mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 std::optional<bool> is_causal = std::nullopt, EncoderTrace* trace = nullptr) const;
  Tensor backward(const Tensor& grad_output);  // gradient of src, in src's layout

  // Training: keep only each layer's input and recompute the layer's forward during backward (less memory,
  // about one more forward of compute). Gradients are bitwise those without it (same ops, same dropout masks).
  void set_gradient_checkpointing(bool enabled) { gradient_checkpointing = enabled; }

  std::vector<TransformerEncoderLayer> layers;
  std::optional<Norm> norm;
  int64_t num_layers = 0;
  bool share_parameters = false;
  bool batch_first = false;
  bool gradient_checkpointing = false;

 protected:
  Tensor forward_train(const Tensor& x, const Tensor& mask, const Tensor& kpm, bool causal, EncoderTrace* trace) const;

 protected:
  void members(Members& m) override;
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer() = default;
  // norm: "layer_norm" or "rms_norm" (norm1..norm3), as TransformerEncoderLayer.
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          const std::string& activation = "relu", double layer_norm_eps = 1e-5,
                          bool batch_first = false, bool norm_first = false, bool bias = true,
                          const std::string& norm = "layer_norm");

  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 bool memory_is_causal = false) const;
  Tensor forward_batch_first(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask,
                             const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                             const Tensor& memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal) const;
  // Training: the gradients of tgt and of memory (in their layouts) for the last training-mode forward;
  // accumulates parameter gradients.
  std::pair<Tensor, Tensor> backward(const Tensor& grad_output);
  std::pair<Tensor, Tensor> backward_batch_first(const Tensor& grad_output);

 protected:
  Tensor forward_train(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
                       const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                       bool memory_is_causal) const;

 public:
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1, linear2;
  Norm norm1, norm2, norm3;  // LayerNorm by default; RMSNorm with norm = "rms_norm"
  int64_t d_model = 0, dim_feedforward = 0;
  double dropout = 0.1;
  Activation activation = Activation::relu;
  bool batch_first = false, norm_first = false;

 protected:
  void members(Members& m) override;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder() = default;
  TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers,
                     std::optional<Norm> norm = std::nullopt);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), std::optional<bool> tgt_is_causal = std::nullopt,
                 bool memory_is_causal = false) const;

  std::vector<TransformerDecoderLayer> layers;
  std::optional<Norm> norm;
  int64_t num_layers = 0;
  bool batch_first = false;

 protected:
  void members(Members& m) override;
};

class Transformer : public Module {
 public:
  Transformer(int64_t d_model = 512, int64_t nhead = 8, int64_t num_encoder_layers = 6,
              int64_t num_decoder_layers = 6, int64_t dim_feedforward = 2048, double dropout = 0.1,
              const std::string& activation = "relu", double layer_norm_eps = 1e-5, bool batch_first = false,
              bool norm_first = false, bool bias = true, const std::string& norm = "layer_norm");
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), std::optional<bool> src_is_causal = std::nullopt,
                 std::optional<bool> tgt_is_causal = std::nullopt, bool memory_is_causal = false) const;

  TransformerEncoder encoder;
  TransformerDecoder decoder;
  int64_t d_model = 0, nhead = 0;
  bool batch_first = false;

 protected:
  void members(Members& m) override;
};

// The (length, d_model) sinusoidal positional-encoding table for positions [start, start + length) ("Attention Is
// All You Need"): pe[p, 2i] = sin(p / 10000^(2i / d_model)), pe[p, 2i + 1] = cos(p / 10000^(2i / d_model)).
Tensor sinusoidal_positions(int64_t start, int64_t length, int64_t d_model);

// torch.nn.Embedding: a table of num_embeddings vectors of embedding_dim; forward gathers the rows of int64 ids,
// (*) -> (*, embedding_dim). The padding_idx row gets no gradient (as torch's). Initialised as every encore layer
// (Xavier-uniform; torch draws normal(0, 1) and zeroes the padding row). Training: forward saves the ids and
// backward(grad_output) accumulates into the table's gradient (integer ids have none).
class Embedding : public Module {
 public:
  Embedding() = default;
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  // Wraps a table (num_embeddings, embedding_dim), sharing its storage (loaders: a checkpoint's mapped weights).
  explicit Embedding(const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& input) const;
  // forward without clearing earlier saves (for use inside modules); `what` names the ids in errors.
  Tensor apply(const Tensor& input, const char* what = "input") const;
  void backward(const Tensor& grad_output);
  Parameter weight;
  Tensor dweight;
  int64_t num_embeddings = 0, embedding_dim = 0;
  std::optional<int64_t> padding_idx;

 protected:
  void members(Members& m) override;
};

// While alive on this thread, module constructors allocate parameters without initialising them (for
// loaders that overwrite every parameter anyway).
class NoInitGuard {
 public:
  NoInitGuard();
  ~NoInitGuard();
  NoInitGuard(const NoInitGuard&) = delete;
  NoInitGuard& operator=(const NoInitGuard&) = delete;

 private:
  bool previous_;
};

// Seeds the generator that constructors use for initialisation and that training-mode dropout draws
// from (like torch.manual_seed; the random streams themselves differ from torch's).
void manual_seed(uint64_t seed);

// torch.nn.Transformer.generate_square_subsequent_mask: (T, T) float, -inf above the diagonal, 0 elsewhere.
Tensor generate_square_subsequent_mask(int64_t size);

}  // namespace encore::nn
