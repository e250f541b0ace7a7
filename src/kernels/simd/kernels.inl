// Kernel bodies written once over Vec (simd/vec_*.inl) and instantiated per ISA. Each loop's scalar
// meaning is its *_ref twin in reference.cpp; tails shorter than a vector use the scalar definition.

void softmax_masked_f32(float* x, int64_t cols, float scale, const float* mask_a, const float* mask_b,
                        int64_t limit) {
  // y = x·scale + mask_a + mask_b ; m = max(y)
  const float neg_inf = -__builtin_inff();
  Vec vmaxacc = set1(neg_inf);
  float max_v = neg_inf;
  int64_t j = 0;
  for (; j + kWidth <= limit; j += kWidth) {
    Vec y = mul(load(x + j), set1(scale));
    if (mask_a) y = add(y, load(mask_a + j));
    if (mask_b) y = add(y, load(mask_b + j));
    store(x + j, y);
    vmaxacc = vmax(vmaxacc, y);
  }
  for (; j < limit; ++j) {
    float y = x[j] * scale + (mask_a ? mask_a[j] : 0.f) + (mask_b ? mask_b[j] : 0.f);
    x[j] = y;
    max_v = y > max_v ? y : max_v;
  }
  float vm = reduce_max(vmaxacc);
  max_v = vm > max_v ? vm : max_v;
  if (max_v == neg_inf && !any_nan(x, limit)) {  // nothing to attend to: zeros, not NaN (a NaN stays, math.inl)
    for (int64_t i = 0; i < cols; ++i) x[i] = 0.f;
    return;
  }
  // p = exp(y - m) ; sum
  Vec vsum = set1(0.f);
  float sum = 0.f;
  j = 0;
  for (; j + kWidth <= limit; j += kWidth) {
    Vec e = vexp(sub(load(x + j), set1(max_v)));
    store(x + j, e);
    vsum = add(vsum, e);
  }
  for (; j < limit; ++j) {
    x[j] = __builtin_expf(x[j] - max_v);
    sum += x[j];
  }
  sum += reduce_add(vsum);
  // p /= sum
  const float inv = 1.f / sum;
  j = 0;
  for (; j + kWidth <= limit; j += kWidth) store(x + j, mul(load(x + j), set1(inv)));
  for (; j < limit; ++j) x[j] *= inv;
  for (j = limit; j < cols; ++j) x[j] = 0.f;
}

void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* in, const float* weight,
                           const float* bias, int64_t rows, int64_t C, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * C;
    float* y = out + r * C;
    // mean = sum(x)/C
    Vec vs = set1(0.f);
    float s = 0.f;
    int64_t i = 0;
    for (; i + kWidth <= C; i += kWidth) vs = add(vs, load(x + i));
    for (; i < C; ++i) s += x[i];
    const float m = (s + reduce_add(vs)) / static_cast<float>(C);
    // var = sum((x-mean)^2)/C
    Vec vv = set1(0.f);
    float v = 0.f;
    for (i = 0; i + kWidth <= C; i += kWidth) {
      Vec d = sub(load(x + i), set1(m));
      vv = fmadd(d, d, vv);
    }
    for (; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    const float var = (v + reduce_add(vv)) / static_cast<float>(C);
    const float rs = 1.f / __builtin_sqrtf(var + eps);
    // out = (x-mean)·rstd·weight + bias
    for (i = 0; i + kWidth <= C; i += kWidth) {
      Vec yv = mul(sub(load(x + i), set1(m)), set1(rs));
      if (weight) yv = mul(yv, load(weight + i));
      if (bias) yv = add(yv, load(bias + i));
      store(y + i, yv);
    }
    for (; i < C; ++i) {
      float yv = (x[i] - m) * rs;
      if (weight) yv *= weight[i];
      if (bias) yv += bias[i];
      y[i] = yv;
    }
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = rs;
  }
}

