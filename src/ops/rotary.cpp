// Rotary position embedding, forward and backward (one file: the backward is the same kernel rotating by -θ),
// and its cos/sin tables. Tokens are split across threads; each token's result depends on that token only, so
// any split gives the same bits.
#include "encore/profiler.hpp"
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

namespace {

struct RotaryShape {
  int64_t batch, T, H, D, half;
  bool shared_tables;  // cos/sin (T, R/2), the same for every leading index
};

RotaryShape check_rotary(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const std::string name(op);
  check_dtype(x, (name + " input").c_str(), DType::f32);
  check_dtype(cos, (name + " cos").c_str(), DType::f32);
  check_dtype(sin, (name + " sin").c_str(), DType::f32);
  ENCORE_CHECK(x.dim() >= 3, op, " input: expected (..., T, heads, head_dim), got ", x.shape_str());
  const int64_t T = x.size(-3), H = x.size(-2), D = x.size(-1);
  ENCORE_CHECK(cos.dim() >= 2, op, " cos: expected (T, rotary_dim/2) or (..., T, rotary_dim/2), got ",
               cos.shape_str());
  ENCORE_CHECK(sin.shape() == cos.shape(), op, ": cos ", cos.shape_str(), " and sin ", sin.shape_str(),
               " differ");
  const int64_t half = cos.size(-1);
  ENCORE_CHECK(half >= 1 && 2 * half <= D, op, ": rotary_dim = 2·cos.size(-1) = ", 2 * half,
               " must be in [2, head_dim = ", D, "]");
  Shape want(x.shape().begin(), x.shape().end() - 2);  // (..., T)
  want.push_back(half);
  const bool shared = cos.dim() == 2;
  ENCORE_CHECK(shared ? cos.size(0) == T : cos.shape() == want, op, ": cos/sin: expected (", T, ", ", half,
               ") or ", shape_str(want), " for input ", x.shape_str(), ", got ", cos.shape_str());
  const int64_t batch = x.numel() / std::max<int64_t>(T * H * D, 1);
  return {batch, T, H, D, half, shared};
}

// out = R(±θ)·x over every token; x and out contiguous (…, T, H, D).
void rotate(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, const RotaryShape& s, bool inverse) {
  Tensor cc = cos.contiguous(), sc = sin.contiguous();
  const auto& k = kernels::kernels();
  const int64_t row = s.H * s.D, n = s.batch * s.T;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(row, 1));
  runtime::parallel_for(0, n, grain, [&](int64_t n0, int64_t n1) {
    while (n0 < n1) {  // split at sequence boundaries: a shared table restarts at position 0
      const int64_t t0 = n0 % s.T, len = std::min(n1 - n0, s.T - t0);
      const int64_t table_row = s.shared_tables ? t0 : n0;
      k.rotary_f32(out.data<float>() + n0 * row, row, x.data<float>() + n0 * row, row,
                   cc.data<float>() + table_row * s.half, sc.data<float>() + table_row * s.half, len, s.H, s.D,
                   2 * s.half, inverse);
      n0 += len;
    }
  });
}

}  // namespace

Tensor rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  profiler::Scope profile("rotary");
  const RotaryShape s = check_rotary("rotary_embedding", x, cos, sin);
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape());
  // forward: y = x·cos + rotate_half(x)·sin
  rotate(out, xc, cos, sin, s, /*inverse=*/false);
  return out;
}

void rotary_backward(Tensor* dx, const Tensor& dout, const Tensor& cos, const Tensor& sin) {
  profiler::Scope profile("rotary backward");
  const RotaryShape s = check_rotary("rotary_embedding backward", dout, cos, sin);
  if (!dx) return;
  Tensor gc = dout.contiguous();
  Tensor out = Tensor::empty(dout.shape());
  // forward: y = R(θ)·x, R orthogonal  ->  dx = R(θ)ᵀ·dy = R(-θ)·dy ; pass-through dims: dx = dy
  rotate(out, gc, cos, sin, s, /*inverse=*/true);
  *dx = out;
}

Tensor rotary_cos_sin(const Tensor& position_ids, int64_t rotary_dim, double theta, Tensor* sin) {
  check_dtype(position_ids, "rotary position_ids", DType::i64);
  ENCORE_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, "rotary_cos_sin: rotary_dim must be even and >= 2, got ",
               rotary_dim);
  ENCORE_CHECK(theta > 0.0 && std::isfinite(theta), "rotary_cos_sin: theta (rope base) must be positive, got ", theta);
  Tensor ids = position_ids.contiguous();
  const int64_t n = ids.numel();
  const int64_t* p = ids.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)  // float32 holds every integer up to 2^24 exactly (HF converts them so)
    ENCORE_CHECK(p[i] >= 0 && p[i] <= (int64_t{1} << 24), "rotary position_ids: position ", p[i], " at index ", i,
                 " is out of range [0, 2^24]");
  Shape s = position_ids.shape();
  s.push_back(rotary_dim / 2);
  Tensor cos = Tensor::empty(s), sn = Tensor::empty(s);
  kernels::rotary_cos_sin_f32(cos.data<float>(), sn.data<float>(), p, n, rotary_dim, theta);
  if (sin) *sin = sn;
  return cos;
}

}  // namespace encore::ops
