// Backward kernels (src/kernels/backward.hpp), two checks per kernel:
//  * every *_ref twin against central finite differences of a double-precision forward (test_backward_reference.hpp)
//    on tiny shapes: error = max|grad - fd| / max|fd| (normwise, ∞-norm), tolerance per case (1e-6: the ref
//    computes in double and rounds once; the float inputs are exact in double);
//  * every fast variant, for each ISA table this CPU runs, against its ref twin on odd sizes, vector tails,
//    masks and strided views: max |fast - ref| / max(1, |ref|) <= 1e-5 (fp32), bitwise where the arithmetic is
//    the same (dropout, embedding).
#include <cstring>
#include <limits>
#include <string>

#include "kernels/backward.hpp"
#include "test_backward_reference.hpp"

using namespace encore::kernels;
using bwdtest::fd_grad;
using bwdtest::max_scaled_err;
using bwdtest::randn;
using bwdtest::rel_err;
using bwdtest::to_double;
using DVec = std::vector<double>;

namespace {

std::vector<const BackwardKernelTable*> tables() {
  std::vector<const BackwardKernelTable*> out;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const BackwardKernelTable* t = backward_kernels_for(isa)) out.push_back(t);
  return out;
}

const int64_t kSizes[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 768, 1001};
const Act kActs[] = {Act::none, Act::relu, Act::gelu_erf, Act::gelu_tanh, Act::silu, Act::tanh};
const float kNegInf = -std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// dx of a norm is rstd·(…): fast vs ref is compared on the scale of (…), each row divided by its rstd, so that
// C = 1 (variance 0, rstd = 1/√eps ≈ 316) does not magnify float rounding 316 times.
std::vector<float> per_rstd(const std::vector<float>& dx, const std::vector<float>& rstd, int64_t C) {
  std::vector<float> out(dx.size());
  for (size_t i = 0; i < dx.size(); ++i) out[i] = dx[i] / rstd[i / C];
  return out;
}

// Moves values off relu's kink, where a finite difference straddles two slopes.
void off_kink(std::vector<float>& x) {
  for (auto& v : x)
    if (std::abs(v) < 1e-3f) v = 0.5f;
}

}  // namespace

TEST(BackwardKernels, TablesFollowTheForwardDispatch) {
  ASSERT_FALSE(tables().empty());
  EXPECT_STREQ(backward_kernels_ref().name, "ref");
  EXPECT_STREQ(backward_kernels().name, kernels().name);
}

// ---------------------------------------------------------------- activations

struct ActCase {
  Act act;
  double fd_tol;
};
const ActCase kActCases[] = {{Act::none, 1e-6},      {Act::relu, 1e-6}, {Act::gelu_erf, 1e-6},
                             {Act::gelu_tanh, 1e-6}, {Act::silu, 1e-6}, {Act::tanh, 1e-6}};

TEST(BackwardKernels, ActivationRefMatchesFiniteDifferences) {
  for (const ActCase& c : kActCases) {
    const int64_t n = 41;
    auto x = randn(n, 11, 2.5f);
    off_kink(x);
    auto dout = randn(n, 12);
    std::vector<float> dx(n);
    activation_backward_f32_ref(dx.data(), dout.data(), x.data(), n, c.act);
    const DVec w = to_double(dout);
    DVec fd = fd_grad(
        [&](const DVec& xd) {
          DVec y(n);
          for (int64_t i = 0; i < n; ++i) y[i] = bwdtest::act(xd[i], c.act);
          return bwdtest::dot(w, y);
        },
        to_double(x));
    EXPECT_LE(rel_err(dx, fd), c.fd_tol) << act_name(c.act);
  }
}

TEST(BackwardKernels, ActivationFastMatchesRef) {
  const float specials[] = {0.f, -0.f, 1e-20f, -1e-20f, 12.f, -12.f, 60.f, -60.f};
  for (const BackwardKernelTable* t : tables())
    for (Act act : kActs)
      for (int64_t n : kSizes) {
        auto x = randn(n, 100 + n, 3.f);
        for (int64_t i = 0; i < n && i < 8; ++i) x[i] = specials[i];
        auto dout = randn(n, 200 + n);
        std::vector<float> got(n), want(n);
        t->activation_backward_f32(got.data(), dout.data(), x.data(), n, act);
        activation_backward_f32_ref(want.data(), dout.data(), x.data(), n, act);
        EXPECT_LE(max_scaled_err(got, want), 1e-5) << t->name << " " << act_name(act) << " n=" << n;
        auto alias = dout;  // dx may alias dout
        t->activation_backward_f32(alias.data(), alias.data(), x.data(), n, act);
        EXPECT_EQ(alias, got) << t->name << " aliased " << act_name(act) << " n=" << n;
      }
}

// ---------------------------------------------------------------- gated FFN hidden

