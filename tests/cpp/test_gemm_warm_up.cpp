// gemm_warm_up_token_counts (include/encore/runtime.hpp): forwards of those token counts create every GEMM row-block
// size that any batch of up to max_tokens rows can use, so a server that ran them creates no primitive later.
// kernels::warm_up_gemm_kernels: oneDNN's process-wide GEMM kernels are made by a warm-up, which loading a model
// runs beside the load.
#include <gtest/gtest.h>

#include <set>

#include "encore/model.hpp"
#include "encore/runtime.hpp"
#include "encore/sentence_encoder.hpp"
#include "kernels/kernels.hpp"
#include "kernels/onednn.hpp"

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

TEST(GemmWarmUp, AWarmUpLeavesNoKernelsToMake) {
  using encore::kernels::Precision;
  for (const Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    encore::kernels::warm_up_gemm_kernels(p);
    EXPECT_FALSE(encore::kernels::gemm_kernels_need_warm_up(p)) << encore::kernels::precision_name(p);
  }
}

// Where oneDNN's f32 matmul is gemm:jit (CPUs without AVX-512), only a warm-up marks the kernels made, so this
// fails if loading stops running it; on brgemm CPUs nothing needs a warm-up and it passes either way. ctest runs
// each test in its own process, so no earlier test has warmed them.
TEST(GemmWarmUp, LoadingAModelMakesTheKernelsOfItsDtype) {
  using encore::DType;
  using encore::kernels::Precision;
  const std::string dir = encore::default_model_dir();
  for (const auto& [dtype, precision] :
       {std::pair{DType::f32, Precision::f32}, std::pair{DType::i8, Precision::int8}}) {
    const encore::AutoModel model = encore::AutoModel::load(dir, dtype);
    EXPECT_FALSE(encore::kernels::gemm_kernels_need_warm_up(precision)) << encore::kernels::precision_name(precision);
  }
}
