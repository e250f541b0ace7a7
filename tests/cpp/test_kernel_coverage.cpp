// Which vector kernels this run of the suite exercises. The *OnEveryIsa tests (test_kernels, test_attention_fused,
// test_backward_kernels, test_int8, test_int8_static) compare every kernel table this CPU can run with its scalar
// twin, and pass without a word about the tables it cannot run. Here each ISA is one test: on a CPU without it
// the test is skipped, so ctest's summary lists the kernels that were not tested on this host (e.g. every AVX-512
// kernel on an AVX2 machine) instead of the suite passing them silently. Where the ISA is present the test checks
// that its tables exist and that the dispatch point picks the best one.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/backward.hpp"
#include "kernels/kernels.hpp"

namespace {

using encore::kernels::Isa;

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// The tables of `isa` exist (forward, backward, int8) and, unless ENCORE_ISA / ENCORE_KERNELS override the choice,
// the active tables are the best ISA's.
void expect_tables_of(Isa isa) {
  using namespace encore::kernels;
  const KernelTable* forward = kernels_for(isa);
  ASSERT_NE(forward, nullptr);
  EXPECT_NE(backward_kernels_for(isa), nullptr);
  EXPECT_NE(int8_kernels_for(isa), nullptr);
  if (isa == detected_isa() && !env_set("ENCORE_ISA") && !env_set("ENCORE_KERNELS")) {
    EXPECT_EQ(&kernels(), forward) << "active table " << kernels().name << ", expected " << forward->name;
    EXPECT_STREQ(int8_kernels().name, int8_kernels_for(isa)->name);
  }
}

}  // namespace

TEST(KernelCoverage, Avx2KernelsAreTestedOnThisCpu) {
  if (encore::kernels::kernels_for(Isa::avx2) == nullptr)
    GTEST_SKIP() << "this CPU has no AVX2 + FMA: only the scalar kernels are tested here";
  expect_tables_of(Isa::avx2);
}

TEST(KernelCoverage, Avx512KernelsAreTestedOnThisCpu) {
  if (encore::kernels::kernels_for(Isa::avx512) == nullptr)
    GTEST_SKIP() << "this CPU has no AVX-512 (F, BW, DQ, VL): the AVX-512 kernels are not tested here";
  expect_tables_of(Isa::avx512);
}

TEST(KernelCoverage, Avx512Bf16AttentionIsTestedOnThisCpu) {
  using namespace encore::kernels;
  if (!cpu_has_avx512_bf16())
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the vdpbf16ps attention kernel is not tested here";
  const KernelTable* t = kernels_for(Isa::avx512);
  ASSERT_NE(t, nullptr);
  // its own kernel, not the fp32 one an ISA without a bf16 dot product stands in with
  EXPECT_NE(t->attention_fused_bf16, t->attention_fused_f32);
}