TEST(BackwardKernels, GatedRefMatchesFiniteDifferences) {
  for (const ActCase& c : kActCases)
    for (int64_t F : {1, 5, 9}) {
      const int64_t rows = 3;
      auto in = randn(rows * 2 * F, 21 + F, 2.f);
      off_kink(in);
      auto dout = randn(rows * F, 22 + F);
      const DVec w = to_double(dout);
      for (Gate gate : {Gate::first, Gate::second}) {
        std::vector<float> din(rows * 2 * F);
        gated_backward_f32_ref(din.data(), dout.data(), in.data(), rows, F, c.act, gate);
        // Gate::second is Gate::first on each row's halves swapped: act(x1)·x0
        auto forward = [&](const DVec& x) {
          if (gate == Gate::first) return bwdtest::gated(x, rows, F, c.act);
          DVec swapped(x.size());
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < F; ++i) {
              swapped[r * 2 * F + i] = x[r * 2 * F + F + i];
              swapped[r * 2 * F + F + i] = x[r * 2 * F + i];
            }
          return bwdtest::gated(swapped, rows, F, c.act);
        };
        DVec fd = fd_grad([&](const DVec& x) { return bwdtest::dot(w, forward(x)); }, to_double(in));
        EXPECT_LE(rel_err(din, fd), c.fd_tol) << act_name(c.act) << " F=" << F << " gate " << int(gate);
      }
    }
}

TEST(BackwardKernels, GatedFastMatchesRef) {
  for (const BackwardKernelTable* t : tables())
    for (Act act : kActs)
      for (int64_t F : kSizes) {
        const int64_t rows = 2;
        auto in = randn(rows * 2 * F, 300 + F, 2.f);
        auto dout = randn(rows * F, 400 + F);
        for (Gate gate : {Gate::first, Gate::second}) {
          std::vector<float> got(rows * 2 * F), want(rows * 2 * F);
          t->gated_backward_f32(got.data(), dout.data(), in.data(), rows, F, act, gate);
          gated_backward_f32_ref(want.data(), dout.data(), in.data(), rows, F, act, gate);
          EXPECT_LE(max_scaled_err(got, want), 1e-5) << t->name << " " << act_name(act) << " F=" << F << " gate "
                                                     << int(gate);
        }
      }
}

// ---------------------------------------------------------------- layernorm, rmsnorm

struct NormCase {
  const char* name;
  int64_t rows, C;
  bool weight, bias;
  double fd_tol;
};
const NormCase kNormCases[] = {
    {"affine", 3, 7, true, true, 1e-6},     {"no affine", 2, 16, false, false, 1e-6},
    {"weight only", 4, 33, true, false, 1e-6}, {"bias only", 3, 5, false, true, 1e-6},
    {"C=1", 2, 1, true, true, 1e-6},
};

TEST(BackwardKernels, LayerNormRefMatchesFiniteDifferences) {
  const float eps = 1e-5f;
  for (const NormCase& c : kNormCases) {
    const int64_t rows = c.rows, C = c.C, n = rows * C;
    auto x = randn(n, 31, 1.5f, 0.3f), dout = randn(n, 32);
    auto w = c.weight ? randn(C, 33, 0.5f, 1.f) : std::vector<float>();
    auto b = c.bias ? randn(C, 34) : std::vector<float>();
    std::vector<float> out(n), mean(rows), rstd(rows), dx(n), dw(C, 0.f), db(C, 0.f);
    layernorm_forward_f32_ref(out.data(), mean.data(), rstd.data(), x.data(), c.weight ? w.data() : nullptr,
                              c.bias ? b.data() : nullptr, rows, C, eps);
    layernorm_backward_f32_ref(dx.data(), c.weight ? dw.data() : nullptr, c.bias ? db.data() : nullptr, dout.data(),
                               mean.data(), rstd.data(), x.data(), c.weight ? w.data() : nullptr, rows, C);
    const DVec g = to_double(dout), xd = to_double(x), wd = to_double(w), bd = to_double(b);
    auto L = [&](const DVec& xx, const DVec& ww, const DVec& bb) {
      return bwdtest::dot(g, bwdtest::layernorm(xx, ww, bb, rows, C, double(eps)));
    };
    EXPECT_LE(rel_err(dx, fd_grad([&](const DVec& v) { return L(v, wd, bd); }, xd)), c.fd_tol) << c.name << " dx";
    if (c.weight) {
      EXPECT_LE(rel_err(dw, fd_grad([&](const DVec& v) { return L(xd, v, bd); }, wd)), c.fd_tol) << c.name << " dw";
    }
    if (c.bias) {
      EXPECT_LE(rel_err(db, fd_grad([&](const DVec& v) { return L(xd, wd, v); }, bd)), c.fd_tol) << c.name << " db";
    }
  }
}

