// BERT (also MiniLM, BGE, E5, GTE-base): embeddings (word + absolute position + token type, LayerNorm),
// Post-LN layers, optional tanh pooler over [CLS]; heads of BertForSequenceClassification (classifier on the
// pooled output) and BertForTokenClassification (classifier on every token).
#include <random>

#include "models/model.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Bert : public EncoderModel {
 public:
  TokenEmbeddings embeddings;
  std::vector<nn::TransformerEncoderLayer> layers;
  std::optional<LinearWeights> pooler, classifier;
  bool token_head = false;

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "encoder.layer." + std::to_string(i) + ".", out);
    if (pooler) pooler->collect_parameters(prefix + "pooler.dense", out);
    if (classifier) classifier->collect_parameters(prefix + "classifier", out);
  }
  void for_each_child(const std::function<void(nn::Module&, const std::string&)>& fn) override {
    for (size_t i = 0; i < layers.size(); ++i) fn(layers[i], "encoder.layer." + std::to_string(i));
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) override {
    for (auto& l : layers) fn(l);
  }

  void add_sequence_classifier(int64_t num_labels, uint64_t seed) override {
    ENCORE_CHECK(num_labels > 0, "add_sequence_classifier: num_labels must be positive");
    ENCORE_CHECK(pooler, "add_sequence_classifier: BERT's sequence classifier reads the pooler, which this "
                 "checkpoint does not have");
    const int64_t H = info.hidden_size;
    LinearWeights c;
    c.weight = Tensor::empty({num_labels, H});
    c.bias = Tensor::zeros({num_labels});
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 0.02f);
    for (int64_t i = 0; i < num_labels * H; ++i) c.weight.data<float>()[i] = normal(rng);
    classifier = c;
    token_head = false;
    info.head = "sequence_classification";
    info.num_labels = num_labels;
  }

  // What backward needs beyond what the layers save themselves.
  struct Saved {
    TokenEmbeddings::Saved embeddings;
    Tensor pooler_in, pooler_pre, classifier_in;
    int64_t T = 0;
  };

  ModelOutput forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                      const ForwardOptions& opt) const override {
    auto [B, T] = check_inputs(ids, mask, types);
    ENCORE_CHECK(T <= info.max_position_embeddings, "input length ", T, " exceeds max_position_embeddings ",
                 info.max_position_embeddings);
    if (training_) clear_saved();
    auto sv = training_ ? std::make_shared<Saved>() : nullptr;
    ModelOutput out;
    const Tensor positions = absolute_position_ids(B, T);
    Tensor x = sv ? embeddings.forward_train(sv->embeddings, ids, positions, types)
                  : embeddings.forward(ids, positions, types);
    out.last_hidden_state = run_layers(pointers(layers), x, Tensor(), key_padding_from_attention_mask(mask, B, T), opt, out);
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
    if (classifier && opt.compute_logits) {
      const Tensor& in = token_head ? out.last_hidden_state : out.pooler_output;
      out.logits = classifier->apply(in);
      if (sv) sv->classifier_in = in;
    }
    if (sv) {
      sv->T = T;
      push_saved(sv);
    }
    return out;
  }

  void backward(const Tensor& d_last, const Tensor& d_pooler, const Tensor& d_logits) const override {
    auto sv = pop_saved<Saved>("BertModel");
    auto* self = const_cast<Bert*>(this);  // gradients accumulate into the model's own buffers
    auto grad = [](Tensor& g, const Tensor& p) -> Tensor* {
      if (!g.defined() || g.shape() != p.shape()) g = Tensor::zeros(p.shape());
      return &g;
    };
    const int64_t B = sv->embeddings.ids.size(0), H = info.hidden_size;
    Tensor dlast = d_last.defined() ? d_last.contiguous().clone() : Tensor::zeros({B, sv->T, H});
    check_shape(dlast, "d_last_hidden_state", {B, sv->T, H});
    Tensor dpool = d_pooler.defined() ? d_pooler.contiguous().clone() : Tensor();
    if (d_logits.defined()) {
      ENCORE_CHECK(classifier && sv->classifier_in.defined(), "backward: d_logits given but no logits were computed");
      // in the forward pass this was:  logits = classifier_in·Wᵀ + b
      Tensor din;
      ops::linear_backward(&din, grad(self->classifier->dweight, classifier->weight),
                           grad(self->classifier->dbias, classifier->bias), d_logits.contiguous(), Tensor(),
                           sv->classifier_in, classifier->weight);
      if (token_head) {
        ops::add_forward_(dlast, din);
      } else if (dpool.defined()) {
        ops::add_forward_(dpool, din);
      } else {
        dpool = din;
      }
    }
    if (dpool.defined()) {
      ENCORE_CHECK(pooler, "backward: d_pooler given but the model has no pooler");
      // in the forward pass this was:  pooler_output = tanh(last_hidden[:, 0]·Wᵀ + b)
      Tensor dfirst;
      ops::linear_backward(&dfirst, grad(self->pooler->dweight, pooler->weight), grad(self->pooler->dbias, pooler->bias),
                           dpool, sv->pooler_pre, sv->pooler_in, pooler->weight, kernels::Act::tanh);
      Tensor first = dlast.select(1, 0);
      Tensor summed = ops::add_forward(first.contiguous(), dfirst);
      first.copy_from(summed);
    }
    Tensor d = dlast;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) d = it->backward_batch_first(d);
    self->embeddings.backward(sv->embeddings, d);
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_bert(const HfConfig& cfg, const io::WeightStore& store) {
  const std::string pet = cfg.get_string("position_embedding_type", "absolute");
  ENCORE_CHECK(pet == "absolute", cfg.source(), ": position_embedding_type '", pet, "' is not supported (absolute)");
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<Bert>();
  fill_info(m->info, cfg, d);
  Weights root(store, "");
  Weights w = root.sub(detect_prefix(store, "bert.", "embeddings.word_embeddings.weight"));
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, true);
  m->embeddings.padding_idx = cfg.get_int("pad_token_id", 0, 0, 10'000'000);
  m->layers = load_bert_layers(w, d, "encoder.layer.");
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  const bool seq = architecture_ends_with(cfg, "ForSequenceClassification");
  m->token_head = architecture_ends_with(cfg, "ForTokenClassification");
  if ((seq || m->token_head) && root.has("classifier.weight")) {
    read_labels(cfg, m->info);
    ENCORE_CHECK(m->token_head || m->pooler, cfg.source(), ": a sequence-classification head needs the pooler");
    m->classifier = take_linear(root, "classifier", m->info.num_labels, d.hidden);
    m->info.head = m->token_head ? "token_classification" : "sequence_classification";
  }
  w.finish();
  for (auto& l : m->layers) m->info.num_parameters += l.num_parameters();
  return m;
}

}  // namespace encore::models
