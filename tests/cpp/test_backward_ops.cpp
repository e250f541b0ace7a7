// Tensor-level backward ops (src/ops/backward.hpp) with the active kernel table (fast kernels, oneDNN GEMMs):
//  * against central finite differences of double-precision forwards (test_backward_reference.hpp):
//    error = max|grad - fd| / max|fd|, tolerance per case (1e-5: fp32 GEMMs and kernels);
//  * masks (additive with -inf, (T,S) and (B·H,T,S), key padding, causal with T != S, a fully masked batch),
//    strided q/k/v views of a packed QKV buffer with dq/dk/dv written into views of a NaN-filled dQKV;
//  * accumulation: parameter gradients add up over calls (2 calls = 2x, 1e-6), activation gradients do not;
//  * determinism: every gradient bitwise the same with 1 and 2 threads;
//  * shape errors name the argument.
#include <cstring>
#include <limits>
#include <string>

#include "ops/backward.hpp"
#include "runtime/parallel.hpp"
#include "scoped_threads.hpp"
#include "test_backward_reference.hpp"

using namespace encore;
using bwdtest::fd_grad;
using bwdtest::randn;
using bwdtest::rel_err;
using bwdtest::to_double;
using kernels::Act;
using DVec = std::vector<double>;

namespace {

const float kNegInf = -std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
Tensor tensor(const Shape& s, const std::vector<float>& v) { return Tensor::from_floats(s, v.data()); }
std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}
DVec dvalues(const Tensor& t) { return to_double(values(t)); }

template <typename Fn>
void expect_error_naming(Fn&& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one naming '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

}  // namespace

// ---------------------------------------------------------------- linear with fused activations

struct LinearOpCase {
  const char* name;
  Act act;
  bool bias;
  Shape x_shape;  // (..., K)
  int64_t N;
  double tol;
};
const LinearOpCase kLinearOpCases[] = {
    {"none", Act::none, true, {2, 3, 7}, 5, 1e-5},
    {"none, no bias", Act::none, false, {4, 9}, 3, 1e-5},
    {"relu", Act::relu, true, {2, 3, 7}, 5, 1e-5},
    {"gelu", Act::gelu_erf, true, {3, 7}, 6, 1e-5},
    {"gelu_tanh", Act::gelu_tanh, true, {3, 7}, 6, 1e-5},
    {"silu, no bias", Act::silu, false, {5, 4}, 9, 1e-5},
    {"tanh", Act::tanh, true, {2, 2, 5}, 3, 1e-5},
    {"several row tiles (M=70, N=300)", Act::none, true, {70, 3}, 300, 1e-5},
    {"several column tiles (K=260)", Act::gelu_erf, true, {3, 260}, 4, 1e-5},
};

TEST(BackwardOps, LinearMatchesFiniteDifferences) {
  for (const LinearOpCase& c : kLinearOpCases) {
    const int64_t K = c.x_shape.back(), N = c.N, M = numel(c.x_shape) / K;
    Shape out_shape = c.x_shape;
    out_shape.back() = N;
    auto x = randn(M * K, 201), w = randn(N * K, 202, 0.5f), b = randn(N, 203), g = randn(M * N, 204);
    Tensor X = tensor(c.x_shape, x), W = tensor({N, K}, w), B = c.bias ? tensor({N}, b) : Tensor();
    Tensor pre;
    Tensor out = ops::linear_forward_train(&pre, X, W, B, c.act);
    EXPECT_LE(bwdtest::max_scaled_err(values(out), values(ops::linear_forward(X, W, B, c.act))), 1e-5) << c.name;
    EXPECT_EQ(pre.defined(), c.act != Act::none) << c.name;
    Tensor dx, dW = Tensor::zeros({N, K}), db = Tensor::zeros({N});
    ops::linear_backward(&dx, &dW, c.bias ? &db : nullptr, tensor(out_shape, g), pre, X, W, c.act);
    ASSERT_EQ(dx.shape(), c.x_shape) << c.name;
    const DVec gd = to_double(g), xd = to_double(x), wd = to_double(w), bd = c.bias ? to_double(b) : DVec();
    auto L = [&](const DVec& xx, const DVec& ww, const DVec& bb) {
      return bwdtest::dot(gd, bwdtest::linear(xx, ww, bb, M, K, N, c.act));
    };
    EXPECT_LE(rel_err(values(dx), fd_grad([&](const DVec& v) { return L(v, wd, bd); }, xd)), c.tol) << c.name << " dx";
    EXPECT_LE(rel_err(values(dW), fd_grad([&](const DVec& v) { return L(xd, v, bd); }, wd)), c.tol) << c.name << " dW";
    if (c.bias) {
      EXPECT_LE(rel_err(values(db), fd_grad([&](const DVec& v) { return L(xd, wd, v); }, bd)), c.tol) << c.name << " db";
    }
  }
}

// ---------------------------------------------------------------- norms

struct NormOpCase {
  const char* name;
  Shape shape;
  bool weight, bias;
  double tol;
};
const NormOpCase kNormOpCases[] = {
    {"affine", {2, 3, 7}, true, true, 1e-5},
    {"65 rows: three row blocks", {5, 13, 9}, true, true, 1e-5},
    {"no affine", {4, 16}, false, false, 1e-5},
    {"weight only, C=33", {3, 33}, true, false, 1e-5},
};