TEST(BackwardKernels, LayerNormFastMatchesRef) {
  for (const BackwardKernelTable* t : tables())
    for (int64_t C : kSizes)
      for (int variant = 0; variant < 3; ++variant) {  // 0: weight + bias, 1: weight, 2: no affine
        const int64_t rows = 3, n = rows * C;
        auto x = randn(n, 40 + C, 2.f, -0.7f), dout = randn(n, 41 + C), w = randn(C, 42 + C, 0.5f, 1.f);
        std::vector<float> out(n), mean(rows), rstd(rows);
        const float* wp = variant < 2 ? w.data() : nullptr;
        layernorm_forward_f32_ref(out.data(), mean.data(), rstd.data(), x.data(), wp, nullptr, rows, C, 1e-5f);
        auto dw0 = randn(C, 43 + C), db0 = randn(C, 44 + C);  // accumulated into
        std::vector<float> dx_got(n), dx_want(n), dw_got = dw0, dw_want = dw0, db_got = db0, db_want = db0;
        float* dwg = variant < 2 ? dw_got.data() : nullptr;
        float* dbg = variant == 0 ? db_got.data() : nullptr;
        t->layernorm_backward_f32(dx_got.data(), dwg, dbg, dout.data(), mean.data(), rstd.data(), x.data(), wp, rows, C);
        layernorm_backward_f32_ref(dx_want.data(), variant < 2 ? dw_want.data() : nullptr,
                                   variant == 0 ? db_want.data() : nullptr, dout.data(), mean.data(), rstd.data(),
                                   x.data(), wp, rows, C);
        const std::string where = std::string(t->name) + " C=" + std::to_string(C) + " variant=" + std::to_string(variant);
        EXPECT_LE(max_scaled_err(per_rstd(dx_got, rstd, C), per_rstd(dx_want, rstd, C)), 1e-5) << where;
        EXPECT_LE(max_scaled_err(dw_got, dw_want), 1e-5) << where;
        EXPECT_LE(max_scaled_err(db_got, db_want), 1e-5) << where;
        auto alias = dout;  // dinp may alias dout
        t->layernorm_backward_f32(alias.data(), nullptr, nullptr, alias.data(), mean.data(), rstd.data(), x.data(), wp,
                                  rows, C);
        EXPECT_EQ(alias, dx_got) << where << " aliased";
      }
}

// RMSNorm at C = 1 is out = w·x/√(x² + eps) ≈ w·sign(x): its dx ≈ w·eps/|x|³ is what is left after cancelling
// 1 - x²·rstd², which the float rstd the forward saves cannot resolve (in torch either). Not a case.
const NormCase kRmsCases[] = {
    {"weight", 3, 7, true, false, 1e-6},
    {"no weight", 2, 16, false, false, 1e-6},
    {"weight, 33", 4, 33, true, false, 1e-6},
    {"C=2", 3, 2, true, false, 1e-6},
};

TEST(BackwardKernels, RmsNormRefMatchesFiniteDifferences) {
  const float eps = 1e-6f;
  for (const NormCase& c : kRmsCases) {
    const int64_t rows = c.rows, C = c.C, n = rows * C;
    auto x = randn(n, 51, 1.5f, 0.3f), dout = randn(n, 52);
    auto w = c.weight ? randn(C, 53, 0.5f, 1.f) : std::vector<float>();
    std::vector<float> out(n), rstd(rows), dx(n), dw(C, 0.f);
    rmsnorm_forward_f32_ref(out.data(), rstd.data(), x.data(), c.weight ? w.data() : nullptr, rows, C, eps);
    rmsnorm_backward_f32_ref(dx.data(), c.weight ? dw.data() : nullptr, dout.data(), rstd.data(), x.data(),
                             c.weight ? w.data() : nullptr, rows, C);
    const DVec g = to_double(dout), xd = to_double(x), wd = to_double(w);
    auto L = [&](const DVec& xx, const DVec& ww) { return bwdtest::dot(g, bwdtest::rmsnorm(xx, ww, rows, C, double(eps))); };
    EXPECT_LE(rel_err(dx, fd_grad([&](const DVec& v) { return L(v, wd); }, xd)), c.fd_tol) << c.name << " dx";
    if (c.weight) {
      EXPECT_LE(rel_err(dw, fd_grad([&](const DVec& v) { return L(xd, v); }, wd)), c.fd_tol) << c.name << " dw";
    }
  }
}

TEST(BackwardKernels, RmsNormFastMatchesRef) {
  for (const BackwardKernelTable* t : tables())
    for (int64_t C : kSizes)
      for (bool weighted : {true, false}) {
        const int64_t rows = 3, n = rows * C;
        auto x = randn(n, 60 + C, 2.f, 0.4f), dout = randn(n, 61 + C), w = randn(C, 62 + C, 0.5f, 1.f);
        std::vector<float> out(n), rstd(rows);
        const float* wp = weighted ? w.data() : nullptr;
        rmsnorm_forward_f32_ref(out.data(), rstd.data(), x.data(), wp, rows, C, 1e-6f);
        auto dw0 = randn(C, 63 + C);
        std::vector<float> dx_got(n), dx_want(n), dw_got = dw0, dw_want = dw0;
        t->rmsnorm_backward_f32(dx_got.data(), weighted ? dw_got.data() : nullptr, dout.data(), rstd.data(), x.data(),
                                wp, rows, C);
        rmsnorm_backward_f32_ref(dx_want.data(), weighted ? dw_want.data() : nullptr, dout.data(), rstd.data(),
                                 x.data(), wp, rows, C);
        EXPECT_LE(max_scaled_err(per_rstd(dx_got, rstd, C), per_rstd(dx_want, rstd, C)), 1e-5)
            << t->name << " C=" << C << " weighted=" << weighted;
        EXPECT_LE(max_scaled_err(dw_got, dw_want), 1e-5) << t->name << " C=" << C << " weighted=" << weighted;
      }
}

