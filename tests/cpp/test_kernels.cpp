// Tier 1: every fast kernel against its scalar *_ref twin, for every ISA table this CPU can run, on odd
// sizes, vector tails and strided (non-contiguous) operands. Tolerances are per case and stated in the tables.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/onednn.hpp"

using namespace encore::kernels;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// max |a-b| / max(1, |b|): absolute near zero, relative for large values.
double max_scaled_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i])) << "non-finite at " << i;
    e = std::max(e, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  }
  return e;
}

// NMSE = sum((a-b)^2) / sum(b^2)
double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

std::vector<const KernelTable*> tables() {
  std::vector<const KernelTable*> out;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const KernelTable* t = kernels_for(isa)) out.push_back(t);
  return out;
}

// The tables whose `fn` is a different implementation from the reference one: the "scalar" ISA table reuses
// the *_ref functions for everything but the GEMMs, so comparing its entries with the reference would compare
// a function with itself. Tables sharing the reference pointer are skipped, and the test fails if no table
// on this host has a distinct implementation at all (then it would compare nothing).
template <typename Fn>
std::vector<const KernelTable*> distinct_tables(Fn KernelTable::*fn, const char* what) {
  std::vector<const KernelTable*> out;
  for (const KernelTable* t : tables())
    if (t->*fn != kernels_ref().*fn) out.push_back(t);
  EXPECT_FALSE(out.empty()) << what << ": every kernel table on this host uses the reference implementation, so "
                            << "this test compares nothing (run it on an AVX2 or AVX-512 machine)";
  return out;
}

const int64_t kSizes[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 768, 1001};

}  // namespace

TEST(Kernels, AtLeastTheScalarTableRuns) {
  ASSERT_FALSE(tables().empty());
  EXPECT_STREQ(kernels_ref().name, "ref");
}

TEST(Kernels, SoftmaxMaskedMatchesRef) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (const KernelTable* t : distinct_tables(&KernelTable::softmax_masked_f32, "softmax_masked_f32"))
    for (int64_t cols : kSizes)
      for (int variant = 0; variant < 4; ++variant) {
        // variant 0: no masks; 1: additive masks with some -inf; 2: causal-style limit; 3: everything masked
        auto x = randn(cols, 1 + cols, 3.f);
        auto ma = randn(cols, 100 + cols), mb = randn(cols, 200 + cols);
        for (int64_t j = 0; j < cols; j += 3) mb[j] = neg_inf;
        if (variant == 3) std::fill(ma.begin(), ma.end(), neg_inf);
        const bool masked = variant == 1 || variant == 3;
        const int64_t limit = variant == 2 ? (cols + 1) / 2 : cols;
        auto got = x, want = x;
        t->softmax_masked_f32(got.data(), cols, 0.125f, masked ? ma.data() : nullptr, masked ? mb.data() : nullptr, limit);
        softmax_masked_f32_ref(want.data(), cols, 0.125f, masked ? ma.data() : nullptr, masked ? mb.data() : nullptr,
                               limit);
        EXPECT_LE(max_scaled_err(got, want), 1e-6) << t->name << " cols=" << cols << " variant=" << variant;
        double sum = 0;
        for (float p : got) sum += p;
        if (variant == 3) {
          EXPECT_EQ(sum, 0.0) << "fully masked row must be zeros";
        } else if (!(variant == 1 && cols == 1)) {  // cols=1 with mb[0]=-inf is fully masked too
          EXPECT_NEAR(sum, 1.0, 1e-5) << t->name << " cols=" << cols;
        }
      }
}

TEST(Kernels, LayerNormAndRmsNormMatchRef) {
  for (const KernelTable* t : distinct_tables(&KernelTable::layernorm_forward_f32, "layernorm_forward_f32"))
    for (int64_t C : kSizes)
      for (bool affine : {true, false}) {
        const int64_t rows = 5;
        auto x = randn(rows * C, 7 + C, 2.f);
        for (auto& v : x) v += 3.f;  // non-zero mean exercises the centring
        auto w = randn(C, 8 + C), b = randn(C, 9 + C);
        std::vector<float> got(rows * C), want(rows * C), m1(rows), m2(rows), r1(rows), r2(rows);
        t->layernorm_forward_f32(got.data(), m1.data(), r1.data(), x.data(), affine ? w.data() : nullptr,
                                 affine ? b.data() : nullptr, rows, C, 1e-5f);
        layernorm_forward_f32_ref(want.data(), m2.data(), r2.data(), x.data(), affine ? w.data() : nullptr,
                                  affine ? b.data() : nullptr, rows, C, 1e-5f);
        // fp32 accumulation vs the double-precision reference: 1e-5 scaled.
        EXPECT_LE(max_scaled_err(got, want), 1e-5) << t->name << " layernorm C=" << C;
        EXPECT_LE(max_scaled_err(m1, m2), 1e-5) << t->name << " mean C=" << C;
        EXPECT_LE(max_scaled_err(r1, r2), 1e-5) << t->name << " rstd C=" << C;
        t->rmsnorm_forward_f32(got.data(), r1.data(), x.data(), affine ? w.data() : nullptr, rows, C, 1e-6f);
        rmsnorm_forward_f32_ref(want.data(), r2.data(), x.data(), affine ? w.data() : nullptr, rows, C, 1e-6f);
        EXPECT_LE(max_scaled_err(got, want), 1e-5) << t->name << " rmsnorm C=" << C;
      }
}

