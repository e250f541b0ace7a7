// Raw-pointer math kernels. Everything here works on plain buffers, row-major, last dim contiguous.
// Each kernel has a scalar *_ref twin (the definition of what it computes) and ISA variants; the
// variant used is chosen once, in dispatch.cpp, and can be forced with ENCORE_KERNELS=ref or
// ENCORE_ISA={avx512,avx2,scalar}. Kernels never spawn threads: callers split rows across threads.
#pragma once
#include <cstdint>
#include <memory>

namespace encore::kernels {

enum class Isa { scalar, avx2, avx512 };
const char* isa_name(Isa isa);

// Activation applied by a GEMM epilogue or an elementwise kernel.
enum class Act { none, relu, gelu_erf, gelu_tanh, silu, tanh };
const char* act_name(Act act);

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
  // row with no finite entry becomes all zeros (never NaN).
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
  // Gated FFN hidden: in is (rows, 2F) = [a | b]; out (rows, F) = act(a)·b.
  void (*gated_f32)(float* out, const float* in, int64_t rows, int64_t F, Act act);
  // out[i] = a[i] + b[i]; out may alias a or b.
  void (*add_f32)(float* out, const float* a, const float* b, int64_t n);
};

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
void gated_f32_ref(float* out, const float* in, int64_t rows, int64_t F, Act act);
void add_f32_ref(float* out, const float* a, const float* b, int64_t n);
float act_scalar(float x, Act act);

// ---- oneDNN-backed GEMMs (gemm.cpp) ----
void linear_f32_onednn(float* out, const float* in, const float* weight, const float* bias, int64_t M,
                       int64_t K, int64_t N, Act act);
void gemm_f32_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// ---- weights prepared once for repeated GEMMs ----
enum class Precision { f32, bf16 };
const char* precision_name(Precision p);

// out(M,N) = act(in(M,K) · weight(N,K)ᵀ + bias(N)) with the weight reordered once into oneDNN's preferred
// layout and, for bf16, rounded to bfloat16 (the input is rounded per call; accumulation and output stay f32).
// Where the CPU cannot run a bf16 GEMM, the bf16-rounded weight is kept in f32 and an f32 GEMM is used: the
// same weights, slower. Immutable after creation; forward() may run concurrently.
class PackedLinear {
 public:
  static std::shared_ptr<const PackedLinear> create(const float* weight, const float* bias, int64_t N, int64_t K,
                                                    Precision precision);
  virtual ~PackedLinear() = default;
  virtual void forward(float* out, const float* in, int64_t M, Act act) const = 0;
  int64_t N = 0, K = 0;
  Precision precision = Precision::f32;
  bool native = true;  // false: bf16 emulated with an f32 GEMM on bf16-rounded weights
};

// Round-to-nearest-even f32 -> bf16 (bit patterns), and bf16 -> f32.
void convert_f32_to_bf16(uint16_t* out, const float* in, int64_t n);
float bf16_round(float x);  // x rounded to the nearest bfloat16, returned as f32

// ---- kernels with a single implementation (memory-bound copies), ref-checked in tests ----
// out(n, C) = table[ids[i]] rows; ids must be in [0, vocab) (checked by the op, not here).
void embedding_lookup_f32(float* out, const float* table, const int64_t* ids, int64_t n, int64_t C);
void embedding_lookup_f32_ref(float* out, const float* table, const int64_t* ids, int64_t n, int64_t C);
// pe(pos, 2i) = sin(pos / 10000^(2i/C)), pe(pos, 2i+1) = cos(pos / 10000^(2i/C)), positions [start, start+T).
void sinusoidal_positions_f32(float* out, int64_t start, int64_t T, int64_t C);
// out = in·keep/(1-p) with keep ~ Bernoulli(1-p) from a counter-based RNG: keep[i] depends only on
// (seed, offset+i), so the result is independent of how rows are split across threads. mask may be null.
void dropout_f32(float* out, uint8_t* mask, const float* in, int64_t n, float p, uint64_t seed, uint64_t offset);

}  // namespace encore::kernels