TEST(BackwardOps, LayerNormMatchesFiniteDifferences) {
  const double eps = 1e-5;
  for (const NormOpCase& c : kNormOpCases) {
    const int64_t C = c.shape.back(), rows = numel(c.shape) / C;
    auto x = randn(rows * C, 211, 1.5f, 0.2f), w = randn(C, 212, 0.5f, 1.f), b = randn(C, 213), g = randn(rows * C, 214);
    Tensor X = tensor(c.shape, x), W = c.weight ? tensor({C}, w) : Tensor(), B = c.bias ? tensor({C}, b) : Tensor();
    Tensor mean, rstd;
    ops::layernorm_forward(X, W, B, eps, &mean, &rstd);
    Tensor dx, dw = Tensor::zeros({C}), db = Tensor::zeros({C});
    ops::layernorm_backward(&dx, c.weight ? &dw : nullptr, c.bias ? &db : nullptr, tensor(c.shape, g), mean, rstd, X, W);
    const DVec gd = to_double(g), xd = to_double(x), wd = c.weight ? to_double(w) : DVec(),
               bd = c.bias ? to_double(b) : DVec();
    const double eps_f = static_cast<float>(eps);  // the kernels add eps as a float
    auto L = [&](const DVec& xx, const DVec& ww, const DVec& bb) {
      return bwdtest::dot(gd, bwdtest::layernorm(xx, ww, bb, rows, C, eps_f));
    };
    EXPECT_LE(rel_err(values(dx), fd_grad([&](const DVec& v) { return L(v, wd, bd); }, xd)), c.tol) << c.name << " dx";
    if (c.weight) {
      EXPECT_LE(rel_err(values(dw), fd_grad([&](const DVec& v) { return L(xd, v, bd); }, wd)), c.tol) << c.name << " dw";
    }
    if (c.bias) {
      EXPECT_LE(rel_err(values(db), fd_grad([&](const DVec& v) { return L(xd, wd, v); }, bd)), c.tol) << c.name << " db";
    }
  }
}

TEST(BackwardOps, RmsNormMatchesFiniteDifferences) {
  const double eps = 1e-6;
  for (const NormOpCase& c : kNormOpCases) {
    const int64_t C = c.shape.back(), rows = numel(c.shape) / C;
    auto x = randn(rows * C, 221, 1.5f, 0.2f), w = randn(C, 222, 0.5f, 1.f), g = randn(rows * C, 224);
    Tensor X = tensor(c.shape, x), W = c.weight ? tensor({C}, w) : Tensor();
    Tensor rstd;
    ops::rmsnorm_forward(X, W, eps, &rstd);
    Tensor dx, dw = Tensor::zeros({C});
    ops::rmsnorm_backward(&dx, c.weight ? &dw : nullptr, tensor(c.shape, g), rstd, X, W);
    const DVec gd = to_double(g), xd = to_double(x), wd = c.weight ? to_double(w) : DVec();
    const double eps_f = static_cast<float>(eps);
    auto L = [&](const DVec& xx, const DVec& ww) { return bwdtest::dot(gd, bwdtest::rmsnorm(xx, ww, rows, C, eps_f)); };
    EXPECT_LE(rel_err(values(dx), fd_grad([&](const DVec& v) { return L(v, wd); }, xd)), c.tol) << c.name << " dx";
    if (c.weight) {
      EXPECT_LE(rel_err(values(dw), fd_grad([&](const DVec& v) { return L(xd, v); }, wd)), c.tol) << c.name << " dw";
    }
  }
}

// ---------------------------------------------------------------- elementwise, softmax, dropout, add, embedding

TEST(BackwardOps, ActivationAndGatedMatchFiniteDifferences) {
  for (Act act : {Act::none, Act::relu, Act::gelu_erf, Act::gelu_tanh, Act::silu, Act::tanh}) {
    auto x = randn(3 * 11, 231, 2.f), g = randn(3 * 11, 232);
    Tensor dx;
    ops::activation_backward(&dx, tensor({3, 11}, g), tensor({3, 11}, x), act);
    const DVec gd = to_double(g);
    DVec fd = fd_grad(
        [&](const DVec& xx) {
          DVec y(xx.size());
          for (size_t i = 0; i < xx.size(); ++i) y[i] = bwdtest::act(xx[i], act);
          return bwdtest::dot(gd, y);
        },
        to_double(x));
    EXPECT_LE(rel_err(values(dx), fd), 1e-5) << kernels::act_name(act);

    const int64_t rows = 6, F = 5;
    auto in = randn(rows * 2 * F, 233, 2.f), gg = randn(rows * F, 234);
    Tensor din;
    ops::gated_backward(&din, tensor({2, 3, F}, gg), tensor({2, 3, 2 * F}, in), act);
    ASSERT_EQ(din.shape(), (Shape{2, 3, 2 * F}));
    const DVec ggd = to_double(gg);
    DVec fdg = fd_grad([&](const DVec& v) { return bwdtest::dot(ggd, bwdtest::gated(v, rows, F, act)); }, to_double(in));
    EXPECT_LE(rel_err(values(din), fdg), 1e-5) << "gated " << kernels::act_name(act);
  }
}

TEST(BackwardOps, SoftmaxMatchesFiniteDifferences) {
  const int64_t rows = 4, C = 13;
  auto x = randn(rows * C, 241, 2.f), g = randn(rows * C, 242);
  Tensor p = tensor({2, 2, C}, x);
  ops::softmax_forward_(p);
  Tensor dx;
  ops::softmax_backward(&dx, tensor({2, 2, C}, g), p);
  const DVec gd = to_double(g);
  DVec fd = fd_grad(
      [&](const DVec& xx) {
        DVec pp(xx.size());
        for (int64_t r = 0; r < rows; ++r) bwdtest::softmax_row<double>(pp.data() + r * C, xx.data() + r * C, C, 1.0, nullptr, C);
        return bwdtest::dot(gd, pp);
      },
      to_double(x));
  EXPECT_LE(rel_err(values(dx), fd), 1e-5);
}

TEST(BackwardOps, DropoutRegeneratesTheForwardMask) {
  const Shape s{3, 40001};  // more than one 32768-element chunk: chunk offsets must line up with the forward's
  const uint64_t seed = 99;
  for (double p : {0.4, 1.0}) {
    Tensor ones = Tensor::full(s, 1.f);
    const auto keep_scaled = values(ops::dropout_forward(ones, p, true, seed));  // keep/(1-p)
    auto g = randn(numel(s), 251);
    Tensor dx;
    ops::dropout_backward(&dx, tensor(s, g), p, true, seed);
    DVec want(g.size());
    for (size_t i = 0; i < g.size(); ++i) want[i] = double(g[i]) * keep_scaled[i];
    EXPECT_LE(rel_err(values(dx), want), 1e-6) << "p=" << p;
  }
  Tensor g = tensor({5}, randn(5, 252)), dx;
  ops::dropout_backward(&dx, g, 0.5, /*training=*/false, seed);
  EXPECT_EQ(dx.raw_data(), g.raw_data());  // identity, as the forward in eval mode
}

