#include "encore/profiler.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

namespace {
constexpr int64_t kPlainLinearRows = 64;  // the backward's tile height (linear_backward.cpp)
}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Act act) {
  profiler::Scope profile("linear", 2.0 * static_cast<double>(x.numel()) * (weight.dim() == 2 ? weight.size(0) : 0));
  check_dtype(x, "linear input", DType::f32);
  ENCORE_CHECK(weight.dim() == 2, "linear weight: expected 2 dimensions (out, in), got ", weight.shape_str());
  const int64_t N = weight.size(0), K = weight.size(1);
  ENCORE_CHECK(x.dim() >= 1 && x.size(-1) == K, "linear input: expected last dimension ", K, " (weight ",
               weight.shape_str(), "), got ", x.shape_str());
  if (bias.defined()) check_shape(bias, "linear bias", {N});
  Tensor xc = x.contiguous();
  const int64_t M = xc.numel() / std::max<int64_t>(K, 1);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape);
  Tensor w = weight.contiguous(), b = bias.defined() ? bias.contiguous() : Tensor();
  // Blocks of kPlainLinearRows rows, fixed by the shape, each a GEMM on one thread (detail::parallel_blocks): the
  // result is the same bitwise for any thread count, as the backward's (docs/backward.md, Determinism). oneDNN
  // left to thread one call itself sums differently with 1 and 2 threads on some CPUs (its AVX2 sgemm: measured,
  // BackwardOps.GradientsIdenticalWithOneAndTwoThreads). The blocks depend on the shape only, so every row comes
  // from the same single-threaded call whatever the thread count.
  const auto& kt = kernels::kernels();
  const float *xp = xc.data<float>(), *wp = w.data<float>(), *bp = b.defined() ? b.data<float>() : nullptr;
  float* op = out.data<float>();
  detail::parallel_blocks(detail::num_blocks(M, kPlainLinearRows), [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kPlainLinearRows, rows = std::min(kPlainLinearRows, M - r0);
      kt.linear_f32(op + r0 * N, xp + r0 * K, wp, bp, rows, K, N, act);
    }
  });
  return out;
}

Tensor linear_forward(const Tensor& x, const kernels::PackedLinear& w, Act act) {
  profiler::Scope profile("linear", 2.0 * static_cast<double>(x.numel()) * static_cast<double>(w.N));
  check_dtype(x, "linear input", DType::f32);
  ENCORE_CHECK(x.dim() >= 1 && x.size(-1) == w.K, "linear input: expected last dimension ", w.K, ", got ",
               x.shape_str());
  Tensor xc = x.contiguous();
  const int64_t M = xc.numel() / std::max<int64_t>(w.K, 1);
  Shape out_shape = x.shape();
  out_shape.back() = w.N;
  Tensor out = Tensor::empty(out_shape);
  w.forward(out.data<float>(), xc.data<float>(), M, act);
  return out;
}

Tensor linear_chain_forward(const Tensor& x, const kernels::PackedLinear& first, Act act,
                            const kernels::PackedLinear& second) {
  ENCORE_CHECK(second.K == first.N, "linear chain: the second Linear's in_features ", second.K,
               " differ from the first one's out_features ", first.N);
  if (!first.chains_with(second)) return linear_forward(linear_forward(x, first, act), second);
  const double rows = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(first.K, 1));
  profiler::Scope profile("linear", 2.0 * rows * static_cast<double>(first.K * first.N + second.K * second.N));
  check_dtype(x, "linear input", DType::f32);
  ENCORE_CHECK(x.dim() >= 1 && x.size(-1) == first.K, "linear input: expected last dimension ", first.K, ", got ",
               x.shape_str());
  Tensor xc = x.contiguous();
  const int64_t M = xc.numel() / first.K;
  Shape out_shape = x.shape();
  out_shape.back() = second.N;
  Tensor out = Tensor::empty(out_shape);
  first.forward_chain(out.data<float>(), xc.data<float>(), M, act, second);
  return out;
}

}  // namespace encore::ops
