#include "encore/profiler.hpp"
#include <cmath>
#include <limits>

#include "ops/ops.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

using runtime::parallel_for;

static int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }

Tensor layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor* mean,
                         Tensor* rstd) {
  profiler::Scope profile("layer_norm");
  check_dtype(x, "layer_norm input", DType::f32);
  ENCORE_CHECK(x.dim() >= 1, "layer_norm input: expected at least 1 dimension, got ", x.shape_str());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  if (weight.defined()) check_shape(weight, "layer_norm weight", {C});
  if (bias.defined()) check_shape(bias, "layer_norm bias", {C});
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape());
  if (mean) *mean = Tensor::empty({rows});
  if (rstd) *rstd = Tensor::empty({rows});
  const auto& k = kernels::kernels();
  const float* w = weight.defined() ? weight.data<float>() : nullptr;
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  parallel_for(0, rows, row_grain(C), [&](int64_t r0, int64_t r1) {
    k.layernorm_forward_f32(out.data<float>() + r0 * C, mean ? mean->data<float>() + r0 : nullptr,
                            rstd ? rstd->data<float>() + r0 : nullptr, xc.data<float>() + r0 * C, w, b, r1 - r0, C,
                            static_cast<float>(eps));
  });
  return out;
}

Tensor add_layernorm_forward_(Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                              double eps, bool keep_sum) {
  profiler::Scope profile("add + layer_norm");
  check_dtype(x, "add_layer_norm input", DType::f32);
  check_dtype(residual, "add_layer_norm residual", DType::f32);
  ENCORE_CHECK(x.shape() == residual.shape(), "add_layer_norm: input ", x.shape_str(), " and residual ",
               residual.shape_str(), " differ");
  ENCORE_CHECK(x.dim() >= 1 && x.is_contiguous(), "add_layer_norm: input must be contiguous, got strides ",
               shape_str(x.strides()));
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  if (weight.defined()) check_shape(weight, "layer_norm weight", {C});
  if (bias.defined()) check_shape(bias, "layer_norm bias", {C});
  Tensor rc = residual.contiguous();
  Tensor out = keep_sum ? Tensor::empty(x.shape()) : x;
  const auto& k = kernels::kernels();
  const float* w = weight.defined() ? weight.data<float>() : nullptr;
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  float* px = x.data<float>();
  parallel_for(0, rows, row_grain(C), [&](int64_t r0, int64_t r1) {
    k.add_layernorm_f32(out.data<float>() + r0 * C, keep_sum ? px + r0 * C : nullptr, px + r0 * C,
                        rc.data<float>() + r0 * C, w, b, r1 - r0, C, static_cast<float>(eps));
  });
  return out;
}

Tensor rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor* rstd) {
  profiler::Scope profile("rms_norm");
  check_dtype(x, "rms_norm input", DType::f32);
  ENCORE_CHECK(x.dim() >= 1, "rms_norm input: expected at least 1 dimension, got ", x.shape_str());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  if (weight.defined()) check_shape(weight, "rms_norm weight", {C});
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape());
  if (rstd) *rstd = Tensor::empty({rows});
  const auto& k = kernels::kernels();
  const float* w = weight.defined() ? weight.data<float>() : nullptr;
  parallel_for(0, rows, row_grain(C), [&](int64_t r0, int64_t r1) {
    k.rmsnorm_forward_f32(out.data<float>() + r0 * C, rstd ? rstd->data<float>() + r0 : nullptr,
                          xc.data<float>() + r0 * C, w, r1 - r0, C, static_cast<float>(eps));
  });
  return out;
}

void activation_forward_(Tensor& x, Act act) {
  profiler::Scope profile("activation");
  check_dtype(x, "activation input", DType::f32);
  ENCORE_CHECK(x.is_contiguous(), "activation input: in-place needs a contiguous tensor, got strides ",
               shape_str(x.strides()));
  const auto& k = kernels::kernels();
  float* p = x.data<float>();
  parallel_for(0, x.numel(), 16384, [&](int64_t i0, int64_t i1) { k.activation_f32(p + i0, p + i0, i1 - i0, act); });
}

Tensor activation_forward(const Tensor& x, Act act) {
  profiler::Scope profile("activation");
  Tensor out = x.clone();
  activation_forward_(out, act);
  return out;
}

