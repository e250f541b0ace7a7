// Static int8: the encoder Linears' input ranges measured on a calibration corpus (`encore quantize --calibrate`),
// stored in the quantized checkpoint and applied at load (format and measurements: docs/quantization.md,
// "Static int8").
//
// Calibration runs the fp32 model over the texts with every encoder-layer GEMM wrapped in a recorder that sees its
// input (M, K) before computing. Two passes:
//   1. per input channel k: min and max of x[:, k] over the whole corpus. Channels whose max |x| exceeds
//      f32_channel_ratio x the median channel's are the f32 input columns (the largest kMaxF32Channels): BERT-family
//      hidden states carry a few channels 10-50x the others, which would otherwise set every token's scale.
//   2. (percentile rules only) per call (one batch), the P and 1-P quantiles of x over the other channels.
// The range rule then gives [lo, hi] over the non-f32 channels (0 always included):
//   max    lo = min over the corpus, hi = max (from pass 1: no value of the corpus saturates)
//   pX     lo = mean over batches of the (1 - X/100) quantile, hi = mean of the X/100 quantile (values beyond
//          saturate; a percentile trades those for a finer step for the rest)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "encore/error.hpp"
#include "encore/sentence_encoder.hpp"
#include "models/model.hpp"
#include "models/static_int8.hpp"

namespace encore::models {

namespace {

// One GEMM's input statistics (the recorder may be called from several threads: guarded).
struct InputStats {
  std::mutex mutex;
  int64_t K = 0;
  std::vector<float> ch_min, ch_max;  // pass 1
  std::vector<int64_t> columns;       // chosen after pass 1
  std::vector<uint8_t> is_column;
  double lo_sum = 0, hi_sum = 0;  // pass 2: per-batch quantiles summed
  int64_t batches = 0;
  int pass = 1;
  double percentile = 0;  // in (50, 100): pass 2's quantile

  void record(const float* x, int64_t M) {
    std::lock_guard<std::mutex> lock(mutex);
    if (pass == 1) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) {
          const float v = x[m * K + k];
          ENCORE_CHECK(std::isfinite(v), "calibration: a non-finite activation (the fp32 model produced NaN/Inf)");
          ch_min[k] = std::min(ch_min[k], v);
          ch_max[k] = std::max(ch_max[k], v);
        }
      return;
    }
    std::vector<float> body;
    body.reserve(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k)
        if (!is_column[k]) body.push_back(x[m * K + k]);
    if (body.empty()) return;
    const auto [lo, hi] = quantile_range(body, percentile);
    lo_sum += lo;
    hi_sum += hi;
    ++batches;
  }
};

class InputRecorder final : public kernels::PackedLinear {
 public:
  InputRecorder(std::shared_ptr<const kernels::PackedLinear> inner, std::shared_ptr<InputStats> stats)
      : inner_(std::move(inner)), stats_(std::move(stats)) {
    N = inner_->N;
    K = inner_->K;
    precision = inner_->precision;
  }
  void forward(float* out, const float* in, int64_t M, kernels::Act act) const override {
    if (M > 0) stats_->record(in, M);
    inner_->forward(out, in, M, act);
  }

 private:
  std::shared_ptr<const kernels::PackedLinear> inner_;
  std::shared_ptr<InputStats> stats_;
};

}  // namespace

std::pair<float, float> quantile_range(std::vector<float>& values, double percentile) {
  ENCORE_CHECK(!values.empty(), "quantile_range: no values");
  auto quantile = [&](double q) {  // rank floor(q·(n-1)) of the sorted values
    const auto r = static_cast<int64_t>(std::floor(q * static_cast<double>(values.size() - 1)));
    std::nth_element(values.begin(), values.begin() + r, values.end());
    return values[static_cast<size_t>(r)];
  };
  const double p = percentile / 100.0;
  return {std::min(0.f, quantile(1.0 - p)), std::max(0.f, quantile(p))};
}

double parse_range_rule(const std::string& rule) {
  if (rule == "max") return 100.0;
  char* end = nullptr;
  const double p = rule.size() > 1 && rule[0] == 'p' ? std::strtod(rule.c_str() + 1, &end) : 0.0;
  ENCORE_CHECK_AS(UsageError, end && *end == '\0' && p > 50.0 && p <= 100.0, "static int8 range rule '", rule,
                  "': expected \"max\" or \"pX\" with X a percentile in (50, 100], e.g. p99.99");
  return p;
}

