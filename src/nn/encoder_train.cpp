// TransformerEncoderLayer / TransformerEncoder in training mode: the forward that saves what backward needs,
// and the backward. The forward computes what encoder.cpp's inference forward computes (same ops, same order),
// with dropout seeds and FFN intermediates kept. Sub-modules (self_attn, norm1, norm2) save their own - so no
// tensor is modified in place after a sub-module saved it.
#include <algorithm>

#include "nn/common.hpp"
#include "nn/layer_stack.hpp"
#include "ops/backward.hpp"

namespace encore::nn {

namespace detail {

Tensor ffn_forward_train(FfnSaved& sv, const Tensor& x, const Linear& linear1, const Linear& linear2,
                         Activation activation, double p_hidden, double p_out) {
  const kernels::Act act = pointwise_act(activation);
  sv.in = x;
  Tensor hidden;
  if (is_gated(activation)) {
    sv.pre = ops::linear_forward(x, linear1.weight, linear1.bias);
    hidden = ops::gated_forward(sv.pre, act);
  } else {
    hidden = ops::linear_forward_train(&sv.pre, x, linear1.weight, linear1.bias, act);
  }
  sv.seed_hidden = next_seed();
  sv.hidden = ops::dropout_forward(hidden, p_hidden, true, sv.seed_hidden);
  sv.seed_out = next_seed();
  return ops::dropout_forward(ops::linear_forward(sv.hidden, linear2.weight, linear2.bias), p_out, true, sv.seed_out);
}

Tensor ffn_backward(const FfnSaved& sv, const Tensor& dout, Linear& linear1, Linear& linear2, Activation activation,
                    double p_hidden, double p_out) {
  const kernels::Act act = pointwise_act(activation);
  // in the forward pass this was:  out = dropout_out(hidden·W2ᵀ + b2)
  Tensor dlin2, dhidden, dpre;
  ops::dropout_backward(&dlin2, dout, p_out, true, sv.seed_out);
  dhidden = linear_backward(linear2, dlin2, sv.hidden);
  // in the forward pass this was:  hidden = dropout_hidden(act(in·W1ᵀ + b1))  (gated: act(a)·b)
  ops::dropout_backward(&dhidden, dhidden, p_hidden, true, sv.seed_hidden);
  if (is_gated(activation)) {
    ops::gated_backward(&dpre, dhidden, sv.pre, act);
    return linear_backward(linear1, dpre, sv.in);
  }
  return linear_backward(linear1, dhidden, sv.in, sv.pre, act);
}

}  // namespace detail

struct EncoderLayerSaved {
  detail::FfnSaved ffn;
  uint64_t seed_attn = 0;
};

Tensor TransformerEncoderLayer::forward_train(const Tensor& x, const Tensor& src_mask, const Tensor& kpm,
                                              bool is_causal, Tensor* attn_weights) const {
  auto sv = std::make_shared<EncoderLayerSaved>();
  auto sa_block = [&](const Tensor& h) {
    AttentionResult r = self_attn.forward_batch_first(h, h, h, kpm, attn_weights != nullptr, src_mask, false, is_causal);
    if (attn_weights) *attn_weights = r.weights;
    sv->seed_attn = detail::next_seed();
    return ops::dropout_forward(r.output, dropout_sites_.attention_output, true, sv->seed_attn);
  };
  auto ff_block = [&](const Tensor& h) {
    return detail::ffn_forward_train(sv->ffn, h, linear1, linear2, activation, dropout_sites_.ffn_hidden,
                                     dropout_sites_.ffn_output);
  };
  Tensor out;
  if (norm_first) {
    // x = x + sa(norm1(x)) ; x = x + ff(norm2(x))
    Tensor h = sa_block(norm1.apply(x));
    ops::add_forward_(h, x);
    out = ops::add_forward(h, ff_block(norm2.apply(h)));  // out of place: norm2 saved h for its backward
  } else {
    // x = norm1(x + sa(x)) ; x = norm2(x + ff(x))
    Tensor a = sa_block(x);
    ops::add_forward_(a, x);
    Tensor h = norm1.apply(a);
    Tensor f = ff_block(h);
    ops::add_forward_(f, h);
    out = norm2.apply(f);
  }
  push_saved(sv);
  return out;
}

Tensor TransformerEncoderLayer::backward(const Tensor& grad_output) {
  ENCORE_CHECK(grad_output.defined() && (grad_output.dim() == 2 || grad_output.dim() == 3),
               "TransformerEncoderLayer.backward: grad_output must be 2-D or 3-D");
  const detail::BatchLayout io(grad_output, batch_first);
  return io.out(backward_batch_first(io.in(grad_output, "grad_output")));
}

void TransformerEncoderLayer::set_dropout(const EncoderLayerDropout& d) {
  for (double p : {d.attention_probs, d.attention_output, d.ffn_hidden, d.ffn_output})
    ENCORE_CHECK(p >= 0.0 && p <= 1.0, "TransformerEncoderLayer: dropout probabilities must be in [0, 1], got ", p);
  dropout_sites_ = d;
  self_attn.dropout = d.attention_probs;
}

Tensor TransformerEncoderLayer::backward_batch_first(const Tensor& dout_in, Tensor* d_src_mask) {
  auto sv = pop_saved<EncoderLayerSaved>("TransformerEncoderLayer");
  check_shape(dout_in, "grad_output", {-1, -1, d_model});
  const Tensor dout = dout_in.contiguous();
  auto ff_backward = [&](const Tensor& dff) {
    return detail::ffn_backward(sv->ffn, dff, linear1, linear2, activation, dropout_sites_.ffn_hidden,
                                dropout_sites_.ffn_output);
  };
  auto sa_backward = [&](const Tensor& dsa) {
    // in the forward pass this was:  a = dropout(self_attn(h))
    Tensor da;
    ops::dropout_backward(&da, dsa, dropout_sites_.attention_output, true, sv->seed_attn);
    return self_attn.backward_batch_first(da, d_src_mask);
  };
  if (norm_first) {
    // forward: h = x + sa(norm1(x)) ; out = h + ff(norm2(h))
    Tensor dh = dout.clone();
    ops::add_forward_(dh, norm2.backward(ff_backward(dout)));
    Tensor dx = dh.clone();
    ops::add_forward_(dx, norm1.backward(sa_backward(dh)));
    return dx;
  }
  // forward: h = norm1(x + sa(x)) ; out = norm2(h + ff(h))
  Tensor ds2 = norm2.backward(dout);
  Tensor dh = ff_backward(ds2);
  ops::add_forward_(dh, ds2);
  Tensor ds1 = norm1.backward(dh);
  Tensor dx = sa_backward(ds1);
  ops::add_forward_(dx, ds1);
  return dx;
}

namespace detail {

Tensor layer_stack_forward_train(LayerStackSaved& sv, const std::vector<const TransformerEncoderLayer*>& layers,
                                 Tensor x, const Tensor& mask, const Tensor& kpm, bool causal, bool checkpointing,
                                 bool want_weights,
                                 const std::function<void(size_t, const Tensor&, const Tensor&)>& after_layer) {
  sv.mask = mask;
  sv.key_padding_mask = kpm;
  sv.causal = causal;
  Tensor weights;
  return nn::layer_stack_forward_train(
      sv.tape, layers.size(), std::move(x), checkpointing,
      [&](size_t i, const Tensor& h) {
        return layers[i]->forward_batch_first(h, mask, kpm, causal, want_weights ? &weights : nullptr);
      },
      [&](size_t i, const Tensor& h) {
        if (after_layer) after_layer(i, h, weights);
      },
      [&](size_t i) { layers[i]->clear_saved(); });
}

Tensor layer_stack_backward(const LayerStackSaved& sv, const std::vector<TransformerEncoderLayer*>& layers, Tensor d,
                            Tensor* d_mask) {
  ENCORE_CHECK(layers.size() == sv.tape.seeds.size(), "encoder backward: ", layers.size(), " layers for a forward of ",
               sv.tape.seeds.size());
  return nn::layer_stack_backward(
      sv.tape, std::move(d),
      [&](size_t i, const Tensor& input) {
        layers[i]->forward_batch_first(input, sv.mask, sv.key_padding_mask, sv.causal, nullptr);
      },
      [&](size_t i, const Tensor& dout) {
        Tensor dm;
        Tensor dx = layers[i]->backward_batch_first(dout, d_mask ? &dm : nullptr);
        // Walking back, a layer's gradients are final after its first use in the forward (shared layers run again).
        const auto first = layers.begin() + static_cast<std::ptrdiff_t>(i);
        if (std::find(layers.begin(), first, layers[i]) == first) gradients_ready(*layers[i]);
        if (d_mask && d_mask->defined()) {
          ops::add_forward_(*d_mask, dm);
        } else if (d_mask) {
          *d_mask = dm;
        }
        return dx;
      });
}

}  // namespace detail

Tensor TransformerEncoder::forward_train(const Tensor& x, const Tensor& mask, const Tensor& kpm, bool causal,
                                         EncoderTrace* trace) const {
  auto sv = std::make_shared<detail::LayerStackSaved>();
  std::vector<const TransformerEncoderLayer*> run;
  for (int64_t i = 0; i < num_layers; ++i) run.push_back(&layers[share_parameters ? 0 : i]);
  if (trace && trace->want_hidden_states) trace->hidden_states.push_back(x);
  Tensor out = detail::layer_stack_forward_train(
      *sv, run, x, mask, kpm, causal, gradient_checkpointing, trace && trace->want_attentions,
      [&](size_t, const Tensor& h, const Tensor& w) {
        if (trace && trace->want_hidden_states) trace->hidden_states.push_back(h);
        if (trace && trace->want_attentions) trace->attentions.push_back(w);
      });
  push_saved(sv);
  return norm ? norm->apply(out) : out;
}

Tensor TransformerEncoder::backward(const Tensor& grad_output) {
  ENCORE_CHECK(grad_output.defined() && (grad_output.dim() == 2 || grad_output.dim() == 3),
               "TransformerEncoder.backward: grad_output must be 2-D or 3-D");
  const detail::BatchLayout io(grad_output, batch_first);
  Tensor d = io.in(grad_output, "grad_output");
  if (norm) d = norm->backward(d);
  // Layers ran 0..n-1 (layer 0 every time when shared): undo them in reverse.
  std::vector<TransformerEncoderLayer*> run;
  for (int64_t i = 0; i < num_layers; ++i) run.push_back(&layers[share_parameters ? 0 : i]);
  d = detail::layer_stack_backward(*pop_saved<detail::LayerStackSaved>("TransformerEncoder"), run, d, nullptr);
  return io.out(d);
}

}  // namespace encore::nn
