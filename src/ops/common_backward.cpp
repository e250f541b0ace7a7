// Shared machinery of the backward ops: deterministic blocks with single-threaded library GEMMs.
#include <omp.h>

#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops::detail {

namespace {
// While alive, OpenMP's thread count for parallel regions opened by the calling thread (oneDNN's sgemm
// opens its own) is 1. A no-op inside a parallel region, where nested regions are serial anyway.
class SerialLibraryCalls {
 public:
  SerialLibraryCalls() : prev_(omp_in_parallel() ? 0 : omp_get_max_threads()) {
    if (prev_ > 1) omp_set_num_threads(1);
  }
  ~SerialLibraryCalls() {
    if (prev_ > 1) omp_set_num_threads(prev_);
  }
  SerialLibraryCalls(const SerialLibraryCalls&) = delete;
  SerialLibraryCalls& operator=(const SerialLibraryCalls&) = delete;

 private:
  int prev_;
};
}  // namespace

void parallel_blocks(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  // parallel_for takes its thread count from runtime::num_threads(), not from the OpenMP setting changed here.
  SerialLibraryCalls serial;
  runtime::parallel_for(0, n, 1, fn);
}

void check_grad(const Tensor& grad, const char* name, const Shape& shape) {
  check_shape(grad, name, shape);
  check_dtype(grad, name, DType::f32);
  ENCORE_CHECK(grad.is_contiguous(), name, ": a gradient to accumulate into must be contiguous, got strides ",
               shape_str(grad.strides()));
}

}  // namespace encore::ops::detail
