// The avx512 instantiation of the backward kernel bodies (simd/backward.inl), built like isa_avx512.cpp:
// standard headers before the target pragma, the SIMD code in its own namespace (bwd_avx512), called only
// when dispatch.cpp chose avx512 for this CPU.
// GCC 12 warns spuriously inside its own AVX-512 intrinsic headers (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/backward.hpp"
#include "kernels/isa_target.hpp"

ENCORE_TARGET_BEGIN_AVX512
// The scalar tails stay scalar: GCC would otherwise vectorize some of them in versions chosen at run time by the
// buffers' addresses and overlap (dinp == dout is allowed), and a vectorized and a scalar version may round
// differently, so one input could give two results. The SIMD loops are written with intrinsics either way.
#if !defined(__clang__)
#pragma GCC optimize("no-tree-vectorize")
#endif

namespace encore::kernels::bwd_avx512 {
#include "kernels/simd/vec_avx512.inl"
#include "kernels/simd/math.inl"
#include "kernels/simd/backward_vec_avx512.inl"
#include "kernels/simd/backward.inl"
}  // namespace encore::kernels::bwd_avx512

ENCORE_TARGET_END

namespace encore::kernels {
BackwardKernelTable make_backward_avx512_table() {
  BackwardKernelTable t{};
  t.name = "avx512";
  t.activation_backward_f32 = bwd_avx512::activation_backward_f32;
  t.gated_backward_f32 = bwd_avx512::gated_backward_f32;
  t.layernorm_backward_f32 = bwd_avx512::layernorm_backward_f32;
  t.rmsnorm_backward_f32 = bwd_avx512::rmsnorm_backward_f32;
  t.softmax_backward_f32 = bwd_avx512::softmax_backward_f32;
  t.bias_backward_f32 = bwd_avx512::bias_backward_f32;
  return t;
}
}  // namespace encore::kernels