std::vector<int64_t> f32_input_channels(const std::vector<float>& ch_min, const std::vector<float>& ch_max,
                                        double ratio) {
  const int64_t K = static_cast<int64_t>(ch_max.size());
  if (ratio <= 0.0 || K == 0) return {};
  std::vector<float> amax(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) amax[k] = std::max(-ch_min[k], ch_max[k]);
  return kernels::columns_above_median(amax, static_cast<float>(ratio), kMaxF32Channels);
}

std::map<std::string, kernels::Int8StaticInput> calibrate_input_ranges(const std::string& model_dir,
                                                                       const QuantizeOptions& options) {
  const std::vector<std::string>& texts = options.calibration_texts;
  const double percentile = parse_range_rule(options.range_rule);
  ENCORE_CHECK_AS(InputError, !texts.empty(), "calibration: no texts to calibrate on");
  ENCORE_CHECK_AS(UsageError, options.batch_size > 0 && options.batch_size <= 4096,
                  "calibration batch size must be in [1, 4096], got ", options.batch_size);
  ENCORE_CHECK_AS(UsageError, std::isfinite(options.f32_channel_ratio) && options.f32_channel_ratio >= 0.0,
                  "f32 channel ratio must be >= 0 (0: none), got ", options.f32_channel_ratio);
  SentenceEncoder encoder = SentenceEncoder::load(model_dir, DType::f32);
  auto* model = dynamic_cast<EncoderModel*>(&encoder.model().module());
  ENCORE_CHECK(model != nullptr, "calibration: internal error: the model is not an encore encoder");
  std::vector<EncoderModel::LinearSlot> slots = model->layer_linear_slots();
  ENCORE_CHECK_AS(UsageError, !slots.empty(), "static int8 (--calibrate) is not supported for model_type '",
                  model->info.model_type, "' (it is for bert, roberta, xlm-roberta, distilbert, electra, albert, mpnet); "
                  "quantize without --calibrate for dynamic int8");
  std::vector<std::shared_ptr<InputStats>> stats;
  std::vector<std::shared_ptr<const kernels::PackedLinear>> originals;
  for (auto& slot : slots) {
    ENCORE_CHECK(*slot.packed, "calibration: internal error: '", slot.names.front(), "' is not prepared");
    auto s = std::make_shared<InputStats>();
    s->K = (*slot.packed)->K;
    s->ch_min.assign(static_cast<size_t>(s->K), 0.f);
    s->ch_max.assign(static_cast<size_t>(s->K), 0.f);
    s->percentile = percentile;
    stats.push_back(s);
    originals.push_back(*slot.packed);
    *slot.packed = std::make_shared<InputRecorder>(*slot.packed, s);
  }
  EncodeOptions eo;
  eo.batch_size = options.batch_size;
  encoder.encode(texts, eo);  // pass 1
  for (auto& s : stats) {
    s->columns = f32_input_channels(s->ch_min, s->ch_max, options.f32_channel_ratio);
    s->is_column.assign(static_cast<size_t>(s->K), 0);
    for (int64_t c : s->columns) s->is_column[c] = 1;
    s->pass = 2;
  }
  if (percentile < 100.0) encoder.encode(texts, eo);  // pass 2
  std::map<std::string, kernels::Int8StaticInput> out;
  for (size_t i = 0; i < slots.size(); ++i) {
    *slots[i].packed = originals[i];
    const InputStats& s = *stats[i];
    kernels::Int8StaticInput in;
    in.columns = s.columns;
    if (percentile < 100.0 && s.batches > 0) {
      in.lo = static_cast<float>(s.lo_sum / static_cast<double>(s.batches));
      in.hi = static_cast<float>(s.hi_sum / static_cast<double>(s.batches));
    } else {
      for (int64_t k = 0; k < s.K; ++k)
        if (!s.is_column[k]) {
          in.lo = std::min(in.lo, s.ch_min[k]);
          in.hi = std::max(in.hi, s.ch_max[k]);
        }
    }
    for (const std::string& name : slots[i].names) out[name] = in;
  }
  return out;
}

