// encore::FillMask - a masked-LM checkpoint (*ForMaskedLM: BERT, RoBERTa/XLM-R, DistilBERT, ALBERT, ELECTRA's
// generator, MPNet) as transformers' fill-mask pipeline runs it: for every mask token in a text, the top_k
// vocabulary tokens by probability (softmax over the vocabulary of the masked-LM logits).
//
//   encore::FillMask fm = encore::FillMask::load("/path/to/bert-base-uncased");
//   for (const auto& c : fm.predict({"Paris is the [MASK] of France."})[0][0])   // text 0, its first mask
//     std::printf("%s %.3f  %s\n", c.token_str.c_str(), c.score, c.sequence.c_str());
//
// Each candidate is {score, token, token_str, sequence} as the pipeline gives it: token_str is the token decoded
// alone; sequence the text's tokens with the mask replaced, decoded without special tokens (with them when the text
// has several masks, as the pipeline keeps the other masks visible). The mask token is the tokenizer's
// (tokenizer_config.json / special_tokens_map.json mask_token, else [MASK] or <mask> when the vocabulary has it).
// A text without a mask token is an InputError. Texts are cut to max_seq_length() tokens unless truncation is off.
// Thread safety: predict() is const and may run concurrently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "encore/sentence_encoder.hpp"

namespace encore {

struct FillMaskCandidate {
  float score = 0.f;  // probability of the token at the mask
  int64_t token = 0;  // its id
  std::string token_str, sequence;
};

struct FillMaskOptions {
  int64_t top_k = 5;       // candidates per mask (at most the vocabulary)
  int64_t batch_size = 8;  // texts per forward pass (the logits are (batch, tokens, vocabulary) floats)
  bool truncate = true;    // false: a text longer than max_seq_length() tokens is an InputError
};

class FillMask {
 public:
  // dir: a *ForMaskedLM (or *ForPreTraining) checkpoint with its tokenizer; dtype as AutoModel::load. A checkpoint
  // without a masked-LM head, or a tokenizer without a mask token, is a ModelFormatError.
  static FillMask load(const std::string& model_dir, DType dtype = DType::f32);

  // result[i][m]: text i's m-th mask token (in text order), its top_k candidates best first (equal probabilities:
  // lower id first).
  std::vector<std::vector<std::vector<FillMaskCandidate>>> predict(const std::vector<std::string>& texts,
                                                                   const FillMaskOptions& options = {}) const;

  const std::string& mask_token() const { return mask_token_; }
  int64_t mask_token_id() const { return mask_token_id_; }
  int64_t max_seq_length() const { return encoder_.max_seq_length(); }
  void set_max_seq_length(int64_t length) { encoder_.set_max_seq_length(length); }
  const SentenceEncoder& encoder() const { return encoder_; }  // the tokenizer and model underneath

 private:
  FillMask(SentenceEncoder encoder, std::string mask_token, int64_t mask_token_id);
  SentenceEncoder encoder_;
  std::string mask_token_;
  int64_t mask_token_id_;
};

}  // namespace encore
