// The one way a stack of layers runs in training (not public): nn::TransformerEncoder, models::StackedEncoder
// and the model files' own layers (models/layer_stack.hpp) all go through these two templates.
//
//   LayerStackTape tape;
//   Tensor y = layer_stack_forward_train(tape, n, x, checkpointing,
//       [&](size_t i, const Tensor& h) { return layer_i_forward_train(h); },   // saves what its backward needs
//       [&](size_t i, Tensor& y) { /* between layers: record hidden states, ... */ },
//       [&](size_t i) { /* drop what layer i saved (checkpointing: backward recomputes it) */ });
//   Tensor dx = layer_stack_backward(tape, dy, run_again, [&](size_t i, const Tensor& d) { return layer_i_backward(d); });
//
// Dropout: layer i runs under SeedScope(seeds[i]), so running it again draws the same masks. Gradient
// checkpointing keeps only each layer's input; backward re-runs layer i's forward (same input, masks and seeds,
// so the same bits) just before its backward, and one layer's saved activations are alive at a time.
#pragma once
#include <vector>

#include "nn/common.hpp"

namespace encore::nn {

// Marks a layer type (beside nn::Module) whose stack announces it to the gradient-ready hook after its backward
// (models/layer_stack.hpp does, for the model files' own layers; nn::TransformerEncoderLayer is announced by
// detail::layer_stack_backward without the mark). Data-parallel training lays out its gradient buckets from the
// announced layers (train/data_parallel.hpp).
struct AnnouncedLayer {
  virtual ~AnnouncedLayer() = default;
};

// What a training forward of a layer stack keeps besides the layers' own saved state.
struct LayerStackTape {
  std::vector<uint64_t> seeds;  // layer i's dropout stream
  std::vector<Tensor> inputs;   // checkpointing only: layer i's input
  bool checkpointing = false;
};

// Runs layers 0..count-1 over x in training mode. run(i, x) -> layer i's output, saving what its backward needs
// (it runs under layer i's SeedScope). after(i, y) then sees (and may replace) the output, outside that scope: it
// reads what run saved (attention weights) before release(i), which follows only with checkpointing and drops it.
template <class Run, class After, class Release>
Tensor layer_stack_forward_train(LayerStackTape& tape, size_t count, Tensor x, bool checkpointing, Run&& run,
                                 After&& after, Release&& release) {
  tape = LayerStackTape{};
  tape.checkpointing = checkpointing;
  for (size_t i = 0; i < count; ++i) {
    tape.seeds.push_back(detail::next_seed());
    {
      detail::SeedScope seeds(tape.seeds.back());
      if (checkpointing) tape.inputs.push_back(x);
      x = run(i, x);
    }
    after(i, x);
    if (checkpointing) release(i);  // recomputed in backward
  }
  return x;
}

// d: the gradient of the last layer's output -> the gradient of the stack's input. For i = count-1..0: with
// checkpointing run(i, input_i) again (under seeds[i], saving this time), then d = backward(i, d). When
// backward(i, d) returns, layer i's parameter gradients hold all of this step's contributions (unless the same
// parameters also run at a lower index, as ALBERT's shared layer does): the point where a gradient-ready signal
// for layer i belongs.
template <class Run, class Backward>
Tensor layer_stack_backward(const LayerStackTape& tape, Tensor d, Run&& run, Backward&& backward) {
  for (size_t i = tape.seeds.size(); i-- > 0;) {
    if (tape.checkpointing) {  // the forward again, saving this time: same input, masks and seeds
      detail::SeedScope seeds(tape.seeds[i]);
      run(i, tape.inputs[i]);
    }
    d = backward(i, d);
  }
  return d;
}

}  // namespace encore::nn

namespace encore::nn::detail {

// Training-mode run of TransformerEncoderLayers in order (one layer may appear several times: shared
// parameters), through nn/layer_stack.hpp's runner (seeds per layer, gradient checkpointing).
struct LayerStackSaved {
  nn::LayerStackTape tape;
  Tensor mask, key_padding_mask;
  bool causal = false;
};
// after_layer(i, output, weights), when set, sees each layer's output (and (B, H, T, T) weights if want_weights).
Tensor layer_stack_forward_train(LayerStackSaved& sv, const std::vector<const TransformerEncoderLayer*>& layers,
                                 Tensor x, const Tensor& mask, const Tensor& key_padding_mask, bool causal,
                                 bool checkpointing, bool want_weights,
                                 const std::function<void(size_t, const Tensor&, const Tensor&)>& after_layer);
// d (B, T, E) -> gradient of the stack's input, through the layers the forward ran (in the same order; the
// owner passes them again, writable, since backward accumulates into their gradients). d_mask, when non-null,
// receives Σ over layers of the gradient of the float mask (B, H, T, T) (see
// TransformerEncoderLayer::backward_batch_first).
Tensor layer_stack_backward(const LayerStackSaved& sv, const std::vector<TransformerEncoderLayer*>& layers, Tensor d,
                            Tensor* d_mask);

}  // namespace encore::nn::detail
