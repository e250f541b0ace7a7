// Classifies texts with a sequence-classification checkpoint (the one ./train_classifier writes, or any
// transformers *ForSequenceClassification directory): tokenizer -> AutoModel -> softmax over the logits.
//   ./classify MODEL_DIR "text" ["text" ...]
#include <encore/model.hpp>
#include <encore/tokenizer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: classify MODEL_DIR TEXT [TEXT ...]\n");
    return 2;
  }
  const std::vector<std::string> texts(argv + 2, argv + argc);
  encore::Tokenizer tokenizer = encore::Tokenizer::load(argv[1]);
  tokenizer.set_padding(encore::PaddingOptions{});  // pad the batch to its longest text
  const encore::AutoModel model = encore::AutoModel::load(argv[1]);
  if (model.info().head != "sequence_classification") {
    std::fprintf(stderr, "classify: %s has no sequence-classification head\n", argv[1]);
    return 1;
  }

  const std::vector<encore::Encoding> batch = tokenizer.encode_batch(texts);
  const int64_t B = static_cast<int64_t>(batch.size()), T = static_cast<int64_t>(batch[0].ids.size());
  encore::Tensor ids = encore::Tensor::empty({B, T}, encore::DType::i64);
  encore::Tensor mask = encore::Tensor::empty({B, T}, encore::DType::i64);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(batch[b].ids.begin(), batch[b].ids.end(), ids.data<int64_t>() + b * T);
    std::copy(batch[b].attention_mask.begin(), batch[b].attention_mask.end(), mask.data<int64_t>() + b * T);
  }
  const encore::Tensor logits = model.forward(ids, mask).logits;  // (B, num_labels)
  const int64_t L = logits.shape()[1];
  const std::vector<std::string>& labels = model.info().id2label;
  for (int64_t b = 0; b < B; ++b) {
    const float* z = logits.data<float>() + b * L;
    const int64_t best = std::max_element(z, z + L) - z;
    double denom = 0;  // softmax: p_k = exp(z_k - max) / sum_j exp(z_j - max)
    for (int64_t k = 0; k < L; ++k) denom += std::exp(double(z[k]) - z[best]);
    const std::string name = best < static_cast<int64_t>(labels.size()) ? labels[best] : std::to_string(best);
    std::printf("%-10s %.3f  %s\n", name.c_str(), 1.0 / denom, texts[b].c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "classify: %s\n", e.what());
  return 1;
}
