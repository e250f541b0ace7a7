// gemm_warm_up_token_counts (include/encore/runtime.hpp): forwards of those token counts create every GEMM row-block
// size that any batch of up to max_tokens rows can use, so a server that ran them creates no primitive later.
// kernels::warm_up_gemm_kernels: oneDNN's process-wide GEMM kernels are made by a warm-up, which loading a model
// runs beside the load, so the first forward makes none (oneDNN's perf map shows which kernels it makes when).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "encore/model.hpp"
#include "encore/runtime.hpp"
#include "encore/sentence_encoder.hpp"
#include "kernels/kernels.hpp"
#include "kernels/onednn.hpp"
#include "oneapi/dnnl/dnnl.h"

namespace {
std::set<int64_t> block_sizes(int64_t m, std::set<int64_t> into = {}) {
  encore::kernels::for_each_row_block(m, [&](int64_t, int64_t rows) { into.insert(rows); });
  return into;
}
}  // namespace

TEST(GemmWarmUp, TokenCountsCoverEveryRowBlockSize) {
  for (const int64_t max_tokens : {int64_t{16384}, int64_t{4096}, int64_t{1056}, int64_t{500}, int64_t{40}, int64_t{7}}) {
    std::set<int64_t> needed, warmed;
    for (int64_t m = 1; m <= max_tokens; ++m) needed = block_sizes(m, std::move(needed));
    const std::vector<int64_t> counts = encore::gemm_warm_up_token_counts(max_tokens);
    for (const int64_t c : counts) {
      EXPECT_LE(c, max_tokens);
      warmed = block_sizes(c, std::move(warmed));
    }
    EXPECT_EQ(warmed, needed) << "max_tokens " << max_tokens;
  }
}

namespace {

// Lines of oneDNN's perf map (DNNL_JIT_PROFILE_LINUX_PERFMAP: one per JIT kernel it generates) naming its
// process-wide GEMM kernels: gemm:jit's f32 (jit_avx2_kernel_sgemm_kern, jit_avx_gemm_f32_xbyak_gemm, the gemv
// and copy kernels) and u8 x s8 ones (jit_avx2_gemm_s8u8s32_kern, the u8 copy kernels).
size_t process_wide_gemm_kernels(const std::string& perf_map) {
  std::ifstream f(perf_map);
  const std::regex name("_copy_|sgemm_kern|gemm_f32_xbyak|gemv_|gemm_s8u8s32_kern");
  size_t n = 0;
  for (std::string line; std::getline(f, line);) n += std::regex_search(line, name) ? 1 : 0;
  return n;
}

std::string perf_map_path() { return "/tmp/perf-" + std::to_string(getpid()) + ".map"; }

// Loads all-MiniLM-L6-v2 in `dtype` and encodes one text: the load must make kernels (new lines in the map), the
// first encode none. Without the warm-up the load makes none and the encode all of them. oneDNN keeps the map
// open and appends to it, so it is removed when the process exits, not here.
void expect_the_load_makes_the_kernels(encore::DType dtype) {
  static const bool remove_at_exit = std::atexit([] { std::remove(perf_map_path().c_str()); }) == 0;
  (void)remove_at_exit;
  ASSERT_EQ(dnnl_set_jit_profiling_flags(DNNL_JIT_PROFILE_LINUX_PERFMAP), dnnl_success);
  const size_t before = process_wide_gemm_kernels(perf_map_path());
  const encore::SentenceEncoder enc = encore::SentenceEncoder::load(encore::default_model_dir(), dtype);
  const size_t after_load = process_wide_gemm_kernels(perf_map_path());
  enc.encode({"hello"});
  const size_t after_encode = process_wide_gemm_kernels(perf_map_path());
  EXPECT_GT(after_load, before) << "no GEMM kernels made during the load";
  EXPECT_EQ(after_encode, after_load) << "the first encode made GEMM kernels";
}

}  // namespace

// Where oneDNN's matmul is gemm:jit (f32: CPUs without AVX-512; int8: where its int8 matmul is gemm:jit), its
// kernels are made once per process; elsewhere (brgemm) these skip. ctest runs each test in its own process, so
// the kernels are not made yet when it starts; in a shared process a test skips once a warm-up made them.
TEST(GemmWarmUp, LoadingF32MakesTheKernelsTheFirstEncodeRuns) {
  if (!encore::kernels::gemm_kernels_need_warm_up(encore::kernels::Precision::f32))
    GTEST_SKIP() << "oneDNN's f32 matmul makes its kernels per primitive here (brgemm)";
  expect_the_load_makes_the_kernels(encore::DType::f32);
}

TEST(GemmWarmUp, LoadingInt8MakesTheKernelsTheFirstEncodeRuns) {
  if (!encore::kernels::gemm_kernels_need_warm_up(encore::kernels::Precision::int8))
    GTEST_SKIP() << "no process-wide GEMM kernels to make for int8 here";
  expect_the_load_makes_the_kernels(encore::DType::i8);
}
