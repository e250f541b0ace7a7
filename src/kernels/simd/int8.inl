// int8 kernel bodies written once over Vec (simd/vec_*.inl + simd/int8_vec_*.inl), instantiated per ISA in
// gemm_int8.cpp. Their scalar definitions are the *_ref functions in gemm_int8.cpp; row parameters and tails
// use the same scalar helpers (row_quant_params, quantize_one), and min, max, counts and outlier positions are
// exact, so quantization is bit-identical to the reference.

void quantize_rows_u8(uint8_t* q, float* scale, int32_t* zp, Int8RowOutliers* outliers, const float* x,
                      int64_t rows, int64_t K, int64_t ld_x, int qmax) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    uint8_t* qr = q + r * K;
    // lo = min(0, min x), hi = max(0, max x); check = sum(x·0) is NaN iff some x is NaN or ±inf
    Vec vlo = set1(0.f), vhi = set1(0.f), vcheck = set1(0.f);
    float lo = 0.f, hi = 0.f, check = 0.f;
    int64_t k = 0;
    for (; k + kWidth <= K; k += kWidth) {
      Vec v = load(xr + k);
      vlo = vmin(vlo, v);
      vhi = vmax(vhi, v);
      vcheck = add(vcheck, mul(v, set1(0.f)));
    }
    for (; k < K; ++k) {
      lo = xr[k] < lo ? xr[k] : lo;
      hi = xr[k] > hi ? xr[k] : hi;
      check += xr[k] * 0.f;
    }
    const float vl = -reduce_max(mul(vlo, set1(-1.f))), vh = reduce_max(vhi);
    lo = vl < lo ? vl : lo;
    hi = vh > hi ? vh : hi;
    const bool finite = check + reduce_add(vcheck) == 0.f;
    // above = #{|x| > amax/ratio}, counted until it exceeds kInt8MaxOutliers (then the row has no outliers)
    const float thr = (-lo > hi ? -lo : hi) / kInt8OutlierRatio;
    int64_t above = 0;
    if (finite) {
      for (k = 0; k + kWidth <= K && above <= kInt8MaxOutliers; k += kWidth)
        above += __builtin_popcount(greater_mask(vabs(load(xr + k)), thr));
      for (; k < K && above <= kInt8MaxOutliers; ++k) above += (xr[k] < 0.f ? -xr[k] : xr[k]) > thr;
    }
    Int8RowOutliers& o = outliers[r];
    o.count = 0;
    if (above >= 1 && above <= kInt8MaxOutliers) {
      // the outliers, ascending, and [lo, hi] of the rest (0 included)
      vlo = set1(0.f);
      vhi = set1(0.f);
      lo = 0.f;
      hi = 0.f;
      for (k = 0; k + kWidth <= K; k += kWidth) {
        const Vec v = load(xr + k);
        const unsigned m = greater_mask(vabs(v), thr);
        const Vec body = zero_where(v, m);
        vlo = vmin(vlo, body);
        vhi = vmax(vhi, body);
        for (unsigned bits = m; bits; bits &= bits - 1) {
          const int64_t i = k + __builtin_ctz(bits);
          o.index[o.count] = static_cast<int32_t>(i);
          o.value[o.count] = xr[i];
          ++o.count;
        }
      }
      for (; k < K; ++k) {
        if ((xr[k] < 0.f ? -xr[k] : xr[k]) > thr) {
          o.index[o.count] = static_cast<int32_t>(k);
          o.value[o.count] = xr[k];
          ++o.count;
        } else {
          lo = xr[k] < lo ? xr[k] : lo;
          hi = xr[k] > hi ? xr[k] : hi;
        }
      }
      const float bl = -reduce_max(mul(vlo, set1(-1.f))), bh = reduce_max(vhi);
      lo = bl < lo ? bl : lo;
      hi = bh > hi ? bh : hi;
    }
    const RowQuant p = row_quant_params(lo, hi, finite, qmax);
    scale[r] = p.scale;
    zp[r] = p.zp;
    // q = clamp(round(x·inv) + zp, 0, qmax); outliers then read as 0 (q = zp)
    const Vec inv = set1(p.inv);
    for (k = 0; k + kWidth <= K; k += kWidth) store_u8(qr + k, mul(load(xr + k), inv), p.zp, qmax);
    for (; k < K; ++k) qr[k] = quantize_one(xr[k], p, qmax);
    for (int32_t i = 0; i < o.count; ++i) qr[o.index[i]] = static_cast<uint8_t>(p.zp);
  }
}

