// Relative position bias (T5): a learned (num_buckets, H) table gathered by the bucket of each key - query
// distance into an (H, T, S) additive attention bias, and the scatter that is its backward.
#include "encore/profiler.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::ops {

namespace {
// The buckets are exact up to max_exact = num_buckets/4 (bidirectional; /2 causal) and log-spaced from there to
// max_distance: max_exact >= 1 and max_distance > max_exact keep that log defined.
void check_table(const Tensor& table, const char* name, int64_t max_distance, bool bidirectional) {
  check_dtype(table, name, DType::f32);
  const int64_t min_buckets = bidirectional ? 4 : 2;
  ENCORE_CHECK(table.dim() == 2 && table.size(0) >= min_buckets, name, ": expected (num_buckets >= ", min_buckets,
               ", heads), got ", table.shape_str());
  const int64_t max_exact = table.size(0) / (bidirectional ? 4 : 2);
  ENCORE_CHECK(max_distance > max_exact, "relative position bias: max_distance ", max_distance,
               " must exceed num_buckets/", bidirectional ? 4 : 2, " = ", max_exact);
}
}  // namespace

Tensor relative_position_bias_forward(const Tensor& table_in, int64_t T, int64_t S, int64_t max_distance,
                                      bool bidirectional) {
  profiler::Scope profile("relative position bias");
  check_table(table_in, "relative position bias table", max_distance, bidirectional);
  ENCORE_CHECK(T >= 0 && S >= 0, "relative position bias: negative length ", T, " x ", S);
  const Tensor table = table_in.contiguous();
  const int64_t H = table.size(1);
  Tensor bias = Tensor::empty({H, T, S});
  kernels::relative_position_bias_f32(bias.data<float>(), table.data<float>(), H, T, S, table.size(0), max_distance,
                                      bidirectional);
  return bias;
}

void relative_position_bias_backward(Tensor* dtable, const Tensor& dbias_in, int64_t max_distance,
                                     bool bidirectional) {
  profiler::Scope profile("relative position bias backward");
  if (!dtable) return;
  check_table(*dtable, "relative position bias dtable", max_distance, bidirectional);
  detail::check_grad(*dtable, "relative position bias dtable", dtable->shape());
  check_dtype(dbias_in, "relative position bias dbias", DType::f32);
  const int64_t H = dtable->size(1);
  ENCORE_CHECK(dbias_in.dim() == 3 && dbias_in.size(0) == H, "relative position bias dbias: expected (", H,
               ", T, S), got ", dbias_in.shape_str());
  const Tensor dbias = dbias_in.contiguous();
  kernels::relative_position_bias_backward_f32(dtable->data<float>(), dbias.data<float>(), H, dbias.size(1),
                                               dbias.size(2), dtable->size(0), max_distance, bidirectional);
}

}  // namespace encore::ops
