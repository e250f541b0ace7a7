// StackedEncoder: the forward every family shares (inference and training) and its backward, with Hugging Face's
// dropout placement and gradient checkpointing; ClassificationHead, the heads of the *ForSequenceClassification and
// *ForTokenClassification models.
#include <random>
#include <set>

#include "models/layer_stack.hpp"
#include "models/model.hpp"
#include "nn/common.hpp"
#include "nn/layer_stack.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::models {

// ---------------- ClassificationHead ----------------

Tensor ClassificationHead::forward(const Tensor& x, Saved* sv) const {
  if (!sv) {  // inference: no dropout, activation fused into the dense GEMM
    Tensor h = dense ? ops::linear_forward(x, dense->weight, dense->bias, act) : x;
    return ops::linear_forward(h, out.weight, out.bias);
  }
  sv->x = x;
  sv->seed_in = nn::detail::next_seed();
  sv->dropped_x = ops::dropout_forward(x, dropout_in, true, sv->seed_in);
  Tensor h = sv->dropped_x;
  if (dense) h = ops::linear_forward_train(&sv->pre, h, dense->weight, dense->bias, act);
  sv->seed_hidden = nn::detail::next_seed();
  sv->hidden = ops::dropout_forward(h, dropout_hidden, true, sv->seed_hidden);
  return ops::linear_forward(sv->hidden, out.weight, out.bias);
}

Tensor ClassificationHead::backward(const Saved& sv, const Tensor& dlogits) {
  // in the forward pass this was:  logits = dropout_hidden(act(dense(dropout_in(x))))·Wᵀ + b
  Tensor dh = nn::detail::linear_backward(out, dlogits, sv.hidden);
  ops::dropout_backward(&dh, dh, dropout_hidden, true, sv.seed_hidden);
  if (dense) dh = nn::detail::linear_backward(*dense, dh, sv.dropped_x, sv.pre, act);
  Tensor dx;
  ops::dropout_backward(&dx, dh, dropout_in, true, sv.seed_in);
  return dx;
}

void ClassificationHead::members(nn::Members& m, const std::string& prefix) {
  if (dense) m.child(prefix + dense_name, *dense);
  m.child(prefix + out_name, out);
}

ClassificationHead head_layout(ClassificationHead::Input input, const std::string& dense_name,
                               const std::string& out_name, kernels::Act act, double dropout_in, double dropout_hidden) {
  ClassificationHead h;
  h.input = input;
  h.act = act;
  h.dropout_in = dropout_in;
  h.dropout_hidden = dropout_hidden;
  h.dense_name = dense_name;
  h.out_name = out_name;
  if (!dense_name.empty()) h.dense = nn::Linear();
  return h;
}

ClassificationHead take_head(Weights& w, const ClassificationHead& layout, int64_t num_labels, int64_t hidden) {
  ClassificationHead h = layout;
  if (h.dense) h.dense = take_linear(w, h.dense_name, hidden, hidden);
  h.out = take_linear(w, h.out_name, num_labels, hidden);
  return h;
}

double classifier_dropout(const HfConfig& cfg) {
  return cfg.has("classifier_dropout") ? cfg.get_double("classifier_dropout") : cfg.get_double("hidden_dropout_prob", 0.1);
}

// ---------------- StackedEncoder ----------------

struct StackedEncoder::Saved {
  Tensor project_in;
  nn::detail::LayerStackSaved layers;
  Tensor pooler_in, pooler_pre;
  ClassificationHead::Saved head;
  bool logits = false;
  int64_t B = 0, T = 0;
};

Tensor StackedEncoder::position_ids(const Tensor& ids) const { return absolute_position_ids(ids.size(0), ids.size(1)); }

void StackedEncoder::load_layers(Weights& w, const EncoderDims& d, int64_t count,
                                 const std::function<std::string(int64_t)>& prefix) {
  for (int64_t i = 0; i < count; ++i) {
    layer_prefixes.push_back(prefix(i));
    layers.push_back(load_post_ln_layer(w, layer_prefixes.back(), layer_names, d.hidden, d.heads, d.intermediate,
                                        d.activation, d.eps, info.num_parameters));
  }
}

