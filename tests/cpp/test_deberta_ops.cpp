// DeBERTa's ops (src/ops/disentangled_bias.cpp, src/ops/conv1d.cpp) with the active kernel table:
//  * forward against a double-precision scalar loop of the formula (max|a - b| / max|b| <= 1e-5);
//  * backward against central finite differences of that double forward (test_backward_reference.hpp), 1e-5;
//  * odd sizes, groups, packed sequences (cu_seqlens), several heads; shape errors name the argument.
#include <algorithm>
#include <string>

#include "ops/backward.hpp"
#include "ops/ops.hpp"
#include "test_backward_reference.hpp"

using namespace encore;
using bwdtest::fd_grad;
using bwdtest::randn;
using bwdtest::rel_err;
using bwdtest::to_double;
using DVec = std::vector<double>;

namespace {

Tensor tensor(const Shape& s, const std::vector<float>& v) { return Tensor::from_floats(s, v.data()); }
std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// ---------------------------------------------------------------- conv1d

struct ConvCase {
  const char* name;
  int64_t B, T, Cin, Cout, K, groups;
  std::vector<int64_t> cu;  // packed: B = 1 and these row ranges
};
const ConvCase kConvCases[] = {
    {"k3", 2, 7, 5, 6, 3, 1, {}},
    {"k5 groups 2, T < K", 3, 2, 6, 4, 5, 2, {}},
    {"k1", 1, 4, 3, 3, 1, 1, {}},
    {"packed k3 groups 3", 1, 9, 6, 6, 3, 3, {0, 4, 5, 9}},
};

// out[t, g·Cog + o] = bias + Σ_s Σ_c W[g·Cog + o, c, s] · x[t + s - pad, g·Cig + c], 0 outside the sequence
DVec conv_ref(const ConvCase& c, const DVec& x, const DVec& w, const DVec& b) {
  const int64_t Cig = c.Cin / c.groups, Cog = c.Cout / c.groups, pad = (c.K - 1) / 2;
  std::vector<std::pair<int64_t, int64_t>> seqs;
  if (c.cu.empty())
    for (int64_t i = 0; i < c.B; ++i) seqs.emplace_back(i * c.T, c.T);
  else
    for (size_t i = 0; i + 1 < c.cu.size(); ++i) seqs.emplace_back(c.cu[i], c.cu[i + 1] - c.cu[i]);
  DVec out(static_cast<size_t>(c.B * c.T * c.Cout), 0.0);
  for (const auto& [r0, L] : seqs)
    for (int64_t t = 0; t < L; ++t)
      for (int64_t o = 0; o < c.Cout; ++o) {
        const int64_t g = o / Cog;
        double v = b[o];
        for (int64_t s = 0; s < c.K; ++s) {
          const int64_t u = t + s - pad;
          if (u < 0 || u >= L) continue;
          for (int64_t ci = 0; ci < Cig; ++ci) v += w[(o * Cig + ci) * c.K + s] * x[(r0 + u) * c.Cin + g * Cig + ci];
        }
        out[(r0 + t) * c.Cout + o] = v;
      }
  return out;
}

TEST(DebertaOps, Conv1dMatchesReferenceAndFiniteDifferences) {
  for (const ConvCase& c : kConvCases) {
    const int64_t Cig = c.Cin / c.groups, n = c.B * c.T;
    auto x = randn(n * c.Cin, 301), w = randn(c.Cout * Cig * c.K, 302, 0.5f), b = randn(c.Cout, 303),
         g = randn(n * c.Cout, 304);
    const Tensor X = tensor({c.B, c.T, c.Cin}, x), W = tensor({c.Cout, Cig, c.K}, w), Bv = tensor({c.Cout}, b);
    const std::vector<int64_t>* cu = c.cu.empty() ? nullptr : &c.cu;
    const DVec xd = to_double(x), wd = to_double(w), bd = to_double(b), gd = to_double(g);
    EXPECT_LE(rel_err(values(ops::conv1d_forward(X, W, Bv, c.groups, cu)), conv_ref(c, xd, wd, bd)), 1e-5) << c.name;
    Tensor dx, dW = Tensor::zeros(W.shape()), db = Tensor::zeros({c.Cout});
    ops::conv1d_backward(&dx, &dW, &db, tensor({c.B, c.T, c.Cout}, g), X, W, c.groups, cu);
    auto L = [&](const DVec& xx, const DVec& ww, const DVec& bb) { return bwdtest::dot(gd, conv_ref(c, xx, ww, bb)); };
    EXPECT_LE(rel_err(values(dx), fd_grad([&](const DVec& v) { return L(v, wd, bd); }, xd)), 1e-5) << c.name << " dx";
    EXPECT_LE(rel_err(values(dW), fd_grad([&](const DVec& v) { return L(xd, v, bd); }, wd)), 1e-5) << c.name << " dW";
    EXPECT_LE(rel_err(values(db), fd_grad([&](const DVec& v) { return L(xd, wd, v); }, bd)), 1e-5) << c.name << " db";
  }
}

// ---------------------------------------------------------------- disentangled bias

struct BiasCase {
  const char* name;
  int64_t B, T, heads, d, R;
  bool c2p, p2c;
};
const BiasCase kBiasCases[] = {
    {"c2p + p2c", 2, 5, 2, 3, 6, true, true},
    {"c2p only, 3 heads", 1, 7, 3, 2, 4, true, false},
    {"p2c only", 3, 4, 1, 5, 7, false, true},
};

// row(i - j) for a case: some distances share rows, as buckets and clamping make them
ops::RelativeRows rows_of(const BiasCase& c) {
  ops::RelativeRows r;
  r.T = c.T;
  r.rows = c.R;
  for (int64_t delta = -(c.T - 1); delta <= c.T - 1; ++delta)
    r.row.push_back(static_cast<int32_t>(std::clamp<int64_t>(delta + c.R / 2, 0, c.R - 1)));
  return r;
}

// bias[b·H + h, i, j] = scale·(q_i·Kr[m] + k_j·Qr[m]) over head h's columns, m = row(i - j)
DVec bias_ref(const BiasCase& c, const ops::RelativeRows& rel, double scale, const DVec& q, const DVec& k,
              const DVec& kr, const DVec& qr) {
  const int64_t C = c.heads * c.d;
  DVec out(static_cast<size_t>(c.B * c.heads * c.T * c.T), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t j = 0; j < c.T; ++j) {
          const int64_t m = rel.at(i, j);
          double v = 0;
          for (int64_t e = 0; e < c.d; ++e) {
            const int64_t col = h * c.d + e;
            if (c.c2p) v += q[(b * c.T + i) * C + col] * kr[m * C + col];
            if (c.p2c) v += k[(b * c.T + j) * C + col] * qr[m * C + col];
          }
          out[((b * c.heads + h) * c.T + i) * c.T + j] = scale * v;
        }
  return out;
}

TEST(DebertaOps, DisentangledBiasMatchesReferenceAndFiniteDifferences) {
  for (const BiasCase& c : kBiasCases) {
    const int64_t C = c.heads * c.d, H = c.heads, T = c.T;
    const ops::RelativeRows rel = rows_of(c);
    const float scale = 0.37f;
    auto q = randn(c.B * T * C, 401), k = randn(c.B * T * C, 402), kr = randn(c.R * C, 403), qr = randn(c.R * C, 404),
         g = randn(c.B * H * T * T, 405);
    const Tensor Q = tensor({c.B, T, C}, q), K = tensor({c.B, T, C}, k);
    const Tensor Kr = c.c2p ? tensor({c.R, C}, kr) : Tensor(), Qr = c.p2c ? tensor({c.R, C}, qr) : Tensor();
    std::vector<ops::DisentangledSeq> seqs;
    for (int64_t b = 0; b < c.B; ++b) seqs.push_back({b, 0, T});
    Tensor bias = Tensor::empty({c.B * H, T, T});
    ops::disentangled_bias_forward(bias, T, seqs, Q, K, Kr, Qr, H, rel, scale);
    const DVec qd = to_double(q), kd = to_double(k), krd = to_double(kr), qrd = to_double(qr), gd = to_double(g);
    EXPECT_LE(rel_err(values(bias), bias_ref(c, rel, scale, qd, kd, krd, qrd)), 1e-5) << c.name;
    Tensor dq = Tensor::zeros(Q.shape()), dk = Tensor::zeros(K.shape());
    Tensor dkr = c.c2p ? Tensor::zeros({c.R, C}) : Tensor(), dqr = c.p2c ? Tensor::zeros({c.R, C}) : Tensor();
    ops::disentangled_bias_backward(&dq, &dk, &dkr, &dqr, tensor({c.B, H, T, T}, g), Q, K, Kr, Qr, H, rel, scale);
    auto L = [&](const DVec& a, const DVec& b, const DVec& x, const DVec& y) {
      return bwdtest::dot(gd, bias_ref(c, rel, scale, a, b, x, y));
    };
    if (c.c2p) {
      EXPECT_LE(rel_err(values(dq), fd_grad([&](const DVec& v) { return L(v, kd, krd, qrd); }, qd)), 1e-5) << c.name;
      EXPECT_LE(rel_err(values(dkr), fd_grad([&](const DVec& v) { return L(qd, kd, v, qrd); }, krd)), 1e-5) << c.name;
    }
    if (c.p2c) {
      EXPECT_LE(rel_err(values(dk), fd_grad([&](const DVec& v) { return L(qd, v, krd, qrd); }, kd)), 1e-5) << c.name;
      EXPECT_LE(rel_err(values(dqr), fd_grad([&](const DVec& v) { return L(qd, kd, krd, v); }, qrd)), 1e-5) << c.name;
    }
  }
}

TEST(DebertaOps, ShapeErrorsNameTheArgument) {
  const Tensor x = Tensor::zeros({1, 4, 6});
  try {
    ops::conv1d_forward(x, Tensor::zeros({6, 6, 2}), Tensor(), 1);
    ADD_FAILURE() << "even kernel accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel size 2 must be odd"), std::string::npos) << e.what();
  }
  try {
    ops::conv1d_forward(x, Tensor::zeros({6, 3, 3}), Tensor(), 4);
    ADD_FAILURE() << "groups 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("groups 4"), std::string::npos) << e.what();
  }
}

}  // namespace
