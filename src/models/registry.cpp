// The model families: config.json's model_type -> the loader its family file defines. Adding a family is its
// file plus one line in ENCORE_FAMILIES (docs/adding_a_family.md); the declarations and the table are both made
// from that list.
#include "models/model.hpp"

// X(model_type, loader, heads, attention and positions): one line per model_type. The last two columns are what
// `encore info --families` and AutoModel::supported_families() print (README's family table is that output); every
// family runs padded and padding-free, in fp32/bf16/int8, and trains (tests/python/test_<family>.py and
// test_models_parity.py / test_model_training.py check each claim against transformers).
// HEADS: the four heads of an encoder family (*ForSequenceClassification, *ForTokenClassification,
// *ForQuestionAnswering, *ForMaskedLM / *ForPreTraining).
#define HEADS "sequence classification, token classification, question answering, masked LM"
#define ENCORE_FAMILIES(X) \
  X("bert", load_bert, HEADS, "bidirectional; absolute positions") \
  X("roberta", load_roberta, HEADS, "bidirectional; absolute positions from pad_token_id + 1") \
  X("xlm-roberta", load_roberta, HEADS, "bidirectional; absolute positions from pad_token_id + 1") \
  X("electra", load_electra, HEADS, "bidirectional; absolute positions") \
  X("distilbert", load_distilbert, HEADS, "bidirectional; absolute positions") \
  X("albert", load_albert, HEADS, "bidirectional; absolute positions; layers shared across groups") \
  X("mpnet", load_mpnet, HEADS, "bidirectional; absolute positions + relative bucket bias") \
  X("modernbert", load_modernbert, HEADS, "bidirectional; rotary, global + sliding-window local layers") \
  X("deberta-v2", load_deberta_v2, HEADS, "bidirectional; disentangled relative attention (c2p/p2c)") \
  X("qwen3", load_qwen3, "sequence classification (last token), token classification, question answering", "causal; rotary, grouped-query; last-token pooling") \
  X("t5", load_t5, "token classification; encoder of T5/T5ForConditionalGeneration", "bidirectional; relative bucket bias, no length limit") \
  X("mt5", load_t5, "token classification; encoder of MT5/MT5ForConditionalGeneration", "bidirectional; relative bucket bias, no length limit")

namespace encore::models {

#define ENCORE_DECLARE_LOADER(type, loader, heads, attention) std::unique_ptr<EncoderModel> loader(const HfConfig&, const io::WeightStore&);
ENCORE_FAMILIES(ENCORE_DECLARE_LOADER)
#undef ENCORE_DECLARE_LOADER

const std::map<std::string, Loader>& registry() {
#define ENCORE_TABLE_ENTRY(type, loader, heads, attention) {type, loader},
  static const std::map<std::string, Loader> families = {ENCORE_FAMILIES(ENCORE_TABLE_ENTRY)};
#undef ENCORE_TABLE_ENTRY
  return families;
}

const std::vector<FamilyDescription>& family_descriptions() {
#define ENCORE_DESCRIPTION(type, loader, heads, attention) {type, heads, attention},
  static const std::vector<FamilyDescription> families = {ENCORE_FAMILIES(ENCORE_DESCRIPTION)};
#undef ENCORE_DESCRIPTION
  return families;
}

}  // namespace encore::models