TEST(Kernels, ActivationsMatchRef) {
  struct Case {
    Act act;
    // max abs (scaled) error. gelu-erf uses a rational erf (simd/math.inl, |err| <= 4e-7 near |x| = 4), which
    // x/2 amplifies where 1 + erf cancels near x = -5.5 (the extremes below include it)
    double tol;
  };
  const Case cases[] = {{Act::none, 0}, {Act::relu, 0}, {Act::gelu_erf, 1.5e-6}, {Act::gelu_tanh, 1e-6}, {Act::silu, 1e-6}, {Act::tanh, 1e-6}};
  for (const KernelTable* t : distinct_tables(&KernelTable::activation_f32, "activation_f32"))
    for (const Case& c : cases)
      for (int64_t n : kSizes) {
        auto x = randn(n, 11 + n, 4.f);
        if (n > 3) {  // extremes: saturation and underflow paths
          x[0] = 40.f;
          x[1] = -40.f;
          x[2] = 0.f;
        }
        if (n > 8) {  // far beyond the erf clamp (GELU exactly 0 / x), and where 1 + erf cancels
          x[3] = -1000.f;
          x[4] = 1000.f;
          x[5] = -5.5f;
          x[6] = -5.2f;
          x[7] = 5.5f;
        }
        std::vector<float> got(n), want(n);
        t->activation_f32(got.data(), x.data(), n, c.act);
        activation_f32_ref(want.data(), x.data(), n, c.act);
        EXPECT_LE(max_scaled_err(got, want), c.tol) << t->name << " " << act_name(c.act) << " n=" << n;
        // gated: rows of [x0 | x1], the activation on either half
        const int64_t rows = 3;
        auto ab = randn(rows * 2 * n, 12 + n, 2.f);
        for (Gate gate : {Gate::first, Gate::second}) {
          std::vector<float> g1(rows * n), g2(rows * n);
          t->gated_f32(g1.data(), ab.data(), rows, n, c.act, gate);
          gated_f32_ref(g2.data(), ab.data(), rows, n, c.act, gate);
          EXPECT_LE(max_scaled_err(g1, g2), std::max(c.tol, 1e-6) * 4)
              << t->name << " gated " << act_name(c.act) << " gate " << (gate == Gate::first ? "first" : "second");
        }
      }
}

// NaN in, NaN out, for every activation in every table and its twin, as torch's (relu(NaN) is NaN there; a max
// with 0 that drops NaN gave 0), plain, gated and as a Linear's epilogue (oneDNN's post-op or encore's).
TEST(Kernels, ActivationsKeepNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(19, 0.5f);
  for (int64_t i : {0, 7, 18}) x[i] = nan;  // vector body and tail
  std::vector<const KernelTable*> tables = distinct_tables(&KernelTable::activation_f32, "activation_f32");
  for (Act act : {Act::none, Act::relu, Act::gelu_erf, Act::gelu_tanh, Act::silu, Act::tanh}) {
    std::vector<float> want(x.size());
    activation_f32_ref(want.data(), x.data(), static_cast<int64_t>(x.size()), act);
    for (int64_t i : {0, 7, 18}) EXPECT_TRUE(std::isnan(want[i])) << "ref " << act_name(act) << " " << i;
    for (const KernelTable* t : tables) {
      std::vector<float> got(x.size()), gated(x.size());
      t->activation_f32(got.data(), x.data(), static_cast<int64_t>(x.size()), act);
      for (int64_t i : {0, 7, 18}) EXPECT_TRUE(std::isnan(got[i])) << t->name << " " << act_name(act) << " " << i;
      std::vector<float> rows(2 * x.size(), 1.f);  // [x | 1]: the activation on x, gated by 1
      std::copy(x.begin(), x.end(), rows.begin());
      t->gated_f32(gated.data(), rows.data(), 1, static_cast<int64_t>(x.size()), act, Gate::first);
      for (int64_t i : {0, 7, 18}) EXPECT_TRUE(std::isnan(gated[i])) << t->name << " gated " << act_name(act);
    }
    // a Linear whose output is NaN in column 2 (its weight row 2 holds a NaN), with the activation fused; the
    // larger shape splits the unfused relu over threads and runs bf16's row blocks in parallel
    for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 4}, {200, 24, 700}}) {
      std::vector<float> in(M * K, 0.25f), weight(N * K, 0.5f), out(M * N);
      weight[2 * K + 1] = nan;
      auto check = [&](const std::string& what) {
        for (int64_t m = 0; m < M; ++m) {
          EXPECT_TRUE(std::isnan(out[m * N + 2])) << what << " " << act_name(act) << " row " << m << " N " << N;
          EXPECT_FALSE(std::isnan(out[m * N + 1])) << what << " " << act_name(act) << " row " << m << " N " << N;
        }
      };
      for (Precision p : {Precision::f32, Precision::bf16}) {  // packed (bf16: native, or emulated where none)
        PackedLinear::create(weight.data(), nullptr, N, K, p)->forward(out.data(), in.data(), M, act);
        check(std::string("packed ") + precision_name(p));
      }
      linear_f32_onednn(out.data(), in.data(), weight.data(), nullptr, M, K, N, act);  // the plain weight
      check("plain");
    }
  }
}