TEST(BackwardOps, AddPassesTheGradientToBothInputs) {
  Tensor g = tensor({2, 3}, randn(6, 253)), da, db;
  ops::add_backward(&da, &db, g);
  EXPECT_EQ(values(da), values(g));
  EXPECT_EQ(values(db), values(g));
}

TEST(BackwardOps, EmbeddingScatterAddsInTokenOrder) {
  const int64_t V = 7, C = 70;  // two column blocks
  const std::vector<int64_t> id_values = {3, 1, 3, 0, 2, 6, 3, 2, 1, 3};
  Tensor ids = Tensor::empty({2, 5}, DType::i64);
  std::memcpy(ids.data<int64_t>(), id_values.data(), id_values.size() * sizeof(int64_t));
  auto g = randn(10 * C, 261);
  for (int64_t padding_idx : {int64_t(-1), int64_t(2)}) {
    Tensor dt = Tensor::zeros({V, C});
    ops::embedding_backward(&dt, tensor({2, 5, C}, g), ids, padding_idx);
    DVec want(V * C, 0.0);
    for (size_t i = 0; i < id_values.size(); ++i)
      if (id_values[i] != padding_idx)
        for (int64_t c = 0; c < C; ++c) want[id_values[i] * C + c] += g[i * C + c];
    EXPECT_LE(rel_err(values(dt), want), 1e-6) << "padding_idx=" << padding_idx;
    if (padding_idx >= 0) {
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(values(dt)[padding_idx * C + c], 0.f);
    }
  }
}

// ---------------------------------------------------------------- attention

// attn2d (T, S), attn_heads (H, T, S) shared by the batch, attn3d (B*H, T, S)
enum class OpMask { none, attn2d, attn_heads, attn3d, key_padding, causal, fully_masked_batch };
struct AttnOpCase {
  const char* name;
  int64_t B, T, S, E, Ev, H;
  OpMask mask;
  double dropout;
  bool packed;  // q, k, v (and dq, dk, dv) are strided views of one (B, T, E + Ek + Ev) buffer (needs T == S)
  double tol;
  double scale;    // attention's scale=; 0 = unset (1/sqrt(head dim))
  int64_t KV = 0;  // key/value heads (grouped-query attention when < H; 0: H). k is (B, S, KV·E/H), v (B, S, Ev)
};
const AttnOpCase kAttnCases[] = {
    {"plain", 2, 3, 4, 4, 6, 2, OpMask::none, 0.0, false, 1e-5, 0},
    {"packed self-attention views", 2, 4, 4, 6, 6, 3, OpMask::none, 0.0, true, 1e-5, 0},
    {"additive (T,S) mask with -inf", 2, 3, 5, 4, 4, 2, OpMask::attn2d, 0.0, false, 1e-5, 0},
    {"additive (H,T,S) mask with -inf", 2, 3, 4, 6, 4, 2, OpMask::attn_heads, 0.0, false, 1e-5, 0},
    {"additive (B*H,T,S) mask with -inf", 2, 4, 3, 4, 2, 2, OpMask::attn3d, 0.0, false, 1e-5, 0},
    {"key padding", 2, 4, 4, 4, 4, 2, OpMask::key_padding, 0.0, true, 1e-5, 0},
    {"causal", 2, 5, 5, 6, 6, 2, OpMask::causal, 0.0, true, 1e-5, 0},
    {"causal, T < S", 1, 3, 5, 4, 4, 1, OpMask::causal, 0.0, false, 1e-5, 0},
    {"causal, T > S", 2, 5, 3, 4, 4, 2, OpMask::causal, 0.0, false, 1e-5, 0},
    {"fully masked batch", 2, 3, 3, 4, 4, 2, OpMask::fully_masked_batch, 0.0, true, 1e-5, 0},
    {"dropout 0.3, key padding", 2, 3, 4, 4, 4, 2, OpMask::key_padding, 0.3, false, 1e-5, 0},
    {"dropout 0.5, causal, packed", 2, 4, 4, 4, 4, 2, OpMask::causal, 0.5, true, 1e-5, 0},
    // scale= (T5: 1; DeBERTa: 1/sqrt(3·head dim)), with the masks whose gradients those families train
    {"scale 1 (T5), (H,T,S) bias, packed", 2, 4, 4, 4, 4, 2, OpMask::attn_heads, 0.0, true, 1e-5, 1.0},
    {"scale 1/sqrt(3d) (DeBERTa), (B*H,T,S) bias", 2, 3, 4, 6, 9, 3, OpMask::attn3d, 0.0, false, 1e-5, 0.40824829},
    {"scale 0.7, causal, dropout 0.3", 2, 4, 4, 4, 4, 2, OpMask::causal, 0.3, true, 1e-5, 0.7},
    // grouped-query attention: query head h reads key/value head h / (H / KV); dk, dv sum over the group
    {"GQA 4 heads / 2 kv heads", 2, 3, 4, 8, 6, 4, OpMask::none, 0.0, false, 1e-5, 0, 2},
    {"GQA 6 heads / 2 kv heads, packed, causal", 2, 5, 5, 12, 4, 6, OpMask::causal, 0.0, true, 1e-5, 0, 2},
    {"GQA 4 heads / 1 kv head (multi-query), key padding", 2, 4, 4, 8, 2, 4, OpMask::key_padding, 0.0, false, 1e-5, 0,
     1},
    {"GQA 4 heads / 2 kv heads, (B*H,T,S) mask, dropout 0.3", 2, 3, 5, 8, 4, 4, OpMask::attn3d, 0.3, false, 1e-5, 0,
     2},
    {"GQA 4 heads / 2 kv heads, (H,T,S) bias, scale 1", 2, 3, 4, 8, 4, 4, OpMask::attn_heads, 0.0, false, 1e-5, 1.0,
     2},
};

