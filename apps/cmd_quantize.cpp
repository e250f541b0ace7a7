// encore quantize: a quantized copy of a model directory (encore::quantize_checkpoint, docs/quantization.md).
#include <algorithm>
#include <cstdio>

#include "apps/common.hpp"
#include "encore/model.hpp"

namespace encore::cli {

void register_quantize(CLI::App& app) {
  struct Args {
    std::string model_dir, out_dir, dtype = "int8";
  };
  static Args a;
  auto* cmd = app.add_subcommand("quantize", "write a quantized copy of a model directory (int8 weights)");
  cmd->add_option("MODEL_DIR", a.model_dir, "model directory to quantize")->required();
  cmd->add_option("OUT_DIR", a.out_dir, "new directory for the quantized copy (must not exist, or be empty)")->required();
  cmd->add_option("--dtype", a.dtype, "quantized weight type (int8)")->check(DTypeName())->capture_default_str();
  cmd->callback([] {
    const QuantizeSummary s = quantize_checkpoint(a.model_dir, a.out_dir, parse_dtype(a.dtype));
    std::printf("%s: %lld encoder Linear weights stored int8", a.out_dir.c_str(), static_cast<long long>(s.quantized));
    if (!s.kept_f32.empty()) std::printf(", %zu kept f32 (requantizing them would not be exact)", s.kept_f32.size());
    std::printf("; weights %s -> %s (%.2fx smaller: the int8 Linear weights are 4x smaller, the embeddings, norms "
                "and biases stay float32)\n",
                human_bytes(s.bytes_in).c_str(), human_bytes(s.bytes_out).c_str(),
                static_cast<double>(s.bytes_in) / static_cast<double>(std::max<int64_t>(s.bytes_out, 1)));
    std::printf("run it with --dtype int8 (other dtypes use its dequantized weights)\n");
  });
}

}  // namespace encore::cli
