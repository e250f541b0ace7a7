// Helpers shared by the layer implementations (not public).
#pragma once
#include "encore/nn.hpp"
#include "ops/ops.hpp"

namespace encore::nn::detail {

// (T, B, E) -> (B, T, E) when !batch_first (a contiguous copy), else x itself. Checks rank 3.
Tensor to_batch_first(const Tensor& x, bool batch_first, const char* name);
// Inverse of to_batch_first for outputs.
Tensor from_batch_first(const Tensor& x, bool batch_first);

// act(x·Wᵀ + b) through the module's prepared weights in eval mode when it has them, else the plain weights.
Tensor linear(const Linear& lin, const Tensor& x, bool training, kernels::Act act = kernels::Act::none);
kernels::Precision precision_of(DType dtype);  // f32 or bf16; anything else throws

kernels::Act pointwise_act(Activation a);  // the activation applied to linear1's output (gate's act if gated)
bool is_gated(Activation a);

// linear2(dropout(act(linear1(x)))) with act fused into linear1's epilogue when not gated.
Tensor feed_forward(const Module& owner, const Tensor& x, const Linear& linear1, const Linear& linear2,
                    Activation activation, double dropout, bool training);

uint64_t next_seed();  // from the manual_seed generator

void observe(const std::string& name, const Tensor& value);
bool observing();

}  // namespace encore::nn::detail