// ---------------------------------------------------------------- softmax with masks

enum class MaskKind { none, additive, causal, full_row };
const char* mask_name(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "none";
    case MaskKind::additive: return "additive with -inf";
    case MaskKind::causal: return "causal";
    case MaskKind::full_row: return "one fully masked row";
  }
  return "?";
}

// Row r's additive mask (cols floats) and limit for a kind; nullptr = no mask.
struct RowMask {
  std::vector<float> values;  // rows × cols, or empty
  std::vector<int64_t> limit;
};
RowMask make_row_mask(MaskKind kind, int64_t rows, int64_t cols, uint32_t seed) {
  RowMask m;
  m.limit.assign(rows, cols);
  if (kind == MaskKind::additive || kind == MaskKind::full_row) {
    m.values = randn(rows * cols, seed);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        if ((r + j) % 3 == 1 && j > 0) m.values[r * cols + j] = kNegInf;  // column 0 stays finite
    if (kind == MaskKind::full_row)
      for (int64_t j = 0; j < cols; ++j) m.values[std::min<int64_t>(1, rows - 1) * cols + j] = kNegInf;
  }
  if (kind == MaskKind::causal)
    for (int64_t r = 0; r < rows; ++r) m.limit[r] = std::min<int64_t>(cols, r + 1);
  return m;
}

struct SoftmaxCase {
  int64_t rows, cols;
  float scale;
  MaskKind mask;
  double fd_tol;
};
const SoftmaxCase kSoftmaxCases[] = {
    {3, 1, 1.f, MaskKind::none, 1e-6},        {4, 5, 0.5f, MaskKind::none, 1e-6},
    {4, 9, 0.35f, MaskKind::additive, 1e-6},  {5, 4, 1.f, MaskKind::causal, 1e-6},
    {3, 7, 0.7f, MaskKind::full_row, 1e-6},
};

TEST(BackwardKernels, SoftmaxRefMatchesFiniteDifferences) {
  for (const SoftmaxCase& c : kSoftmaxCases) {
    const int64_t rows = c.rows, cols = c.cols, n = rows * cols;
    const RowMask m = make_row_mask(c.mask, rows, cols, 71);
    auto x = randn(n, 72, 2.f), dp = randn(n, 73);
    std::vector<float> p = x, dx(n);
    for (int64_t r = 0; r < rows; ++r)
      softmax_masked_f32_ref(p.data() + r * cols, cols, c.scale, m.values.empty() ? nullptr : m.values.data() + r * cols,
                             nullptr, m.limit[r]);
    softmax_backward_f32_ref(dx.data(), dp.data(), p.data(), rows, cols, c.scale);
    const DVec g = to_double(dp), md = to_double(m.values);
    DVec fd = fd_grad(
        [&](const DVec& xd) {
          DVec pd(n);
          for (int64_t r = 0; r < rows; ++r)
            bwdtest::softmax_row(pd.data() + r * cols, xd.data() + r * cols, cols, double(c.scale),
                                 md.empty() ? nullptr : md.data() + r * cols, m.limit[r]);
          return bwdtest::dot(g, pd);
        },
        to_double(x));
    EXPECT_LE(rel_err(dx, fd), c.fd_tol) << mask_name(c.mask) << " cols=" << cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const bool masked = j >= m.limit[r] || (!m.values.empty() && m.values[r * cols + j] == kNegInf);
        if (masked) {
          EXPECT_EQ(dx[r * cols + j], 0.f) << mask_name(c.mask) << " masked entry " << r << "," << j;
        }
      }
  }
}

TEST(BackwardKernels, SoftmaxFastMatchesRef) {
  for (const BackwardKernelTable* t : tables())
    for (int64_t cols : kSizes)
      for (MaskKind kind : {MaskKind::none, MaskKind::additive, MaskKind::causal, MaskKind::full_row}) {
        const int64_t rows = 3, n = rows * cols;
        const RowMask m = make_row_mask(kind, rows, cols, 80 + cols);
        auto x = randn(n, 81 + cols, 3.f), dp = randn(n, 82 + cols);
        std::vector<float> p = x;
        for (int64_t r = 0; r < rows; ++r)
          softmax_masked_f32_ref(p.data() + r * cols, cols, 0.125f,
                                 m.values.empty() ? nullptr : m.values.data() + r * cols, nullptr, m.limit[r]);
        std::vector<float> got(n), want(n);
        t->softmax_backward_f32(got.data(), dp.data(), p.data(), rows, cols, 0.125f);
        softmax_backward_f32_ref(want.data(), dp.data(), p.data(), rows, cols, 0.125f);
        EXPECT_LE(max_scaled_err(got, want), 1e-5) << t->name << " cols=" << cols << " " << mask_name(kind);
        auto alias = dp;
        t->softmax_backward_f32(alias.data(), alias.data(), p.data(), rows, cols, 0.125f);
        EXPECT_EQ(alias, got) << t->name << " aliased cols=" << cols;
      }
}

