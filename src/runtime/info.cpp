#include <string>

#include "oneapi/dnnl/dnnl.hpp"

#include "encore/runtime.hpp"
#include "kernels/kernels.hpp"
#include "runtime/parallel.hpp"

namespace encore {

void set_num_threads(int n) { runtime::set_num_threads(n); }
int get_num_threads() { return runtime::num_threads(); }

std::string runtime_info() {
  const auto& k = kernels::kernels();
  const dnnl_version_t* v = dnnl_version();
  std::string gemm = std::string(k.name) == "ref" ? "scalar-reference"
                                                  : "oneDNN-" + std::to_string(v->major) + "." +
                                                        std::to_string(v->minor) + "." + std::to_string(v->patch);
  return "isa=" + std::string(kernels::isa_name(kernels::detected_isa())) + " kernels=" + k.name + " gemm=" + gemm +
         " threads=" + std::to_string(runtime::num_threads());
}

}  // namespace encore