namespace {

struct AttnProblem {
  const AttnOpCase& c;
  int64_t KV, group, Dh, Dv, Ek, Eo;  // Ek = k's width, Eo = H·Dv the output's
  uint64_t seed = 4242;
  Tensor qkv, q, k, v;  // q/k/v: views of qkv when packed
  ops::AttentionMasks masks;
  std::vector<float> mask_values;  // the float attn_mask (2-D or 3-D), if any
  DVec kpm;                        // additive key padding (B, S), if any

  std::optional<double> scale() const { return c.scale > 0 ? std::optional<double>(c.scale) : std::nullopt; }
  double scale_value() const { return c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(Dh)); }
  int64_t mask_planes() const {
    return c.mask == OpMask::attn3d ? c.B * c.H : c.mask == OpMask::attn_heads ? c.H : 1;
  }

  explicit AttnProblem(const AttnOpCase& ac)
      : c(ac), KV(ac.KV ? ac.KV : ac.H), group(ac.H / KV), Dh(ac.E / ac.H), Dv(ac.Ev / KV), Ek(KV * Dh),
        Eo(ac.H * Dv) {
    if (c.packed) {
      const int64_t W = c.E + Ek + c.Ev;
      qkv = tensor({c.B, c.T, W}, randn(c.B * c.T * W, 271, 1.2f));
      q = qkv.slice(2, 0, c.E), k = qkv.slice(2, c.E, c.E + Ek), v = qkv.slice(2, c.E + Ek, W);
    } else {
      q = tensor({c.B, c.T, c.E}, randn(c.B * c.T * c.E, 272, 1.2f));
      k = tensor({c.B, c.S, Ek}, randn(c.B * c.S * Ek, 273, 1.2f));
      v = tensor({c.B, c.S, c.Ev}, randn(c.B * c.S * c.Ev, 274));
    }
    if (c.mask == OpMask::attn2d || c.mask == OpMask::attn3d || c.mask == OpMask::attn_heads) {
      const int64_t planes = mask_planes();
      mask_values = randn(planes * c.T * c.S, 275);
      for (int64_t i = 0; i < planes * c.T * c.S; ++i) {
        const int64_t t = (i / c.S) % c.T, j = i % c.S;
        if (j > 0 && (t + j + i / (c.T * c.S)) % 3 == 2) mask_values[i] = kNegInf;  // key 0 stays visible
      }
      masks.attn_mask = planes > 1 ? tensor({planes, c.T, c.S}, mask_values) : tensor({c.T, c.S}, mask_values);
    }
    if (c.mask == OpMask::key_padding || c.mask == OpMask::fully_masked_batch) {
      Tensor pad = Tensor::zeros({c.B, c.S}, DType::boolean);
      uint8_t* pm = pad.data<uint8_t>();
      if (c.mask == OpMask::key_padding) pm[1 * c.S + c.S - 1] = 1;  // batch 1: last key is padding
      if (c.mask == OpMask::fully_masked_batch)
        for (int64_t j = 0; j < c.S; ++j) pm[1 * c.S + j] = 1;  // batch 1: nothing to attend to
      masks.key_padding_mask = ops::additive_mask(pad, "key_padding_mask");
      kpm = dvalues(masks.key_padding_mask);
    }
    masks.causal = c.mask == OpMask::causal;
  }

  // (B, L, D) view -> dense doubles
  static DVec dense(const Tensor& t) { return dvalues(t); }

  // out (B, T, Eo) in double: each (b, h) through bwdtest::attention_head with the masks summed, head h reading
  // key/value head h / group (K and V repeated per group, as torch's repeat_interleave / transformers' repeat_kv).
  DVec forward(const DVec& qd, const DVec& kd, const DVec& vd, const DVec& md) const {
    const int64_t T = c.T, S = c.S, E = c.E, Ev = c.Ev;
    DVec out(c.B * T * Eo);
    const double ds = c.dropout > 0 ? double(1.f / (1.f - static_cast<float>(c.dropout))) : 1.0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h) {
        const int64_t bh = b * c.H + h;
        DVec qh(T * Dh), kh(S * Dh), vh(S * Dv), mh;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < Dh; ++d) qh[t * Dh + d] = qd[(b * T + t) * E + h * Dh + d];
        for (int64_t s = 0; s < S; ++s) {
          for (int64_t d = 0; d < Dh; ++d) kh[s * Dh + d] = kd[(b * S + s) * Ek + (h / group) * Dh + d];
          for (int64_t d = 0; d < Dv; ++d) vh[s * Dv + d] = vd[(b * S + s) * Ev + (h / group) * Dv + d];
        }
        if (!md.empty() || !kpm.empty()) {
          mh.assign(T * S, 0.0);
          for (int64_t i = 0; i < T * S; ++i) {
            if (!md.empty())
              mh[i] += md[(c.mask == OpMask::attn3d ? bh : c.mask == OpMask::attn_heads ? h : 0) * T * S + i];
            if (!kpm.empty()) mh[i] += kpm[b * S + i % S];
          }
        }
        std::vector<uint8_t> keep;
        if (c.dropout > 0) {
          std::vector<float> ones(T * S, 1.f), tmp(T * S);
          keep.resize(T * S);
          kernels::dropout_f32(tmp.data(), keep.data(), ones.data(), T * S, static_cast<float>(c.dropout), seed,
                               static_cast<uint64_t>(bh * T * S));
        }
        DVec oh = bwdtest::attention_head(qh, kh, vh, mh, masks.causal, keep, ds, T, S, Dh, Dv, scale_value());
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < Dv; ++d) out[(b * T + t) * Eo + h * Dv + d] = oh[t * Dv + d];
      }
    return out;
  }
};

}  // namespace

