// Compiling a region of a file for an ISA beyond the baseline (the SIMD instantiations: isa_*.cpp,
// backward_*.cpp, gemm_int8.cpp), the same way under GCC (#pragma GCC target) and clang (#pragma clang attribute,
// which clang needs: it ignores GCC's target pragma; tests/fuzz builds the tree with clang). Include the standard
// headers before ENCORE_TARGET_BEGIN_* so their inline functions keep baseline code generation.
#pragma once

#if defined(__clang__)
#define ENCORE_TARGET_BEGIN_AVX512 \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma\"))), apply_to = function)")
#define ENCORE_TARGET_BEGIN_AVX512_BF16 \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma\"))), apply_to = function)")
#define ENCORE_TARGET_BEGIN_AVX2 \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
#define ENCORE_TARGET_END _Pragma("clang attribute pop")
#else
#define ENCORE_TARGET_BEGIN_AVX512 \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma\")")
#define ENCORE_TARGET_BEGIN_AVX512_BF16 \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma\")")
#define ENCORE_TARGET_BEGIN_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define ENCORE_TARGET_END _Pragma("GCC pop_options")
#endif