// Rotary embedding: fast vs ref on odd half-widths (vector tails), partial rotary (pass-through dims), a row
// stride wider than the heads (a view into packed QKV), in place, and the inverse rotation. Tolerance 1e-6
// scaled (two products and a sum in float vs the double ref, |x| ~ 1).
TEST(Kernels, RotaryMatchesRef) {
  struct Case {
    int64_t tokens, heads, head_dim, rotary_dim, pad;  // pad: extra floats per token row (ld = heads·head_dim + pad)
  };
  const Case cases[] = {{1, 1, 2, 2, 0},   {5, 3, 7 * 2, 14, 0}, {7, 2, 64, 64, 0},   {3, 4, 64, 32, 5},
                        {9, 1, 66, 66, 0}, {4, 2, 128, 96, 3},   {2, 3, 34, 16, 0},   {6, 2, 200, 200, 7},
                        {3, 1, 2002, 2002, 0}};
  for (const KernelTable* t : distinct_tables(&KernelTable::rotary_f32, "rotary_f32"))
    for (const Case& c : cases)
      for (bool inverse : {false, true}) {
        const int64_t half = c.rotary_dim / 2, ld = c.heads * c.head_dim + c.pad;
        auto x = randn(c.tokens * ld, 31 + c.head_dim), cs = randn(c.tokens * half, 32), sn = randn(c.tokens * half, 33);
        std::vector<float> got(x.size(), -7.f), want(x.size(), -7.f);
        t->rotary_f32(got.data(), ld, x.data(), ld, cs.data(), sn.data(), c.tokens, c.heads, c.head_dim, c.rotary_dim,
                      inverse);
        rotary_f32_ref(want.data(), ld, x.data(), ld, cs.data(), sn.data(), c.tokens, c.heads, c.head_dim,
                       c.rotary_dim, inverse);
        const std::string what = std::string(t->name) + " D=" + std::to_string(c.head_dim) +
                                 " R=" + std::to_string(c.rotary_dim) + (inverse ? " inverse" : "");
        EXPECT_LE(max_scaled_err(got, want), 1e-6) << what;
        for (int64_t r = 0; r < c.tokens; ++r)  // the padding between token rows is never written
          for (int64_t p = c.heads * c.head_dim; p < ld; ++p) EXPECT_EQ(got[r * ld + p], -7.f) << what;
        auto in_place = x;  // out may alias in
        t->rotary_f32(in_place.data(), ld, in_place.data(), ld, cs.data(), sn.data(), c.tokens, c.heads, c.head_dim,
                      c.rotary_dim, inverse);
        for (int64_t r = 0; r < c.tokens; ++r)
          for (int64_t p = 0; p < c.heads * c.head_dim; ++p)
            EXPECT_EQ(in_place[r * ld + p], got[r * ld + p]) << what << " in place";
      }
}

// The ref is HF's formula (x·cos + rotate_half(x)·sin on the first R dims, the rest unchanged) and its inverse is
// its transpose (the backward): <g, R·x> = <Rᵀ·g, x> to 1e-6 relative, with real angles (cos² + sin² = 1).
TEST(Kernels, RotaryRefIsHfFormulaAndInverseIsItsTranspose) {
  const int64_t T = 5, H = 3, D = 10, R = 6, half = R / 2, ld = H * D;
  std::vector<int64_t> pos = {0, 1, 2, 17, 300};
  std::vector<float> cs(T * half), sn(T * half);
  rotary_cos_sin_f32(cs.data(), sn.data(), pos.data(), T, R, 10000.0);
  auto x = randn(T * ld, 41), g = randn(T * ld, 42);
  std::vector<float> y(x.size()), gt(x.size());
  rotary_f32_ref(y.data(), ld, x.data(), ld, cs.data(), sn.data(), T, H, D, R, false);
  rotary_f32_ref(gt.data(), ld, g.data(), ld, cs.data(), sn.data(), T, H, D, R, true);
  double lhs = 0, rhs = 0, scale = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D; ++i) {
        const int64_t k = t * ld + h * D + i;
        double expected = x[k];  // HF: cat(-x2, x1) as rotate_half, cos/sin repeated over both halves
        if (i < R) {
          const int64_t j = i % half;
          const double c = cs[t * half + j], s = sn[t * half + j];
          const double rot = i < half ? -double(x[k + half]) : double(x[k - half]);
          expected = x[k] * c + rot * s;
        }
        EXPECT_NEAR(y[k], expected, 1e-6) << "t=" << t << " h=" << h << " i=" << i;
        lhs += double(g[k]) * y[k];
        rhs += double(gt[k]) * x[k];
        scale += std::abs(double(g[k]) * x[k]);
      }
  EXPECT_LE(std::abs(lhs - rhs), 1e-6 * scale);
  // the angles: pos·theta^(-2i/R), to the float32 roundings of inv_freq and the angle (|err| <= 3e-7·|angle| + 1e-7)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(pos[t]) * std::pow(10000.0, -2.0 * double(i) / double(R));
      const double bound = std::abs(angle) * 3e-7 + 1e-7;
      EXPECT_NEAR(cs[t * half + i], std::cos(angle), bound) << "pos " << pos[t] << " i " << i;
      EXPECT_NEAR(sn[t * half + i], std::sin(angle), bound) << "pos " << pos[t] << " i " << i;
    }
}