TEST(BackwardOps, AttentionMatchesFiniteDifferences) {
  for (const AttnOpCase& c : kAttnCases) {
    SCOPED_TRACE(c.name);
    const AttnProblem pb(c);
    const bool training = c.dropout > 0;
    Tensor probs;
    Tensor out = ops::attention_forward_train(&probs, pb.q, pb.k, pb.v, c.H, pb.masks, c.dropout, training, pb.seed,
                                              pb.scale());
    // The training forward's output is bitwise the unfused attention_forward's (asking for the weights selects
    // it); the fused inference kernel (no weights, no dropout) sums in another order: within 1e-6.
    Tensor ref_probs;
    Tensor ref =
        ops::attention_forward(pb.q, pb.k, pb.v, c.H, pb.masks, &ref_probs, c.dropout, training, pb.seed, pb.scale());
    EXPECT_EQ(values(out), values(ref));
    EXPECT_LE(rel_err(values(out), pb.forward(AttnProblem::dense(pb.q), AttnProblem::dense(pb.k),
                                              AttnProblem::dense(pb.v), to_double(pb.mask_values))),
              c.tol)
        << "out vs the double reference";
    if (!training) {
      EXPECT_EQ(values(probs), values(ref_probs));
      const Tensor fused =
          ops::attention_forward(pb.q, pb.k, pb.v, c.H, pb.masks, nullptr, 0.0, false, pb.seed, pb.scale());
      const std::vector<float> a = values(out), b = values(fused);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << "fused attention, element " << i;
    }

    auto g = randn(c.B * c.T * pb.Eo, 281);
    Tensor dqkv, dq, dk, dv, dlogits;
    if (c.packed) {  // gradients written into views of one NaN-filled buffer: every element must be written
      const int64_t W = c.E + pb.Ek + c.Ev;
      dqkv = Tensor::full({c.B, c.T, W}, kNaN);
      dq = dqkv.slice(2, 0, c.E), dk = dqkv.slice(2, c.E, c.E + pb.Ek), dv = dqkv.slice(2, c.E + pb.Ek, W);
    }
    ops::attention_backward(&dq, &dk, &dv, &dlogits, tensor({c.B, c.T, pb.Eo}, g), probs, pb.q, pb.k, pb.v, c.H,
                            c.dropout, training, pb.seed, pb.scale());
    if (c.packed) {
      for (float x : values(dqkv)) ASSERT_TRUE(std::isfinite(x)) << "dQKV left unwritten or non-finite";
      EXPECT_EQ(dq.raw_data(), dqkv.raw_data());  // written in place, not reallocated
    }
    const DVec gd = to_double(g), qd = AttnProblem::dense(pb.q), kd = AttnProblem::dense(pb.k),
               vd = AttnProblem::dense(pb.v), md = to_double(pb.mask_values);
    auto L = [&](const DVec& qq, const DVec& kk, const DVec& vv, const DVec& mm) {
      return bwdtest::dot(gd, pb.forward(qq, kk, vv, mm));
    };
    EXPECT_LE(rel_err(values(dq), fd_grad([&](const DVec& x) { return L(x, kd, vd, md); }, qd)), c.tol) << "dq";
    EXPECT_LE(rel_err(values(dk), fd_grad([&](const DVec& x) { return L(qd, x, vd, md); }, kd)), c.tol) << "dk";
    EXPECT_LE(rel_err(values(dv), fd_grad([&](const DVec& x) { return L(qd, kd, x, md); }, vd)), c.tol) << "dv";
    if (!md.empty()) {  // dlogits summed over its broadcast is the mask's gradient (finite entries)
      DVec fm = fd_grad([&](const DVec& x) { return L(qd, kd, vd, x); }, md);
      for (size_t i = 0; i < md.size(); ++i)
        if (std::isinf(md[i])) fm[i] = 0.0;
      const auto dl = values(dlogits);
      std::vector<float> dmask(md.size(), 0.f);
      for (size_t i = 0; i < dl.size(); ++i) dmask[i % md.size()] += dl[i];
      EXPECT_LE(rel_err(dmask, fm), c.tol) << "dmask";
      // A defined d_attn_mask of the mask's shape receives that sum, added to what it held (a bias shared by
      // several layers accumulates): start from 1.5 everywhere.
      Tensor summed = Tensor::full(pb.masks.attn_mask.shape(), 1.5f);
      ops::attention_backward(nullptr, nullptr, nullptr, &summed, tensor({c.B, c.T, pb.Eo}, g), probs, pb.q, pb.k,
                              pb.v, c.H, c.dropout, training, pb.seed, pb.scale());
      std::vector<float> minus(values(summed));
      for (auto& x : minus) x -= 1.5f;
      EXPECT_LE(rel_err(minus, fm), c.tol) << "d_attn_mask summed over its broadcast";
    }
    if (c.mask == OpMask::fully_masked_batch) {  // batch 1 attends to nothing: zero gradients, never NaN
      for (Tensor* t : {&dq, &dk, &dv})
        for (float x : values(t->select(0, 1))) EXPECT_EQ(x, 0.f);
    }
  }
}

// ---------------------------------------------------------------- accumulation semantics

