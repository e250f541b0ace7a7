// encore trace: the shape of every named activation through an encoder (or decoder) layer stack.
#include <cstdio>
#include <iostream>
#include <memory>

#include "apps/common.hpp"

namespace encore::cli {

void register_trace(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "print the shape at each step through a layer stack");
  static StackOptions o;
  o.layers = 1;
  o.d_model = 512;
  o.heads = 8;
  o.d_ff = 2048;
  o.batch = 2;
  o.seq = 10;
  o.activation = "relu";
  static bool decoder = false;
  add_stack_options(*cmd, o);
  cmd->add_flag("--decoder", decoder, "trace a TransformerDecoderLayer stack (memory = a random source of --seq tokens)");
  cmd->callback([] {
    // Everything is built before the first line is printed: a bad option (--heads not dividing --d-model, an
    // unsupported --dtype) fails with nothing on stdout.
    Tensor x = random_input(o);
    std::unique_ptr<nn::TransformerEncoder> enc;
    std::unique_ptr<nn::TransformerDecoder> dec;
    if (decoder) {
      apply_threads(o.threads);
      nn::manual_seed(o.seed);
      nn::TransformerDecoderLayer layer(o.d_model, o.heads, o.d_ff, 0.0, o.activation, 1e-5, true, o.norm_first);
      dec = std::make_unique<nn::TransformerDecoder>(layer, o.layers);
      dec->eval();
    } else {
      enc = build_encoder(o);
    }
    const Tensor memory = decoder ? random_input(o) : Tensor();
    std::printf("%-38s %s\n", "step", "shape (batch-first)");
    std::printf("%-38s %s\n", "input", x.shape_str().c_str());
    nn::ScopedObserver obs([](const std::string& name, const Tensor& t) {
      std::printf("%-38s %s\n", name.c_str(), t.shape_str().c_str());
    });
    const Tensor out = decoder ? dec->forward(x, memory, Tensor(), Tensor(), Tensor(), Tensor(), true) : enc->forward(x);
    std::printf("%-38s %s\n", "output", out.shape_str().c_str());
  });
}

}  // namespace encore::cli
