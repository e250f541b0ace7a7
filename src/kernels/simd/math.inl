// Vector math shared by the ISA instantiations (needs a Vec from simd/vec_*.inl).

// exp(x): x = n·ln2 + r, |r| <= ln2/2; exp(r) by its degree-7 Taylor polynomial (rel. error < 1e-8
// before rounding); exp(x) = 2^n·exp(r). -inf and x < -104 give 0; x > 88.7 saturates near FLT_MAX; NaN gives NaN.
inline Vec vexp(Vec x) {
  // Clamped to [-104, 88.72] with NaN kept: min/max return their second operand when either is NaN, so x goes
  // second (clamped the other way round, exp(NaN) was exp(-104) = 0, and a NaN score dropped out of a softmax).
  x = vmin(set1(88.72f), vmax(set1(-104.f), x));
  Vec n = round_nearest(mul(x, set1(1.44269504088896341f)));
  Vec r = fmadd(n, set1(-0.693145751953125f), x);        // ln2 split hi/lo for an exact product
  r = fmadd(n, set1(-1.428606765330187045e-06f), r);
  Vec p = set1(1.f / 5040.f);
  p = fmadd(p, r, set1(1.f / 720.f));
  p = fmadd(p, r, set1(1.f / 120.f));
  p = fmadd(p, r, set1(1.f / 24.f));
  p = fmadd(p, r, set1(1.f / 6.f));
  p = fmadd(p, r, set1(0.5f));
  p = fmadd(p, r, set1(1.f));
  p = fmadd(p, r, set1(1.f));
  return scale_pow2(p, n);
}

// erf(x) = x·P(x²)/Q(x²) on x clamped to [-4, 4] (beyond, erf is ±1 in f32): the rational minimax
// approximation of Eigen's and XLA's float erf, its result clamped to [-1, 1] as XLA's is (near the input clamp
// the rational form overshoots: 1.0000001 at x = 3.9). Max abs error about 4e-7 (near the clamp; 1e-7
// elsewhere), measured against std::erf in double; 12 FMAs and one division, no exp: GELU's cost in an epilogue
// is this function (the Abramowitz & Stegun 7.1.26 form it replaces, 1.5e-7 with an exp, took 0.24 ns per
// element per thread, this one 0.14, in a one-off measurement of session 13 not kept in the tree).
inline Vec verf(Vec a) {
  const Vec x = vmin(vmax(a, set1(-4.f)), set1(4.f));
  const Vec x2 = mul(x, x);
  Vec p = set1(-2.72614225801306e-10f);
  p = fmadd(p, x2, set1(2.77068142495902e-08f));
  p = fmadd(p, x2, set1(-2.10102402082508e-06f));
  p = fmadd(p, x2, set1(-5.69250639462346e-05f));
  p = fmadd(p, x2, set1(-7.34990630326855e-04f));
  p = fmadd(p, x2, set1(-2.95459980854025e-03f));
  p = fmadd(p, x2, set1(-1.60960333262415e-02f));
  Vec q = set1(-1.45660718464996e-05f);
  q = fmadd(q, x2, set1(-2.13374055278905e-04f));
  q = fmadd(q, x2, set1(-1.68282697438203e-03f));
  q = fmadd(q, x2, set1(-7.37332916720468e-03f));
  q = fmadd(q, x2, set1(-1.42647390514189e-02f));
  return vmin(vmax(div(mul(p, x), q), set1(-1.f)), set1(1.f));
}

// tanh(y) = 1 - 2/(1 + exp(2y)); saturates correctly at ±1.
inline Vec vtanh(Vec y) { return sub(set1(1.f), div(set1(2.f), add(set1(1.f), vexp(add(y, y))))); }

// Whether row[0, n) holds a NaN. The softmaxes ask it only of a row whose max came out -inf: max and reduce_max
// drop a NaN lane beside a -inf one, and a NaN score must make the row NaN (as the reference twins do), not a
// masked one.
inline bool any_nan(const float* row, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    if (row[j] != row[j]) return true;
  return false;
}

inline Vec vact(Vec x, Act act) {
  switch (act) {
    case Act::none: return x;
    case Act::relu: return vmax(set1(0.f), x);  // NaN kept: max returns its second operand when either is NaN
    case Act::gelu_erf:  // x/2 · (1 + erf(x/√2))
      return mul(mul(set1(0.5f), x), add(set1(1.f), verf(mul(x, set1(0.70710678118654752f)))));
    case Act::gelu_tanh: {  // x/2 · (1 + tanh(√(2/π)·(x + 0.044715x³)))
      Vec inner = mul(set1(0.79788456080286536f), fmadd(mul(mul(x, x), x), set1(0.044715f), x));
      return mul(mul(set1(0.5f), x), add(set1(1.f), vtanh(inner)));
    }
    case Act::silu:  // x / (1 + exp(-x))
      return div(x, add(set1(1.f), vexp(mul(x, set1(-1.f)))));
    case Act::tanh:
      return vtanh(x);
  }
  return x;
}