void rmsnorm_forward_f32(float* out, float* rstd, const float* in, const float* weight, int64_t rows, int64_t C,
                         float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * C;
    float* y = out + r * C;
    // rstd = 1/sqrt(sum(x^2)/C + eps)
    Vec vs = set1(0.f);
    float s = 0.f;
    int64_t i = 0;
    for (; i + kWidth <= C; i += kWidth) {
      Vec xv = load(x + i);
      vs = fmadd(xv, xv, vs);
    }
    for (; i < C; ++i) s += x[i] * x[i];
    const float rs = 1.f / __builtin_sqrtf((s + reduce_add(vs)) / static_cast<float>(C) + eps);
    // out = x·rstd·weight
    for (i = 0; i + kWidth <= C; i += kWidth) {
      Vec yv = mul(load(x + i), set1(rs));
      if (weight) yv = mul(yv, load(weight + i));
      store(y + i, yv);
    }
    for (; i < C; ++i) y[i] = x[i] * rs * (weight ? weight[i] : 1.f);
    if (rstd) rstd[r] = rs;
  }
}

void activation_f32(float* out, const float* in, int64_t n, Act act) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(out + i, vact(load(in + i), act));
  for (; i < n; ++i) out[i] = act_scalar(in[i], act);
}

void gated_f32(float* out, const float* in, int64_t rows, int64_t F, Act act, Gate gate) {
  const int64_t ia = gate == Gate::first ? 0 : F, ib = F - ia;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = in + r * 2 * F + ia;
    const float* b = in + r * 2 * F + ib;
    float* y = out + r * F;
    // y = act(a)·b
    int64_t i = 0;
    for (; i + kWidth <= F; i += kWidth) store(y + i, mul(vact(load(a + i), act), load(b + i)));
    for (; i < F; ++i) y[i] = act_scalar(a[i], act) * b[i];
  }
}

void rotary_f32(float* out, int64_t ld_out, const float* in, int64_t ld, const float* cos, const float* sin,
                int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, bool inverse) {
  const int64_t half = rotary_dim / 2;
  const float sign = inverse ? -1.f : 1.f;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* x = in + t * ld + h * head_dim;
      float* y = out + t * ld_out + h * head_dim;
      // y1 = x1·c - x2·s ; y2 = x2·c + x1·s  (s negated for the inverse rotation)
      int64_t i = 0;
      for (; i + kWidth <= half; i += kWidth) {
        const Vec x1 = load(x + i), x2 = load(x + half + i), vc = load(c + i), vs = mul(load(s + i), set1(sign));
        store(y + i, sub(mul(x1, vc), mul(x2, vs)));
        store(y + half + i, fmadd(x1, vs, mul(x2, vc)));
      }
      for (; i < half; ++i) {
        const float x1 = x[i], x2 = x[half + i], si = sign * s[i];
        y[i] = x1 * c[i] - x2 * si;
        y[half + i] = x2 * c[i] + x1 * si;
      }
      if (y != x)
        for (i = rotary_dim; i < head_dim; ++i) y[i] = x[i];  // the pass-through dims
    }
  }
}

void add_f32(float* out, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(out + i, add(load(a + i), load(b + i)));
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void add_layernorm_f32(float* out, float* sum, const float* a, const float* b, const float* weight,
                       const float* bias, int64_t rows, int64_t C, float eps) {
  // s = a + b ; out = layernorm(s), one row at a time so that s is re-read from L1
  for (int64_t r = 0; r < rows; ++r) {
    float* s = (sum ? sum : out) + r * C;
    add_f32(s, a + r * C, b + r * C, C);
    layernorm_forward_f32(out + r * C, nullptr, nullptr, s, weight, bias, 1, C, eps);
  }
}

void convert_f32_to_bf16(uint16_t* out, const float* in, int64_t n) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store_bf16(out + i, load(in + i));
  if (i < n) convert_f32_to_bf16_ref(out + i, in + i, n - i);
}