void int8_epilogue_f32(float* out, const int32_t* acc, const float* a_scale, const int32_t* zp,
                       const float* w_scale, const int32_t* wsum, const float* bias, int64_t rows, int64_t N,
                       Act act) {
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* ar = acc + r * N;
    float* yr = out + r * N;
    const float s = a_scale[r];
    const int32_t z = zp[r];
    // y = act((acc - zp·wsum)·(a_scale·w_scale) + bias)
    int64_t n = 0;
    for (; n + kWidth <= N; n += kWidth) {
      Vec v = compensated_i32_to_f32(ar + n, wsum + n, z);
      Vec sc = mul(set1(s), load(w_scale + n));
      Vec y = bias ? fmadd(v, sc, load(bias + n)) : mul(v, sc);
      store(yr + n, vact(y, act));
    }
    for (; n < N; ++n) yr[n] = epilogue_one(ar[n], s, z, w_scale[n], wsum[n], bias ? bias[n] : 0.f, act);
  }
}

void int8_epilogue_outliers_f32(float* out, const int32_t* acc, float a_scale, int32_t zp, const float* w_scale,
                                const int32_t* wsum, const float* bias, const Int8RowOutliers& outliers,
                                const int8_t* wq_t, int64_t N, Act act) {
  const int32_t count = outliers.count;
  const int8_t* cols[kInt8MaxOutliers];
  for (int32_t i = 0; i < count; ++i) cols[i] = wq_t + static_cast<int64_t>(outliers.index[i]) * N;
  // y = act((acc - zp·wsum)·(a_scale·w_scale) + bias + w_scale·sum_i value[i]·wq_t[index[i]])
  int64_t n = 0;
  for (; n + kWidth <= N; n += kWidth) {
    const Vec ws = load(w_scale + n);
    Vec y = mul(compensated_i32_to_f32(acc + n, wsum + n, zp), mul(set1(a_scale), ws));
    if (bias) y = add(y, load(bias + n));
    Vec c = set1(0.f);
    for (int32_t i = 0; i < count; ++i) c = fmadd(set1(outliers.value[i]), load_i8_as_f32(cols[i] + n), c);
    store(out + n, vact(fmadd(ws, c, y), act));
  }
  for (; n < N; ++n) {
    float c = 0.f;
    for (int32_t i = 0; i < count; ++i) c += outliers.value[i] * static_cast<float>(cols[i][n]);
    const float v = static_cast<float>(acc[n] - zp * wsum[n]);
    out[n] = act_scalar(v * (a_scale * w_scale[n]) + (bias ? bias[n] : 0.f) + w_scale[n] * c, act);
  }
}

void quantize_rows_u8_static(uint8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ld_x,
                             float a_scale, float inv, int32_t zp, int qmax) {
  const RowQuant p{a_scale, inv, zp};
  const Vec vinv = set1(inv), lo = set1(-1e6f), hi = set1(1e6f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    uint8_t* qr = q + r * K;
    // q = clamp(round(clamp(x·inv, ±1e6)) + zp, 0, qmax): vmax(NaN, -1e6) is -1e6, as quantize_one's NaN;
    // check = sum(x·0) is NaN iff some x is NaN or ±inf
    Vec vcheck = set1(0.f);
    float check = 0.f;
    int64_t k = 0;
    for (; k + kWidth <= K; k += kWidth) {
      const Vec v = load(xr + k);
      vcheck = add(vcheck, mul(v, set1(0.f)));
      store_u8(qr + k, vmin(vmax(mul(v, vinv), lo), hi), zp, qmax);
    }
    for (; k < K; ++k) {
      check += xr[k] * 0.f;
      qr[k] = quantize_one(xr[k], p, qmax);
    }
    scale[r] = check + reduce_add(vcheck) == 0.f ? a_scale : std::numeric_limits<float>::quiet_NaN();
  }
}