Tensor gated_forward(const Tensor& x, Act act, kernels::Gate gate) {
  profiler::Scope profile("gated activation");
  check_dtype(x, "gated input", DType::f32);
  ENCORE_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "gated input: expected an even last dimension [a | b], got ",
               x.shape_str());
  const int64_t F = x.size(-1) / 2, rows = x.numel() / std::max<int64_t>(2 * F, 1);
  Tensor xc = x.contiguous();
  Shape s = x.shape();
  s.back() = F;
  Tensor out = Tensor::empty(s);
  const auto& k = kernels::kernels();
  parallel_for(0, rows, row_grain(2 * F), [&](int64_t r0, int64_t r1) {
    k.gated_f32(out.data<float>() + r0 * F, xc.data<float>() + r0 * 2 * F, r1 - r0, F, act, gate);
  });
  return out;
}

void add_forward_(Tensor& a, const Tensor& b) {
  profiler::Scope profile("add");
  ENCORE_CHECK(a.shape() == b.shape(), "add: shapes differ, ", a.shape_str(), " and ", b.shape_str());
  check_dtype(a, "add lhs", DType::f32);
  check_dtype(b, "add rhs", DType::f32);
  ENCORE_CHECK(a.is_contiguous(), "add: in-place target must be contiguous");
  Tensor bc = b.contiguous();
  const auto& k = kernels::kernels();
  float* pa = a.data<float>();
  const float* pb = bc.data<float>();
  parallel_for(0, a.numel(), 32768, [&](int64_t i0, int64_t i1) { k.add_f32(pa + i0, pa + i0, pb + i0, i1 - i0); });
}

Tensor add_forward(const Tensor& a, const Tensor& b) {
  profiler::Scope profile("add");
  Tensor out = a.clone();
  add_forward_(out, b);
  return out;
}

Tensor dropout_forward(const Tensor& x, double p, bool training, uint64_t seed) {
  profiler::Scope profile("dropout");
  ENCORE_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return x;
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape());
  parallel_for(0, x.numel(), 32768, [&](int64_t i0, int64_t i1) {
    kernels::dropout_f32(out.data<float>() + i0, nullptr, xc.data<float>() + i0, i1 - i0, static_cast<float>(p),
                         seed, static_cast<uint64_t>(i0));
  });
  return out;
}

void softmax_forward_(Tensor& x) {
  profiler::Scope profile("softmax");
  check_dtype(x, "softmax input", DType::f32);
  ENCORE_CHECK(x.is_contiguous() && x.dim() >= 1, "softmax: needs a contiguous tensor, got ", x.shape_str());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  const auto& k = kernels::kernels();
  parallel_for(0, rows, row_grain(C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) k.softmax_masked_f32(x.data<float>() + r * C, C, 1.f, nullptr, nullptr, C);
  });
}

Tensor additive_mask(const Tensor& mask, const char* name) {
  if (!mask.defined()) return mask;
  if (mask.dtype() == DType::f32) return mask.contiguous();
  ENCORE_CHECK(mask.dtype() == DType::boolean || mask.dtype() == DType::u8, name,
               ": expected a bool or float32 mask, got ", dtype_name(mask.dtype()));
  Tensor m = mask.contiguous();
  Tensor out = Tensor::empty(mask.shape());
  const uint8_t* src = m.data<uint8_t>();
  float* dst = out.data<float>();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0, n = m.numel(); i < n; ++i) dst[i] = src[i] ? neg_inf : 0.f;
  return out;
}

Tensor embedding_forward(const Tensor& ids, const Tensor& table, const char* name) {
  profiler::Scope profile("embedding");
  check_dtype(ids, name, DType::i64);
  ENCORE_CHECK(table.dim() == 2, name, " table: expected (num_embeddings, dim), got ", table.shape_str());
  const int64_t V = table.size(0), C = table.size(1), n = ids.numel();
  Tensor idc = ids.contiguous();
  const int64_t* id = idc.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    ENCORE_CHECK(id[i] >= 0 && id[i] < V, name, ": index ", id[i], " at position ", i, " is out of range [0, ", V, ")");
  Shape s = ids.shape();
  s.push_back(C);
  Tensor out = Tensor::empty(s);
  Tensor tc = table.contiguous();
  parallel_for(0, n, 64, [&](int64_t i0, int64_t i1) {
    kernels::embedding_lookup_f32(out.data<float>() + i0 * C, tc.data<float>(), id + i0, i1 - i0, C);
  });
  return out;
}

Tensor sinusoidal_positions(int64_t start, int64_t T, int64_t C) {
  ENCORE_CHECK(start >= 0 && T >= 0 && C > 0, "sinusoidal_positions: invalid start ", start, ", length ", T,
               ", dim ", C);
  Tensor out = Tensor::empty({T, C});
  kernels::sinusoidal_positions_f32(out.data<float>(), start, T, C);
  return out;
}

}  // namespace encore::ops
