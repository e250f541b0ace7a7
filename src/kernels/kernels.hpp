// Raw-pointer math kernels. Everything here works on plain buffers, row-major, last dim contiguous.
// Each kernel has a scalar *_ref twin (the definition of what it computes) and ISA variants; the
// variant used is chosen once, in dispatch.cpp, and can be forced with ENCORE_KERNELS=ref or
// ENCORE_ISA={avx512,avx2,scalar}. Kernels never spawn threads: callers split rows across threads.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "encore/error.hpp"

namespace encore::kernels {

enum class Isa { scalar, avx2, avx512 };
const char* isa_name(Isa isa);

// Activation applied by a GEMM epilogue or an elementwise kernel.
enum class Act { none, relu, gelu_erf, gelu_tanh, silu, tanh };
const char* act_name(Act act);

// Which half of a gated FFN's [x0 | x1] goes through the activation: first = act(x0)·x1 (ModernBERT's Wi,
// Jina's gated_layers, a Qwen3/T5 [gate_proj | up_proj] stack), second = act(x1)·x0 (GTE's up_gate_proj).
enum class Gate { first, second };

struct AttentionBlock;  // below

struct KernelTable {
  const char* name;  // "ref", "avx2", "avx512"

  // out(M,N) = in(M,K) · weight(N,K)ᵀ + bias(N) (bias may be null), then act. Weight as PyTorch stores it.
  void (*linear_f32)(float* out, const float* in, const float* weight, const float* bias, int64_t M,
                     int64_t K, int64_t N, Act act);
  // Row-major C(M,N) = alpha·op(A)·op(B) + beta·C with leading dimensions; op = transpose when trans_* is true.
  // Single-threaded when called from inside a parallel region.
  void (*gemm_f32)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

  // In place over one row x[0, cols): y = x·scale + mask_a + mask_b on [0, limit) (masks may be null),
  // then softmax over [0, limit); positions [limit, cols) become 0. -inf entries get probability 0 and a
  // row whose entries are all -inf becomes all zeros (never NaN); a NaN entry makes the row NaN (it is no mask).
  void (*softmax_masked_f32)(float* x, int64_t cols, float scale, const float* mask_a, const float* mask_b,
                             int64_t limit);

  // mean = sum(x)/C ; rstd = 1/sqrt(sum((x-mean)^2)/C + eps) ; out = (x-mean)·rstd·weight + bias
  // weight/bias may be null (no affine); mean/rstd may be null (inference).
  void (*layernorm_forward_f32)(float* out, float* mean, float* rstd, const float* in, const float* weight,
                                const float* bias, int64_t rows, int64_t C, float eps);
  // rstd = 1/sqrt(sum(x^2)/C + eps) ; out = x·rstd·weight
  void (*rmsnorm_forward_f32)(float* out, float* rstd, const float* in, const float* weight, int64_t rows,
                              int64_t C, float eps);