TEST(BackwardOps, ParameterGradientsAccumulateActivationGradientsDoNot) {
  auto twice = [](const std::vector<float>& a) {
    std::vector<float> out(a);
    for (auto& x : out) x *= 2.f;
    return out;
  };
  {  // linear
    Tensor x = tensor({4, 6}, randn(24, 301)), w = tensor({5, 6}, randn(30, 302)), g = tensor({4, 5}, randn(20, 303));
    Tensor pre;
    ops::linear_forward_train(&pre, x, w, Tensor(), Act::gelu_erf);
    Tensor dx1, dx2, dw = Tensor::zeros({5, 6}), db = Tensor::zeros({5});
    ops::linear_backward(&dx1, &dw, &db, g, pre, x, w, Act::gelu_erf);
    const auto dw1 = values(dw), db1 = values(db);
    ops::linear_backward(&dx2, &dw, &db, g, pre, x, w, Act::gelu_erf);
    EXPECT_LE(bwdtest::max_scaled_err(values(dw), twice(dw1)), 1e-6) << "linear dweight";
    EXPECT_LE(bwdtest::max_scaled_err(values(db), twice(db1)), 1e-6) << "linear dbias";
    EXPECT_EQ(values(dx2), values(dx1)) << "linear dx is written, not accumulated";
  }
  {  // layernorm, rmsnorm
    Tensor x = tensor({70, 9}, randn(630, 311, 1.f, 0.5f)), w = tensor({9}, randn(9, 312)), b = tensor({9}, randn(9, 313));
    Tensor g = tensor({70, 9}, randn(630, 314)), mean, rstd, rrstd;
    ops::layernorm_forward(x, w, b, 1e-5, &mean, &rstd);
    ops::rmsnorm_forward(x, w, 1e-6, &rrstd);
    Tensor dx1, dx2, dw = Tensor::zeros({9}), db = Tensor::zeros({9}), rw = Tensor::zeros({9});
    ops::layernorm_backward(&dx1, &dw, &db, g, mean, rstd, x, w);
    ops::rmsnorm_backward(nullptr, &rw, g, rrstd, x, w);
    const auto dw1 = values(dw), db1 = values(db), rw1 = values(rw);
    ops::layernorm_backward(&dx2, &dw, &db, g, mean, rstd, x, w);
    ops::rmsnorm_backward(nullptr, &rw, g, rrstd, x, w);
    EXPECT_LE(bwdtest::max_scaled_err(values(dw), twice(dw1)), 1e-6) << "layer_norm dweight";
    EXPECT_LE(bwdtest::max_scaled_err(values(db), twice(db1)), 1e-6) << "layer_norm dbias";
    EXPECT_LE(bwdtest::max_scaled_err(values(rw), twice(rw1)), 1e-6) << "rms_norm dweight";
    EXPECT_EQ(values(dx2), values(dx1)) << "layer_norm dx is written, not accumulated";
  }
  {  // embedding
    Tensor ids = Tensor::zeros({6}, DType::i64);
    for (int64_t i = 0; i < 6; ++i) ids.data<int64_t>()[i] = (i * 5) % 4;
    Tensor g = tensor({6, 8}, randn(48, 321)), dt = Tensor::zeros({4, 8});
    ops::embedding_backward(&dt, g, ids);
    const auto dt1 = values(dt);
    ops::embedding_backward(&dt, g, ids);
    EXPECT_LE(bwdtest::max_scaled_err(values(dt), twice(dt1)), 1e-6) << "embedding dtable";
  }
  {  // attention: dq/dk/dv are written into the caller's views, not accumulated
    const AttnProblem pb(kAttnCases[1]);
    const AttnOpCase& c = pb.c;
    Tensor probs, dqkv = Tensor::full({c.B, c.T, 3 * c.E}, 5.f);
    ops::attention_forward_train(&probs, pb.q, pb.k, pb.v, c.H, pb.masks, 0.0, false, 0);
    Tensor g = tensor({c.B, c.T, c.Ev}, randn(c.B * c.T * c.Ev, 331));
    Tensor dq = dqkv.slice(2, 0, c.E), dk = dqkv.slice(2, c.E, 2 * c.E), dv = dqkv.slice(2, 2 * c.E, 3 * c.E);
    ops::attention_backward(&dq, &dk, &dv, nullptr, g, probs, pb.q, pb.k, pb.v, c.H, 0.0, false, 0);
    const auto first = values(dqkv);
    ops::attention_backward(&dq, &dk, &dv, nullptr, g, probs, pb.q, pb.k, pb.v, c.H, 0.0, false, 0);
    EXPECT_EQ(values(dqkv), first) << "attention dq/dk/dv";
  }
}

// ---------------------------------------------------------------- determinism

namespace {

// Every gradient of a set of ops on fixed inputs, in one vector per gradient.
std::vector<std::vector<float>> all_gradients() {
  std::vector<std::vector<float>> out;
  auto keep = [&](const Tensor& t) { out.push_back(values(t)); };
  {  // linear: many tiles; and tall-skinny (one output tile, depth 8192: oneDNN may split K by thread count)
    Tensor x = tensor({8, 512, 48}, randn(8 * 512 * 48, 401)), w = tensor({40, 48}, randn(40 * 48, 402));
    Tensor b = tensor({40}, randn(40, 403)), g = tensor({8, 512, 40}, randn(8 * 512 * 40, 404)), pre;
    ops::linear_forward_train(&pre, x, w, b, Act::gelu_erf);
    Tensor dx, dw = Tensor::zeros({40, 48}), db = Tensor::zeros({40});
    ops::linear_backward(&dx, &dw, &db, g, pre, x, w, Act::gelu_erf);
    keep(dx), keep(dw), keep(db);
    Tensor x2 = tensor({8192, 16}, randn(8192 * 16, 405)), w2 = tensor({8, 16}, randn(128, 406));
    Tensor g2 = tensor({8192, 8}, randn(8192 * 8, 407));
    Tensor dx2, dw2 = Tensor::zeros({8, 16}), db2 = Tensor::zeros({8});
    ops::linear_backward(&dx2, &dw2, &db2, g2, Tensor(), x2, w2, Act::none);
    keep(dx2), keep(dw2), keep(db2);
    // one output (a regression head): dweight is 1×16 with depth 20000, which oneDNN 2.6's sgemm, left to
    // itself, splits across threads (different bits with 1 and 2 threads)
    Tensor x3 = tensor({20000, 16}, randn(20000 * 16, 408)), w3 = tensor({1, 16}, randn(16, 409));
    Tensor g3 = tensor({20000, 1}, randn(20000, 410));
    Tensor dx3, dw3 = Tensor::zeros({1, 16}), db3 = Tensor::zeros({1});
    ops::linear_backward(&dx3, &dw3, &db3, g3, Tensor(), x3, w3, Act::none);
    keep(dx3), keep(dw3), keep(db3);
  }
  {  // norms: 1000 rows = 63 row blocks
    Tensor x = tensor({1000, 77}, randn(77000, 411, 1.f, 0.3f)), w = tensor({77}, randn(77, 412));
    Tensor b = tensor({77}, randn(77, 413)), g = tensor({1000, 77}, randn(77000, 414)), mean, rstd, rrstd;
    ops::layernorm_forward(x, w, b, 1e-5, &mean, &rstd);
    ops::rmsnorm_forward(x, w, 1e-6, &rrstd);
    Tensor dx, dw = Tensor::zeros({77}), db = Tensor::zeros({77}), rdx, rdw = Tensor::zeros({77});
    ops::layernorm_backward(&dx, &dw, &db, g, mean, rstd, x, w);
    ops::rmsnorm_backward(&rdx, &rdw, g, rrstd, x, w);
    keep(dx), keep(dw), keep(db), keep(rdx), keep(rdw);
  }
  {  // embedding: 3000 tokens over 50 rows, 4 column blocks
    Tensor ids = Tensor::empty({3000}, DType::i64);
    for (int64_t i = 0; i < 3000; ++i) ids.data<int64_t>()[i] = (i * 7919) % 50;
    Tensor dt = Tensor::zeros({50, 200});
    ops::embedding_backward(&dt, tensor({3000, 200}, randn(3000 * 200, 421)), ids, 3);
    keep(dt);
  }
  {  // attention, packed, dropout
    const int64_t B = 2, T = 33, E = 48, H = 3;
    Tensor qkv = tensor({B, T, 3 * E}, randn(B * T * 3 * E, 431));
    Tensor q = qkv.slice(2, 0, E), k = qkv.slice(2, E, 2 * E), v = qkv.slice(2, 2 * E, 3 * E), probs;
    ops::AttentionMasks masks;
    masks.causal = true;
    ops::attention_forward_train(&probs, q, k, v, H, masks, 0.1, true, 77);
    Tensor dq, dk, dv, dl;
    ops::attention_backward(&dq, &dk, &dv, &dl, tensor({B, T, E}, randn(B * T * E, 432)), probs, q, k, v, H, 0.1, true,
                            77);
    keep(dq), keep(dk), keep(dv), keep(dl);
  }
  return out;
}

}  // namespace