// ---------------------------------------------------------------- linear, bias

struct LinearCase {
  int64_t M, K, N;
  bool bias;
  double fd_tol;
};
const LinearCase kLinearCases[] = {{1, 1, 1, true, 1e-6}, {3, 5, 4, true, 1e-6}, {4, 7, 3, false, 1e-6},
                                   {2, 9, 17, true, 1e-6}};

TEST(BackwardKernels, LinearRefMatchesFiniteDifferences) {
  for (const LinearCase& c : kLinearCases) {
    auto x = randn(c.M * c.K, 91), w = randn(c.N * c.K, 92), b = randn(c.N, 93), dout = randn(c.M * c.N, 94);
    std::vector<float> dx(c.M * c.K), dw(c.N * c.K, 0.f), db(c.N, 0.f);
    linear_backward_f32_ref(dx.data(), dw.data(), c.bias ? db.data() : nullptr, dout.data(), x.data(), w.data(), c.M,
                            c.K, c.N);
    const DVec g = to_double(dout), xd = to_double(x), wd = to_double(w), bd = c.bias ? to_double(b) : DVec();
    auto L = [&](const DVec& xx, const DVec& ww, const DVec& bb) {
      return bwdtest::dot(g, bwdtest::linear(xx, ww, bb, c.M, c.K, c.N, Act::none));
    };
    const std::string where = "M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N);
    EXPECT_LE(rel_err(dx, fd_grad([&](const DVec& v) { return L(v, wd, bd); }, xd)), c.fd_tol) << where;
    EXPECT_LE(rel_err(dw, fd_grad([&](const DVec& v) { return L(xd, v, bd); }, wd)), c.fd_tol) << where;
    if (c.bias) {
      EXPECT_LE(rel_err(db, fd_grad([&](const DVec& v) { return L(xd, wd, v); }, bd)), c.fd_tol) << where;
    }
  }
}

TEST(BackwardKernels, BiasFastMatchesRef) {
  for (const BackwardKernelTable* t : tables())
    for (int64_t cols : kSizes)
      for (int64_t rows : {1, 5, 37}) {
        const int64_t ld = cols + 3;
        auto dout = randn(rows * ld, 100 + cols + rows), db0 = randn(cols, 101 + cols);
        auto got = db0, want = db0;
        t->bias_backward_f32(got.data(), dout.data(), rows, cols, ld);
        bias_backward_f32_ref(want.data(), dout.data(), rows, cols, ld);
        EXPECT_LE(max_scaled_err(got, want), 1e-5) << t->name << " cols=" << cols << " rows=" << rows;
      }
}

// ---------------------------------------------------------------- residual add, dropout, embedding

TEST(BackwardKernels, AddCopiesTheGradientToBothInputs) {
  auto dout = randn(33, 110);
  std::vector<float> da(33), db(33), ra(33), rb(33);
  add_backward_f32(da.data(), db.data(), dout.data(), 33);
  add_backward_f32_ref(ra.data(), rb.data(), dout.data(), 33);
  EXPECT_EQ(da, dout);
  EXPECT_EQ(db, dout);
  EXPECT_EQ(ra, dout);
  EXPECT_EQ(rb, dout);
  add_backward_f32(nullptr, da.data(), dout.data(), 33);  // one side frozen
}

TEST(BackwardKernels, DropoutRegeneratesTheForwardMask) {
  for (float p : {0.1f, 0.5f, 0.9f, 1.f}) {
    const int64_t n = 1001;
    const uint64_t seed = 0xC0FFEE, offset = 12345;
    std::vector<float> ones(n, 1.f), tmp(n);
    std::vector<uint8_t> keep(n);
    dropout_f32(tmp.data(), keep.data(), ones.data(), n, p, seed, offset);
    auto dout = randn(n, 111);
    // the forward is linear: ∂out/∂in = keep/(1-p), exactly
    DVec exact(n);
    for (int64_t i = 0; i < n; ++i) exact[i] = keep[i] ? dout[i] / (1.0 - p) : 0.0;
    std::vector<float> a(n), b(n), c(n), d(n);
    dropout_backward_f32(a.data(), dout.data(), keep.data(), n, p, seed, offset);
    dropout_backward_f32(b.data(), dout.data(), nullptr, n, p, seed, offset);
    dropout_backward_f32_ref(c.data(), dout.data(), keep.data(), n, p, seed, offset);
    dropout_backward_f32_ref(d.data(), dout.data(), nullptr, n, p, seed, offset);
    EXPECT_LE(rel_err(d, exact), 1e-6) << "p=" << p;
    EXPECT_EQ(a, d) << "p=" << p;  // same arithmetic: bitwise
    EXPECT_EQ(b, d) << "p=" << p;
    EXPECT_EQ(c, d) << "p=" << p;
    // regenerating a sub-range with its offset gives that slice (rows may be split across threads)
    std::vector<float> part(n - 300);
    dropout_backward_f32(part.data(), dout.data() + 300, nullptr, n - 300, p, seed, offset + 300);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), d.begin() + 300)) << "p=" << p;
  }
}