TEST(Kernels, AddMatchesRef) {
  for (const KernelTable* t : distinct_tables(&KernelTable::add_f32, "add_f32"))
    for (int64_t n : kSizes) {
      auto a = randn(n, 13 + n), b = randn(n, 14 + n);
      std::vector<float> got(n), want(n);
      t->add_f32(got.data(), a.data(), b.data(), n);
      add_f32_ref(want.data(), a.data(), b.data(), n);
      EXPECT_EQ(got, want) << t->name << " n=" << n;  // one rounding each: bitwise equal
    }
}

TEST(Kernels, LinearMatchesRef) {
  struct Case {
    int64_t M, K, N;
  };
  const Case cases[] = {{1, 1, 1}, {1, 17, 3}, {5, 33, 7}, {67, 44, 80}, {3, 768, 769}, {128, 64, 192}};
  for (const KernelTable* t : distinct_tables(&KernelTable::linear_f32, "linear_f32"))
    for (const Case& c : cases)
      for (Act act : {Act::none, Act::relu, Act::gelu_erf, Act::gelu_tanh, Act::silu, Act::tanh})
        for (bool bias : {true, false}) {
          auto x = randn(c.M * c.K, 21 + c.M), w = randn(c.N * c.K, 22 + c.N, 0.1f), b = randn(c.N, 23 + c.N);
          std::vector<float> got(c.M * c.N), want(c.M * c.N);
          t->linear_f32(got.data(), x.data(), w.data(), bias ? b.data() : nullptr, c.M, c.K, c.N, act);
          linear_f32_ref(want.data(), x.data(), w.data(), bias ? b.data() : nullptr, c.M, c.K, c.N, act);
          // NMSE 1e-7 (GEMM accumulation order differs from the double-precision reference)
          EXPECT_LE(nmse(got, want), 1e-7) << t->name << " M=" << c.M << " K=" << c.K << " N=" << c.N << " "
                                           << act_name(act);
          EXPECT_LE(max_scaled_err(got, want), 1e-4) << t->name << " " << act_name(act);
        }
}

