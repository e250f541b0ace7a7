// LayerNorm and RMSNorm backward over the last dim, from the mean/rstd the forward saved.
// Rows are cut into fixed blocks (their size depends on the shape only); each block accumulates its dweight
// and dbias into its own zeroed partial row, and the partials are added in block order, one thread per block
// of columns: the same sums, in the same order, for any thread count.
#include "encore/profiler.hpp"
#include <string>

#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

namespace {

constexpr int64_t kReduceCols = 256;

// At least 32 rows per block, at most 64 blocks: partial buffers stay at most 64 rows of C.
int64_t rows_per_block(int64_t rows) { return std::max<int64_t>(32, detail::num_blocks(rows, 64)); }

// grad[c] += Σ_b partial[b][c] for b in order.
void add_partials(Tensor& grad, const Tensor& partial) {
  const int64_t nb = partial.size(0), C = partial.size(1);
  const auto& bk = kernels::backward_kernels();
  runtime::parallel_for(0, detail::num_blocks(C, kReduceCols), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kReduceCols, c1 = std::min(C, c0 + kReduceCols);
      bk.bias_backward_f32(grad.data<float>() + c0, partial.data<float>() + c0, nb, c1 - c0, C);
    }
  });
}

struct NormShapes {
  int64_t rows, C;
};

NormShapes check_norm(const char* op, const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor* mean,
                      const Tensor& rstd, Tensor* dweight) {
  const std::string name(op);
  check_dtype(x, (name + " input").c_str(), DType::f32);
  check_dtype(dout, (name + " dout").c_str(), DType::f32);
  ENCORE_CHECK(x.dim() >= 1, op, " input: expected at least 1 dimension, got ", x.shape_str());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  check_shape(dout, (name + " dout").c_str(), x.shape());
  if (mean) check_shape(*mean, (name + " mean").c_str(), {rows});
  check_shape(rstd, (name + " rstd").c_str(), {rows});
  if (weight.defined()) check_shape(weight, (name + " weight").c_str(), {C});
  if (dweight) {
    ENCORE_CHECK(weight.defined(), op, ": dweight requested but the norm has no weight");
    detail::check_grad(*dweight, (name + " dweight").c_str(), {C});
  }
  return {rows, C};
}

}  // namespace

void layernorm_backward(Tensor* dx, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& mean,
                        const Tensor& rstd, const Tensor& x, const Tensor& weight) {
  profiler::Scope profile("layer_norm backward");
  const NormShapes rows_cols = check_norm("layer_norm", dout, x, weight, &mean, rstd, dweight);
  const int64_t rows = rows_cols.rows, C = rows_cols.C;  // not a structured binding: clang 14 cannot capture one
  if (dbias) detail::check_grad(*dbias, "layer_norm dbias", {C});
  Tensor xc = x.contiguous(), gc = dout.contiguous(), mc = mean.contiguous(), rc = rstd.contiguous();
  Tensor din = Tensor::empty(x.shape());  // the kernel always writes dinp
  const int64_t R = rows_per_block(rows), nb = detail::num_blocks(rows, R);
  Tensor pw = dweight ? Tensor::zeros({nb, C}) : Tensor(), pb = dbias ? Tensor::zeros({nb, C}) : Tensor();
  Tensor wkeep = weight.defined() ? weight.contiguous() : Tensor();
  const float* w = wkeep.defined() ? wkeep.data<float>() : nullptr;
  const auto& bk = kernels::backward_kernels();
  runtime::parallel_for(0, nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * R, r1 = std::min(rows, r0 + R);
      bk.layernorm_backward_f32(din.data<float>() + r0 * C, dweight ? pw.data<float>() + b * C : nullptr,
                                dbias ? pb.data<float>() + b * C : nullptr, gc.data<float>() + r0 * C,
                                mc.data<float>() + r0, rc.data<float>() + r0, xc.data<float>() + r0 * C, w, r1 - r0,
                                C);
    }
  });
  if (dweight) add_partials(*dweight, pw);
  if (dbias) add_partials(*dbias, pb);
  if (dx) *dx = din;
}

void rmsnorm_backward(Tensor* dx, Tensor* dweight, const Tensor& dout, const Tensor& rstd, const Tensor& x,
                      const Tensor& weight) {
  profiler::Scope profile("rms_norm backward");
  const NormShapes rows_cols = check_norm("rms_norm", dout, x, weight, nullptr, rstd, dweight);
  const int64_t rows = rows_cols.rows, C = rows_cols.C;
  Tensor xc = x.contiguous(), gc = dout.contiguous(), rc = rstd.contiguous();
  Tensor din = Tensor::empty(x.shape());
  const int64_t R = rows_per_block(rows), nb = detail::num_blocks(rows, R);
  Tensor pw = dweight ? Tensor::zeros({nb, C}) : Tensor();
  Tensor wkeep = weight.defined() ? weight.contiguous() : Tensor();
  const float* w = wkeep.defined() ? wkeep.data<float>() : nullptr;
  const auto& bk = kernels::backward_kernels();
  runtime::parallel_for(0, nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * R, r1 = std::min(rows, r0 + R);
      bk.rmsnorm_backward_f32(din.data<float>() + r0 * C, dweight ? pw.data<float>() + b * C : nullptr,
                              gc.data<float>() + r0 * C, rc.data<float>() + r0, xc.data<float>() + r0 * C, w,
                              r1 - r0, C);
    }
  });
  if (dweight) add_partials(*dweight, pw);
  if (dx) *dx = din;
}

}  // namespace encore::ops
