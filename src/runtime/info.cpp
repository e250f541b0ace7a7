#include <cstdlib>
#include <string>

#include "oneapi/dnnl/dnnl.hpp"

#include "encore/runtime.hpp"
#include "kernels/kernels.hpp"
#include "kernels/onednn.hpp"
#include "runtime/parallel.hpp"

namespace encore {

namespace {
// What libgomp was told about idle threads (it read these at start-up): OMP_WAIT_POLICY wins over GOMP_SPINCOUNT.
std::string omp_wait_policy() {
  if (const char* p = std::getenv("OMP_WAIT_POLICY"); p && *p) return p;
  if (const char* s = std::getenv("GOMP_SPINCOUNT"); s && *s) return std::string("spin") + s;
  return "default";
}
}  // namespace

void set_num_threads(int n) { runtime::set_num_threads(n); }
int get_num_threads() { return runtime::num_threads(); }

// Row blocks (kernels/onednn.hpp, for_each_row_block): M > kRowChunk runs as kRowChunk blocks, then the largest
// multiple of kRowGranule left, then the last M mod kRowGranule rows. M_j = j·kRowGranule + (j mod kRowGranule),
// j = 1..kRowChunk/kRowGranule, covers every multiple of kRowGranule up to kRowChunk and every remainder
// 1..kRowGranule-1: two new sizes per forward (all-MiniLM-L6-v2: 32 forwards, 17,424 tokens in all). Under a
// small max_tokens, a multiple whose M_j does not fit runs alone, and the remainders left over run alone.
std::vector<int64_t> gemm_warm_up_token_counts(int64_t max_tokens) {
  using kernels::kRowChunk;
  using kernels::kRowGranule;
  std::vector<int64_t> counts;
  std::vector<bool> remainder_done(static_cast<size_t>(kRowGranule), false);
  for (int64_t j = 1; j <= kRowChunk / kRowGranule; ++j) {
    const int64_t m = j * kRowGranule + j % kRowGranule;
    if (m <= max_tokens) {
      counts.push_back(m);
      remainder_done[static_cast<size_t>(j % kRowGranule)] = true;
    } else if (j * kRowGranule <= max_tokens) {
      counts.push_back(j * kRowGranule);
    }
  }
  for (int64_t r = 1; r < kRowGranule && r <= max_tokens; ++r)
    if (!remainder_done[static_cast<size_t>(r)]) counts.push_back(r);
  return counts;
}

namespace {
// What an int8 Linear quantizes activations to on this CPU (kernels.hpp, Int8Path): 8 bits with VNNI, 7 without
// (u8 x s8 pair sums would saturate int16), or fake-quantized in fp32 GEMMs where oneDNN has no int8 GEMM.
const char* int8_activations() {
  switch (kernels::int8_path_for_this_cpu()) {
    case kernels::Int8Path::native8: return "8-bit";
    case kernels::Int8Path::native7: return "7-bit";
    default: return "emulated";
  }
}
}  // namespace

std::string runtime_info() {
  const auto& k = kernels::kernels();
  const dnnl_version_t* v = dnnl_version();
  std::string gemm = std::string(k.name) == "ref" ? "scalar-reference"
                                                  : "oneDNN-" + std::to_string(v->major) + "." +
                                                        std::to_string(v->minor) + "." + std::to_string(v->patch);
  return "isa=" + std::string(kernels::isa_name(kernels::detected_isa())) + " kernels=" + k.name + " gemm=" + gemm +
         " threads=" + std::to_string(runtime::num_threads()) + " omp_wait=" + omp_wait_policy() +
         " int8=" + int8_activations() + " fp32_pack=" + (kernels::f32_packing_is_lazy() ? "lazy" : "at-load");
}

}  // namespace encore