// oneDNN primitives are made for a bounded set of row counts (onednn.hpp): the blocks of any M cover its rows
// once, in order, and every block size is 1..kRowGranule or a multiple of kRowGranule up to kRowChunk.
TEST(Kernels, RowBlocksCoverEveryRowWithBoundedSizes) {
  std::set<int64_t> sizes;
  for (int64_t M = 1; M <= 3 * kRowChunk + 77; ++M) {
    int64_t next = 0, calls = 0;
    for_each_row_block(M, [&](int64_t r0, int64_t rows) {
      EXPECT_EQ(r0, next) << "M=" << M;
      EXPECT_TRUE(rows >= 1 && (rows <= kRowGranule || (rows % kRowGranule == 0 && rows <= kRowChunk)))
          << "M=" << M << " rows=" << rows;
      next += rows;
      ++calls;
      sizes.insert(rows);
    });
    EXPECT_EQ(next, M);
    // one call per whole chunk, then at most two (a multiple of the granule and a tail)
    EXPECT_LE(calls, (M - 1) / kRowChunk + 2) << "M=" << M;
    if (M <= kRowGranule || (M % kRowGranule == 0 && M <= kRowChunk)) {
      EXPECT_EQ(calls, 1) << "M=" << M;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(sizes.size()), kRowGranule + kRowChunk / kRowGranule - 1);
}

// The packed fp32 linear runs M rows as row blocks (chunks, a granule multiple and a tail): same numbers as the
// scalar reference for row counts on every side of the block boundaries.
TEST(Kernels, PackedLinearMatchesRefAcrossRowBlocks) {
  const int64_t K = 40, N = 48;
  auto w = randn(N * K, 31, 0.1f), b = randn(N, 32);
  auto lin = PackedLinear::create(w.data(), b.data(), N, K, Precision::f32);
  for (int64_t M : {int64_t{1}, kRowGranule - 1, kRowGranule, kRowGranule + 1, int64_t{100}, kRowChunk,
                    kRowChunk + 1, 2 * kRowChunk + 3 * kRowGranule + 5})
    for (Act act : {Act::none, Act::gelu_erf}) {
      auto x = randn(M * K, 33 + static_cast<uint32_t>(M));
      std::vector<float> got(M * N), want(M * N);
      lin->forward(got.data(), x.data(), M, act);
      linear_f32_ref(want.data(), x.data(), w.data(), b.data(), M, K, N, act);
      // as LinearMatchesRef: NMSE 1e-7, max scaled error 1e-4 (accumulation order differs from the reference)
      EXPECT_LE(nmse(got, want), 1e-7) << "M=" << M << " " << act_name(act);
      EXPECT_LE(max_scaled_err(got, want), 1e-4) << "M=" << M << " " << act_name(act);
    }
}

// The packing layout rule (onednn.hpp, padded_packing_layout): the plain row-major (K, N) that oneDNN's gemm:jit
// matmul asks for gets rows one 64-byte cache line longer, in f32 and s8; any other layout is kept as chosen. The
// f32 and int8 Linears pack with it: where their matmul is gemm:jit (AVX2) the packed rows are N + 16 floats and
// N + 64 bytes, and where it is brgemm (AVX-512) the layout is blocked. A Linear of 1024 outputs (rows of 4 KiB,
// the conflicting case) packed so still matches the scalar reference at the row counts where the padding measured
// faster (it never changes which elements are summed).
TEST(Kernels, PackedRowMajorWeightsArePaddedByACacheLine) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  using dims = dnnl::memory::dims;
  const int64_t K = 64, N = 1024;
  EXPECT_EQ(padded_packing_layout(dnnl::memory::desc({K, N}, dt::f32, tag::ab), K, N),
            dnnl::memory::desc({K, N}, dt::f32, dims{N + 16, 1}));
  EXPECT_EQ(padded_packing_layout(dnnl::memory::desc({K, N}, dt::s8, tag::ab), K, N),
            dnnl::memory::desc({K, N}, dt::s8, dims{N + 64, 1}));
  for (const auto& kept : {dnnl::memory::desc({K, N}, dt::f32, tag::ba),
                           dnnl::memory::desc({K, N}, dt::f32, dims{N + 5, 1}),
                           dnnl::memory::desc({K, N}, dt::s8, tag::ba)})
    EXPECT_EQ(padded_packing_layout(kept, K, N), kept);
  EXPECT_EQ(plain_row_stride(dnnl::memory::desc({K, N}, dt::f32, dims{N + 16, 1})), N + 16);
  EXPECT_EQ(plain_row_stride(dnnl::memory::desc({K, N}, dt::f32, tag::ba)), 0);

  if (kernels().gemm_f32 != &gemm_f32_onednn) GTEST_SKIP() << "GEMMs are not oneDNN's here (ENCORE_KERNELS=ref)";
  auto w = randn(N * K, 41, 0.1f), b = randn(N, 42);
  auto lin = PackedLinear::create(w.data(), b.data(), N, K, Precision::f32);
  EXPECT_EQ(lin->packed_row_stride(), lazy_f32_packing_is_exact() ? 0 : N + 16);  // brgemm : gemm:jit
  auto int8 = PackedLinear::create(w.data(), b.data(), N, K, Precision::int8);
  if (int8_gemm_kernels_are_process_wide()) {  // gemm:jit
    EXPECT_EQ(int8->packed_row_stride(), N + 64);
  }
  for (int64_t M : {1, 8, 40, 256}) {
    auto x = randn(M * K, 43 + static_cast<uint32_t>(M));
    std::vector<float> got(M * N), want(M * N);
    lin->forward(got.data(), x.data(), M, Act::none);
    linear_f32_ref(want.data(), x.data(), w.data(), b.data(), M, K, N, Act::none);
    EXPECT_LE(nmse(got, want), 1e-7) << "M=" << M;  // LinearMatchesRef's tolerances
    EXPECT_LE(max_scaled_err(got, want), 1e-4) << "M=" << M;
  }
}