  // out[i] = act(in[i]); out may alias in.
  void (*activation_f32)(float* out, const float* in, int64_t n, Act act);
  // Gated FFN hidden: in is (rows, 2F) = [x0 | x1]; out (rows, F) = act(a)·b with (a, b) = (x0, x1) for
  // Gate::first, (x1, x0) for Gate::second.
  void (*gated_f32)(float* out, const float* in, int64_t rows, int64_t F, Act act, Gate gate);
  // out[i] = a[i] + b[i]; out may alias a or b.
  void (*add_f32)(float* out, const float* a, const float* b, int64_t n);
  // Fused attention over one (sequence, head) block, see AttentionBlock; scratch holds
  // attention_fused_scratch_floats(T, Dk, false) floats (attention_fused_bf16 below: ..., true).
  void (*attention_fused_f32)(const AttentionBlock& a, float* scratch);
  // The same with bf16 matmuls (see attention_fused_bf16_ref for what is rounded where): AVX512-BF16 vdpbf16ps
  // where the CPU has it; elsewhere this entry is the table's attention_fused_f32 (exact fp32, no rounding), except
  // in the ref/scalar tables, whose entry is the rounding reference itself.
  void (*attention_fused_bf16)(const AttentionBlock& a, float* scratch);
  // Residual + LayerNorm, row by row while the row is in L1: s = a + b (written to sum when non-null, else
  // held in out), then out = layernorm(s) exactly as layernorm_forward_f32 computes it, so the result is bit for
  // bit add_f32 followed by layernorm_forward_f32. out and sum may each alias a or b, not each other.
  void (*add_layernorm_f32)(float* out, float* sum, const float* a, const float* b, const float* weight,
                            const float* bias, int64_t rows, int64_t C, float eps);
  // Round to nearest even, f32 -> bf16 bit patterns; NaN stays NaN (see convert_f32_to_bf16_ref).
  void (*convert_f32_to_bf16)(uint16_t* out, const float* in, int64_t n);
  // Rotary position embedding, Hugging Face's half-split ("rotate_half", NeoX) convention, on `tokens` rows of
  // `heads` heads of head_dim floats (token t, head h at in + t·ld + h·head_dim; ld >= heads·head_dim, so views
  // into a packed QKV buffer work). The first rotary_dim (even, <= head_dim) dims of each head rotate, the rest
  // pass through; cos/sin are (tokens, R/2) with R = rotary_dim, c = cos[t][i], s = sin[t][i], i < R/2:
  //   out[i] = x[i]·c - x[i + R/2]·s ;  out[i + R/2] = x[i + R/2]·c + x[i]·s     (x·cos + rotate_half(x)·sin)
  // inverse applies the transposed rotation (s -> -s), which is the backward: dx = R(θ)ᵀ·dout. out rows are
  // ld_out apart; out may alias in (same ld).
  void (*rotary_f32)(float* out, int64_t ld_out, const float* in, int64_t ld, const float* cos, const float* sin,
                     int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, bool inverse);
};

// One (sequence, head) of scaled dot-product attention, computed without a T x S score matrix:
//   p[i, :] = softmax_j(scale·(q[i,:]·k[j,:]) + bias[i,j] + key_mask[j])   over the keys j in [0, S)
//   out[i, :] = sum_j p[i, j]·v[j, :]
// with, when causal, key j excluded for query i if j > q_start + i (query i is query q_start + i of the
// sequence). A query whose scores are all -inf gets out = 0 (never NaN), as softmax_masked does; a NaN score (NaN
// in q, k, bias or key_mask) makes its query's out NaN, as in PyTorch's eager attention. Rows of q, k, v,
// out and bias are ld_* floats apart (views into a packed (T, 3E) QKV buffer work as they are); bias and
// key_mask may be null. The fast kernels tile keys (kAttentionKeyTile) and queries (kAttentionQueryTile) and keep
// a running max and sum per query (online softmax, the accumulator - out itself - rescaled when the max grows).
struct AttentionBlock {
  float* out = nullptr;
  int64_t ld_out = 0;
  const float* q = nullptr;
  int64_t ld_q = 0;
  const float* k = nullptr;
  int64_t ld_k = 0;
  const float* v = nullptr;
  int64_t ld_v = 0;
  int64_t T = 0, S = 0, Dk = 0, Dv = 0;
  float scale = 1.f;
  const float* bias = nullptr;  // (T, S) additive, rows ld_bias apart
  int64_t ld_bias = 0;
  const float* key_mask = nullptr;  // (S) additive
  bool causal = false;
  int64_t q_start = 0;
};
constexpr int64_t kAttentionQueryTile = 32;
constexpr int64_t kAttentionKeyTile = 128;
// Scratch of one fused call, D = max(Dk, Dv): what attention_fused_f32 uses, or with bf16_matmuls what
// attention_fused_bf16 and its twin use (the fp32 layout followed by the bf16 tiles), so an fp32 call does not carry
// the bf16 kernel's buffers.
int64_t attention_fused_scratch_floats(int64_t T, int64_t D, bool bf16_matmuls);
void attention_fused_f32_ref(const AttentionBlock& a, float* scratch);
// Starts loading, into L2, the q rows and the k and v rows (up to the causal limit) a fused call on `a` will read:
// the rows of a (T, 3E) QKV buffer are kilobytes apart, and a block read straight from memory ran at about half
// its cached rate. The op issues it for the next task before running the current one. Reads nothing itself; the
// k and v rows are the first key tile's (kAttentionKeyTile rows), so the prefetched bytes are bounded whatever S.
void attention_prefetch_block(const AttentionBlock& a);
// bf16-matmul attention (the bf16 and int8 dtypes' attention, ops::AttentionPrecisionScope), one query at a time
// over the key tiles [j0, j0 + kAttentionKeyTile) the fast kernel visits, rounding exactly where it does:
//   y_j = scale·sum_d bf16(q[i,d])·bf16(k[j,d]) + bias[i,j] + key_mask[j]      (products exact, fp32 sum)
//   per tile: m' = max(m, max_j y_j) ; p_j = exp(y_j - m') (fp32) ; l = l·exp(m - m') + sum_j p_j (fp32)
//             acc = acc·exp(m - m') + sum_j bf16(p_j)·bf16(v[j,:])              (products exact, fp32 sum)
//   out = acc / l
// bf16() is round_bf16_daz_ref. Softmax, masks and the normalisation stay fp32; only the four matmul operands
// are rounded (relative error <= 2^-9 each). A fast kernel may differ from this by fp32 summation order, which
// can flip the rounding of a p_j: tests/cpp/test_attention_fused.cpp states the tolerance.
void attention_fused_bf16_ref(const AttentionBlock& a, float* scratch);
// f32 -> bf16 bits as vcvtneps2bf16 rounds: nearest even, zero and denormal inputs to ±0, NaN quiet.
uint16_t round_bf16_daz_ref(float x);
bool cpu_has_avx512_bf16();  // AVX512-BF16 (vdpbf16ps, vcvtneps2bf16)

const KernelTable& kernels();      // the active table (decided once, logged with ENCORE_VERBOSE=1)
const KernelTable& kernels_ref();  // scalar reference twins
const KernelTable* kernels_for(Isa isa);  // a specific ISA's table, or null if this CPU lacks it
Isa detected_isa();                 // best ISA this CPU supports

// ---- scalar references (also the 'ref' table's entries) ----
void linear_f32_ref(float* out, const float* in, const float* weight, const float* bias, int64_t M, int64_t K,
                    int64_t N, Act act);
void gemm_f32_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void softmax_masked_f32_ref(float* x, int64_t cols, float scale, const float* mask_a, const float* mask_b,
                            int64_t limit);
void layernorm_forward_f32_ref(float* out, float* mean, float* rstd, const float* in, const float* weight,
                               const float* bias, int64_t rows, int64_t C, float eps);
void rmsnorm_forward_f32_ref(float* out, float* rstd, const float* in, const float* weight, int64_t rows,
                             int64_t C, float eps);
void activation_f32_ref(float* out, const float* in, int64_t n, Act act);
void gated_f32_ref(float* out, const float* in, int64_t rows, int64_t F, Act act, Gate gate);
void rotary_f32_ref(float* out, int64_t ld_out, const float* in, int64_t ld, const float* cos, const float* sin,
                    int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, bool inverse);
void add_f32_ref(float* out, const float* a, const float* b, int64_t n);
void add_layernorm_f32_ref(float* out, float* sum, const float* a, const float* b, const float* weight,
                           const float* bias, int64_t rows, int64_t C, float eps);
// bits(x) rounded half to even to the upper 16 bits; inf stays inf; a NaN keeps its sign and upper payload and,
// when that payload is empty, gets the quiet bit so it stays a NaN.
void convert_f32_to_bf16_ref(uint16_t* out, const float* in, int64_t n);
float act_scalar(float x, Act act);

// ---- oneDNN-backed GEMMs (gemm.cpp) ----
void linear_f32_onednn(float* out, const float* in, const float* weight, const float* bias, int64_t M,
                       int64_t K, int64_t N, Act act);
void gemm_f32_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// ---- weights prepared once for repeated GEMMs ----
enum class Precision { f32, bf16, int8 };
const char* precision_name(Precision p);

// out(M,N) = act(in(M,K) · weight(N,K)ᵀ + bias(N)) with the weight reordered once into oneDNN's preferred
// layout and, for bf16, rounded to bfloat16 (the input is rounded per call; accumulation and output stay f32).
// Where the CPU cannot run a bf16 GEMM, the bf16-rounded weight is kept in f32 and an f32 GEMM is used: the
// same weights, slower. int8 quantizes the weight once and the input per call (see below: create_int8_linear).
// forward() may run concurrently; the numbers a call gives depend only on its input (not on earlier calls).
//
// When the weight is packed (create's `plain` argument; this is the one place that decides):
// - f32 with plain.keep set ("lazy"): nothing is done at creation but copying the bias. The first forward() of
//   at most kRowChunk rows (onednn.hpp) runs on the plain (N, K) weight where it lies (a oneDNN matmul reading it as the
//   transposed (K, N), no copy kept); the packed copy is made once, thread-safely, by the first call after that,
//   or by the first call itself if it has more rows (each row block would copy the plain weight again). One call
//   on the plain weight costs a few µs more than on the packed one and the packing costs more than that, so a
//   process that embeds once (`encore embed "hello"`) never packs, and one that serves packs on its second call.
//   The two paths give bit-identical results where oneDNN runs its brgemm matmul (AVX-512 cores): it copies a
//   plain weight into the same blocked layout per call (tests/cpp/test_kernels.cpp, LazyPackedLinear*). Its
//   other f32 matmul (gemm:jit, on AVX2 CPUs) sums in another order on the plain layout than on the packed one,
//   so there the lazy path is off and weights are packed at creation (lazy_f32_packing_is_exact, once per
//   process): a call's numbers never depend on whether it was the first. plain.keep holds the weight's memory until
//   the packed copy exists; the weight must not change meanwhile (layers drop their prepared state before their
//   weights change: Module::drop_prepared). plain.after_pack, if set, runs once after the packing (Linear gives
//   a checkpoint's pages back to the OS there) and then keep is released.
// - otherwise (no plain.keep, bf16, int8): packed at creation (then plain.after_pack runs, if set); `weight` may
//   go as soon as create() returns.
// ENCORE_PACK=eager packs every weight at creation (the lazy path off: to compare the two).
// True where the lazy f32 path gives the packed path's bits (oneDNN's f32 matmul is brgemm on this CPU); decided
// once per process from the implementation oneDNN picks for a packed-weight f32 matmul.
bool lazy_f32_packing_is_exact();
// Whether f32 weights given with plain.keep are packed lazily in this process: lazy_f32_packing_is_exact() and
// ENCORE_PACK is not "eager".
bool f32_packing_is_lazy();
// oneDNN's gemm:jit, the f32 matmul of CPUs without AVX-512 (and the int8 one of some), generates its kernels
// for every shape once per process, at the first GEMM of a data type: 20-30 ms for f32 on a 2-vCPU AVX2 VM (a
// 3-token all-MiniLM-L6-v2 forward took ~30 ms instead of ~5 ms the first time). brgemm makes its kernels per
// primitive, when the primitive is created. gemm_kernels_need_warm_up tells whether Linears of `precision`
// (int8 models keep some f32 GEMMs too) would run such process-wide kernels not yet made by a warm-up;
// warm_up_gemm_kernels makes them with a few small GEMMs on the calling thread alone (oneDNN makes them once,
// whichever thread comes first; other oneDNN calls may run meanwhile). Model loading runs it on a second
// thread (models/model.cpp, load_model).
bool gemm_kernels_need_warm_up(Precision precision);
void warm_up_gemm_kernels(Precision precision);
struct Int8StaticInput;  // below (static int8)

class PackedLinear {
 public:
  struct PlainWeight {
    std::shared_ptr<const void> keep;  // keeps `weight` alive while the lazy f32 path may read it
    std::function<void()> after_pack;  // optional; run once, after the packed copy is made (whenever that is)
  };
  static std::shared_ptr<const PackedLinear> create(const float* weight, const float* bias, int64_t N, int64_t K,
                                                    Precision precision, PlainWeight plain = {});
  virtual ~PackedLinear() = default;
  virtual void forward(float* out, const float* in, int64_t M, Act act) const = 0;
  // The packed weight's row stride in elements where it is the plain row-major (K, N) oneDNN's gemm:jit matmul
  // reads (padded: padded_packing_layout in onednn.hpp); 0 for a blocked layout, or before a lazy f32 weight is
  // packed. For tests.
  virtual int64_t packed_row_stride() const { return 0; }
  // out(M, next.N) = next(act(in·Wᵀ + b)) for a `next` Linear (next.K == N) without activation, as forward() then
  // next.forward() compute it, but without the (M, N) f32 intermediate in memory: for int8 Linears each row goes
  // from this one's epilogue straight into next's quantization. Only where chains_with(next) (else it throws).
  virtual bool chains_with(const PackedLinear& next) const {
    (void)next;
    return false;
  }
  virtual void forward_chain(float* out, const float* in, int64_t M, Act act, const PackedLinear& next) const;
  // int8 only: the same Linear (sharing its prepared weights) with a fixed input range instead of per-call
  // quantization (Int8StaticInput). Other precisions throw.
  virtual std::shared_ptr<const PackedLinear> with_static_int8_input(const Int8StaticInput& input) const;
  bool static_int8 = false;  // int8 with a static input range
  int64_t N = 0, K = 0;
  Precision precision = Precision::f32;
  bool native = true;  // false: bf16/int8 emulated with an f32 GEMM on bf16-rounded/dequantized weights
  int activation_bits = 0;  // int8: 8, or 7 where u8 x s8 products could saturate (no VNNI); else 0
};

// ---- int8 dynamic quantization (gemm_int8.cpp; scheme and error bounds in docs/quantization.md) ----
// Precision::int8 PackedLinear: weights s8, symmetric per output channel, quantized once; activations u8,
// asymmetric per row (token), quantized per call; int32 accumulation by oneDNN (u8 x s8 -> s32); then
//   out[m,n] = act((acc[m,n] - zp[m]·wsum[n]) · a_scale[m]·w_scale[n] + bias[n]),  wsum[n] = sum_k wq[n,k],
// plus, for a row's few outlier values (kept exact, see quantize_rows_u8_ref), their product with the int8 weights.
// Without VNNI, oneDNN's u8 x s8 products go through vpmaddubsw, whose int16 pair sums saturate: activations
// then use 7 bits (q <= 127, so 2·127·127 < 32767). Where oneDNN has no int8 GEMM, the same numbers are
// emulated in f32 (fake-quantized activations, dequantized weights), logged with ENCORE_VERBOSE=1.

// Weights, symmetric per output channel: scale[n] = h(max_k |w[n,k]| / 127) with h(s) = (127·s)/127 in f32
// (h makes the scale a fixed point, so quantizing dequantize(q, scale) returns q and scale bit for bit); an
// all-zero row has scale 1. q[n,k] = round_half_even(w[n,k] / scale[n]) in [-127, 127]. Throws
// NonFiniteWeightError on non-finite weights.
void quantize_weights_s8(int8_t* q, float* scale, const float* w, int64_t N, int64_t K);
// w[n,k] = q[n,k]·scale[n]
void dequantize_weights_s8(float* w, const int8_t* q, const float* scale, int64_t N, int64_t K);

// What int8 quantization throws for a weight holding NaN or Inf: the first such row of the (N, K) matrix it was
// given ("int8 quantization: weight row 5 has a non-finite value"). A plain Error to callers; load_model catches
// this class to name the checkpoint tensor instead (the matrix may be several stacked: Q, K and V).
class NonFiniteWeightError : public Error {
 public:
  explicit NonFiniteWeightError(int64_t row);
  int64_t row;
};

// The int8 form of a Linear weight (N, K). Input columns whose max |w| exceeds kInt8OutlierColumnRatio x the
// median column max stay f32 (at most kInt8MaxOutlierColumns, the largest): the FFN output projections of
// BERT-family models have one or two columns 20-50x the others, which would otherwise set every row's scale
// (all-MiniLM-L6-v2 weight-only error: min cosine 0.9976 -> 0.9994). Their q is 0.
constexpr int kInt8MaxOutlierColumns = 16;
constexpr float kInt8OutlierColumnRatio = 16.f;
struct Int8Weights {
  int64_t N = 0, K = 0;
  std::vector<int8_t> q;             // (N, K), 0 in the outlier columns
  std::vector<float> scale;          // (N)
  std::vector<int64_t> columns;      // outlier columns, ascending
  std::vector<float> column_values;  // (N, columns.size()): w[n, columns[i]]
  bool operator==(const Int8Weights&) const = default;
};
Int8Weights quantize_linear_int8(const float* w, int64_t N, int64_t K);
// The indices k with colmax[k] > ratio·median (the lower median, rank (K-1)/2), the max_count largest, ascending:
// the weight's f32 columns and static int8's f32 input channels.
std::vector<int64_t> columns_above_median(const std::vector<float>& colmax, float ratio, int max_count);
void dequantize_linear_int8(float* w, const Int8Weights& qw);  // the (N, K) f32 weight qw stands for
// quantize_linear_int8(dequantize_linear_int8(qw)) == qw: what a quantized checkpoint needs to run exactly
// like on-the-fly quantization. It fails only when a column max lies within rounding of the outlier-column
// threshold; `encore quantize` then keeps that weight in f32.
bool int8_round_trip_exact(const Int8Weights& qw);

// Activations, asymmetric per row (token), with the row's outliers taken out. amax = max|x|; when between 1 and
// kInt8MaxOutliers elements have |x| > amax/kInt8OutlierRatio, those are the row's outliers: their exact values
// go to `outliers` (their q is the zero point, i.e. they quantize to 0) and the linear adds their contribution
// from the weights' int8 columns in f32 (int8_epilogue_outliers_f32_ref). This is what keeps a token like BERT's
// [CLS], whose hidden state has one channel ~20x the others, from spending the 8 bits on a single value.
// The remaining (body) values give [lo, hi] = [min(0, min x), max(0, max x)] and, with qmax = 255 (or 127):
// scale = (hi - lo)/qmax (1 for an all-zero row), zp = clamp(round(-lo/scale), 0, qmax),
// q[k] = clamp(round_half_even(x[k]·(1/scale)) + zp, 0, qmax). A row with a non-finite value gets scale NaN
// (its outputs become NaN, as in f32), q = 0 and no outliers. x rows are ld_x apart, q rows K apart.
constexpr int kInt8MaxOutliers = 8;
constexpr float kInt8OutlierRatio = 4.f;
struct Int8RowOutliers {
  int32_t count = 0;
  int32_t index[kInt8MaxOutliers];
  float value[kInt8MaxOutliers];
};
void quantize_rows_u8_ref(uint8_t* q, float* scale, int32_t* zp, Int8RowOutliers* outliers, const float* x,
                          int64_t rows, int64_t K, int64_t ld_x, int qmax);
// Static int8 (docs/quantization.md, "Static int8"): the input range [lo, hi] (lo <= 0 <= hi, finite) of a Linear
// measured once on a calibration corpus. Every row is quantized with the same parameters - scale = (hi - lo)/qmax,
// zp = clamp(round(-lo/scale), 0, qmax), as row_quant_params gives for that range - so there is no range scan and
// no outlier search per call; values beyond [lo, hi] saturate to 0 or qmax. `columns` (ascending, < K): input
// channels whose calibration range was far beyond the others; they are computed in f32 (their q is the zero
// point, and x[:, columns]·w[:, columns]ᵀ is added after the GEMM, as for the weight's f32 columns).
struct Int8StaticInput {
  float lo = 0.f, hi = 0.f;
  std::vector<int64_t> columns;
};
// q[r,k] = clamp(round_half_even(clamp(x[r,k]·inv, ±1e6)) + zp, 0, qmax) (NaN -> 0), and scale[r] = a_scale, or NaN for
// a row holding a NaN/inf (its outputs become NaN, as in f32 and the dynamic path). inv = 1/a_scale.
void quantize_rows_u8_static_ref(uint8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ld_x,
                                 float a_scale, float inv, int32_t zp, int qmax);
// out[m,n] = act((acc[m,n] - zp[m]·wsum[n]) · (a_scale[m]·w_scale[n]) + bias[n]); bias may be null.
void int8_epilogue_f32_ref(float* out, const int32_t* acc, const float* a_scale, const int32_t* zp,
                           const float* w_scale, const int32_t* wsum, const float* bias, int64_t rows, int64_t N,
                           Act act);
// One row with outliers, in one pass: the epilogue plus their contribution through the int8 weight columns,
// out[n] = act((acc[n] - zp·wsum[n])·(a_scale·w_scale[n]) + bias[n] + w_scale[n]·sum_i value[i]·wq_t[index[i], n])
// (wq_t: the int8 weights transposed, (K, N); the sum in i order).
void int8_epilogue_outliers_f32_ref(float* out, const int32_t* acc, float a_scale, int32_t zp, const float* w_scale,
                                    const int32_t* wsum, const float* bias, const Int8RowOutliers& outliers,
                                    const int8_t* wq_t, int64_t N, Act act);
// acc(M,N) = a(M,K) · w(N,K)ᵀ in exact int32 (the definition oneDNN's u8 x s8 -> s32 matmul must meet).
void gemm_u8s8s32_ref(int32_t* acc, const uint8_t* a, const int8_t* w, int64_t M, int64_t K, int64_t N);

struct Int8KernelTable {
  const char* name;  // "ref", "avx2", "avx512"
  void (*quantize_rows_u8)(uint8_t* q, float* scale, int32_t* zp, Int8RowOutliers* outliers, const float* x,
                           int64_t rows, int64_t K, int64_t ld_x, int qmax);
  void (*int8_epilogue_f32)(float* out, const int32_t* acc, const float* a_scale, const int32_t* zp,
                            const float* w_scale, const int32_t* wsum, const float* bias, int64_t rows, int64_t N,
                            Act act);
  void (*int8_epilogue_outliers_f32)(float* out, const int32_t* acc, float a_scale, int32_t zp,
                                     const float* w_scale, const int32_t* wsum, const float* bias,
                                     const Int8RowOutliers& outliers, const int8_t* wq_t, int64_t N, Act act);
  void (*quantize_rows_u8_static)(uint8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ld_x,
                                  float a_scale, float inv, int32_t zp, int qmax);
};
const Int8KernelTable& int8_kernels();              // follows kernels(): same ISA, "ref" with ENCORE_KERNELS=ref
const Int8KernelTable* int8_kernels_for(Isa isa);   // null if this CPU lacks the ISA
const Int8KernelTable& int8_kernels_ref();

// How an int8 PackedLinear computes: automatic picks native8 with VNNI (or AMX), native7 on other CPUs where
// oneDNN has an int8 GEMM, emulated elsewhere. Forcing a path is for tests (native7 is correct everywhere).
enum class Int8Path { automatic, native8, native7, emulated };
std::shared_ptr<const PackedLinear> create_int8_linear(const float* weight, const float* bias, int64_t N, int64_t K,
                                                       Int8Path path = Int8Path::automatic);
// The quantization parameters a static range gives (scale, 1/scale, zero point): row_quant_params(lo, hi).
struct Int8StaticParams {
  float scale, inv;
  int32_t zp;
};
Int8StaticParams int8_static_params(float lo, float hi, int qmax);
Int8Path int8_path_for_this_cpu();  // what automatic resolves to (oneDNN's effective ISA, DNNL_MAX_CPU_ISA included)
const char* int8_path_name(Int8Path p);

float bf16_round(float x);  // x rounded to the nearest bfloat16 (convert_f32_to_bf16_ref), returned as f32

// ---- kernels with a single implementation (memory-bound copies), ref-checked in tests ----
// out(n, C) = table[ids[i]] rows; ids must be in [0, vocab) (checked by the op, not here).
void embedding_lookup_f32(float* out, const float* table, const int64_t* ids, int64_t n, int64_t C);
void embedding_lookup_f32_ref(float* out, const float* table, const int64_t* ids, int64_t n, int64_t C);
// pe(pos, 2i) = sin(pos / 10000^(2i/C)), pe(pos, 2i+1) = cos(pos / 10000^(2i/C)), positions [start, start+T).
void sinusoidal_positions_f32(float* out, int64_t start, int64_t T, int64_t C);
// Hugging Face's RotaryEmbedding tables for n positions, in its float32 steps (so angles at long positions
// round as they do there): e_i = f32(2i)/f32(R) ; inv_freq_i = 1/f32(theta^e_i) ; angle = f32(pos·inv_freq_i) ;
// cos[p][i] = cos(angle), sin[p][i] = sin(angle), i < R/2 (HF's cos is cat(cos, cos) over the R dims).
void rotary_cos_sin_f32(float* cos, float* sin, const int64_t* positions, int64_t n, int64_t rotary_dim,
                        double theta);
// T5's relative-position buckets (transformers' T5Attention._relative_position_bucket; MPNet uses the same):
// rel = key position - query position. Bidirectional: buckets [nb/2, nb) are for rel > 0 and |rel| is bucketed
// into the other nb/2; unidirectional (a decoder): rel > 0 is bucket 0 and -rel is bucketed into nb. Of those n
// buckets, |rel| < n/2 gets its own; beyond, max_exact + trunc(f32(log(f32(|rel|)/max_exact)) / f32(log(max_distance/
// max_exact)) · (n - max_exact)), at most n - 1 (float32 steps, as torch computes them).
int64_t relative_position_bucket(int64_t rel, bool bidirectional, int64_t num_buckets, int64_t max_distance);
// Relative position bias (H, T, S) from a table (num_buckets, H) (T5's relative_attention_bias.weight):
//   bias[h, i, j] = table[bucket(j - i), h]
// The fast version buckets each of the T + S - 1 distances once and copies rows out of a per-head diagonal vector.
void relative_position_bias_f32(float* bias, const float* table, int64_t H, int64_t T, int64_t S, int64_t num_buckets,
                                int64_t max_distance, bool bidirectional);
void relative_position_bias_f32_ref(float* bias, const float* table, int64_t H, int64_t T, int64_t S,
                                    int64_t num_buckets, int64_t max_distance, bool bidirectional);
// Its backward: dtable[bucket(j - i), h] += Σ_{i,j} dbias[h, i, j], summed in double. The fast version sums each
// diagonal first (in i order), then the diagonals into their buckets in distance order; the reference adds element
// by element.
void relative_position_bias_backward_f32(float* dtable, const float* dbias, int64_t H, int64_t T, int64_t S,
                                         int64_t num_buckets, int64_t max_distance, bool bidirectional);
void relative_position_bias_backward_f32_ref(float* dtable, const float* dbias, int64_t H, int64_t T, int64_t S,
                                             int64_t num_buckets, int64_t max_distance, bool bidirectional);
// out = in·keep/(1-p) with keep ~ Bernoulli(1-p) from a counter-based RNG: keep[i] depends only on
// (seed, offset+i), so the result is independent of how rows are split across threads. mask may be null.
void dropout_f32(float* out, uint8_t* mask, const float* in, int64_t n, float p, uint64_t seed, uint64_t offset);

}  // namespace encore::kernels
