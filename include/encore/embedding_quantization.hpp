// Quantized embeddings, as sentence-transformers' quantize_embeddings (util/quantization.py) computes them, to
// shrink a vector index 4x (int8, uint8) or 32x (binary, ubinary):
//
//   Tensor e = encoder.encode(texts);                                    // (n, 384) float32
//   Tensor q = encore::quantize_embeddings(e, EmbeddingPrecision::int8); // (n, 384) int8, ranges from e itself
//   Tensor b = encore::quantize_embeddings(e, EmbeddingPrecision::ubinary);  // (n, 48) uint8, 8 signs a byte
//
// int8 / uint8: each dimension c is cut into 256 buckets between ranges[0][c] (its minimum) and ranges[1][c]
// (its maximum): step = (max - min) / 255 (1 where max == min), q = clamp(floor((x - min) / step), 0, 255),
// all in float32 as numpy does; uint8 stores q, int8 stores q - 128. The ranges come from calibration
// embeddings (ideally a representative sample of the corpus) or, without them, from the embeddings being
// quantized, which takes at least two rows (one row has no range).
// binary / ubinary: bit 7 - (c mod 8) of byte c / 8 is x[c] > 0 (numpy.packbits order; the last byte padded with
// zero bits); ubinary stores the byte, binary the byte - 128 as int8.
// A NaN or infinite input is an error naming its row and dimension (it has no bucket and no sign).
#pragma once
#include <string>
#include <vector>

#include "encore/tensor.hpp"

namespace encore {

enum class EmbeddingPrecision { float32, int8, uint8, binary, ubinary };

// "float32", "int8", "uint8", "binary", "ubinary" (sentence-transformers' names); others throw UsageError.
EmbeddingPrecision parse_embedding_precision(const std::string& name);
const char* embedding_precision_name(EmbeddingPrecision precision);
// The dtype quantize_embeddings returns for a precision (f32, i8 or u8).
DType embedding_precision_dtype(EmbeddingPrecision precision);

// (n, dim) float32 calibration embeddings, n >= 2 -> (2, dim): per-dimension minimum (row 0) and maximum (row 1).
Tensor quantization_ranges(const Tensor& calibration);

// embeddings (n, dim) float32 -> (n, dim) for float32 (a copy), int8, uint8; (n, ceil(dim / 8)) for binary,
// ubinary. ranges: (2, dim) float32 as quantization_ranges returns; undefined: computed from `embeddings`
// (int8 / uint8 only; ignored otherwise).
Tensor quantize_embeddings(const Tensor& embeddings, EmbeddingPrecision precision, const Tensor& ranges = Tensor());
// Multi-vector (token) embeddings: matrices (tokens_i, dim), quantized each, int8 / uint8 with one set of ranges
// for all of them (from every row of every matrix when `ranges` is undefined), as sentence-transformers'
// quantize_embeddings on a list of matrices.
std::vector<Tensor> quantize_embeddings(const std::vector<Tensor>& matrices, EmbeddingPrecision precision,
                                        const Tensor& ranges = Tensor());

}  // namespace encore