TEST(BackwardKernels, EmbeddingScatterAddMatchesFiniteDifferences) {
  const int64_t V = 6, C = 5;
  const std::vector<int64_t> ids = {3, 1, 3, 0, 5, 3, 2, 1};
  const int64_t n = static_cast<int64_t>(ids.size());
  auto table = randn(V * C, 120), dout = randn(n * C, 121);
  for (int64_t padding_idx : {int64_t(-1), int64_t(1)}) {
    std::vector<float> dt(V * C, 0.f);
    embedding_backward_f32_ref(dt.data(), dout.data(), ids.data(), n, C, C, padding_idx);
    const DVec g = to_double(dout);
    DVec fd = fd_grad(
        [&](const DVec& tb) {
          DVec out(n * C);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t c = 0; c < C; ++c) out[i * C + c] = tb[ids[i] * C + c];
          return bwdtest::dot(g, out);
        },
        to_double(table));
    if (padding_idx >= 0)  // torch's padding_idx: the row is looked up but gets no gradient
      for (int64_t c = 0; c < C; ++c) fd[padding_idx * C + c] = 0.0;
    EXPECT_LE(rel_err(dt, fd), 1e-6) << "padding_idx=" << padding_idx;
    // fast == ref bitwise, whole rows and split into column blocks (ld = C), accumulating onto prior values
    auto base = randn(V * C, 122);
    auto want = base, whole = base, split = base;
    embedding_backward_f32_ref(want.data(), dout.data(), ids.data(), n, C, C, padding_idx);
    embedding_backward_f32(whole.data(), dout.data(), ids.data(), n, C, C, padding_idx);
    embedding_backward_f32(split.data(), dout.data(), ids.data(), n, 2, C, padding_idx);
    embedding_backward_f32(split.data() + 2, dout.data() + 2, ids.data(), n, C - 2, C, padding_idx);
    EXPECT_EQ(whole, want);
    EXPECT_EQ(split, want);
  }
}

// ---------------------------------------------------------------- attention, one head

enum class HeadMask { none, additive, causal, full_row, additive_causal };
struct HeadCase {
  const char* name;
  int64_t T, S, Dh, Dv;
  HeadMask mask;
  float dropout;
  int64_t pad;  // extra row stride on every operand (padding filled with NaN: never read)
  double fd_tol;
};
const HeadCase kHeadCases[] = {
    {"plain", 3, 4, 2, 3, HeadMask::none, 0.f, 0, 1e-6},
    {"odd sizes, strided", 5, 7, 3, 2, HeadMask::none, 0.f, 5, 1e-6},
    {"additive with -inf", 4, 5, 2, 2, HeadMask::additive, 0.f, 1, 1e-6},
    {"causal T<S", 3, 5, 2, 3, HeadMask::causal, 0.f, 0, 1e-6},
    {"causal T>S", 5, 3, 3, 2, HeadMask::causal, 0.f, 2, 1e-6},
    {"fully masked row", 4, 4, 2, 2, HeadMask::full_row, 0.f, 0, 1e-6},
    {"dropout", 4, 6, 2, 3, HeadMask::none, 0.3f, 1, 1e-6},
    {"dropout, causal, additive", 5, 5, 3, 2, HeadMask::additive_causal, 0.5f, 3, 1e-6},
};

// Operands of one head with padded rows, the saved probabilities, and a double oracle.
struct HeadProblem {
  const HeadCase& c;
  int64_t lq, lk, lv, lo;
  std::vector<float> q, k, v, dout, mask, probs;  // q/k/v/dout padded; mask, probs (T, S)
  std::vector<uint8_t> keep;
  double ds = 1.0;
  uint64_t seed = 7, offset = 1000;

