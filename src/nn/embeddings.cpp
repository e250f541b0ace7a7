// Token + position (+ token type) embeddings.
#include <cmath>

#include "nn/common.hpp"

namespace encore::nn {

Embeddings::Embeddings(int64_t vocab_size_, int64_t d_model_, int64_t max_positions_, PositionKind positions_,
                       int64_t type_vocab_size_, bool scale)
    : vocab_size(vocab_size_),
      d_model(d_model_),
      max_positions(max_positions_),
      type_vocab_size(type_vocab_size_),
      positions(positions_),
      scale_by_sqrt_d(scale) {
  ENCORE_CHECK(vocab_size > 0 && d_model > 0, "Embeddings: vocab_size and d_model must be positive, got ", vocab_size,
               " and ", d_model);
  ENCORE_CHECK(positions == PositionKind::none || max_positions > 0, "Embeddings: max_positions must be positive, got ",
               max_positions);
  word_embeddings = Tensor::empty({vocab_size, d_model});
  if (positions == PositionKind::learned) position_embeddings = Tensor::empty({max_positions, d_model});
  if (type_vocab_size > 0) token_type_embeddings = Tensor::empty({type_vocab_size, d_model});
  reset_parameters(detail::next_seed());
  // The sinusoidal table is a fixed buffer, not a parameter.
  if (positions == PositionKind::sinusoidal) position_embeddings = ops::sinusoidal_positions(0, max_positions, d_model);
}

void Embeddings::members(Members& m) {
  m.parameter("word_embeddings.weight", word_embeddings, dword_embeddings);
  if (positions == PositionKind::learned)  // a sinusoidal table is a fixed buffer, not a parameter
    m.parameter("position_embeddings.weight", position_embeddings, dposition_embeddings);
  m.parameter("token_type_embeddings.weight", token_type_embeddings, dtoken_type_embeddings);
}

Tensor Embeddings::forward(const Tensor& input_ids, const Tensor& token_type_ids, int64_t past_length) const {
  ENCORE_CHECK(input_ids.defined() && input_ids.dim() == 2, "Embeddings: input_ids: expected (B, T), got ",
               input_ids.defined() ? input_ids.shape_str() : "none");
  const int64_t B = input_ids.size(0), T = input_ids.size(1), C = d_model;
  Tensor x = ops::embedding_forward(input_ids, word_embeddings, "input_ids");
  if (scale_by_sqrt_d) {
    const float s = static_cast<float>(std::sqrt(static_cast<double>(C)));
    float* p = x.data<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] *= s;
  }
  if (positions != PositionKind::none) {
    ENCORE_CHECK(past_length >= 0 && past_length + T <= max_positions, "Embeddings: sequence length ", past_length + T,
                 " exceeds max_positions ", max_positions);
    Tensor pos = position_embeddings.slice(0, past_length, past_length + T).contiguous();
    for (int64_t b = 0; b < B; ++b) {
      Tensor xb = x.select(0, b);
      ops::add_forward_(xb, pos);
    }
  }
  if (token_type_embeddings.defined()) {
    Tensor types = token_type_ids.defined() ? token_type_ids : Tensor::zeros({B, T}, DType::i64);
    check_shape(types, "token_type_ids", {B, T});
    ops::add_forward_(x, ops::embedding_forward(types, token_type_embeddings, "token_type_ids"));
  }
  observe("embeddings", x);
  return x;
}

Tensor sinusoidal_positions(int64_t start, int64_t length, int64_t d_model) {
  return ops::sinusoidal_positions(start, length, d_model);
}

}  // namespace encore::nn