void StackedEncoder::select_head(const HfConfig& cfg, Weights& root, double token_dropout) {
  using In = ClassificationHead::Input;
  token_head_dropout = token_dropout;
  ClassificationHead layout;
  if (architecture_ends_with(cfg, "ForSequenceClassification") && root.has(sequence_head_layout.out_name + ".weight")) {
    layout = sequence_head_layout;
    info.head = "sequence_classification";
  } else if (architecture_ends_with(cfg, "ForTokenClassification") && root.has("classifier.weight")) {
    layout = head_layout(In::every_token, "", "classifier", kernels::Act::none, token_dropout, 0.0);
    info.head = "token_classification";
  } else if (architecture_ends_with(cfg, "ForQuestionAnswering") && root.has(qa_head_layout.out_name + ".weight")) {
    info.head = "question_answering";
    read_question_answering_labels(cfg, info);
    head = take_head(root, qa_head_layout, info.num_labels, info.hidden_size);
    return;
  } else {
    // *ForPreTraining checkpoints (BERT's, ALBERT's) hold the masked-LM head too, under the same names
    if (architecture_ends_with(cfg, "ForMaskedLM") || architecture_ends_with(cfg, "ForPreTraining")) {
      const bool tied = !cfg.has("tie_word_embeddings") || cfg.json()["tie_word_embeddings"] == true;
      masked_lm = take_masked_lm_head(root, masked_lm_layout, info.hidden_size,
                                      masked_lm_width ? masked_lm_width : info.hidden_size,
                                      embeddings.word_embeddings.weight.size(0), tied);
      if (masked_lm) info.head = "masked_lm";
    }
    return;
  }
  read_labels(cfg, info);
  ENCORE_CHECK(layout.input != In::pooled || pooler, cfg.source(), ": a sequence-classification head needs the pooler");
  head = take_head(root, layout, info.num_labels, info.hidden_size);
}

void StackedEncoder::for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) {
  for (auto& l : layers) fn(l);
}

std::vector<nn::TransformerEncoderLayer*> StackedEncoder::layer_order() {
  std::vector<nn::TransformerEncoderLayer*> order;
  if (run_order.empty())
    for (auto& l : layers) order.push_back(&l);
  for (size_t i : run_order) order.push_back(&layers.at(i));
  return order;
}

std::vector<const nn::TransformerEncoderLayer*> StackedEncoder::layer_order() const {
  std::vector<const nn::TransformerEncoderLayer*> order;
  if (run_order.empty())
    for (const auto& l : layers) order.push_back(&l);
  for (size_t i : run_order) order.push_back(&layers.at(i));
  return order;
}

void StackedEncoder::members(nn::Members& m) {
  m.child("embeddings", embeddings);
  if (project) m.child(project_name, *project);
  for (size_t i = 0; i < layers.size(); ++i)  // "encoder.layer.3." names child "encoder.layer.3"
    m.child(layer_prefixes[i].substr(0, layer_prefixes[i].size() - 1), layers[i]);
  extra_members(m);
  if (pooler) m.child(pooler_name, *pooler);
  if (head) head->members(m, "");
}

// The parameters under transformers' names. Base-model names are the parameters' own (relative to the base
// prefix), each layer's through layer_names (the packed Q/K/V split back into three by rows); with a head they
// live under hf_base_prefix, as the task model keeps them, and the head's names stay at the root.
HfExport StackedEncoder::export_hf() {
  HfExport out;
  const bool task = head.has_value();  // a masked-LM head is not exported: the base model is
  out.architecture = hf_class_stem + (info.head == "sequence_classification" ? "ForSequenceClassification"
                                      : info.head == "token_classification" ? "ForTokenClassification"
                                      : info.head == "question_answering"   ? "ForQuestionAnswering"
                                                                             : "Model");
  std::set<const Tensor*> head_params;
  if (head) {
    std::vector<nn::ParamRef> refs;
    nn::ParameterList list("", refs);
    head->members(list, "");
    for (auto& r : refs) head_params.insert(r.param);
  }
  std::map<const Tensor*, std::vector<std::string>> in_layers;  // layer parameter -> its checkpoint names
  for (size_t i = 0; i < layers.size(); ++i)
    for (auto& [local, p] : layers[i].named_parameters()) {
      std::vector<std::string> names = layer_names.hf_names(local);
      for (auto& n : names) n = layer_prefixes[i] + n;
      in_layers[p] = std::move(names);
    }
  for (auto& [name, p] : named_parameters()) {
    const std::string base = task ? hf_base_prefix : "";
    if (head_params.count(p)) {
      out.tensors.emplace_back(name, p->contiguous());
      continue;
    }
    auto it = in_layers.find(p);
    if (it == in_layers.end()) {
      out.tensors.emplace_back(base + name, p->contiguous());
      continue;
    }
    const int64_t parts = static_cast<int64_t>(it->second.size()), rows = p->size(0) / parts;
    for (int64_t i = 0; i < parts; ++i)
      out.tensors.emplace_back(base + it->second[i], parts == 1 ? p->contiguous()
                                                                : p->slice(0, i * rows, (i + 1) * rows).contiguous());
  }
  return out;
}