  explicit HeadProblem(const HeadCase& hc) : c(hc) {
    lq = c.Dh + c.pad, lk = c.Dh + c.pad, lv = c.Dv + c.pad, lo = c.Dv + c.pad;
    q = padded(randn(c.T * c.Dh, 131, 1.2f), c.T, c.Dh, lq);
    k = padded(randn(c.S * c.Dh, 132, 1.2f), c.S, c.Dh, lk);
    v = padded(randn(c.S * c.Dv, 133), c.S, c.Dv, lv);
    dout = padded(randn(c.T * c.Dv, 134), c.T, c.Dv, lo);
    if (c.mask == HeadMask::additive || c.mask == HeadMask::additive_causal || c.mask == HeadMask::full_row) {
      mask = randn(c.T * c.S, 135);
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t j = 1; j < c.S; ++j)
          if ((t + j) % 3 == 2) mask[t * c.S + j] = kNegInf;
      if (c.mask == HeadMask::full_row)
        for (int64_t j = 0; j < c.S; ++j) mask[1 * c.S + j] = kNegInf;
    }
    if (c.dropout > 0.f) {
      std::vector<float> ones(c.T * c.S, 1.f), tmp(c.T * c.S);
      keep.resize(c.T * c.S);
      dropout_f32(tmp.data(), keep.data(), ones.data(), c.T * c.S, c.dropout, seed, offset);
      ds = 1.f / (1.f - c.dropout);
    }
    std::vector<double> p;
    forward(dense(q, c.T, c.Dh, lq), dense(k, c.S, c.Dh, lk), dense(v, c.S, c.Dv, lv), to_double(mask), &p);
    probs.assign(p.begin(), p.end());  // the forward's saved probabilities, rounded to float once
  }
  bool causal() const { return c.mask == HeadMask::causal || c.mask == HeadMask::additive_causal; }
  float scale() const { return static_cast<float>(1.0 / std::sqrt(double(c.Dh))); }

  static std::vector<float> padded(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> out(rows * ld, kNaN);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) out[r * ld + j] = x[r * cols + j];
    return out;
  }
  static DVec dense(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld) {
    DVec out(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = x[r * ld + j];
    return out;
  }
  DVec forward(const DVec& qd, const DVec& kd, const DVec& vd, const DVec& md, DVec* p = nullptr) const {
    return bwdtest::attention_head(qd, kd, vd, md, causal(), keep, ds, c.T, c.S, c.Dh, c.Dv, double(scale()), p);
  }
  AttentionHeadArgs args() const {
    AttentionHeadArgs a;
    a.dout = dout.data(), a.ld_dout = lo, a.probs = probs.data();
    a.q = q.data(), a.ld_q = lq, a.k = k.data(), a.ld_k = lk, a.v = v.data(), a.ld_v = lv;
    a.T = c.T, a.S = c.S, a.Dh = c.Dh, a.Dv = c.Dv, a.scale = scale();
    a.dropout_p = c.dropout, a.seed = seed, a.offset = offset;
    return a;
  }
};

struct HeadResult {
  std::vector<float> dq, dk, dv, dl;
  int64_t lq, lk, lv;
  HeadResult(const HeadProblem& pb, int64_t extra)
      : dq(pb.c.T * (pb.c.Dh + extra), kNaN), dk(pb.c.S * (pb.c.Dh + extra), kNaN), dv(pb.c.S * (pb.c.Dv + extra), kNaN),
        dl(pb.c.T * pb.c.S, kNaN), lq(pb.c.Dh + extra), lk(pb.c.Dh + extra), lv(pb.c.Dv + extra) {}
  AttentionHeadGrads grads(bool with_logits) {
    AttentionHeadGrads g;
    g.dq = dq.data(), g.ld_dq = lq, g.dk = dk.data(), g.ld_dk = lk, g.dv = dv.data(), g.ld_dv = lv;
    g.dlogits = with_logits ? dl.data() : nullptr;
    return g;
  }
};

// The padding columns of a strided gradient are never written.
void expect_padding_untouched(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld, const char* what) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = cols; j < ld; ++j) EXPECT_TRUE(std::isnan(x[r * ld + j])) << what << " wrote padding";
}

TEST(BackwardKernels, AttentionHeadRefMatchesFiniteDifferences) {
  for (const HeadCase& c : kHeadCases) {
    const HeadProblem pb(c);
    HeadResult r(pb, 2);
    attention_head_backward_f32_ref(r.grads(true), pb.args());
    const DVec g = HeadProblem::dense(pb.dout, c.T, c.Dv, pb.lo);
    const DVec qd = HeadProblem::dense(pb.q, c.T, c.Dh, pb.lq), kd = HeadProblem::dense(pb.k, c.S, c.Dh, pb.lk),
               vd = HeadProblem::dense(pb.v, c.S, c.Dv, pb.lv), md = to_double(pb.mask);
    auto L = [&](const DVec& qq, const DVec& kk, const DVec& vv, const DVec& mm) {
      return bwdtest::dot(g, pb.forward(qq, kk, vv, mm));
    };
    const DVec fq = fd_grad([&](const DVec& x) { return L(x, kd, vd, md); }, qd);
    const DVec fk = fd_grad([&](const DVec& x) { return L(qd, x, vd, md); }, kd);
    const DVec fv = fd_grad([&](const DVec& x) { return L(qd, kd, x, md); }, vd);
    auto dense_f = [](const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld) {
      std::vector<float> out(rows * cols);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x[i * ld + j];
      return out;
    };
    EXPECT_LE(rel_err(dense_f(r.dq, c.T, c.Dh, r.lq), fq), c.fd_tol) << c.name << " dq";
    EXPECT_LE(rel_err(dense_f(r.dk, c.S, c.Dh, r.lk), fk), c.fd_tol) << c.name << " dk";
    EXPECT_LE(rel_err(dense_f(r.dv, c.S, c.Dv, r.lv), fv), c.fd_tol) << c.name << " dv";
    expect_padding_untouched(r.dq, c.T, c.Dh, r.lq, "dq");
    expect_padding_untouched(r.dv, c.S, c.Dv, r.lv, "dv");
    if (!md.empty()) {  // dlogits is the gradient of the additive mask (finite entries; -inf ones get 0)
      DVec fm = fd_grad([&](const DVec& x) { return L(qd, kd, vd, x); }, md);
      for (size_t i = 0; i < md.size(); ++i)
        if (std::isinf(md[i])) fm[i] = 0.0;
      EXPECT_LE(rel_err(r.dl, fm), c.fd_tol) << c.name << " dlogits";
    }
    if (c.mask == HeadMask::full_row) {  // nothing to attend to: zero gradient, not NaN
      for (int64_t d = 0; d < c.Dh; ++d) EXPECT_EQ(r.dq[1 * r.lq + d], 0.f) << c.name;
    }
  }
}

