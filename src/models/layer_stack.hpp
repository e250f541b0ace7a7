// The stack of layers of the model files that define their own layers (modernbert, qwen3, t5, deberta_v2): one
// template over the layer type for the inference forward, the training forward (dropout seed per layer, gradient
// checkpointing) and backward, recording output_hidden_states / output_attentions as ForwardOptions asks. The
// training loop itself is nn/layer_stack.hpp's, which nn::TransformerEncoder and StackedEncoder run too.
//
// A Layer provides (Context: what every layer reads besides its input: masks, rotary tables, position biases):
//   Tensor forward(const Tensor& x, const Context& ctx, Tensor* weights) const;    // weights: (B, H, T, T) on request
//   struct Saved { ... attn.probs ... };                                           // probs: the attention weights
//   Tensor forward_train(Saved& sv, const Tensor& x, const Context& ctx) const;    // saves into sv (and its norms)
//   Tensor backward(Saved& sv, const Tensor& dout, const Context& ctx);            // dx; accumulates its gradients
// and nn::Module's clear_saved(), and derives from nn::AnnouncedLayer beside nn::Module. After layer i's backward
// its gradients are final (each layer runs once), so the stack announces it to the gradient-ready hook (data-
// parallel training starts its allreduce then). So a layer's parameters get no gradient after its backward, except
// embedding tables (data-parallel training sums those after backward): T5's relative-attention table in block 0
// and DeBERTa's rel_embeddings (outside the layers) take theirs when the stack is done.
// Example (a family's forward and backward):
//   x = run_layer_stack(layers, x, ctx, StackRecorder{opt, packed, out}, training ? &sv->stack : nullptr,
//                       gradient_checkpointing);
//   d = layer_stack_backward(sv->stack, layers, d, sv->ctx);
#pragma once
#include <vector>

#include "models/model.hpp"
#include "nn/layer_stack.hpp"

namespace encore::models {

// What ForwardOptions asks a stack to record into out: hidden_states (the stack's input, then each layer's
// output) and attentions (each layer's (B, H, T, T)); a padding-free batch's (1, N, C) is scattered back to
// (B, T, C) first.
struct StackRecorder {
  const ForwardOptions& options;
  const PackedBatch* packed = nullptr;  // padding-free forward, else null
  ModelOutput& out;

  void input(const Tensor& x) const {
    if (options.output_hidden_states) out.hidden_states.push_back(packed ? packed->scatter(x) : x);
  }
  void layer(const Tensor& y, const Tensor& weights) const {
    input(y);
    if (options.output_attentions) out.attentions.push_back(weights);
  }
};

// What a training forward keeps for backward.
template <class Layer>
struct LayerStackSaved {
  nn::LayerStackTape tape;
  std::vector<typename Layer::Saved> layers;  // empty entries with gradient checkpointing
};

// A family's own step between layers, none by default: after_layer(i, x) in the forward (DeBERTa's ConvLayer after
// layer 0) and before_layer(i, d) in backward, which turns the gradient of the step's output into that of layer
// i's output.
struct NoStep {
  void operator()(size_t, Tensor&) const {}
};

// Runs the layers over x: inference when saved is null, else training (layer i's activations in
// saved->layers[i]; with checkpointing only its input is kept). after_layer(i, x) runs on each layer's output
// before it is recorded, outside the layer's seed scope.
template <class Layer, class Context, class AfterLayer = NoStep>
Tensor run_layer_stack(const std::vector<Layer>& layers, Tensor x, const Context& ctx, const StackRecorder& record,
                       LayerStackSaved<Layer>* saved, bool checkpointing, AfterLayer after_layer = {}) {
  record.input(x);
  if (!saved) {
    for (size_t i = 0; i < layers.size(); ++i) {
      Tensor weights;
      x = layers[i].forward(x, ctx, record.options.output_attentions ? &weights : nullptr);
      after_layer(i, x);
      record.layer(x, weights);
    }
    return x;
  }
  saved->layers.resize(layers.size());
  return nn::layer_stack_forward_train(
      saved->tape, layers.size(), std::move(x), checkpointing,
      [&](size_t i, const Tensor& h) { return layers[i].forward_train(saved->layers[i], h, ctx); },
      [&](size_t i, Tensor& h) {
        after_layer(i, h);
        record.layer(h, saved->layers[i].attn.probs);
      },
      [&](size_t i) {
        layers[i].clear_saved();
        saved->layers[i] = {};
      });
}

// d: the gradient of the last layer's output (after the last after_layer step) -> that of the stack's input.
// Layer i's saved activations go as soon as its backward used them.
template <class Layer, class Context, class BeforeLayer = NoStep>
Tensor layer_stack_backward(LayerStackSaved<Layer>& saved, std::vector<Layer>& layers, Tensor d, const Context& ctx,
                            BeforeLayer before_layer = {}) {
  ENCORE_CHECK(saved.layers.size() == layers.size() && saved.tape.seeds.size() == layers.size(), "backward: ",
               layers.size(), " layers for a forward of ", saved.tape.seeds.size());
  return nn::layer_stack_backward(
      saved.tape, std::move(d),
      [&](size_t i, const Tensor& input) { layers[i].forward_train(saved.layers[i], input, ctx); },
      [&](size_t i, Tensor dout) {
        before_layer(i, dout);
        Tensor dx = layers[i].backward(saved.layers[i], dout, ctx);
        saved.layers[i] = {};
        nn::detail::gradients_ready(layers[i]);  // its gradients are final (layers are not shared here)
        return dx;
      });
}

}  // namespace encore::models
