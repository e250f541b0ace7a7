// Static int8 (static_int8.cpp; docs/quantization.md, "Static int8"): calibration of the encoder Linears' input
// ranges and their place in a quantized checkpoint.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "encore/model.hpp"
#include "kernels/kernels.hpp"

namespace encore::models {

// Checkpoint tensors per encoder Linear weight <name> (query, key and value each carry their shared input's):
//   <name>.int8_input_range    F32 (2)  [lo, hi], finite, lo <= 0 <= hi
//   <name>.int8_input_columns  I64 (C)  input channels computed in f32, ascending (only when C > 0)
inline const std::string kInt8InputRange = ".int8_input_range", kInt8InputColumns = ".int8_input_columns";

constexpr int kMaxF32Channels = kernels::kInt8MaxOutliers;  // they run as every row's outliers

// "max" -> 100, "pX" -> X in (50, 100]; anything else is a UsageError.
double parse_range_rule(const std::string& rule);
// [min(0, q(1 - p)), max(0, q(p))] with p = percentile/100 and q(a) the value of rank floor(a·(n-1)) in sorted
// order (nearest rank below, no interpolation). Reorders values.
std::pair<float, float> quantile_range(std::vector<float>& values, double percentile);
// Input channels whose max |x| exceeds ratio x the median channel's (the largest kMaxF32Channels), ascending.
std::vector<int64_t> f32_input_channels(const std::vector<float>& ch_min, const std::vector<float>& ch_max,
                                        double ratio);
// Runs model_dir's fp32 model over options.calibration_texts; each encoder Linear weight name's input range.
std::map<std::string, kernels::Int8StaticInput> calibrate_input_ranges(const std::string& model_dir,
                                                                       const QuantizeOptions& options);

}  // namespace encore::models
