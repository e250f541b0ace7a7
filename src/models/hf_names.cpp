// Parameters back under transformers' names: the loaders record which checkpoint tensors each parameter was
// built from (HfSourceRecorder), export_hf turns that record around for saving a trained model.
//
// Contract of the record: a parameter whose storage is exactly a tensor Weights::take returned maps to that
// one name; a packed in_proj (cat_rows of query, key, value) maps to the three names, stacked by rows in that
// order. Parameters built otherwise (a head added after loading) are not recorded and keep encore's name.
#include "models/model.hpp"

namespace encore::models {

namespace {
thread_local HfSourceRecorder* t_recorder = nullptr;

// Class-name stem of each family in transformers (BertModel, RobertaForSequenceClassification, ...).
std::string family_stem(const std::string& model_type) {
  static const std::map<std::string, std::string> stems = {
      {"bert", "Bert"},         {"roberta", "Roberta"}, {"xlm-roberta", "XLMRoberta"}, {"electra", "Electra"},
      {"distilbert", "DistilBert"}, {"albert", "Albert"}, {"mpnet", "MPNet"}};
  auto it = stems.find(model_type);
  ENCORE_CHECK(it != stems.end(), "export: no transformers class is known for model_type '", model_type, "'");
  return it->second;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
}  // namespace

HfSourceRecorder::HfSourceRecorder() : previous_(t_recorder) { t_recorder = this; }
HfSourceRecorder::~HfSourceRecorder() { t_recorder = previous_; }

void record_source(const Tensor& t, std::vector<std::string> names) {
  if (t_recorder && t.defined()) t_recorder->by_storage_[t.raw_data()] = {t, std::move(names)};
}

void record_layer(nn::TransformerEncoderLayer& layer) {
  if (!t_recorder) return;
  std::map<std::string, std::vector<std::string>> names;
  for (auto& [local, p] : layer.named_parameters()) {
    auto it = p->defined() ? t_recorder->by_storage_.find(p->raw_data()) : t_recorder->by_storage_.end();
    if (it != t_recorder->by_storage_.end()) names[local] = it->second.second;
  }
  t_recorder->layers_.push_back(std::move(names));
}

void record_prefixes(const std::string& base_prefix, const std::string& checkpoint_prefix) {
  if (!t_recorder) return;
  t_recorder->base_prefix_ = base_prefix;
  t_recorder->checkpoint_prefix_ = checkpoint_prefix;
}

void HfSourceRecorder::finish(EncoderModel& model) {
  model.hf_base_prefix = base_prefix_;
  model.hf_checkpoint_prefix = checkpoint_prefix_;
  // Layer parameters by the identity of the Tensor members: the k-th layer's recorded local names.
  std::map<const Tensor*, std::vector<std::string>> in_layers;
  size_t k = 0;
  bool layers_match = true;
  model.for_each_layer([&](nn::TransformerEncoderLayer& layer) {
    if (k >= layers_.size()) {
      layers_match = false;
      return;
    }
    for (auto& [local, p] : layer.named_parameters()) {
      auto it = layers_[k].find(local);
      if (it != layers_[k].end()) in_layers[p] = it->second;
    }
    ++k;
  });
  if (!layers_match || k != layers_.size()) in_layers.clear();  // a family that builds layers otherwise
  for (auto& [name, p] : model.named_parameters()) {
    if (!p->defined()) continue;
    if (auto l = in_layers.find(p); l != in_layers.end()) {
      model.hf_sources[name] = l->second;
    } else if (auto it = by_storage_.find(p->raw_data()); it != by_storage_.end()) {
      model.hf_sources[name] = it->second.second;
    }
  }
}

HfExport EncoderModel::export_hf() const {
  HfExport out;
  const bool task = !info.head.empty();
  const std::string stem = family_stem(info.model_type);
  out.architecture = stem + (info.head == "sequence_classification" ? "ForSequenceClassification"
                             : info.head == "token_classification" ? "ForTokenClassification"
                                                                   : "Model");
  // Base-model names: with a head they live under the family prefix; without one, at the root.
  auto rename = [&](const std::string& n) {
    if (task) return hf_checkpoint_prefix.empty() ? hf_base_prefix + n : n;
    return !hf_checkpoint_prefix.empty() && starts_with(n, hf_checkpoint_prefix) ? n.substr(hf_checkpoint_prefix.size())
                                                                                 : n;
  };
  auto& self = const_cast<EncoderModel&>(*this);  // named_parameters hands out mutable pointers; we only read
  for (auto& [name, p] : self.named_parameters()) {
    auto it = hf_sources.find(name);
    if (it == hf_sources.end()) {  // added after loading (a new classifier): encore uses transformers' name
      out.tensors.emplace_back(name, p->contiguous());
      continue;
    }
    const std::vector<std::string>& src = it->second;
    const int64_t parts = static_cast<int64_t>(src.size());
    ENCORE_CHECK(parts >= 1 && p->size(0) % parts == 0, "export: parameter '", name, "' of shape ", p->shape_str(),
                 " cannot be split into ", parts, " checkpoint tensors");
    const int64_t rows = p->size(0) / parts;
    for (int64_t i = 0; i < parts; ++i)
      out.tensors.emplace_back(rename(src[i]), parts == 1 ? p->contiguous()
                                                          : p->slice(0, i * rows, (i + 1) * rows).contiguous());
  }
  return out;
}

}  // namespace encore::models

namespace encore {
HfExport AutoModel::export_hf() const { return impl_->export_hf(); }
}  // namespace encore
