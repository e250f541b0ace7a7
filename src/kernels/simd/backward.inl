// Backward kernel bodies written once over Vec (simd/vec_*.inl, simd/backward_vec_*.inl) and instantiated per
// ISA by backward_avx2.cpp and backward_avx512.cpp. Each loop's scalar meaning is its *_ref twin in
// backward_reference.cpp (quoted above the loop); tails shorter than a vector use plain float code.
// Parameter gradients accumulate (+=), activation gradients are written (=), as in kernels/backward.hpp.

// dy·act'(x), act' as in act_grad_ref.
inline Vec vact_backward(Vec dy, Vec x, Act act) {
  switch (act) {
    case Act::none: return dy;
    case Act::relu: return where_positive(x, dy);
    case Act::gelu_erf: {  // Φ(x) + x·φ(x)
      Vec cdf = mul(set1(0.5f), add(set1(1.f), verf(mul(x, set1(0.70710678118654752f)))));
      Vec pdf = mul(set1(0.39894228040143267794f), vexp(mul(mul(x, x), set1(-0.5f))));
      return mul(dy, fmadd(x, pdf, cdf));
    }
    case Act::gelu_tanh: {  // (1 + t)/2 + x/2·(1 - t²)·√(2/π)·(1 + 3·0.044715x²), t = tanh(u)
      // t = 1 - 2r and 1 - t² = 4r·(e·r), with e = exp(2u), r = 1/(1 + e): no cancellation where |t| -> 1.
      // Exponents are capped at 80 (e stays finite, so e·r is never inf·0; 1 - t² < 1e-34 there anyway).
      Vec x2 = mul(x, x);
      Vec u = mul(set1(0.79788456080286536f), fmadd(mul(x2, x), set1(0.044715f), x));
      Vec e = vexp(vmin(set1(80.f), add(u, u)));
      Vec r = div(set1(1.f), add(set1(1.f), e));
      Vec t = sub(set1(1.f), add(r, r));
      Vec sech2 = mul(mul(set1(4.f), r), mul(e, r));
      Vec dinner = mul(set1(0.79788456080286536f), fmadd(x2, set1(3.f * 0.044715f), set1(1.f)));
      Vec d = fmadd(mul(mul(set1(0.5f), x), sech2), dinner, mul(set1(0.5f), add(set1(1.f), t)));
      return mul(dy, d);
    }
    case Act::silu: {  // s·(1 + x·(1 - s)), s = sigmoid(x) = 1/(1 + e), e = exp(-x), 1 - s = e·s
      Vec e = vexp(vmin(set1(80.f), mul(x, set1(-1.f))));
      Vec s = div(set1(1.f), add(set1(1.f), e));
      return mul(dy, mul(s, fmadd(x, mul(e, s), set1(1.f))));
    }
    case Act::tanh: {  // 1 - tanh(x)² = 4r·(e·r), e = exp(2x), r = 1/(1 + e)
      Vec e = vexp(vmin(set1(80.f), add(x, x)));
      Vec r = div(set1(1.f), add(set1(1.f), e));
      return mul(dy, mul(mul(set1(4.f), r), mul(e, r)));
    }
  }
  return dy;
}

void activation_backward_f32(float* dx, const float* dout, const float* x, int64_t n, Act act) {
  // dx[i] = dout[i]·act'(x[i])
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(dx + i, vact_backward(load(dout + i), load(x + i), act));
  for (; i < n; ++i) dx[i] = dout[i] * act_grad_scalar(x[i], act);
}

void gated_backward_f32(float* din, const float* dout, const float* in, int64_t rows, int64_t F, Act act,
                        Gate gate) {
  const int64_t ia = gate == Gate::first ? 0 : F, ib = F - ia;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = in + r * 2 * F + ia;
    const float* b = in + r * 2 * F + ib;
    const float* dy = dout + r * F;
    float* da = din + r * 2 * F + ia;
    float* db = din + r * 2 * F + ib;
    // da = dy·b·act'(a) ; db = dy·act(a)
    int64_t i = 0;
    for (; i + kWidth <= F; i += kWidth) {
      Vec va = load(a + i), vdy = load(dy + i);
      store(da + i, vact_backward(mul(vdy, load(b + i)), va, act));
      store(db + i, mul(vdy, vact(va, act)));
    }
    for (; i < F; ++i) {
      da[i] = dy[i] * b[i] * act_grad_scalar(a[i], act);
      db[i] = dy[i] * act_scalar(a[i], act);
    }
  }
}

