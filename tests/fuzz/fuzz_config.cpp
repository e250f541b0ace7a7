// libFuzzer: loading a model from an arbitrary config.json (AutoModel::load: field types and ranges, the family
// registry, shape checks against the weights, the cost check before placeholders for missing tensors are
// allocated). The first byte picks the weights beside it: the tiny BERT's (fuzz_util.hpp: a config close to the
// seed loads all the way, through weight preparation) or a file holding no tensors (every load must stop at the
// first missing tensor, whatever sizes the config asks for). Errors must be encore::Error.
#include <string>

#include "encore/error.hpp"
#include "encore/model.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string with_weights = [] {
    const std::string d = encore_fuzz::scratch_dir("with-weights");
    encore_fuzz::write_tiny_bert_weights(d);
    return d;
  }();
  static const std::string without_weights = [] {
    std::string bytes(8, '\0');
    bytes[0] = 2;  // header length 2, little-endian
    bytes += "{}";
    encore_fuzz::write_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "model.safetensors",
                             "no-weights");
    return encore_fuzz::scratch_dir("no-weights");
  }();
  const std::string& dir = data[0] & 1 ? without_weights : with_weights;
  encore_fuzz::write_input(data + 1, size - 1, "config.json", dir.substr(dir.rfind('/') + 1));
  try {
    encore::AutoModel m = encore::AutoModel::load(dir);
    FUZZ_ASSERT(m.info().num_layers >= 1 && m.info().hidden_size >= 1);
  } catch (const encore::Error&) {
  }
  return 0;
}