TEST(BackwardOps, GradientsIdenticalWithOneAndTwoThreads) {
  std::vector<std::vector<float>> one, two;
  {
    ScopedThreads t(1);
    one = all_gradients();
  }
  {
    ScopedThreads t(2);
    two = all_gradients();
  }
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].size(), two[i].size());
    EXPECT_EQ(std::memcmp(one[i].data(), two[i].data(), one[i].size() * sizeof(float)), 0)
        << "gradient #" << i << " differs between 1 and 2 threads";
  }
}

// ---------------------------------------------------------------- errors

TEST(BackwardOps, ShapeErrorsNameTheArgument) {
  Tensor x = Tensor::zeros({4, 6}), w = Tensor::zeros({5, 6}), g = Tensor::zeros({4, 5}), dx;
  Tensor dw = Tensor::zeros({5, 6});
  expect_error_naming([&] { ops::linear_backward(&dx, nullptr, nullptr, Tensor::zeros({4, 4}), Tensor(), x, w); },
                      "linear dout");
  expect_error_naming([&] {
    Tensor bad = Tensor::zeros({6, 5});
    ops::linear_backward(&dx, &bad, nullptr, g, Tensor(), x, w);
  }, "linear dweight");
  expect_error_naming([&] { ops::linear_backward(&dx, &dw, nullptr, g, Tensor(), x, w, Act::gelu_erf); },
                      "linear pre-activation");

  Tensor mean = Tensor::zeros({4}), rstd = Tensor::zeros({3}), ln_w = Tensor::zeros({6}), ln_dw = Tensor::zeros({6});
  expect_error_naming([&] { ops::layernorm_backward(&dx, nullptr, nullptr, x, mean, rstd, x, ln_w); }, "layer_norm rstd");
  expect_error_naming([&] { ops::layernorm_backward(&dx, &ln_dw, nullptr, x, mean, mean, x, Tensor()); },
                      "has no weight");
  expect_error_naming([&] { ops::rmsnorm_backward(&dx, nullptr, Tensor::zeros({4, 5}), mean, x, Tensor()); },
                      "rms_norm dout");

  Tensor q = Tensor::zeros({1, 3, 4}), kv = Tensor::zeros({1, 5, 4}), dq, dk, dv;
  expect_error_naming([&] {
    ops::attention_backward(&dq, &dk, &dv, nullptr, Tensor::zeros({1, 3, 4}), Tensor::zeros({1, 2, 3, 4}), q, kv, kv, 2,
                            0.0, false, 0);
  }, "attention probs");
  expect_error_naming([&] {
    Tensor strided = Tensor::zeros({1, 4, 3}).transpose(1, 2);  // (1, 3, 4), last dim not contiguous
    ops::attention_backward(&strided, &dk, &dv, nullptr, Tensor::zeros({1, 3, 4}), Tensor::zeros({1, 2, 3, 5}), q, kv,
                            kv, 2, 0.0, false, 0);
  }, "attention dq");
  expect_error_naming([&] {
    Tensor probs, kv3 = Tensor::zeros({1, 3, 4});
    ops::attention_forward_train(&probs, q, kv3, kv3, 2, {}, 0.0, false, 0);
    Tensor dmask = Tensor::zeros({3, 3, 3});  // neither (T, S), (H, T, S) nor (B*H, T, S)
    ops::attention_backward(&dq, &dk, &dv, &dmask, Tensor::zeros({1, 3, 4}), probs, q, kv3, kv3, 2, 0.0, false, 0);
  }, "attention d_attn_mask");
  expect_error_naming([&] {
    ops::AttentionMasks m;
    m.attn_mask = Tensor::zeros({3, 3, 5});  // 3 planes for 2 heads, batch 1
    ops::attention_forward(q, kv, kv, 2, m, nullptr, 0.0, false, 0);
  }, "attn_mask must be");
  expect_error_naming([&] {
    ops::attention_forward(q, kv, kv, 2, {}, nullptr, 0.0, false, 0, std::numeric_limits<double>::quiet_NaN());
  }, "scale must be finite");

  Tensor ids = Tensor::zeros({2}, DType::i64), dt = Tensor::zeros({3, 4});
  ids.data<int64_t>()[1] = 7;
  expect_error_naming([&] { ops::embedding_backward(&dt, Tensor::zeros({2, 4}), ids); }, "embedding ids: index 7");
}

// ---------------------------------------------------------------- rotary embedding, gated (gate second)

