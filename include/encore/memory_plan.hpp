// Memory plan of a TransformerEncoder forward pass: parameters, per-layer activations and the predicted
// peak of live tensor bytes, derived from the order in which the layers allocate and release tensors.
//
//   encore::EncoderShape s{.layers = 12, .d_model = 768, .heads = 12, .d_ff = 3072, .batch = 32, .seq = 512};
//   encore::EncoderMemoryPlan p = encore::plan_encoder_memory(s);
//   std::cout << p.predicted_peak_bytes / 1e6 << " MB\n";
#pragma once
#include <cstdint>
#include <string>

namespace encore {

struct EncoderShape {
  int64_t layers = 12, d_model = 768, heads = 12, d_ff = 3072, batch = 8, seq = 128;
  std::string activation = "gelu";
  bool norm_first = false;
  bool final_norm = false;
  bool bias = true;
  int64_t threads = 1;  // each thread holds one fused-attention scratch (key tile + score tile) during attention
};

struct EncoderMemoryPlan {
  int64_t parameters = 0;             // count
  int64_t parameter_bytes = 0;        // fp32
  int64_t input_bytes = 0;            // the (B, T, E) input
  // Per layer, fp32 bytes.
  int64_t qkv_bytes = 0;              // packed Q, K, V projections (B, T, 3E)
  int64_t scores_bytes = 0;           // fused-attention scratch held at once in inference (per busy thread)
  int64_t scores_all_heads_bytes = 0; // all heads' probabilities (B, H, T, T), as training or need_weights keep
  int64_t ffn_hidden_bytes = 0;       // (B, T, d_ff), doubled for the gated linear1 output
  int64_t attention_phase_bytes = 0;  // live activations besides the layer input, attention sub-block
  int64_t ffn_phase_bytes = 0;        // the same, feed-forward sub-block
  int64_t saved_for_backward_bytes = 0;  // what a backward pass keeps per layer (estimate for training)
  int64_t predicted_peak_bytes = 0;   // parameters + input + the larger phase: the peak of live tensor bytes
};

EncoderMemoryPlan plan_encoder_memory(const EncoderShape& shape);

// Memory of one training step of a TransformerEncoder (fp32, AdamW) from the second step on, when gradients and
// optimizer state exist: zero_grad, forward (the output released once its gradient exists), backward, step.
// Derived from what each layer's training forward saves and what its backward allocates (memory_plan.cpp).
struct TrainingMemoryPlan {
  int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;  // AdamW: exp_avg + exp_avg_sq
  int64_t io_bytes = 0;               // the input and the output's gradient, held by the caller
  int64_t saved_per_layer_bytes = 0;  // what one layer's forward keeps for its backward
  int64_t saved_bytes = 0;            // live after forward: every layer's saves, or with checkpointing the inputs
  int64_t backward_bytes = 0;         // working set of one layer's backward on top of saved_bytes
  int64_t predicted_peak_bytes = 0;
};
TrainingMemoryPlan plan_training_memory(const EncoderShape& shape, bool gradient_checkpointing);

}  // namespace encore
