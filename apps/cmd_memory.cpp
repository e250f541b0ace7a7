// encore memory: parameter count and activation memory of an encoder, predicted by the memory plan and
// measured by running the forward pass (peak of live tensor bytes, and the process's peak RSS).
#include <sys/resource.h>

#include <cstdio>

#include "apps/common.hpp"
#include "encore/runtime.hpp"
#include "encore/train.hpp"

namespace encore::cli {

// One training step as a loop runs it from the second step on (gradients and AdamW state already allocated):
// zero_grad, forward, the output released once its gradient exists, backward, AdamW step. Returns the peak of
// live tensor bytes during the step and the bytes live after forward.
struct TrainStepMemory {
  int64_t before = 0, after_forward = 0, peak = 0;
};
static TrainStepMemory measure_train_step(nn::TransformerEncoder& enc, const Tensor& x, const Tensor& dout) {
  train::AdamW opt(enc);
  auto step = [&](TrainStepMemory* m) {
    opt.zero_grad(/*set_to_none=*/false);  // the plan counts gradients live through the step
    if (m) {
      reset_peak_memory();
      m->before = memory_stats().current_bytes;
    }
    Tensor y = enc.forward(x);
    y = Tensor();
    if (m) m->after_forward = memory_stats().current_bytes;
    enc.backward(dout);
    opt.step();
    if (m) m->peak = memory_stats().peak_bytes;
  };
  step(nullptr);  // allocates gradients and AdamW state
  TrainStepMemory m;
  step(&m);
  return m;
}

static void print_training(const StackOptions& o, bool checkpointing, bool no_run) {
  const TrainingMemoryPlan p = plan_training_memory(encoder_shape(o), checkpointing);
  std::printf("training step (fp32, AdamW), gradient checkpointing %s:\n", checkpointing ? "on" : "off");
  std::printf("  weights                        %s\n", human_bytes(p.parameter_bytes).c_str());
  std::printf("  gradients                      %s\n", human_bytes(p.gradient_bytes).c_str());
  std::printf("  AdamW state (2 moments)        %s\n", human_bytes(p.optimizer_bytes).c_str());
  std::printf("  input + output gradient        %s\n", human_bytes(p.io_bytes).c_str());
  std::printf("  saved for backward, one layer  %s\n", human_bytes(p.saved_per_layer_bytes).c_str());
  std::printf("  saved after forward            %s   (%s)\n", human_bytes(p.saved_bytes).c_str(),
              checkpointing ? "each layer's input only" : "every layer's activations");
  std::printf("  backward working set           %s   (%s)\n", human_bytes(p.backward_bytes).c_str(),
              checkpointing ? "one recomputed layer's activations + its gradient buffers" : "gradient buffers");
  std::printf("predicted peak (tensors)         %s\n", human_bytes(p.predicted_peak_bytes).c_str());
  if (no_run) return;
  auto enc = build_encoder(o);
  enc->train();
  enc->set_gradient_checkpointing(checkpointing);
  Tensor x = random_input(o);
  Tensor dout = Tensor::full(x.shape(), 1.f / static_cast<float>(x.numel()));
  const TrainStepMemory m = measure_train_step(*enc, x, dout);
  std::printf("measured peak (tensors)          %s   (predicted / measured = %.4f; saved after forward %s)\n",
              human_bytes(m.peak).c_str(), static_cast<double>(p.predicted_peak_bytes) / static_cast<double>(m.peak),
              human_bytes(m.after_forward - m.before).c_str());
  if (!checkpointing) return;
  enc->set_gradient_checkpointing(false);
  const TrainStepMemory full = measure_train_step(*enc, x, dout);
  std::printf("without checkpointing            %s   (measured; checkpointing saves %.1f%% of the peak, %.2fx less)\n",
              human_bytes(full.peak).c_str(), 100.0 * (1.0 - static_cast<double>(m.peak) / static_cast<double>(full.peak)),
              static_cast<double>(full.peak) / static_cast<double>(m.peak));
}

static int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

void register_memory(CLI::App& app) {
  auto* cmd = app.add_subcommand("memory", "parameters and activation memory per layer, predicted and measured");
  static StackOptions o;
  static bool no_run = false, train = false, checkpointing = false;
  add_stack_options(*cmd, o);
  cmd->add_flag("--no-run", no_run, "print the prediction only");
  cmd->add_flag("--train", train, "a training step (forward, backward, AdamW) instead of inference");
  cmd->add_flag("--gradient-checkpointing", checkpointing,
                "with --train: keep only layer inputs, recompute each layer's forward in backward");
  cmd->callback([] {
    ENCORE_CHECK(train || !checkpointing, "--gradient-checkpointing needs --train");
    if (train) return print_training(o, checkpointing, no_run);
    auto enc = build_encoder(o);
    const EncoderMemoryPlan p = plan_encoder_memory(encoder_shape(o));
    std::printf("encoder: %lld layers, d_model %lld, %lld heads, d_ff %lld, %s, %s; input %lld x %lld tokens; fp32\n",
                (long long)o.layers, (long long)o.d_model, (long long)o.heads, (long long)o.d_ff, o.activation.c_str(),
                o.norm_first ? "pre-LN" : "post-LN", (long long)o.batch, (long long)o.seq);
    std::printf("parameters            %lld (%s); per layer %lld\n", (long long)p.parameters,
                human_bytes(p.parameter_bytes).c_str(), (long long)(p.parameters / o.layers));
    std::printf("input (B, T, E)       %s\n", human_bytes(p.input_bytes).c_str());
    std::printf("per layer, inference:\n");
    std::printf("  QKV (B, T, 3E)                 %s\n", human_bytes(p.qkv_bytes).c_str());
    std::printf("  attention scratch, live        %s   (%lld thread(s) x fused key/score tiles; all heads' T x T "
                "would be %s)\n",
                human_bytes(p.scores_bytes).c_str(), (long long)get_num_threads(),
                human_bytes(p.scores_all_heads_bytes).c_str());
    std::printf("  FFN hidden (B, T, d_ff)        %s\n", human_bytes(p.ffn_hidden_bytes).c_str());
    std::printf("  live during attention          %s\n", human_bytes(p.attention_phase_bytes).c_str());
    std::printf("  live during feed-forward       %s\n", human_bytes(p.ffn_phase_bytes).c_str());
    std::printf("per layer, training (estimate):\n");
    std::printf("  saved for backward             %s   (x %lld layers = %s)\n",
                human_bytes(p.saved_for_backward_bytes).c_str(), (long long)o.layers,
                human_bytes(p.saved_for_backward_bytes * o.layers).c_str());
    std::printf("predicted peak (tensors)         %s   (parameters + live inputs + largest phase)\n",
                human_bytes(p.predicted_peak_bytes).c_str());
    if (no_run) return;
    Tensor x = random_input(o);
    const int64_t rss_before = peak_rss_bytes();
    reset_peak_memory();
    Tensor out = enc->forward(x);
    const MemoryStats m = memory_stats();
    const int64_t rss_after = peak_rss_bytes();
    std::printf("measured peak (tensors)          %s   (predicted / measured = %.3f)\n",
                human_bytes(m.peak_bytes).c_str(),
                static_cast<double>(p.predicted_peak_bytes) / static_cast<double>(m.peak_bytes));
    std::printf("process peak RSS                 %s   (grew by %s during the forward pass; includes oneDNN "
                "scratch and code)\n",
                human_bytes(rss_after).c_str(), human_bytes(rss_after - rss_before).c_str());
  });
}

}  // namespace encore::cli
