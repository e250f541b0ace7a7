// Embeds sentences with a sentence-transformers model and prints each embedding's size, norm and first values.
//   ./embed [MODEL_DIR]     (default: $ENCORE_MODEL, else the installed all-MiniLM-L6-v2)
#include <encore/sentence_encoder.hpp>
#include <encore/version.hpp>

#include <cmath>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) try {
  const std::string model_dir = argc > 1 ? argv[1] : encore::default_model_dir();
  const encore::SentenceEncoder encoder = encore::SentenceEncoder::load(model_dir);
  const std::vector<std::string> texts = {"A man is eating food.", "The girl is carrying a baby."};
  const encore::Tensor emb = encoder.encode(texts);  // (2, dimension) float32, rows L2-normalized by the model
  std::printf("encore %s, %s\n", ENCORE_VERSION_STRING, model_dir.c_str());
  for (int64_t i = 0; i < emb.shape()[0]; ++i) {
    const float* row = emb.data<float>() + i * emb.shape()[1];
    double norm = 0;
    for (int64_t j = 0; j < emb.shape()[1]; ++j) norm += double(row[j]) * row[j];
    std::printf("%-32s dim %lld  norm %.4f  [%.4f %.4f %.4f ...]\n", texts[i].c_str(),
                static_cast<long long>(emb.shape()[1]), std::sqrt(norm), row[0], row[1], row[2]);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "embed: %s\n", e.what());
  return 1;
}
