// encore::functional (include/encore/functional.hpp): argument parsing over the ops pairs, nothing else.
#include "encore/functional.hpp"

#include "encore/nn.hpp"
#include "nn/common.hpp"
#include "ops/backward.hpp"

namespace encore::functional {

namespace {

kernels::Gate parse_gate(const std::string& gate) {
  if (gate == "first") return kernels::Gate::first;
  if (gate == "second") return kernels::Gate::second;
  throw UsageError("gate should be 'first' (act(x0)·x1) or 'second' (act(x1)·x0); got '" + gate + "'");
}

// The activation applied to the gate half: a pointwise name, or swiglu/geglu (silu/erf-gelu).
kernels::Act gate_activation(const std::string& name) {
  const nn::Activation a = nn::parse_activation(name);
  return nn::detail::pointwise_act(a);
}

}  // namespace

RotaryTables rotary_cos_sin(const Tensor& position_ids, int64_t rotary_dim, double theta) {
  RotaryTables t;
  t.cos = ops::rotary_cos_sin(position_ids, rotary_dim, theta, &t.sin);
  return t;
}

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  return ops::rotary_forward(x, cos, sin);
}

Tensor rotary_embedding_backward(const Tensor& grad_output, const Tensor& cos, const Tensor& sin) {
  Tensor dx;
  ops::rotary_backward(&dx, grad_output, cos, sin);
  return dx;
}

Tensor gated_activation(const Tensor& x, const std::string& activation, const std::string& gate) {
  return ops::gated_forward(x, gate_activation(activation), parse_gate(gate));
}

Tensor gated_activation_backward(const Tensor& grad_output, const Tensor& x, const std::string& activation,
                                 const std::string& gate) {
  Tensor dx;
  ops::gated_backward(&dx, grad_output, x, gate_activation(activation), parse_gate(gate));
  return dx;
}

}  // namespace encore::functional
