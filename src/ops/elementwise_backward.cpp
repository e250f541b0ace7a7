// Backward of the elementwise and row-wise ops in elementwise.cpp: activations, gated FFN hidden, residual
// add, dropout, softmax. No reductions across rows, so any split across threads gives the same bits.
#include "encore/profiler.hpp"
#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

using runtime::parallel_for;

namespace {
int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }
}  // namespace

void activation_backward(Tensor* dx, const Tensor& dout, const Tensor& x, Act act) {
  profiler::Scope profile("activation backward");
  check_dtype(x, "activation input", DType::f32);
  check_dtype(dout, "activation dout", DType::f32);
  check_shape(dout, "activation dout", x.shape());
  if (!dx) return;
  Tensor xc = x.contiguous(), gc = dout.contiguous();
  Tensor out = Tensor::empty(x.shape());
  const auto& bk = kernels::backward_kernels();
  // forward: out[i] = act(x[i])
  parallel_for(0, x.numel(), 16384, [&](int64_t i0, int64_t i1) {
    bk.activation_backward_f32(out.data<float>() + i0, gc.data<float>() + i0, xc.data<float>() + i0, i1 - i0, act);
  });
  *dx = out;
}

void gated_backward(Tensor* dx, const Tensor& dout, const Tensor& x, Act act, kernels::Gate gate) {
  profiler::Scope profile("gated activation backward");
  check_dtype(x, "gated input", DType::f32);
  check_dtype(dout, "gated dout", DType::f32);
  ENCORE_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "gated input: expected an even last dimension [a | b], got ",
               x.shape_str());
  const int64_t F = x.size(-1) / 2, rows = x.numel() / std::max<int64_t>(2 * F, 1);
  Shape s = x.shape();
  s.back() = F;
  check_shape(dout, "gated dout", s);
  if (!dx) return;
  Tensor xc = x.contiguous(), gc = dout.contiguous();
  Tensor out = Tensor::empty(x.shape());
  const auto& bk = kernels::backward_kernels();
  // forward: out = act(a)·b, x = [a | b] (gate first) or [b | a] (gate second)
  parallel_for(0, rows, row_grain(2 * F), [&](int64_t r0, int64_t r1) {
    bk.gated_backward_f32(out.data<float>() + r0 * 2 * F, gc.data<float>() + r0 * F, xc.data<float>() + r0 * 2 * F,
                          r1 - r0, F, act, gate);
  });
  *dx = out;
}

void add_backward(Tensor* da, Tensor* db, const Tensor& dout) {
  profiler::Scope profile("add backward");
  // forward: out = a + b
  if (da) *da = dout;
  if (db) *db = dout;
}

void dropout_backward(Tensor* dx, const Tensor& dout, double p, bool training, uint64_t seed) {
  profiler::Scope profile("dropout backward");
  ENCORE_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got ", p);
  check_dtype(dout, "dropout dout", DType::f32);
  if (!dx) return;
  if (!training || p == 0.0) {  // forward was the identity
    *dx = dout;
    return;
  }
  Tensor gc = dout.contiguous();
  Tensor out = Tensor::empty(dout.shape());
  // forward: out = x·keep/(1-p), keep drawn for (seed, element index): dropout_forward splits the same way
  parallel_for(0, dout.numel(), 32768, [&](int64_t i0, int64_t i1) {
    kernels::dropout_backward_f32(out.data<float>() + i0, gc.data<float>() + i0, nullptr, i1 - i0,
                                  static_cast<float>(p), seed, static_cast<uint64_t>(i0));
  });
  *dx = out;
}

void softmax_backward(Tensor* dx, const Tensor& dout, const Tensor& probs) {
  profiler::Scope profile("softmax backward");
  check_dtype(probs, "softmax probs", DType::f32);
  check_dtype(dout, "softmax dout", DType::f32);
  ENCORE_CHECK(probs.dim() >= 1, "softmax probs: expected at least 1 dimension, got ", probs.shape_str());
  check_shape(dout, "softmax dout", probs.shape());
  if (!dx) return;
  const int64_t C = probs.size(-1), rows = probs.numel() / std::max<int64_t>(C, 1);
  Tensor pc = probs.contiguous(), gc = dout.contiguous();
  Tensor out = Tensor::empty(probs.shape());
  const auto& bk = kernels::backward_kernels();
  // forward: p = softmax(x) over the last dim
  parallel_for(0, rows, row_grain(C), [&](int64_t r0, int64_t r1) {
    bk.softmax_backward_f32(out.data<float>() + r0 * C, gc.data<float>() + r0 * C, pc.data<float>() + r0 * C,
                            r1 - r0, C, 1.f);
  });
  *dx = out;
}

}  // namespace encore::ops