TEST(BackwardKernels, AttentionHeadFastMatchesRef) {
  for (const HeadCase& c : kHeadCases)
    for (bool with_logits : {true, false}) {
      const HeadProblem pb(c);
      HeadResult want(pb, 1), got(pb, 1);
      attention_head_backward_f32_ref(want.grads(true), pb.args());
      std::vector<float> scratch(2 * c.T * c.S, kNaN);
      attention_head_backward_f32(got.grads(with_logits), pb.args(), scratch.data());
      const std::string where = std::string(c.name) + (with_logits ? " (dlogits out)" : " (scratch)");
      auto cmp = [&](const std::vector<float>& a, const std::vector<float>& b, int64_t rows, int64_t cols, int64_t ld,
                     const char* what) {
        std::vector<float> x, y;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) x.push_back(a[i * ld + j]), y.push_back(b[i * ld + j]);
        EXPECT_LE(max_scaled_err(x, y), 1e-5) << where << " " << what;
        expect_padding_untouched(a, rows, cols, ld, what);
      };
      cmp(got.dq, want.dq, c.T, c.Dh, got.lq, "dq");
      cmp(got.dk, want.dk, c.S, c.Dh, got.lk, "dk");
      cmp(got.dv, want.dv, c.S, c.Dv, got.lv, "dv");
      if (with_logits) {
        EXPECT_LE(max_scaled_err(got.dl, want.dl), 1e-5) << where << " dlogits";
      }
    }
}

// accumulate_kv (grouped-query attention: the query heads sharing a key/value head add their dk, dv in turn):
// dk, dv become what was there plus this head's gradient, dq and dlogits are still written; fast and ref alike.
// Tolerance 1e-5 scaled, as AttentionHeadFastMatchesRef.
TEST(BackwardKernels, AttentionHeadAccumulatesKeyValueGradients) {
  for (const HeadCase& c : kHeadCases) {
    const HeadProblem pb(c);
    HeadResult fresh(pb, 1);
    attention_head_backward_f32_ref(fresh.grads(true), pb.args());
    std::vector<float> scratch(2 * c.T * c.S, kNaN);
    for (bool fast : {false, true}) {
      HeadResult acc(pb, 1);
      const std::vector<float> dk0 = randn(acc.dk.size(), 141), dv0 = randn(acc.dv.size(), 142);
      acc.dk = dk0, acc.dv = dv0;  // (padding columns included: they must stay as they were)
      AttentionHeadGrads g = acc.grads(true);
      g.accumulate_kv = true;
      if (fast)
        attention_head_backward_f32(g, pb.args(), scratch.data());
      else
        attention_head_backward_f32_ref(g, pb.args());
      const std::string where = std::string(c.name) + (fast ? " (fast)" : " (ref)");
      auto sum_of = [](const std::vector<float>& a, const std::vector<float>& b, int64_t rows, int64_t cols,
                       int64_t ld) {
        std::vector<float> x;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) x.push_back(a[i * ld + j] + b[i * ld + j]);
        return x;
      };
      auto dense_of = [](const std::vector<float>& a, int64_t rows, int64_t cols, int64_t ld) {
        std::vector<float> x;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) x.push_back(a[i * ld + j]);
        return x;
      };
      EXPECT_LE(max_scaled_err(dense_of(acc.dk, c.S, c.Dh, acc.lk), sum_of(dk0, fresh.dk, c.S, c.Dh, fresh.lk)), 1e-5)
          << where << " dk";
      EXPECT_LE(max_scaled_err(dense_of(acc.dv, c.S, c.Dv, acc.lv), sum_of(dv0, fresh.dv, c.S, c.Dv, fresh.lv)), 1e-5)
          << where << " dv";
      EXPECT_LE(max_scaled_err(dense_of(acc.dq, c.T, c.Dh, acc.lq), dense_of(fresh.dq, c.T, c.Dh, fresh.lq)), 1e-5)
          << where << " dq is written, not accumulated";
      for (int64_t s = 0; s < c.S; ++s) EXPECT_EQ(acc.dk[s * acc.lk + c.Dh], dk0[s * acc.lk + c.Dh]) << where;
    }
  }
}
