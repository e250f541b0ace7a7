// quantize_embeddings and its calibration (include/encore/embedding_quantization.hpp).
#include "encore/embedding_quantization.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "encore/error.hpp"

namespace encore {

namespace {

// A contiguous float32 (rows, dim) copy of x, every value finite (what has no bucket and no sign is refused).
Tensor checked_rows(const char* fn, const char* what, const Tensor& x) {
  ENCORE_CHECK_AS(UsageError, x.dim() == 2, fn, ": ", what, " must be 2-D (rows, dim), got ", x.shape_str());
  ENCORE_CHECK_AS(UsageError, x.dtype() == DType::f32, fn, ": ", what, " must be float32, got ", dtype_name(x.dtype()));
  Tensor c = x.contiguous();
  const float* p = c.data<float>();
  const int64_t d = c.size(1);
  for (int64_t i = 0; i < c.numel(); ++i)
    ENCORE_CHECK_AS(UsageError, std::isfinite(p[i]), fn, ": ", what, "[", i / d, "][", i % d, "] is ", p[i],
                    " (a non-finite value has no quantized form)");
  return c;
}

}  // namespace

EmbeddingPrecision parse_embedding_precision(const std::string& name) {
  if (name == "float32") return EmbeddingPrecision::float32;
  if (name == "int8") return EmbeddingPrecision::int8;
  if (name == "uint8") return EmbeddingPrecision::uint8;
  if (name == "binary") return EmbeddingPrecision::binary;
  if (name == "ubinary") return EmbeddingPrecision::ubinary;
  throw UsageError("precision '" + name + "' is not one of float32, int8, uint8, binary, ubinary");
}

const char* embedding_precision_name(EmbeddingPrecision precision) {
  switch (precision) {
    case EmbeddingPrecision::float32: return "float32";
    case EmbeddingPrecision::int8: return "int8";
    case EmbeddingPrecision::uint8: return "uint8";
    case EmbeddingPrecision::binary: return "binary";
    case EmbeddingPrecision::ubinary: return "ubinary";
  }
  return "?";
}

DType embedding_precision_dtype(EmbeddingPrecision precision) {
  switch (precision) {
    case EmbeddingPrecision::float32: return DType::f32;
    case EmbeddingPrecision::int8:
    case EmbeddingPrecision::binary: return DType::i8;
    case EmbeddingPrecision::uint8:
    case EmbeddingPrecision::ubinary: return DType::u8;
  }
  return DType::f32;
}

Tensor quantization_ranges(const Tensor& calibration) {
  const Tensor c = checked_rows("quantization_ranges", "calibration", calibration);
  const int64_t n = c.size(0), d = c.size(1);
  ENCORE_CHECK_AS(UsageError, n >= 2, "quantization_ranges: int8/uint8 ranges need at least 2 calibration embeddings, got ",
                  n, " (pass ranges or calibration embeddings from a representative sample)");
  Tensor r = Tensor::empty({2, d});
  const float* p = c.data<float>();
  float* lo = r.data<float>();
  float* hi = lo + d;
  std::copy_n(p, d, lo);
  std::copy_n(p, d, hi);
  for (int64_t i = 1; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      lo[j] = std::min(lo[j], p[i * d + j]);
      hi[j] = std::max(hi[j], p[i * d + j]);
    }
  return r;
}

Tensor quantize_embeddings(const Tensor& embeddings, EmbeddingPrecision precision, const Tensor& ranges) {
  const Tensor x = checked_rows("quantize_embeddings", "embeddings", embeddings);
  const int64_t n = x.size(0), d = x.size(1);
  const float* px = x.data<float>();
  switch (precision) {
    case EmbeddingPrecision::float32: return embeddings.is_contiguous() ? x.clone() : x;  // never the caller's storage
    case EmbeddingPrecision::int8:
    case EmbeddingPrecision::uint8: {
      const Tensor r = ranges.defined() ? checked_rows("quantize_embeddings", "ranges", ranges) : quantization_ranges(x);
      ENCORE_CHECK_AS(UsageError, r.size(0) == 2 && r.size(1) == d, "quantize_embeddings: ranges must be (2, ", d,
                      ") (per-dimension minimum and maximum), got ", r.shape_str());
      const float* lo = r.data<float>();
      const float* hi = lo + d;
      std::vector<float> step(static_cast<size_t>(d));
      for (int64_t j = 0; j < d; ++j) {
        step[j] = (hi[j] - lo[j]) / 255.0f;
        if (step[j] == 0.0f) step[j] = 1.0f;
      }
      const bool is_signed = precision == EmbeddingPrecision::int8;
      Tensor q = Tensor::empty({n, d}, is_signed ? DType::i8 : DType::u8);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) {
          // Two float32 roundings, as numpy: (x - start), then / step; floor; clip to the 256 buckets.
          const float shifted = px[i * d + j] - lo[j];
          const float bucket = std::clamp(std::floor(shifted / step[j]), 0.0f, 255.0f);
          const int v = static_cast<int>(bucket);
          if (is_signed)
            q.data<int8_t>()[i * d + j] = static_cast<int8_t>(v - 128);
          else
            q.data<uint8_t>()[i * d + j] = static_cast<uint8_t>(v);
        }
      return q;
    }
    case EmbeddingPrecision::binary:
    case EmbeddingPrecision::ubinary: {
      const int64_t bytes = (d + 7) / 8;
      const bool is_signed = precision == EmbeddingPrecision::binary;
      Tensor q = Tensor::empty({n, bytes}, is_signed ? DType::i8 : DType::u8);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t b = 0; b < bytes; ++b) {
          unsigned byte = 0;
          for (int64_t k = 0; k < 8; ++k) {
            const int64_t j = b * 8 + k;
            if (j < d && px[i * d + j] > 0.0f) byte |= 0x80u >> k;
          }
          if (is_signed)
            q.data<int8_t>()[i * bytes + b] = static_cast<int8_t>(static_cast<int>(byte) - 128);
          else
            q.data<uint8_t>()[i * bytes + b] = static_cast<uint8_t>(byte);
        }
      return q;
    }
  }
  throw UsageError("quantize_embeddings: unknown precision");
}

std::vector<Tensor> quantize_embeddings(const std::vector<Tensor>& matrices, EmbeddingPrecision precision,
                                        const Tensor& ranges) {
  std::vector<Tensor> out;
  if (matrices.empty()) return out;
  Tensor shared = ranges;
  const bool bucketed = precision == EmbeddingPrecision::int8 || precision == EmbeddingPrecision::uint8;
  if (bucketed && !shared.defined()) {  // calibrate once on every row, so all matrices share the buckets
    int64_t rows = 0;
    for (const Tensor& m : matrices) {
      ENCORE_CHECK_AS(UsageError, m.dim() == 2 && m.dtype() == DType::f32 && m.size(1) == matrices[0].size(1),
                      "quantize_embeddings: every matrix must be float32 (tokens, ", matrices[0].size(1), "), got ",
                      m.shape_str());
      rows += m.size(0);
    }
    const int64_t d = matrices[0].size(1);
    Tensor all = Tensor::empty({rows, d});
    int64_t at = 0;
    for (const Tensor& m : matrices) {
      const Tensor c = m.contiguous();
      std::copy_n(c.data<float>(), c.numel(), all.data<float>() + at * d);
      at += m.size(0);
    }
    shared = quantization_ranges(all);
  }
  for (const Tensor& m : matrices) out.push_back(quantize_embeddings(m, precision, shared));
  return out;
}

}  // namespace encore
