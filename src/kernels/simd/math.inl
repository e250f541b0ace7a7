// Vector math shared by the ISA instantiations (needs a Vec from simd/vec_*.inl).

// exp(x): x = n·ln2 + r, |r| <= ln2/2; exp(r) by its degree-7 Taylor polynomial (rel. error < 1e-8
// before rounding); exp(x) = 2^n·exp(r). -inf and x < -104 give 0; x > 88.7 saturates near FLT_MAX.
inline Vec vexp(Vec x) {
  x = vmin(vmax(x, set1(-104.f)), set1(88.72f));
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

// erf(x) by Abramowitz & Stegun 7.1.26: 1 - (a1·t + ... + a5·t^5)·exp(-x²), t = 1/(1 + p·|x|);
// max abs error 1.5e-7; odd symmetry restores the sign.
inline Vec verf(Vec x) {
  Vec ax = vabs(x);
  Vec t = div(set1(1.f), fmadd(set1(0.3275911f), ax, set1(1.f)));
  Vec poly = set1(1.061405429f);
  poly = fmadd(poly, t, set1(-1.453152027f));
  poly = fmadd(poly, t, set1(1.421413741f));
  poly = fmadd(poly, t, set1(-0.284496736f));
  poly = fmadd(poly, t, set1(0.254829592f));
  poly = mul(poly, t);
  Vec e = vexp(mul(mul(ax, ax), set1(-1.f)));
  Vec y = sub(set1(1.f), mul(poly, e));
  return copysign_of(y, x);
}

// tanh(y) = 1 - 2/(1 + exp(2y)); saturates correctly at ±1.
inline Vec vtanh(Vec y) { return sub(set1(1.f), div(set1(2.f), add(set1(1.f), vexp(add(y, y))))); }

inline Vec vact(Vec x, Act act) {
  switch (act) {
    case Act::none: return x;
    case Act::relu: return vmax(x, set1(0.f));
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
