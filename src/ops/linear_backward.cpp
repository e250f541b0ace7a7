// Linear backward: out = act(pre), pre = x·weightᵀ + bias (x (M, K), weight (N, K) as PyTorch stores it).
//   dpre = dout·act'(pre) ; dx = dpre·weight ; dweight += dpreᵀ·x ; dbias += Σ_rows dpre
// The GEMMs are cut into fixed tiles of the OUTPUT (64 × 256), each a full-depth GEMM on one thread, so every
// element is reduced in one fixed order whatever the thread count.
#include "encore/profiler.hpp"
#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

namespace {

constexpr int64_t kTileRows = 64, kTileCols = 256, kBiasCols = 64;

// C(M, N) = op(A)·op(B) + beta·C, row-major, tile by tile.
void tiled_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const auto& kt = kernels::kernels();
  const int64_t bm = detail::num_blocks(M, kTileRows), bn = detail::num_blocks(N, kTileCols);
  detail::parallel_blocks(bm * bn, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t m0 = (i / bn) * kTileRows, n0 = (i % bn) * kTileCols;
      const int64_t mt = std::min(kTileRows, M - m0), nt = std::min(kTileCols, N - n0);
      const float* a = trans_a ? A + m0 : A + m0 * lda;  // rows m0.. of op(A)
      const float* b = trans_b ? B + n0 * ldb : B + n0;  // columns n0.. of op(B)
      kt.gemm_f32(trans_a, trans_b, mt, nt, K, 1.f, a, lda, b, ldb, beta, C + m0 * ldc + n0, ldc);
    }
  });
}

}  // namespace

Tensor linear_forward_train(Tensor* pre, const Tensor& x, const Tensor& weight, const Tensor& bias, Act act) {
  profiler::Scope profile("linear", 2.0 * static_cast<double>(x.numel()) * (weight.dim() == 2 ? weight.size(0) : 0));
  if (act == Act::none) {
    if (pre) *pre = Tensor();
    return linear_forward(x, weight, bias, Act::none);
  }
  ENCORE_CHECK(pre, "linear_forward_train: act ", kernels::act_name(act), " needs somewhere to save the pre-activation");
  Tensor p = linear_forward(x, weight, bias, Act::none);
  Tensor out = activation_forward(p, act);
  *pre = p;
  return out;
}

void linear_backward(Tensor* dx, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& pre,
                     const Tensor& x, const Tensor& weight, Act act) {
  profiler::Scope profile("linear backward", 4.0 * static_cast<double>(dout.numel()) * (weight.dim() == 2 ? weight.size(1) : 0));
  check_dtype(x, "linear input", DType::f32);
  check_dtype(dout, "linear dout", DType::f32);
  ENCORE_CHECK(weight.dim() == 2, "linear weight: expected 2 dimensions (out, in), got ", weight.shape_str());
  const int64_t N = weight.size(0), K = weight.size(1);
  ENCORE_CHECK(x.dim() >= 1 && x.size(-1) == K, "linear input: expected last dimension ", K, " (weight ",
               weight.shape_str(), "), got ", x.shape_str());
  Shape out_shape = x.shape();
  out_shape.back() = N;
  check_shape(dout, "linear dout", out_shape);
  if (act != Act::none) {
    check_shape(pre, "linear pre-activation", out_shape);
    check_dtype(pre, "linear pre-activation", DType::f32);
  }
  if (dweight) detail::check_grad(*dweight, "linear dweight", {N, K});
  if (dbias) detail::check_grad(*dbias, "linear dbias", {N});
  const int64_t M = x.numel() / std::max<int64_t>(K, 1);

  // forward: out = act(pre)  ->  dpre = dout·act'(pre)
  Tensor g = dout.contiguous();
  if (act != Act::none) {
    Tensor prec = pre.contiguous();
    Tensor dpre = Tensor::empty(out_shape);
    const auto& bk = kernels::backward_kernels();
    runtime::parallel_for(0, dpre.numel(), 16384, [&](int64_t i0, int64_t i1) {
      bk.activation_backward_f32(dpre.data<float>() + i0, g.data<float>() + i0, prec.data<float>() + i0, i1 - i0,
                                 act);
    });
    g = dpre;
  }
  const float* gp = g.data<float>();
  // forward: pre = x·weightᵀ + bias  ->  dx = dpre·weight (M×N · N×K)
  if (dx) {
    Tensor w = weight.contiguous();
    Tensor out = Tensor::empty(x.shape());
    tiled_gemm(false, false, M, K, N, gp, N, w.data<float>(), K, 0.f, out.data<float>(), K);
    *dx = out;
  }
  // dweight += dpreᵀ·x (N×M · M×K)
  if (dweight) {
    Tensor xc = x.contiguous();
    tiled_gemm(true, false, N, K, M, gp, N, xc.data<float>(), K, 1.f, dweight->data<float>(), K);
  }
  // dbias += Σ_rows dpre, one thread per block of columns
  if (dbias) {
    const auto& bk = kernels::backward_kernels();
    float* db = dbias->data<float>();
    runtime::parallel_for(0, detail::num_blocks(N, kBiasCols), 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t c0 = b * kBiasCols, c1 = std::min(N, c0 + kBiasCols);
        bk.bias_backward_f32(db + c0, gp + c0, M, c1 - c0, N);
      }
    });
  }
}

}  // namespace encore::ops
