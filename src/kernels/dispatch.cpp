// The one ISA dispatch point: the kernel table is chosen once, from the CPU and two environment variables,
// and printed when ENCORE_VERBOSE=1.
//   ENCORE_KERNELS=ref            every kernel, GEMMs included, uses its scalar reference twin
//   ENCORE_ISA=avx512|avx2|scalar caps the ISA of encore's own kernels (GEMMs stay on oneDNN)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "oneapi/dnnl/dnnl.hpp"

#include "encore/error.hpp"
#include "kernels/kernels.hpp"

namespace encore::kernels {

KernelTable make_avx512_table();
KernelTable make_avx2_table();

namespace {

KernelTable make_ref_table(const char* name, bool onednn_gemm) {
  KernelTable t{};
  t.name = name;
  t.linear_f32 = onednn_gemm ? linear_f32_onednn : linear_f32_ref;
  t.gemm_f32 = onednn_gemm ? gemm_f32_onednn : gemm_f32_ref;
  t.softmax_masked_f32 = softmax_masked_f32_ref;
  t.layernorm_forward_f32 = layernorm_forward_f32_ref;
  t.rmsnorm_forward_f32 = rmsnorm_forward_f32_ref;
  t.activation_f32 = activation_f32_ref;
  t.gated_f32 = gated_f32_ref;
  t.add_f32 = add_f32_ref;
  t.attention_fused_f32 = attention_fused_f32_ref;
  t.attention_fused_bf16 = attention_fused_bf16_ref;
  t.add_layernorm_f32 = add_layernorm_f32_ref;
  t.convert_f32_to_bf16 = convert_f32_to_bf16_ref;
  t.rotary_f32 = rotary_f32_ref;
  return t;
}

const KernelTable& table_ref() {
  static const KernelTable t = make_ref_table("ref", false);
  return t;
}
const KernelTable& table_scalar() {
  static const KernelTable t = make_ref_table("scalar", true);
  return t;
}
const KernelTable& table_avx2() {
  static const KernelTable t = make_avx2_table();
  return t;
}
const KernelTable& table_avx512() {
  static const KernelTable t = make_avx512_table();
  return t;
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

const KernelTable& choose() {
  const char* isa_env = std::getenv("ENCORE_ISA");
  Isa best = detected_isa();
  Isa isa = best;
  if (isa_env && *isa_env) {
    std::string s(isa_env);
    Isa want = s == "avx512" ? Isa::avx512 : s == "avx2" ? Isa::avx2 : s == "scalar" ? Isa::scalar : best;
    ENCORE_CHECK(s == "avx512" || s == "avx2" || s == "scalar",
                 "ENCORE_ISA must be one of avx512, avx2, scalar; got '", s, "'");
    // A request above what the CPU has is capped, never obeyed into an illegal instruction.
    isa = static_cast<int>(want) <= static_cast<int>(best) ? want : best;
  }
  const KernelTable* t = env_is("ENCORE_KERNELS", "ref") ? &table_ref()
                         : isa == Isa::avx512            ? &table_avx512()
                         : isa == Isa::avx2              ? &table_avx2()
                                                         : &table_scalar();
  if (env_is("ENCORE_VERBOSE", "1")) {
    const dnnl_version_t* v = dnnl_version();
    std::fprintf(stderr, "encore: cpu isa %s, kernels %s, GEMM %s (oneDNN %d.%d.%d, cpu isa %d)\n",
                 isa_name(best), t->name, t == &table_ref() ? "scalar reference" : "oneDNN", v->major, v->minor,
                 v->patch, static_cast<int>(dnnl_get_effective_cpu_isa()));
    std::fprintf(stderr,
                 "encore: attention: fused %s kernel (online softmax, %lld-query x %lld-key tiles, no T x T buffer) "
                 "unless weights are requested or ENCORE_ATTENTION=unfused\n",
                 t == &table_ref() || t == &table_scalar() ? "scalar reference" : t->name,
                 static_cast<long long>(kAttentionQueryTile), static_cast<long long>(kAttentionKeyTile));
    std::fprintf(stderr, "encore: attention of bf16/int8 models: %s\n",
                 t->attention_fused_bf16 == t->attention_fused_f32 ? "fp32 (this kernel table has no bf16 dot product)"
                 : t == &table_ref() || t == &table_scalar()       ? "bf16 matmuls, scalar reference"
                                                                    : "bf16 matmuls (avx512-bf16 vdpbf16ps)");
  }
  return *t;
}

}  // namespace

Isa detected_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
  return Isa::scalar;
}

bool cpu_has_avx512_bf16() {
  return detected_isa() == Isa::avx512 && __builtin_cpu_supports("avx512bf16");
}

const KernelTable& kernels() {
  static const KernelTable& t = choose();
  return t;
}

const KernelTable& kernels_ref() { return table_ref(); }

const KernelTable* kernels_for(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) return nullptr;
  switch (isa) {
    case Isa::avx512: return &table_avx512();
    case Isa::avx2: return &table_avx2();
    case Isa::scalar: return &table_scalar();
  }
  return nullptr;
}

}  // namespace encore::kernels