// The lazy f32 path (kernels.hpp, PackedLinear::create with a PlainWeight): the first call runs on the plain
// weight, later ones on the packed copy. Both must equal the eagerly packed linear bit for bit (oneDNN copies a
// plain weight into the same blocked layout per call) and the scalar reference within LinearMatchesRef's
// tolerance, on odd shapes, row counts around the row blocks, and with the caller's own handle on the weight gone
// (the PlainWeight keeps it alive until the packing, then lets it go).
TEST(Kernels, LazyPackedLinearMatchesPackedAndRef) {
  struct Case {
    int64_t N, K, M;
  };
  const Case cases[] = {{48, 40, 1}, {17, 33, 7}, {129, 65, kRowGranule + 1}, {3, 1, 100}, {1152, 384, 9},
                        {64, 200, kRowChunk}, {40, 24, kRowChunk + 1}};
  // Off where oneDNN's f32 matmul is not brgemm (AVX2 CPUs): the weight is then packed at creation.
  const bool lazy_on = lazy_f32_packing_is_exact();
  for (const Case& c : cases)
    for (Act act : {Act::none, Act::gelu_erf}) {
      const std::string at = "N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) + " M=" + std::to_string(c.M) +
                             " " + act_name(act);
      auto w = std::make_shared<std::vector<float>>(randn(c.N * c.K, 41, 0.1f));
      const std::vector<float> w_copy = *w, b = randn(c.N, 42);
      int packs = 0;
      auto eager = PackedLinear::create(w_copy.data(), b.data(), c.N, c.K, Precision::f32);
      std::weak_ptr<std::vector<float>> alive = w;
      auto lazy = PackedLinear::create(w->data(), b.data(), c.N, c.K, Precision::f32, {w, [&packs] { ++packs; }});
      w.reset();  // the lazy linear's own handle is what keeps the weight now (if the lazy path is on)
      ASSERT_EQ(alive.expired(), !lazy_on) << at;
      std::vector<float> want(c.M * c.N), ref(c.M * c.N);
      for (int call = 0; call < 2; ++call) {  // first: the plain weight (unless M > kRowChunk); then packed
        auto x = randn(c.M * c.K, 43 + static_cast<uint32_t>(call));
        std::vector<float> got(c.M * c.N);
        lazy->forward(got.data(), x.data(), c.M, act);
        eager->forward(want.data(), x.data(), c.M, act);
        linear_f32_ref(ref.data(), x.data(), w_copy.data(), b.data(), c.M, c.K, c.N, act);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << at << " call " << call;
        EXPECT_LE(nmse(got, ref), 1e-7) << at << " call " << call;
        EXPECT_LE(max_scaled_err(got, ref), 1e-4) << at << " call " << call;
        const bool packed_now = !lazy_on || call == 1 || c.M > kRowChunk;
        EXPECT_EQ(packs, packed_now ? 1 : 0) << at << " call " << call;
        EXPECT_EQ(alive.expired(), packed_now) << at << " call " << call;
      }
    }
}

// Concurrent first calls: the packing happens once, every call gets the eagerly packed linear's numbers, and the
// plain weight is let go afterwards.
TEST(Kernels, LazyPackedLinearPacksOnceUnderConcurrentCalls) {
  const int64_t N = 96, K = 72, M = 5;
  const std::vector<float> b = randn(N, 52);
  for (int round = 0; round < 20; ++round) {
    auto w = std::make_shared<std::vector<float>>(randn(N * K, 51, 0.1f));
    auto eager = PackedLinear::create(w->data(), b.data(), N, K, Precision::f32);
    std::atomic<int> packs{0};
    std::weak_ptr<std::vector<float>> alive = w;
    auto lazy = PackedLinear::create(w->data(), b.data(), N, K, Precision::f32, {w, [&packs] { ++packs; }});
    w.reset();
    const auto x = randn(M * K, 53);
    std::vector<float> want(M * N);
    eager->forward(want.data(), x.data(), M, Act::none);
    std::atomic<int> mismatches{0}, ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t)
      threads.emplace_back([&] {
        ++ready;
        while (ready.load() < 6) {
        }
        for (int call = 0; call < 3; ++call) {
          std::vector<float> got(M * N);
          lazy->forward(got.data(), x.data(), M, Act::none);
          if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) ++mismatches;
        }
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(packs.load(), 1) << "round " << round;
    EXPECT_EQ(mismatches.load(), 0) << "round " << round;
    EXPECT_TRUE(alive.expired()) << "round " << round;
  }
}

TEST(Kernels, StridedGemmMatchesRef) {
  // Per-head products read strided views: leading dimensions larger than the logical width.
  struct Case {
    bool ta, tb;
    int64_t M, N, K, pad;
    float alpha, beta;
  };
  const Case cases[] = {{false, true, 67, 67, 11, 33, 1.f, 0.f}, {false, false, 5, 9, 13, 7, 1.f, 0.f},
                        {true, false, 4, 3, 2, 1, 0.5f, 1.f},   {true, true, 17, 1, 1, 0, 2.f, 0.f},
                        {false, false, 1, 64, 128, 64, 1.f, 0.f}};
  for (const KernelTable* t : distinct_tables(&KernelTable::gemm_f32, "gemm_f32"))
    for (const Case& c : cases) {
      const int64_t ra = c.ta ? c.K : c.M, ca = c.ta ? c.M : c.K, rb = c.tb ? c.N : c.K, cb = c.tb ? c.K : c.N;
      const int64_t lda = ca + c.pad, ldb = cb + c.pad, ldc = c.N + c.pad;
      auto A = randn(ra * lda, 31), B = randn(rb * ldb, 32), C0 = randn(c.M * ldc, 33);
      auto got = C0, want = C0;
      t->gemm_f32(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, got.data(), ldc);
      gemm_f32_ref(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, want.data(), ldc);
      EXPECT_LE(max_scaled_err(got, want), 1e-5) << t->name << " M=" << c.M << " N=" << c.N << " K=" << c.K;
    }
}