std::vector<std::string> StackedEncoder::layer_linear_weight_names() {
  std::vector<std::string> out;
  for (size_t i = 0; i < layers.size(); ++i)
    for (const char* local : {"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight", "linear2.weight"})
      for (const std::string& n : layer_names.hf_names(local)) out.push_back(hf_checkpoint_prefix + layer_prefixes[i] + n);
  return out;
}

std::vector<EncoderModel::LinearSlot> StackedEncoder::layer_linear_slots() {
  std::vector<LinearSlot> out;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto names = [&](const char* local) {
      std::vector<std::string> full;
      for (const std::string& n : layer_names.hf_names(local)) full.push_back(hf_checkpoint_prefix + layer_prefixes[i] + n);
      return full;
    };
    nn::TransformerEncoderLayer& l = layers[i];
    out.push_back({names("self_attn.in_proj_weight"), &l.self_attn.packed_in_proj});
    out.push_back({names("self_attn.out_proj.weight"), &l.self_attn.out_proj.packed});
    out.push_back({names("linear1.weight"), &l.linear1.packed});
    out.push_back({names("linear2.weight"), &l.linear2.packed});
  }
  return out;
}

void StackedEncoder::set_hf_dropout(double hidden, double attention_probs) {
  embeddings.dropout = hidden;
  for_each_layer([&](nn::TransformerEncoderLayer& l) {
    l.set_dropout(nn::EncoderLayerDropout::hugging_face(attention_probs, hidden));
  });
}

namespace {

// transformers' _init_weights for a new head's Linear: weight ~ normal(0, 0.02) (mt19937_64, row-major), bias 0.
void init_head_linear(nn::Linear& l, int64_t out, int64_t in, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 0.02f);
  l.weight = Tensor::empty({out, in});
  l.bias = Tensor::zeros({out});
  l.in_features = in;
  l.out_features = out;
  l.dweight = l.dbias = Tensor();
  for (int64_t i = 0; i < out * in; ++i) l.weight.data<float>()[i] = normal(rng);
}

}  // namespace

void StackedEncoder::add_sequence_classifier(int64_t num_labels, uint64_t seed) {
  ENCORE_CHECK(num_labels > 0, "add_sequence_classifier: num_labels must be positive");
  ClassificationHead c = sequence_head_layout;
  ENCORE_CHECK(!c.out_name.empty(), "add_sequence_classifier: no sequence-classification head is known for model_type '",
               info.model_type, "'");
  ENCORE_CHECK(c.input != ClassificationHead::Input::pooled || pooler, "add_sequence_classifier: ", info.model_type,
               "'s sequence classifier reads the pooler, which this checkpoint does not have");
  std::mt19937_64 rng(seed);
  init_head_linear(c.out, num_labels, info.hidden_size, rng);
  if (c.dense) init_head_linear(*c.dense, info.hidden_size, info.hidden_size, rng);
  head = std::move(c);
  masked_lm.reset();  // a classifier replaces the checkpoint's masked-LM head
  info.head = "sequence_classification";
  info.num_labels = num_labels;
}

void StackedEncoder::add_token_classifier(int64_t num_labels, uint64_t seed) {
  ENCORE_CHECK(num_labels > 0, "add_token_classifier: num_labels must be positive");
  ClassificationHead c = head_layout(ClassificationHead::Input::every_token, "", "classifier", kernels::Act::none,
                                     token_head_dropout, 0.0);
  std::mt19937_64 rng(seed);
  init_head_linear(c.out, num_labels, info.hidden_size, rng);
  head = std::move(c);
  info.head = "token_classification";
  info.num_labels = num_labels;
}

void StackedEncoder::set_dropout(double p) {
  embeddings.dropout = p;
  const nn::EncoderLayerDropout& m = layer_sites;
  for_each_layer([&](nn::TransformerEncoderLayer& l) {
    l.set_dropout({p * m.attention_probs, p * m.attention_output, p * m.ffn_hidden, p * m.ffn_output});
  });
  for (ClassificationHead* h : {head ? &*head : nullptr, &sequence_head_layout, &qa_head_layout}) {
    if (!h) continue;
    h->dropout_in = h->input_dropout_site ? p : 0.0;
    h->dropout_hidden = h->dense ? p : 0.0;
  }
}

