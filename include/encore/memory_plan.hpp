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
  int64_t threads = 1;  // each thread holds one T×T score buffer during attention
};

struct EncoderMemoryPlan {
  int64_t parameters = 0;             // count
  int64_t parameter_bytes = 0;        // fp32
  int64_t input_bytes = 0;            // the (B, T, E) input
  // Per layer, fp32 bytes.
  int64_t qkv_bytes = 0;              // packed Q, K, V projections (B, T, 3E)
  int64_t scores_bytes = 0;           // attention scores held at once in inference (threads × T × T)
  int64_t scores_all_heads_bytes = 0; // all heads' probabilities (B, H, T, T), as training or need_weights keep
  int64_t ffn_hidden_bytes = 0;       // (B, T, d_ff), doubled for the gated linear1 output
  int64_t attention_phase_bytes = 0;  // live activations besides the layer input, attention sub-block
  int64_t ffn_phase_bytes = 0;        // the same, feed-forward sub-block
  int64_t saved_for_backward_bytes = 0;  // what a backward pass keeps per layer (estimate for training)
  int64_t predicted_peak_bytes = 0;   // parameters + input + the larger phase: the peak of live tensor bytes
};

EncoderMemoryPlan plan_encoder_memory(const EncoderShape& shape);

}  // namespace encore
