// torch.nn.Embedding, and the sinusoidal positional-encoding table.
#include "nn/common.hpp"
#include "ops/backward.hpp"

namespace encore::nn {

Embedding::Embedding(int64_t num_embeddings_, int64_t embedding_dim_, std::optional<int64_t> padding_idx_)
    : num_embeddings(num_embeddings_), embedding_dim(embedding_dim_), padding_idx(padding_idx_) {
  ENCORE_CHECK(num_embeddings > 0 && embedding_dim > 0,
               "Embedding: num_embeddings and embedding_dim must be positive, got ", num_embeddings, " and ",
               embedding_dim);
  if (padding_idx && *padding_idx < 0) *padding_idx += num_embeddings;  // torch counts a negative one from the end
  ENCORE_CHECK(!padding_idx || (*padding_idx >= 0 && *padding_idx < num_embeddings),
               "Embedding: padding_idx must be within num_embeddings ", num_embeddings);
  weight = Tensor::empty({num_embeddings, embedding_dim});
  reset_parameters(detail::next_seed());
}

Embedding::Embedding(const Tensor& table, std::optional<int64_t> padding_idx_) : padding_idx(padding_idx_) {
  ENCORE_CHECK(table.defined() && table.dim() == 2, "Embedding: weight: expected (num_embeddings, embedding_dim), got ",
               table.defined() ? table.shape_str() : "none");
  weight = table;
  num_embeddings = table.size(0);
  embedding_dim = table.size(1);
  ENCORE_CHECK(!padding_idx || (*padding_idx >= 0 && *padding_idx < num_embeddings),
               "Embedding: padding_idx must be within num_embeddings ", num_embeddings);
}

void Embedding::members(Members& m) { m.parameter("weight", weight, dweight); }

Tensor Embedding::forward(const Tensor& input) const {
  if (training_) saved_.clear();
  return apply(input);
}

Tensor Embedding::apply(const Tensor& input, const char* what) const {
  Tensor out = ops::embedding_forward(input, weight, what);
  if (training_) push_saved(std::make_shared<Tensor>(input.contiguous()));
  return out;
}

void Embedding::backward(const Tensor& grad_output) {
  auto ids = pop_saved<Tensor>("Embedding");
  // in the forward pass this was:  out[i, :] = weight[ids[i], :]
  ops::embedding_backward(&grad_of(dweight, weight), grad_output, *ids, padding_idx.value_or(-1));
}

Tensor sinusoidal_positions(int64_t start, int64_t length, int64_t d_model) {
  return ops::sinusoidal_positions(start, length, d_model);
}

}  // namespace encore::nn