ModelOutput StackedEncoder::forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                                    const ForwardOptions& opt) const {
  auto [B, T] = check_inputs(ids, mask, types);
  if (max_sequence_length() == info.max_position_embeddings) {
    ENCORE_CHECK(T <= info.max_position_embeddings, "input length ", T, " exceeds max_position_embeddings ",
                 info.max_position_embeddings);
  } else {
    ENCORE_CHECK(T <= max_sequence_length(), "input length ", T, " exceeds the model's maximum ", max_sequence_length(),
                 " (max_position_embeddings - padding_idx - 1)");
  }
  if (training_) clear_saved();
  auto sv = training_ ? std::make_shared<Saved>() : nullptr;
  ModelOutput out;
  const Tensor positions = position_ids(ids);
  Tensor x = embeddings.forward(ids, positions, types);
  if (project) {
    if (sv) sv->project_in = x;
    x = ops::linear_forward(x, project->weight, project->bias);
  }
  const Tensor bias = attention_bias(B, T);
  const Tensor kpm = key_padding_from_attention_mask(mask, B, T);
  if (sv) {
    const StackRecorder record{opt, nullptr, out};
    record.input(x);
    out.last_hidden_state = nn::detail::layer_stack_forward_train(
        sv->layers, layer_order(), x, bias, kpm, false, gradient_checkpointing, opt.output_attentions,
        [&](size_t, const Tensor& h, const Tensor& w) { record.layer(h, w); });
  } else {
    out.last_hidden_state = run_layers(layer_order(), x, bias, kpm, opt, out);
  }
  if (pooler) {
    Tensor first = first_token(out.last_hidden_state);
    if (sv) {
      sv->pooler_in = first;
      out.pooler_output = ops::linear_forward_train(&sv->pooler_pre, first, pooler->weight, pooler->bias,
                                                    kernels::Act::tanh);
    } else {
      out.pooler_output = ops::linear_forward(first, pooler->weight, pooler->bias, kernels::Act::tanh);
    }
  }
  if (head && opt.compute_logits) {
    using In = ClassificationHead::Input;
    const Tensor in = head->input == In::pooled        ? out.pooler_output
                      : head->input == In::first_token ? first_token(out.last_hidden_state)
                                                       : out.last_hidden_state;
    ENCORE_CHECK(in.defined(), "the classification head reads the pooler, which this model does not have");
    out.logits = head->forward(in, sv ? &sv->head : nullptr);
    if (sv) sv->logits = true;
  } else if (masked_lm && opt.compute_logits && !sv) {
    out.logits = masked_lm->forward(out.last_hidden_state, embeddings.word_embeddings.weight);
  }
  if (sv) {
    sv->B = B;
    sv->T = T;
    push_saved(sv);
  }
  return out;
}

void StackedEncoder::backward(const Tensor& d_last, const Tensor& d_pooler, const Tensor& d_logits) {
  auto sv = pop_saved<Saved>(info.model_type.empty() ? "model" : info.model_type.c_str());
  const int64_t H = info.hidden_size;
  Tensor dlast = d_last.defined() ? d_last.contiguous().clone() : Tensor::zeros({sv->B, sv->T, H});
  check_shape(dlast, "d_last_hidden_state", {sv->B, sv->T, H});
  Tensor dpool = d_pooler.defined() ? d_pooler.contiguous().clone() : Tensor();
  auto add_to_first_token = [&](const Tensor& d) {  // dlast[:, 0] += d
    Tensor first = dlast.select(1, 0);
    first.copy_from(ops::add_forward(first.contiguous(), d));
  };
  if (d_logits.defined()) {
    ENCORE_CHECK(head && sv->logits, "backward: d_logits given but no logits were computed");
    Tensor din = head->backward(sv->head, d_logits);
    using In = ClassificationHead::Input;
    if (head->input == In::every_token) {
      ops::add_forward_(dlast, din);
    } else if (head->input == In::first_token) {
      add_to_first_token(din);
    } else if (dpool.defined()) {
      ops::add_forward_(dpool, din);
    } else {
      dpool = din;
    }
  }
  if (dpool.defined()) {
    ENCORE_CHECK(pooler, "backward: d_pooler given but the model has no pooler");
    // in the forward pass this was:  pooler_output = tanh(last_hidden[:, 0]·Wᵀ + b)
    add_to_first_token(nn::detail::linear_backward(*pooler, dpool, sv->pooler_in, sv->pooler_pre, kernels::Act::tanh));
  }
  Tensor dbias;
  Tensor d = nn::detail::layer_stack_backward(sv->layers, layer_order(), dlast, sv->layers.mask.defined() ? &dbias : nullptr);
  if (dbias.defined()) attention_bias_backward(dbias);
  if (project) d = nn::detail::linear_backward(*project, d, sv->project_in);
  embeddings.backward(d);
}

}  // namespace encore::models

namespace encore {
HfExport AutoModel::export_hf() const { return impl_->export_hf(); }
}  // namespace encore