TEST(Kernels, EmbeddingLookupMatchesRef) {
  const int64_t V = 11, C = 17;
  auto table = randn(V * C, 41);
  std::vector<int64_t> ids = {0, 10, 3, 3, 7};
  std::vector<float> got(ids.size() * C), want(ids.size() * C);
  embedding_lookup_f32(got.data(), table.data(), ids.data(), ids.size(), C);
  embedding_lookup_f32_ref(want.data(), table.data(), ids.data(), ids.size(), C);
  EXPECT_EQ(got, want);
}

TEST(Kernels, SinusoidalPositionsFollowThePaper) {
  const int64_t T = 50, C = 33;  // odd C: the last column is a lone sine
  std::vector<float> pe(T * C);
  sinusoidal_positions_f32(pe.data(), 0, T, C);
  for (int64_t pos = 0; pos < T; ++pos)
    for (int64_t i = 0; i < C; ++i) {
      const double freq = std::pow(10000.0, -double(i - i % 2) / double(C));
      const double want = i % 2 == 0 ? std::sin(pos * freq) : std::cos(pos * freq);
      EXPECT_NEAR(pe[pos * C + i], want, 1e-6) << pos << "," << i;
    }
  std::vector<float> tail(5 * C);  // an offset window equals the same rows of the full table
  sinusoidal_positions_f32(tail.data(), 45, 5, C);
  for (int64_t i = 0; i < 5 * C; ++i) EXPECT_FLOAT_EQ(tail[i], pe[45 * C + i]);
}

TEST(Kernels, DropoutIsInvertedAndSplitIndependent) {
  const int64_t n = 100000;
  std::vector<float> x(n, 1.f), whole(n), parts(n);
  std::vector<uint8_t> mask(n);
  dropout_f32(whole.data(), mask.data(), x.data(), n, 0.25f, 1234, 0);
  dropout_f32(parts.data(), nullptr, x.data(), 333, 0.25f, 1234, 0);  // same counters, split in two calls
  dropout_f32(parts.data() + 333, nullptr, x.data() + 333, n - 333, 0.25f, 1234, 333);
  EXPECT_EQ(whole, parts);
  double kept = 0, sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += mask[i];
    sum += whole[i];
    EXPECT_TRUE(whole[i] == 0.f || std::abs(whole[i] - 1.f / 0.75f) < 1e-6);
  }
  EXPECT_NEAR(kept / n, 0.75, 0.01);  // sd of the kept fraction is 0.0014 at n=1e5: 0.01 is ~7 sd
  EXPECT_NEAR(sum / n, 1.0, 0.015);   // inverted dropout keeps the expectation
  std::vector<float> all_dropped(10);
  dropout_f32(all_dropped.data(), nullptr, x.data(), 10, 1.f, 1, 0);
  for (float v : all_dropped) EXPECT_EQ(v, 0.f);
}

// Residual + LayerNorm: bit for bit the table's own add then layernorm (the fused kernel must not change any
// output), with the sum written out or not, in place over either input; and within LayerNorm's 1e-5 of the ref.
TEST(Kernels, AddLayerNormIsAddThenLayerNormBitwise) {
  std::vector<const KernelTable*> all = tables();
  all.push_back(&kernels_ref());
  for (const KernelTable* t : all)
    for (int64_t C : kSizes)
      for (bool affine : {true, false}) {
        const int64_t rows = 4;
        auto a = randn(rows * C, 21 + C, 2.f), r = randn(rows * C, 22 + C, 3.f);
        for (auto& v : a) v += 1.5f;
        auto w = randn(C, 23 + C), b = randn(C, 24 + C);
        const float* pw = affine ? w.data() : nullptr;
        const float* pb = affine ? b.data() : nullptr;
        std::vector<float> sum(rows * C), want(rows * C);
        t->add_f32(sum.data(), a.data(), r.data(), rows * C);
        t->layernorm_forward_f32(want.data(), nullptr, nullptr, sum.data(), pw, pb, rows, C, 1e-12f);
        std::vector<float> got(rows * C), got_sum(rows * C);
        t->add_layernorm_f32(got.data(), nullptr, a.data(), r.data(), pw, pb, rows, C, 1e-12f);
        EXPECT_EQ(got, want) << t->name << " C=" << C;
        t->add_layernorm_f32(got.data(), got_sum.data(), a.data(), r.data(), pw, pb, rows, C, 1e-12f);
        EXPECT_EQ(got, want) << t->name << " with sum, C=" << C;
        EXPECT_EQ(got_sum, sum) << t->name << " sum, C=" << C;
        std::vector<float> x = a;  // Post-LN: the result over the sublayer output
        t->add_layernorm_f32(x.data(), nullptr, x.data(), r.data(), pw, pb, rows, C, 1e-12f);
        EXPECT_EQ(x, want) << t->name << " in place, C=" << C;
        std::vector<float> res = r;  // Pre-LN: the sum over the residual, the norm elsewhere
        t->add_layernorm_f32(got.data(), res.data(), a.data(), res.data(), pw, pb, rows, C, 1e-12f);
        EXPECT_EQ(got, want) << t->name << " sum over b, C=" << C;
        EXPECT_EQ(res, sum) << t->name << " sum over b, C=" << C;
        std::vector<float> ref(rows * C);
        add_layernorm_f32_ref(ref.data(), nullptr, a.data(), r.data(), pw, pb, rows, C, 1e-12f);
        EXPECT_LE(max_scaled_err(got, ref), 1e-5) << t->name << " vs ref, C=" << C;
      }
}

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// An independent definition of the reference's rounding for finite x: of the two bf16 neighbours of x (upper
// halves t and t+1), the nearer in double; ties to the even one; past the largest bf16 by half an ulp or more, inf
// (IEEE: the neighbour beyond bf16's max counts as 2^128).
uint16_t nearest_bf16(float x) {
  const uint32_t u = to_bits(x);
  const uint32_t t = u >> 16;
  const double lo = from_bits(t << 16);
  const uint32_t up = t + 1;
  const double hi = ((up & 0x7f80u) == 0x7f80u) ? std::copysign(std::ldexp(1.0, 128), x) : double(from_bits(up << 16));
  const double dlo = std::abs(double(x) - lo), dhi = std::abs(hi - double(x));
  if (dlo < dhi) return static_cast<uint16_t>(t);
  if (dhi < dlo) return static_cast<uint16_t>(up);
  return static_cast<uint16_t>((t & 1u) ? up : t);
}
}  // namespace

