// The allocation sequence this plan mirrors is in encoder.cpp / attention.cpp (N = B·T tokens, E = d_model,
// F = d_ff; every tensor fp32):
//   attention:   qkv (3NE) -> per-thread fused-attention scratch (key tile + score tile, ops::attention_fused_scratch_bytes)
//                + heads (NE) -> out_proj output (NE) [qkv, heads live]
//   post-LN:     a (NE) -> norm1 h over a (in place) -> hidden (NF) -> linear2 f (NE) -> norm2 out over f
//   pre-LN:      norm1 n1 (NE) lives through attention; norm2 n2 (NE) lives through the feed-forward block
//   gated FFN:   linear1 gives 2NF, then the gated product NF, before the 2NF buffer is released
//   stack:       the caller's input stays alive while layer i > 0 reads layer i-1's output
#include "encore/memory_plan.hpp"

#include <algorithm>

#include "encore/error.hpp"
#include "ops/ops.hpp"

namespace encore {

EncoderMemoryPlan plan_encoder_memory(const EncoderShape& s) {
  ENCORE_CHECK(s.layers > 0 && s.d_model > 0 && s.heads > 0 && s.d_ff > 0 && s.batch > 0 && s.seq > 0,
               "memory plan: every size must be positive");
  ENCORE_CHECK(s.d_model % s.heads == 0, "memory plan: d_model ", s.d_model, " is not divisible by heads ", s.heads);
  const bool gated = s.activation == "swiglu" || s.activation == "geglu";
  const int64_t E = s.d_model, F = s.d_ff, N = s.batch * s.seq, T = s.seq, H = s.heads, f = 4;
  EncoderMemoryPlan p;
  const int64_t linear1_out = gated ? 2 * F : F;
  const int64_t bias = s.bias ? 1 : 0;
  const int64_t per_layer = 3 * E * E + 3 * E * bias        // in_proj
                            + E * E + E * bias               // out_proj
                            + linear1_out * E + linear1_out * bias + E * F + E * bias  // FFN
                            + 2 * (E + E * bias);            // two LayerNorms
  p.parameters = per_layer * s.layers + (s.final_norm ? E + E * bias : 0);
  p.parameter_bytes = p.parameters * f;
  p.input_bytes = N * E * f;
  p.qkv_bytes = 3 * N * E * f;
  p.scores_bytes = ops::attention_fused_scratch_bytes(s.batch, T, H, E / H, s.threads);  // fp32 modules: fp32 attention
  p.scores_all_heads_bytes = s.batch * H * T * T * f;
  p.ffn_hidden_bytes = N * linear1_out * f;
  const int64_t NE = N * E * f, NF = N * F * f;
  const int64_t norm_in = s.norm_first ? NE : 0;  // pre-LN keeps the normalised input alive alongside
  // attention: max(qkv + heads + scores, qkv + heads + out)
  p.attention_phase_bytes = norm_in + std::max(p.qkv_bytes + NE + p.scores_bytes, p.qkv_bytes + 2 * NE);
  // feed-forward: residual stream h (+ pre-LN's n2) + hidden + linear2 output; gated adds the 2NF buffer
  const int64_t ffn_linear1 = gated ? NE + norm_in + 3 * NF : 0;
  p.ffn_phase_bytes = std::max({NE + norm_in + NF + NE, ffn_linear1, 2 * NE});
  // Backward needs (per layer): layer input, normalised inputs, qkv, probabilities, heads, out-proj input,
  // residual sums, FFN pre-activation and activation, LayerNorm statistics.
  p.saved_for_backward_bytes = NE + 2 * NE + p.qkv_bytes + p.scores_all_heads_bytes + NE + NE + 2 * NF +
                               2 * 2 * N * f;
  // From the second layer on, the caller's input and the previous layer's output are both alive.
  const int64_t live_inputs = p.input_bytes + (s.layers > 1 ? NE : 0);
  p.predicted_peak_bytes = p.parameter_bytes + live_inputs + std::max(p.attention_phase_bytes, p.ffn_phase_bytes);
  return p;
}

}  // namespace encore

namespace encore {

TrainingMemoryPlan plan_training_memory(const EncoderShape& s, bool checkpointing) {
  const EncoderMemoryPlan inf = plan_encoder_memory(s);  // validates the shape
  const bool gated = s.activation == "swiglu" || s.activation == "geglu";
  const int64_t E = s.d_model, F = s.d_ff, N = s.batch * s.seq, T = s.seq, H = s.heads, f = 4;
  const int64_t NE = N * E * f, NF = N * F * f, probs = s.batch * H * T * T * f, stats = 2 * N * f;
  TrainingMemoryPlan p;
  p.parameter_bytes = inf.parameter_bytes;
  p.gradient_bytes = inf.parameter_bytes;
  p.optimizer_bytes = 2 * inf.parameter_bytes;
  p.io_bytes = 2 * NE;
  // One layer's training forward keeps (encoder_train.cpp, attention.cpp): packed QKV, all heads' probabilities,
  // the heads' output, three (B, T, E) tensors around the LayerNorms (post-LN: the two residual sums each norm
  // normalised and norm1's output, the FFN input; pre-LN: both normalised inputs and the attention residual), two
  // LayerNorms' mean and rstd, the FFN pre-activation (2F wide when gated) and its activation, and the layer's
  // output (the next layer's input).
  p.saved_per_layer_bytes = 3 * NE + probs + NE + 3 * NE + 2 * stats + (gated ? 3 : 2) * NF + NE;
  const int64_t final_norm = s.final_norm ? stats : -NE;  // the last output: kept by the final norm, else released
  p.saved_bytes = checkpointing ? (s.layers - 1) * NE + (s.final_norm ? NE + stats : 0)
                                : s.layers * p.saved_per_layer_bytes + final_norm;
  // Peak of one layer's backward, found in linear1's backward: the gradients of the FFN activation (F wide) and of
  // its pre-activation (2F when gated) and of the FFN input, over what the layer saved (pre-LN also holds the
  // residual's gradient copy). With checkpointing the layer's recomputed activations come on top of the inputs.
  p.backward_bytes = (gated ? 3 : 2) * NF + (s.norm_first ? 2 : 1) * NE + (checkpointing ? p.saved_per_layer_bytes : 0);
  p.predicted_peak_bytes = p.parameter_bytes + p.gradient_bytes + p.optimizer_bytes + p.io_bytes + p.saved_bytes +
                           p.backward_bytes;
  return p;
}

}  // namespace encore
