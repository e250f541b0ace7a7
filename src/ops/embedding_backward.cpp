// Embedding backward: a scatter-add of dout rows into the table gradient. Threads split the COLUMNS (each
// thread owns a block of columns of every table row and walks all tokens in order), so a repeated id is
// summed in token order with no atomics, the same for any thread count.
#include "encore/profiler.hpp"
#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

namespace {
constexpr int64_t kCols = 64;
}

void embedding_backward(Tensor* dtable, const Tensor& dout, const Tensor& ids, int64_t padding_idx) {
  profiler::Scope profile("embedding backward");
  check_dtype(ids, "embedding ids", DType::i64);
  check_dtype(dout, "embedding dout", DType::f32);
  if (!dtable) return;
  ENCORE_CHECK(dtable->dim() == 2, "embedding dtable: expected (num_embeddings, dim), got ", dtable->shape_str());
  const int64_t V = dtable->size(0), C = dtable->size(1), n = ids.numel();
  detail::check_grad(*dtable, "embedding dtable", {V, C});
  Shape s = ids.shape();
  s.push_back(C);
  check_shape(dout, "embedding dout", s);
  ENCORE_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < V), "embedding padding_idx ", padding_idx,
               " is out of range [0, ", V, ") (-1 for none)");
  Tensor idc = ids.contiguous(), gc = dout.contiguous();
  const int64_t* id = idc.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    ENCORE_CHECK(id[i] >= 0 && id[i] < V, "embedding ids: index ", id[i], " at position ", i,
                 " is out of range [0, ", V, ")");
  float* dt = dtable->data<float>();
  const float* g = gc.data<float>();
  // forward: out[i] = table[ids[i]]
  runtime::parallel_for(0, detail::num_blocks(C, kCols), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kCols, c1 = std::min(C, c0 + kCols);
      kernels::embedding_backward_f32(dt + c0, g + c0, id, n, c1 - c0, C, padding_idx);
    }
  });
}

}  // namespace encore::ops
