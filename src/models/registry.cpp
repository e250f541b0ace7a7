// The model families: config.json's model_type -> the loader its family file defines. Adding a family is its
// file plus one line in ENCORE_FAMILIES (docs/adding_a_family.md); the declarations and the table are both made
// from that list.
#include "models/model.hpp"

// X(model_type, loader): one line per model_type.
#define ENCORE_FAMILIES(X)        \
  X("bert", load_bert)            \
  X("roberta", load_roberta)      \
  X("xlm-roberta", load_roberta)  \
  X("electra", load_electra)      \
  X("distilbert", load_distilbert) \
  X("albert", load_albert)        \
  X("mpnet", load_mpnet)          \
  X("modernbert", load_modernbert) \
  X("deberta-v2", load_deberta_v2) \
  X("qwen3", load_qwen3)           \
  X("t5", load_t5)                \
  X("mt5", load_t5)

namespace encore::models {

#define ENCORE_DECLARE_LOADER(type, loader) std::unique_ptr<EncoderModel> loader(const HfConfig&, const io::WeightStore&);
ENCORE_FAMILIES(ENCORE_DECLARE_LOADER)
#undef ENCORE_DECLARE_LOADER

const std::map<std::string, Loader>& registry() {
#define ENCORE_TABLE_ENTRY(type, loader) {type, loader},
  static const std::map<std::string, Loader> families = {ENCORE_FAMILIES(ENCORE_TABLE_ENTRY)};
#undef ENCORE_TABLE_ENTRY
  return families;
}

}  // namespace encore::models
