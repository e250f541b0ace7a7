// Shared machinery of the backward ops: deterministic blocks with single-threaded library GEMMs.
#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops::detail {

void parallel_blocks(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  // parallel_for takes its thread count from runtime::num_threads(), not from the OpenMP setting changed here.
  runtime::ThreadLimit serial(1);  // library GEMMs (oneDNN's sgemm opens its own regions) on one thread
  runtime::parallel_for(0, n, 1, fn);
}

void check_grad(const Tensor& grad, const char* name, const Shape& shape) {
  check_shape(grad, name, shape);
  check_dtype(grad, name, DType::f32);
  ENCORE_CHECK(grad.is_contiguous(), name, ": a gradient to accumulate into must be contiguous, got strides ",
               shape_str(grad.strides()));
}

}  // namespace encore::ops::detail
