// gemm_warm_up_token_counts (include/encore/runtime.hpp): forwards of those token counts create every GEMM row-block
// size that any batch of up to max_tokens rows can use, so a server that ran them creates no primitive later.
#include <gtest/gtest.h>

#include <set>

#include "encore/runtime.hpp"
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
