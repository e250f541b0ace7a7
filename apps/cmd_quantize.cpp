// encore quantize: a quantized copy of a model directory (encore::quantize_checkpoint, docs/quantization.md).
#include <algorithm>
#include <cstdio>

#include "apps/common.hpp"
#include "encore/model.hpp"
#include "encore/records.hpp"

namespace encore::cli {

void register_quantize(CLI::App& app) {
  struct Args {
    std::string model_dir, out_dir, dtype = "int8", calibrate, field = "text", range_rule = "max";
    double f32_channel_ratio = 4.0;
    int64_t batch_size = 32;
  };
  static Args a;
  auto* cmd = app.add_subcommand("quantize", "write a quantized copy of a model directory (int8 weights)");
  cmd->add_option("MODEL_DIR", a.model_dir, "model directory to quantize")->required();
  cmd->add_option("OUT_DIR", a.out_dir, "new directory for the quantized copy (must not exist, or be empty)")->required();
  cmd->add_option("--dtype", a.dtype, "quantized weight type (int8)")->check(DTypeName())->capture_default_str();
  cmd->add_option("--calibrate", a.calibrate,
                  "static int8: texts (one per line, or .jsonl/.csv with --field) to measure every encoder Linear's "
                  "input range on; stored in the checkpoint, int8 then uses them instead of per-token ranges");
  cmd->add_option("--field", a.field, "--calibrate .jsonl/.csv: the text field")->capture_default_str();
  cmd->add_option("--range-rule", a.range_rule,
                  "--calibrate: max (the corpus's min and max), or pX: per batch the X% and (100-X)% quantiles, "
                  "averaged")
      ->capture_default_str();
  cmd->add_option("--f32-channel-ratio", a.f32_channel_ratio,
                  "--calibrate: input channels whose max |x| exceeds this x the median channel's stay f32 (0: none)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--batch-size", a.batch_size, "--calibrate: texts per calibration batch")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->callback([cmd] {
    QuantizeOptions opts;
    const bool calibrating = !a.calibrate.empty();
    for (const char* o : {"--field", "--range-rule", "--f32-channel-ratio", "--batch-size"})
      ENCORE_CHECK_AS(UsageError, calibrating || cmd->count(o) == 0, "quantize ", o, " needs --calibrate FILE");
    if (calibrating) {
      ENCORE_CHECK_AS(UsageError, a.dtype == "int8", "quantize --calibrate: static ranges are for int8, got --dtype ",
                      a.dtype);
      RecordReader in(a.calibrate);
      for (Record r; in.next(r);) opts.calibration_texts.push_back(in.field(r, a.field));
      ENCORE_CHECK_AS(InputError, !opts.calibration_texts.empty(), "quantize --calibrate: '", a.calibrate,
                      "' holds no texts");
      opts.range_rule = a.range_rule;
      opts.f32_channel_ratio = a.f32_channel_ratio;
      opts.batch_size = a.batch_size;
    }
    QuantizeSummary s;
    try {
      s = quantize_checkpoint(a.model_dir, a.out_dir, parse_dtype(a.dtype), opts);
    } catch (const InputError& e) {
      if (!calibrating || std::string(e.what()).find("calibration text") == std::string::npos) throw;
      throw InputError("'" + a.calibrate + "': " + e.what());
    }
    std::printf("%s: %lld encoder Linear weights stored int8", a.out_dir.c_str(), static_cast<long long>(s.quantized));
    if (!s.kept_f32.empty()) std::printf(", %zu kept f32 (requantizing them would not be exact)", s.kept_f32.size());
    std::printf("; weights %s -> %s (%.2fx smaller: the int8 Linear weights are 4x smaller, the embeddings, norms "
                "and biases stay float32)\n",
                human_bytes(s.bytes_in).c_str(), human_bytes(s.bytes_out).c_str(),
                static_cast<double>(s.bytes_in) / static_cast<double>(std::max<int64_t>(s.bytes_out, 1)));
    if (s.static_ranges > 0)
      std::printf("static int8: input ranges of %lld Linear weights from %zu calibration texts (%s), %lld f32 input "
                  "channels in all\n",
                  static_cast<long long>(s.static_ranges), opts.calibration_texts.size(), a.range_rule.c_str(),
                  static_cast<long long>(s.f32_input_channels));
    std::printf("run it with --dtype int8 (other dtypes use its dequantized weights)\n");
  });
}

}  // namespace encore::cli