namespace {

kernels::Int8StaticInput read_input_range(const io::WeightStore& store, const std::string& name, int64_t K) {
  const std::string where = "static int8 checkpoint '" + store.source() + "', Linear '" + name + "': ";
  const std::string range = name + kInt8InputRange, columns = name + kInt8InputColumns;
  ENCORE_CHECK_AS(ModelFormatError, store.contains(range), where, "its input range '", range,
                  "' is missing (every encoder Linear of a static int8 checkpoint has one)");
  const Tensor r = store.get_f32(range);
  ENCORE_CHECK_AS(ModelFormatError, r.shape() == Shape{2}, where, "input range has shape ", r.shape_str(),
                  ", expected (2)");
  kernels::Int8StaticInput in;
  in.lo = r.data<float>()[0];
  in.hi = r.data<float>()[1];
  ENCORE_CHECK_AS(ModelFormatError, std::isfinite(in.lo) && std::isfinite(in.hi) && in.lo <= 0.f && in.hi >= 0.f,
                  where, "input range [", in.lo, ", ", in.hi, "] must be finite with lo <= 0 <= hi");
  if (store.contains(columns)) {
    const Tensor c = store.get_i64(columns);
    ENCORE_CHECK_AS(ModelFormatError, c.dim() == 1, where, "f32 input columns must be 1-D, got ", c.shape_str());
    in.columns.assign(c.data<int64_t>(), c.data<int64_t>() + c.size(0));
    for (size_t i = 0; i < in.columns.size(); ++i)
      ENCORE_CHECK_AS(ModelFormatError,
                      in.columns[i] >= 0 && in.columns[i] < K && (i == 0 || in.columns[i] > in.columns[i - 1]), where,
                      "f32 input columns must be ascending indices in [0, ", K, ")");
  }
  return in;
}

}  // namespace

void apply_static_int8_ranges(EncoderModel& model, const HfConfig& cfg, const io::WeightStore& store, DType dtype) {
  const nlohmann::json& marker = cfg.json()["encore_quantization"];
  if (!marker.contains("activations")) return;  // written before static int8 existed: dynamic
  const nlohmann::json& a = marker["activations"];
  ENCORE_CHECK_AS(ModelFormatError, a == "static" || a == "dynamic", cfg.source(),
                  ": 'encore_quantization' /activations must be \"static\" or \"dynamic\", got ", a.dump());
  if (a != "static") return;
  // Applied where activations have 8 bits. Where the CPU's int8 GEMM takes 7 bits (no VNNI: Int8Path::native7),
  // one static step is 1/127 of a whole tensor's range: all-MiniLM-L6-v2's static checkpoint kept min cosine
  // 0.970 to fp32 there, dynamic int8 0.9955, at no measured speed difference (docs/quantization.md), so the
  // ranges are checked and dynamic int8 runs: the checkpoint's int8 weights are those dynamic int8 makes from the
  // original model (int8_round_trip_exact), so it gives dynamic int8's vectors exactly.
  const bool apply = dtype == DType::i8 && kernels::int8_path_for_this_cpu() != kernels::Int8Path::native7;
  std::vector<EncoderModel::LinearSlot> slots = model.layer_linear_slots();
  ENCORE_CHECK_AS(ModelFormatError, !slots.empty(), cfg.source(), ": a static int8 checkpoint, but model_type '",
                  model.info.model_type, "' has no static int8 support");
  for (auto& slot : slots) {
    ENCORE_CHECK(*slot.packed, "static int8: internal error: '", slot.names.front(), "' is not prepared");
    const int64_t K = (*slot.packed)->K;
    const kernels::Int8StaticInput in = read_input_range(store, slot.names.front(), K);
    for (size_t i = 1; i < slot.names.size(); ++i) {
      const kernels::Int8StaticInput other = read_input_range(store, slot.names[i], K);
      ENCORE_CHECK_AS(ModelFormatError, other.lo == in.lo && other.hi == in.hi && other.columns == in.columns,
                      "static int8 checkpoint '", store.source(), "': '", slot.names[i], "' and '", slot.names.front(),
                      "' read the same input but store different input ranges");
    }
    if (apply) *slot.packed = (*slot.packed)->with_static_int8_input(in);
  }
  const char* v = std::getenv("ENCORE_VERBOSE");
  if (v && std::string(v) == "1")
    std::fprintf(stderr, "encore: static int8 checkpoint: %zu GEMMs' input ranges %s\n", slots.size(),
                 apply                 ? "applied (fixed scales, values beyond saturate)"
                 : dtype == DType::i8 ? "checked, unused: this CPU's int8 GEMM takes 7-bit activations (no VNNI), "
                                        "where dynamic int8 keeps more accuracy, so dynamic int8 runs"
                                      : "checked, unused in this dtype");
}

}  // namespace encore::models