void layernorm_backward_f32(float* dinp, float* dweight, float* dbias, const float* dout, const float* mean,
                            const float* rstd, const float* inp, const float* weight, int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    float* dx = dinp + r * C;
    const float m = mean[r], s = rstd[r];
    // xhat = (x - mean)·rstd ; g = dy·weight ; Σg, Σg·xhat ; dweight += dy·xhat ; dbias += dy
    Vec vg = set1(0.f), vgx = set1(0.f);
    float sg = 0.f, sgx = 0.f;
    int64_t i = 0;
    for (; i + kWidth <= C; i += kWidth) {
      Vec xhat = mul(sub(load(x + i), set1(m)), set1(s));
      Vec d = load(dy + i);
      Vec g = weight ? mul(d, load(weight + i)) : d;
      vg = add(vg, g);
      vgx = fmadd(g, xhat, vgx);
      if (dweight) store(dweight + i, fmadd(d, xhat, load(dweight + i)));
      if (dbias) store(dbias + i, add(load(dbias + i), d));
    }
    for (; i < C; ++i) {
      const float xhat = (x[i] - m) * s;
      const float g = weight ? dy[i] * weight[i] : dy[i];
      sg += g;
      sgx += g * xhat;
      if (dweight) dweight[i] += dy[i] * xhat;
      if (dbias) dbias[i] += dy[i];
    }
    const float mean_g = (sg + reduce_add(vg)) / static_cast<float>(C);
    const float mean_gx = (sgx + reduce_add(vgx)) / static_cast<float>(C);
    // dx = rstd·(g - mean(g) - xhat·mean(g·xhat))
    for (i = 0; i + kWidth <= C; i += kWidth) {
      Vec xhat = mul(sub(load(x + i), set1(m)), set1(s));
      Vec g = weight ? mul(load(dy + i), load(weight + i)) : load(dy + i);
      store(dx + i, mul(set1(s), sub(sub(g, set1(mean_g)), mul(xhat, set1(mean_gx)))));
    }
    for (; i < C; ++i) {
      const float xhat = (x[i] - m) * s;
      const float g = weight ? dy[i] * weight[i] : dy[i];
      dx[i] = s * (g - mean_g - xhat * mean_gx);
    }
  }
}

void rmsnorm_backward_f32(float* dinp, float* dweight, const float* dout, const float* rstd, const float* inp,
                          const float* weight, int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    float* dx = dinp + r * C;
    const float s = rstd[r];
    // xhat = x·rstd ; g = dy·weight ; Σg·xhat ; dweight += dy·xhat
    Vec vgx = set1(0.f);
    float sgx = 0.f;
    int64_t i = 0;
    for (; i + kWidth <= C; i += kWidth) {
      Vec xhat = mul(load(x + i), set1(s));
      Vec d = load(dy + i);
      Vec g = weight ? mul(d, load(weight + i)) : d;
      vgx = fmadd(g, xhat, vgx);
      if (dweight) store(dweight + i, fmadd(d, xhat, load(dweight + i)));
    }
    for (; i < C; ++i) {
      const float xhat = x[i] * s;
      const float g = weight ? dy[i] * weight[i] : dy[i];
      sgx += g * xhat;
      if (dweight) dweight[i] += dy[i] * xhat;
    }
    const float mean_gx = (sgx + reduce_add(vgx)) / static_cast<float>(C);
    // dx = rstd·(g - xhat·mean(g·xhat))
    for (i = 0; i + kWidth <= C; i += kWidth) {
      Vec xhat = mul(load(x + i), set1(s));
      Vec g = weight ? mul(load(dy + i), load(weight + i)) : load(dy + i);
      store(dx + i, mul(set1(s), sub(g, mul(xhat, set1(mean_gx)))));
    }
    for (; i < C; ++i) {
      const float g = weight ? dy[i] * weight[i] : dy[i];
      dx[i] = s * (g - x[i] * s * mean_gx);
    }
  }
}

void softmax_backward_f32(float* dx, const float* dp, const float* p, int64_t rows, int64_t cols, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * cols;
    const float* dpr = dp + r * cols;
    float* dxr = dx + r * cols;
    // dot = Σ p·dp
    Vec vdot = set1(0.f);
    float dot = 0.f;
    int64_t j = 0;
    for (; j + kWidth <= cols; j += kWidth) vdot = fmadd(load(pr + j), load(dpr + j), vdot);
    for (; j < cols; ++j) dot += pr[j] * dpr[j];
    dot += reduce_add(vdot);
    // dx = scale·p·(dp - dot)
    for (j = 0; j + kWidth <= cols; j += kWidth)
      store(dxr + j, mul(mul(set1(scale), load(pr + j)), sub(load(dpr + j), set1(dot))));
    for (; j < cols; ++j) dxr[j] = scale * pr[j] * (dpr[j] - dot);
  }
}

void bias_backward_f32(float* dbias, const float* dout, int64_t rows, int64_t cols, int64_t ld) {
  // dbias[c] += Σ_r dout[r·ld + c], rows in order; four vectors of columns per sweep over the rows
  int64_t c = 0;
  for (; c + 4 * kWidth <= cols; c += 4 * kWidth) {
    Vec a0 = set1(0.f), a1 = set1(0.f), a2 = set1(0.f), a3 = set1(0.f);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dout + r * ld + c;
      a0 = add(a0, load(row));
      a1 = add(a1, load(row + kWidth));
      a2 = add(a2, load(row + 2 * kWidth));
      a3 = add(a3, load(row + 3 * kWidth));
    }
    store(dbias + c, add(load(dbias + c), a0));
    store(dbias + c + kWidth, add(load(dbias + c + kWidth), a1));
    store(dbias + c + 2 * kWidth, add(load(dbias + c + 2 * kWidth), a2));
    store(dbias + c + 3 * kWidth, add(load(dbias + c + 3 * kWidth), a3));
  }
  for (; c + kWidth <= cols; c += kWidth) {
    Vec a0 = set1(0.f);
    for (int64_t r = 0; r < rows; ++r) a0 = add(a0, load(dout + r * ld + c));
    store(dbias + c, add(load(dbias + c), a0));
  }
  for (; c < cols; ++c) {
    float acc = 0.f;
    for (int64_t r = 0; r < rows; ++r) acc += dout[r * ld + c];
    dbias[c] += acc;
  }
}
