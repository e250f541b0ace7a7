// 1-D convolution over the token axis (torch.nn.Conv1d on x.transpose(1, 2), odd kernel, padding (K-1)/2, groups),
// forward and backward. With shift s - pad for tap s and Cig = Cin/groups, Cog = Cout/groups:
//   out[t, g·Cog + o] = bias[g·Cog + o] + Σ_s Σ_c W[g·Cog + o, c, s] · x[t + s - pad, g·Cig + c]
// (x is 0 outside its sequence). Each (tap, group) is one GEMM over the rows whose shifted row stays inside the
// sequence, through the kernel table (its scalar gemm_f32_ref under ENCORE_KERNELS=ref). The weight is repacked
// per call into (K, Cout, Cig) so every tap is a contiguous matrix.
#include <algorithm>

#include "encore/profiler.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::ops {

namespace {

struct ConvShape {
  int64_t Cin = 0, Cout = 0, K = 0, groups = 1, Cig = 0, Cog = 0, pad = 0;
};

ConvShape check_conv(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups) {
  ENCORE_CHECK(x.dtype() == DType::f32 && x.dim() == 3 && x.is_contiguous(),
               "conv1d: x must be contiguous float32 (B, T, C), got ", x.shape_str());
  ENCORE_CHECK(weight.dtype() == DType::f32 && weight.dim() == 3 && weight.is_contiguous(),
               "conv1d: weight must be contiguous float32 (out, in/groups, kernel), got ", weight.shape_str());
  ConvShape s;
  s.Cin = x.size(2);
  s.Cout = weight.size(0);
  s.K = weight.size(2);
  s.groups = groups;
  ENCORE_CHECK(groups >= 1 && s.Cin % groups == 0 && s.Cout % groups == 0, "conv1d: groups ", groups,
               " does not divide in_channels ", s.Cin, " and out_channels ", s.Cout);
  s.Cig = s.Cin / groups;
  s.Cog = s.Cout / groups;
  ENCORE_CHECK(weight.size(1) == s.Cig, "conv1d: weight ", weight.shape_str(), " needs in/groups = ", s.Cig);
  ENCORE_CHECK(s.K % 2 == 1, "conv1d: kernel size ", s.K, " must be odd ('same' padding (K-1)/2)");
  s.pad = (s.K - 1) / 2;
  if (bias.defined()) check_shape(bias, "conv1d: bias", {s.Cout});
  return s;
}

// (Cout, Cig, K) -> (K, Cout, Cig)
std::vector<float> taps_of(const Tensor& weight, const ConvShape& s) {
  std::vector<float> w(static_cast<size_t>(s.K * s.Cout * s.Cig));
  const float* p = weight.data<float>();
  for (int64_t o = 0; o < s.Cout; ++o)
    for (int64_t c = 0; c < s.Cig; ++c)
      for (int64_t k = 0; k < s.K; ++k) w[(k * s.Cout + o) * s.Cig + c] = p[(o * s.Cig + c) * s.K + k];
  return w;
}

// The sequences of x: each batch row, or the cu_seqlens row ranges of a packed (1, N, C).
std::vector<std::pair<int64_t, int64_t>> segments(const Tensor& x, const std::vector<int64_t>* cu_seqlens) {
  std::vector<std::pair<int64_t, int64_t>> out;  // (first row in x viewed as (B·T, C), length)
  const int64_t B = x.size(0), T = x.size(1);
  if (cu_seqlens && !cu_seqlens->empty()) {
    ENCORE_CHECK(B == 1 && cu_seqlens->front() == 0 && cu_seqlens->back() == T,
                 "conv1d: cu_seqlens must span the packed rows of a (1, N, C) input");
    for (size_t i = 0; i + 1 < cu_seqlens->size(); ++i)
      out.emplace_back((*cu_seqlens)[i], (*cu_seqlens)[i + 1] - (*cu_seqlens)[i]);
  } else {
    for (int64_t b = 0; b < B; ++b) out.emplace_back(b * T, T);
  }
  return out;
}

}  // namespace