// rotary_forward/rotary_backward over (B, T, H, D) with shared (T, R/2) and per-sequence (B, T, R/2) tables,
// against the kernel ref sequence by sequence. B·T is above the op's token grain, so the threads' token ranges
// cross sequence boundaries (where a shared table restarts at position 0). Bitwise with 1 and 2 threads.
TEST(BackwardOps, RotaryMatchesKernelRefPerSequence) {
  const int64_t B = 3, T = 1100, H = 2, D = 6, R = 4, half = R / 2, row = H * D;
  auto x = randn(B * T * row, 501), g = randn(B * T * row, 502);
  std::vector<int64_t> pos(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) pos[b * T + t] = t + 3 * b;  // per sequence: offset positions
  Tensor ids = Tensor::empty({B, T}, DType::i64);
  std::memcpy(ids.data<int64_t>(), pos.data(), pos.size() * sizeof(int64_t));
  Tensor sin_b;
  Tensor cos_b = ops::rotary_cos_sin(ids, R, 10000.0, &sin_b);
  ASSERT_EQ(cos_b.shape(), (Shape{B, T, half}));
  Tensor sin_s;
  Tensor cos_s = ops::rotary_cos_sin(ids.view({B * T}).slice(0, 0, T).contiguous(), R, 10000.0, &sin_s);  // seq 0
  Tensor X = tensor({B, T, H, D}, x), G = tensor({B, T, H, D}, g);
  for (bool shared : {true, false}) {
    const Tensor& c = shared ? cos_s : cos_b;
    const Tensor& s = shared ? sin_s : sin_b;
    std::vector<float> want_y(x.size()), want_dx(x.size());
    for (int64_t b = 0; b < B; ++b) {
      const int64_t tab = shared ? 0 : b * T * half;
      kernels::rotary_f32_ref(want_y.data() + b * T * row, row, x.data() + b * T * row, row, c.data<float>() + tab,
                              s.data<float>() + tab, T, H, D, R, false);
      kernels::rotary_f32_ref(want_dx.data() + b * T * row, row, g.data() + b * T * row, row, c.data<float>() + tab,
                              s.data<float>() + tab, T, H, D, R, true);
    }
    std::vector<float> y1, y2, dx1, dx2;
    for (int threads : {1, 2}) {
      ScopedThreads tc(threads);
      Tensor y = ops::rotary_forward(X, c, s), dx;
      ops::rotary_backward(&dx, G, c, s);
      ASSERT_EQ(y.shape(), X.shape());
      ASSERT_EQ(dx.shape(), X.shape());
      (threads == 1 ? y1 : y2) = values(y);
      (threads == 1 ? dx1 : dx2) = values(dx);
    }
    EXPECT_LE(bwdtest::max_scaled_err(y1, want_y), 1e-6) << (shared ? "shared" : "per-sequence");
    EXPECT_LE(bwdtest::max_scaled_err(dx1, want_dx), 1e-6) << (shared ? "shared" : "per-sequence");
    EXPECT_EQ(y1, y2);
    EXPECT_EQ(dx1, dx2);
  }
}

TEST(BackwardOps, RotaryAndGatedShapeErrorsNameTheArgument) {
  Tensor x = Tensor::zeros({2, 5, 3, 8}), c = Tensor::zeros({5, 4}), ids = Tensor::zeros({5}, DType::i64);
  expect_error_naming([&] { ops::rotary_forward(Tensor::zeros({5, 8}), c, c); }, "expected (..., T, heads, head_dim)");
  expect_error_naming([&] { ops::rotary_forward(x, Tensor::zeros({5, 5}), Tensor::zeros({5, 5})); },
                      "rotary_dim = 2·cos.size(-1) = 10 must be in [2, head_dim = 8]");
  expect_error_naming([&] { ops::rotary_forward(x, Tensor::zeros({4, 4}), Tensor::zeros({4, 4})); }, "cos/sin: expected");
  expect_error_naming([&] { ops::rotary_forward(x, Tensor::zeros({3, 5, 4}), Tensor::zeros({3, 5, 4})); },
                      "cos/sin: expected");
  expect_error_naming([&] { ops::rotary_forward(x, c, Tensor::zeros({5, 3})); }, "differ");
  expect_error_naming([&] { ops::rotary_cos_sin(ids, 7, 10000.0, nullptr); }, "rotary_dim must be even");
  expect_error_naming([&] { ops::rotary_cos_sin(ids, 8, 0.0, nullptr); }, "theta (rope base) must be positive");
  Tensor bad = Tensor::zeros({1}, DType::i64);
  bad.data<int64_t>()[0] = -1;
  expect_error_naming([&] { ops::rotary_cos_sin(bad, 8, 10000.0, nullptr); }, "position -1 at index 0");
  expect_error_naming([&] { ops::gated_forward(Tensor::zeros({2, 7}), Act::silu, kernels::Gate::second); },
                      "expected an even last dimension");
}

// Gate::second through the op: act(x1)·x0, its gradient against finite differences of the swapped-halves forward.
TEST(BackwardOps, GatedSecondHalfMatchesFiniteDifferences) {
  const int64_t rows = 4, F = 7;
  for (Act act : {Act::silu, Act::gelu_erf, Act::gelu_tanh}) {
    auto in = randn(rows * 2 * F, 511, 2.f), gg = randn(rows * F, 512);
    Tensor X = tensor({2, 2, 2 * F}, in);
    Tensor y = ops::gated_forward(X, act, kernels::Gate::second), din;
    ops::gated_backward(&din, tensor({2, 2, F}, gg), X, act, kernels::Gate::second);
    auto swap = [&](const DVec& v) {
      DVec s(v.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < F; ++i) {
          s[r * 2 * F + i] = v[r * 2 * F + F + i];
          s[r * 2 * F + F + i] = v[r * 2 * F + i];
        }
      return s;
    };
    const DVec yd = bwdtest::gated(swap(to_double(in)), rows, F, act);
    EXPECT_LE(rel_err(values(y), yd), 1e-6) << kernels::act_name(act);
    const DVec ggd = to_double(gg);
    DVec fd = fd_grad([&](const DVec& v) { return bwdtest::dot(ggd, bwdtest::gated(swap(v), rows, F, act)); },
                      to_double(in));
    EXPECT_LE(rel_err(values(din), fd), 1e-5) << "gated second " << kernels::act_name(act);
  }
}
