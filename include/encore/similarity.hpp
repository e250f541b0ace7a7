// Cosine similarity of embeddings - the one implementation behind `encore similarity`, `encore accuracy`, the
// embedding trainer's retrieval accuracy and encore.cos_sim in Python (sentence-transformers' util.cos_sim and
// util.pairwise_cos_sim).
//
//   Tensor e = encoder.encode({"a", "b", "c"});          // (3, 384)
//   Tensor s = encore::cos_sim(e, e);                    // (3, 3): s[i][j] = cos(e_i, e_j)
//
// cos(x, y) = x.y / (max(|x|, eps) * max(|y|, eps)), eps = 1e-12 as torch.nn.functional.normalize: a zero vector
// has cosine 0 with everything. Sums are taken in double; the result is float32. Inputs are float32 2-D
// tensors (rows are vectors) of the same width; contiguous or not.
#pragma once
#include "encore/tensor.hpp"

namespace encore {

// (n, d) x (m, d) -> (n, m)
Tensor cos_sim(const Tensor& a, const Tensor& b);
// (n, d) x (n, d) -> (n,): the cosine of each row of a with the same row of b
Tensor pairwise_cos_sim(const Tensor& a, const Tensor& b);

}  // namespace encore