Tensor conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups,
                      const std::vector<int64_t>* cu_seqlens) {
  const ConvShape s = check_conv(x, weight, bias, groups);
  const int64_t rows = x.size(0) * x.size(1);
  profiler::Scope profile("conv1d", 2.0 * rows * s.Cout * s.Cig * s.K);
  Tensor out = Tensor::empty({x.size(0), x.size(1), s.Cout});
  float* y = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    if (bias.defined()) std::copy(bias.data<float>(), bias.data<float>() + s.Cout, y + r * s.Cout);
    else std::fill(y + r * s.Cout, y + (r + 1) * s.Cout, 0.f);
  }
  const std::vector<float> w = taps_of(weight, s);
  const auto& kt = kernels::kernels();
  const float* xp = x.data<float>();
  for (const auto& [r0, L] : segments(x, cu_seqlens))
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t shift = k - s.pad, t0 = std::max<int64_t>(0, -shift), t1 = std::min(L, L - shift);
      if (t1 <= t0) continue;
      for (int64_t g = 0; g < s.groups; ++g)  // out[t, group] += x[t + shift, group] · W_k[group]ᵀ
        kt.gemm_f32(false, true, t1 - t0, s.Cog, s.Cig, 1.f, xp + (r0 + t0 + shift) * s.Cin + g * s.Cig, s.Cin,
                    w.data() + (k * s.Cout + g * s.Cog) * s.Cig, s.Cig, 1.f, y + (r0 + t0) * s.Cout + g * s.Cog,
                    s.Cout);
    }
  return out;
}

void conv1d_backward(Tensor* dx, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& x,
                     const Tensor& weight, int64_t groups, const std::vector<int64_t>* cu_seqlens) {
  const ConvShape s = check_conv(x, weight, Tensor(), groups);
  check_shape(dout, "conv1d_backward: dout", {x.size(0), x.size(1), s.Cout});
  ENCORE_CHECK(dout.is_contiguous(), "conv1d_backward: dout must be contiguous");
  detail::check_grad(*dweight, "conv1d_backward: dweight", weight.shape());
  if (dbias) detail::check_grad(*dbias, "conv1d_backward: dbias", {s.Cout});
  const int64_t rows = x.size(0) * x.size(1);
  profiler::Scope profile("conv1d_backward", 4.0 * rows * s.Cout * s.Cig * s.K);
  *dx = Tensor::zeros(x.shape());
  const std::vector<float> w = taps_of(weight, s);
  std::vector<float> dw(w.size(), 0.f);
  const auto& kt = kernels::kernels();
  const float* xp = x.data<float>();
  const float* gp = dout.data<float>();
  float* dxp = dx->data<float>();
  for (const auto& [r0, L] : segments(x, cu_seqlens))
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t shift = k - s.pad, t0 = std::max<int64_t>(0, -shift), t1 = std::min(L, L - shift);
      if (t1 <= t0) continue;
      for (int64_t g = 0; g < s.groups; ++g) {
        // in the forward pass this was:  out[t, group] += x[t + shift, group] · W_k[group]ᵀ
        const float* go = gp + (r0 + t0) * s.Cout + g * s.Cog;
        kt.gemm_f32(false, false, t1 - t0, s.Cig, s.Cog, 1.f, go, s.Cout, w.data() + (k * s.Cout + g * s.Cog) * s.Cig,
                    s.Cig, 1.f, dxp + (r0 + t0 + shift) * s.Cin + g * s.Cig, s.Cin);
        kt.gemm_f32(true, false, s.Cog, s.Cig, t1 - t0, 1.f, go, s.Cout, xp + (r0 + t0 + shift) * s.Cin + g * s.Cig,
                    s.Cin, 1.f, dw.data() + (k * s.Cout + g * s.Cog) * s.Cig, s.Cig);
      }
    }
  float* dwp = dweight->data<float>();
  for (int64_t o = 0; o < s.Cout; ++o)
    for (int64_t c = 0; c < s.Cig; ++c)
      for (int64_t k = 0; k < s.K; ++k) dwp[(o * s.Cig + c) * s.K + k] += dw[(k * s.Cout + o) * s.Cig + c];
  if (dbias) {
    float* db = dbias->data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < s.Cout; ++o) db[o] += gp[r * s.Cout + o];
  }
}

}  // namespace encore::ops
