// TransformerDecoderLayer in training mode: the forward that saves what backward needs (the same ops as
// decoder.cpp's forward, with the residual adds made out of place where a LayerNorm saved their input), and the
// backward, which returns the gradients of tgt and of memory. Dropout (torch's placement: after self-attention,
// cross-attention, the FFN hidden and the FFN output) replays the forward's seeds.
#include "nn/common.hpp"
#include "ops/backward.hpp"

namespace encore::nn {

struct DecoderLayerSaved {
  detail::FfnSaved ffn;
  uint64_t seed_sa = 0, seed_mha = 0;
};

Tensor TransformerDecoderLayer::forward_train(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask,
                                              const Tensor& memory_mask, const Tensor& tgt_kpm, const Tensor& mem_kpm,
                                              bool tgt_is_causal, bool memory_is_causal) const {
  auto sv = std::make_shared<DecoderLayerSaved>();
  auto drop = [&](const Tensor& t, uint64_t& seed) {
    seed = detail::next_seed();
    return ops::dropout_forward(t, dropout, true, seed);
  };
  auto sa_block = [&](const Tensor& h) {
    return drop(self_attn.forward_batch_first(h, h, h, tgt_kpm, false, tgt_mask, false, tgt_is_causal).output,
                sv->seed_sa);
  };
  auto mha_block = [&](const Tensor& h) {
    return drop(multihead_attn.forward_batch_first(h, memory, memory, mem_kpm, false, memory_mask, false,
                                                   memory_is_causal)
                    .output,
                sv->seed_mha);
  };
  auto ff_block = [&](const Tensor& h) {
    return detail::ffn_forward_train(sv->ffn, h, linear1, linear2, activation, dropout, dropout);
  };
  Tensor out = detail::decoder_residuals(*this, x, sa_block, mha_block, ff_block);
  push_saved(sv);
  return out;
}

std::pair<Tensor, Tensor> TransformerDecoderLayer::backward(const Tensor& grad_output) {
  ENCORE_CHECK(grad_output.defined() && (grad_output.dim() == 2 || grad_output.dim() == 3),
               "TransformerDecoderLayer.backward: grad_output must be 2-D or 3-D");
  const detail::BatchLayout io(grad_output, batch_first);
  auto [dx, dm] = backward_batch_first(io.in(grad_output, "grad_output"));
  return {io.out(dx), io.out(dm)};
}

std::pair<Tensor, Tensor> TransformerDecoderLayer::backward_batch_first(const Tensor& dout_in) {
  auto sv = pop_saved<DecoderLayerSaved>("TransformerDecoderLayer");
  check_shape(dout_in, "grad_output", {-1, -1, d_model});
  const Tensor dout = dout_in.contiguous();
  Tensor dmemory;
  auto plus = [](Tensor a, const Tensor& b) {  // a + b into a fresh tensor
    Tensor s = a.clone();
    ops::add_forward_(s, b);
    return s;
  };
  auto ff_backward = [&](const Tensor& dff) {
    return detail::ffn_backward(sv->ffn, dff, linear1, linear2, activation, dropout, dropout);
  };
  auto sa_backward = [&](const Tensor& d) {
    Tensor da;
    ops::dropout_backward(&da, d, dropout, true, sv->seed_sa);
    return self_attn.backward_batch_first(da);
  };
  auto mha_backward = [&](const Tensor& d) {  // the query's gradient; the memory's goes to dmemory
    Tensor da;
    ops::dropout_backward(&da, d, dropout, true, sv->seed_mha);
    return multihead_attn.backward_batch_first(da, nullptr, &dmemory);
  };
  Tensor dx;
  if (norm_first) {
    // forward: h1 = x + sa(norm1(x)) ; h2 = h1 + mha(norm2(h1)) ; out = h2 + ff(norm3(h2))
    Tensor dh2 = plus(dout, norm3.backward(ff_backward(dout)));
    Tensor dh1 = plus(dh2, norm2.backward(mha_backward(dh2)));
    dx = plus(dh1, norm1.backward(sa_backward(dh1)));
  } else {
    // forward: h1 = norm1(x + sa(x)) ; h2 = norm2(h1 + mha(h1)) ; out = norm3(h2 + ff(h2))
    Tensor ds3 = norm3.backward(dout);
    Tensor ds2 = norm2.backward(plus(ff_backward(ds3), ds3));
    Tensor ds1 = norm1.backward(plus(mha_backward(ds2), ds2));
    dx = plus(sa_backward(ds1), ds1);
  }
  return {dx, dmemory};
}

}  // namespace encore::nn