// f32 -> bf16: every table bit for bit equal to the reference on every upper half with low halves at and around
// the rounding boundary, the specials (signed zeros, denormals, overflow to inf, inf, NaNs with payload only in
// the dropped bits), in vector bodies and tails; the reference itself equal to the independent nearest_bf16.
TEST(Kernels, ConvertF32ToBf16MatchesRefBitwise) {
  std::vector<float> x;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4321};
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) x.push_back(from_bits(hi << 16 | lo));
  const uint32_t specials[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fffff, 0x7f7f8000,
                               0x7f7f7fff, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001, 0x7fc00000, 0x7fbfffff,
                               0x7f80ffff, 0xffc00001, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x00008000};
  for (int rep = 0; rep < 3; ++rep)
    for (uint32_t s : specials) x.push_back(from_bits(s));
  const size_t n = x.size();
  std::vector<uint16_t> want(n);
  convert_f32_to_bf16_ref(want.data(), x.data(), static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = to_bits(x[i]);
    if ((u & 0x7f800000u) != 0x7f800000u) {
      ASSERT_EQ(want[i], nearest_bf16(x[i])) << std::hex << "ref rounding of 0x" << u;
    } else if (x[i] != x[i]) {
      ASSERT_EQ(want[i] & 0x7f80u, 0x7f80u) << std::hex << "NaN 0x" << u;
      ASSERT_NE(want[i] & 0x7fu, 0u) << std::hex << "NaN 0x" << u << " became inf";
      ASSERT_EQ(want[i] >> 15, u >> 31) << "NaN sign";
    } else {
      ASSERT_EQ(want[i], u >> 16) << "inf";
    }
  }
  EXPECT_EQ(bf16_round(1.f), 1.f);
  EXPECT_EQ(to_bits(bf16_round(3.14159265f)), 0x40490000u);
  for (const KernelTable* t : distinct_tables(&KernelTable::convert_f32_to_bf16, "convert_f32_to_bf16"))
    for (size_t offset : {size_t{0}, size_t{1}, size_t{5}})
      for (int64_t len : {int64_t(n - offset), int64_t{1}, int64_t{7}, int64_t{17}, int64_t{33}}) {
        std::vector<uint16_t> got(static_cast<size_t>(len) + 2, 0xabcd);
        t->convert_f32_to_bf16(got.data() + 1, x.data() + n - offset - len, len);
        EXPECT_EQ(got[0], 0xabcd) << t->name << " wrote before its output";
        EXPECT_EQ(got[static_cast<size_t>(len) + 1], 0xabcd) << t->name << " wrote past its output";
        const std::vector<uint16_t> mid(got.begin() + 1, got.end() - 1);
        const std::vector<uint16_t> ref(want.begin() + static_cast<int64_t>(n - offset - len),
                                        want.begin() + static_cast<int64_t>(n - offset));
        EXPECT_EQ(mid, ref) << t->name << " len=" << len << " offset=" << offset;
      }
}

// K = 0 is an empty sum: C = beta·C, as the reference (dnnl_sgemm refuses K = 0; attention over zero keys ran one).
TEST(Kernels, GemmWithNoInnerDimensionScalesC) {
  for (float beta : {0.f, 0.5f}) {
    std::vector<float> got(6, 3.f), want(6, 3.f);
    gemm_f32_onednn(false, true, 2, 3, 0, 1.f, nullptr, 1, nullptr, 1, beta, got.data(), 3);
    gemm_f32_ref(false, true, 2, 3, 0, 1.f, nullptr, 1, nullptr, 1, beta, want.data(), 3);
    EXPECT_EQ(got, want) << "beta " << beta;
    EXPECT_EQ(got[0], beta * 3.f);
  }
}
