#include <cstdlib>
#include <string>

#include "oneapi/dnnl/dnnl.hpp"

#include "encore/runtime.hpp"
#include "kernels/kernels.hpp"
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

std::string runtime_info() {
  const auto& k = kernels::kernels();
  const dnnl_version_t* v = dnnl_version();
  std::string gemm = std::string(k.name) == "ref" ? "scalar-reference"
                                                  : "oneDNN-" + std::to_string(v->major) + "." +
                                                        std::to_string(v->minor) + "." + std::to_string(v->patch);
  return "isa=" + std::string(kernels::isa_name(kernels::detected_isa())) + " kernels=" + k.name + " gemm=" + gemm +
         " threads=" + std::to_string(runtime::num_threads()) + " omp_wait=" + omp_wait_policy();
}

}  // namespace encore
