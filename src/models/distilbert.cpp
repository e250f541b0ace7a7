// DistilBERT: word + absolute position embeddings (no token types), LayerNorm (eps 1e-12), Post-LN layers named
// transformer.layer.N.{attention.{q,k,v,out}_lin, sa_layer_norm, ffn.lin1, ffn.lin2, output_layer_norm}.
// DistilBertForSequenceClassification: pre_classifier + relu over [CLS], dropout, then classifier. Training drops
// (config "dropout") after the embeddings and the FFN output, and (attention_dropout) the attention probabilities.
#include "models/model.hpp"

namespace encore::models {

std::unique_ptr<EncoderModel> load_distilbert(const HfConfig& cfg, const io::WeightStore& store) {
  EncoderDims d;
  d.hidden = cfg.get_int("dim", std::nullopt, 1, 65536);
  d.layers = cfg.get_int("n_layers", std::nullopt, 1, 1000);
  d.heads = cfg.get_int("n_heads", std::nullopt, 1, 4096);
  d.intermediate = cfg.get_int("hidden_dim", std::nullopt, 1, 1 << 20);
  ENCORE_CHECK(d.hidden % d.heads == 0, cfg.source(), ": dim ", d.hidden, " is not divisible by n_heads ", d.heads);
  d.activation = activation_from_hf(cfg.get_string("activation", "gelu"), cfg.source());
  d.eps = 1e-12;  // fixed upstream
  auto m = std::make_unique<StackedEncoder>();
  fill_info(m->info, cfg, d);
  m->hf_class_stem = "DistilBert";
  m->hf_base_prefix = "distilbert.";
  m->hf_checkpoint_prefix = detect_prefix(store, m->hf_base_prefix, "embeddings.word_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->hf_checkpoint_prefix);
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, false);
  m->embeddings.norm.eps = 1e-12;
  m->layer_names = {"attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
                    "sa_layer_norm",   "ffn.lin1",        "ffn.lin2",        "output_layer_norm"};
  m->load_layers(w, d, d.layers, [](int64_t i) { return "transformer.layer." + std::to_string(i) + "."; });
  // dropout after the embeddings and the FFN output; attention_dropout on the probabilities; none after out_lin
  const double p = cfg.get_double("dropout", 0.1);
  m->embeddings.dropout = p;
  m->embeddings.word_embeddings.padding_idx = m->info.pad_token_id;
  m->layer_sites = {1.0, 0.0, 0.0, 1.0};
  for (auto& l : m->layers) l.set_dropout({cfg.get_double("attention_dropout", 0.1), 0.0, 0.0, p});
  m->sequence_head_layout = head_layout(ClassificationHead::Input::first_token, "pre_classifier", "classifier",
                                        kernels::Act::relu, 0.0, cfg.get_double("seq_classif_dropout", 0.2));
  m->sequence_head_layout.input_dropout_site = false;
  m->qa_head_layout.dropout_in = cfg.get_double("qa_dropout", 0.1);  // DistilBertForQuestionAnswering's dropout
  m->qa_head_layout.input_dropout_site = true;
  m->masked_lm_layout = make_masked_lm_layout("vocab_transform", "vocab_layer_norm", "vocab_projector",
                                              "vocab_projector.bias",
                                              kernel_activation(cfg.get_string("activation", "gelu"), cfg.source()), 1e-12);
  m->select_head(cfg, root, p);
  w.finish();
  return m;
}

}  // namespace encore::models
