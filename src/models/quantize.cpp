// Quantized checkpoints: `encore quantize` writes them, Weights::take reads them (format: docs/quantization.md).
//
// A quantized checkpoint is a model directory whose model.safetensors stores each encoder-layer Linear weight
// <name> (query, key, value, attention output, FFN in and out) as
//   <name>                      I8  (N, K)  q, 0 in the f32 outlier columns
//   <name>.int8_scale           F32 (N)     per output channel
//   <name>.int8_columns         I64 (C)     outlier input columns kept f32 (only when C > 0)
//   <name>.int8_column_values   F32 (N, C)  w[:, columns]
// with w[n, k] = q[n, k]·scale[n] outside those columns: exactly kernels::Int8Weights, so that requantizing the
// dequantized weight at load gives back the very same q, scales and columns (checked per weight when writing;
// a weight that would not come back exactly is stored F32 instead). Every other tensor is stored F32 (integer
// tensors as they were), and config.json gets "encore_quantization": {"dtype": "int8", ...}. A static int8
// checkpoint (--calibrate) adds each Linear's input range (static_int8.hpp) and "activations": "static".
// kernels/ is used directly: the file format is the kernels' int8 weight form, defined once there.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>

#include "io/json_file.hpp"
#include "io/safetensors_writer.hpp"
#include "kernels/kernels.hpp"
#include "models/model.hpp"
#include "models/static_int8.hpp"
#include "tokenizer/unicode.hpp"

namespace encore::models {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

constexpr int64_t kFormatVersion = 1;
const std::string kScale = ".int8_scale", kColumns = ".int8_columns", kColumnValues = ".int8_column_values";

bool is_float(io::StDType d) {
  return d == io::StDType::F64 || d == io::StDType::F32 || d == io::StDType::F16 || d == io::StDType::BF16;
}

// Root files a model directory needs besides its weights (config, tokenizer, sentence-transformers settings).
bool copied_root_file(const fs::path& p) {
  const std::string name = p.filename().string(), ext = p.extension().string();
  if (name == "config.json" || name == "model.safetensors.index.json") return false;  // rewritten / replaced
  return ext == ".json" || ext == ".txt" || ext == ".model" || ext == ".md";
}

// The sentence-transformers module directories named by modules.json (1_Pooling, 2_Normalize, 2_Dense...).
std::vector<fs::path> module_dirs(const fs::path& dir) {
  std::vector<fs::path> out;
  const fs::path modules = dir / "modules.json";
  if (!fs::exists(modules)) return out;
  const Json j = io::read_json_file(modules);  // special files refused, parse errors name the file
  ENCORE_CHECK_AS(ModelFormatError, j.is_array(), "'", modules.string(), "' is not a JSON array");
  for (const Json& m : j) {
    if (!m.is_object() || !m.contains("path") || !m["path"].is_string()) continue;
    const std::string rel = m["path"].get<std::string>();
    if (rel.empty()) continue;
    const fs::path p = fs::weakly_canonical(dir / rel);
    const std::string inside = p.lexically_relative(fs::weakly_canonical(dir)).string();
    ENCORE_CHECK(fs::path(rel).is_relative() && !inside.empty() && inside.rfind("..", 0) != 0, "'",
                 modules.string(), "': module path '", rel, "' is outside the model directory");
    if (fs::is_directory(p)) out.push_back(rel);
  }
  return out;
}

bool verbose() {
  const char* v = std::getenv("ENCORE_VERBOSE");
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace

bool read_quantization_marker(const HfConfig& cfg) {
  if (!cfg.has("encore_quantization")) return false;
  const Json& m = cfg.json()["encore_quantization"];
  ENCORE_CHECK(m.is_object() && m.contains("dtype") && m["dtype"] == "int8" && m.contains("format_version") &&
                   m["format_version"].is_number_integer(),
               cfg.source(), ": 'encore_quantization' must be an object with \"dtype\": \"int8\" and an integer "
               "\"format_version\", got ", m.dump());
  const int64_t v = m["format_version"].get<int64_t>();
  ENCORE_CHECK(v == kFormatVersion, cfg.source(), ": quantized checkpoint format_version ", v,
               " is not the one this encore reads (", kFormatVersion, "); was it written by a newer encore?");
  return true;
}

std::optional<Tensor> take_int8_weight(const io::WeightStore& store, const std::string& name) {
  if (!store.contains(name) || store.info(name).dtype != io::StDType::I8) return std::nullopt;
  const std::string where = "int8 weight '" + name + "' in '" + store.source() + "': ";
  ENCORE_CHECK(store.contains(name + kScale), where, "its scale tensor '", name + kScale, "' is missing");
  Tensor q = store.get_i8(name);
  ENCORE_CHECK(q.dim() == 2 && q.size(0) > 0 && q.size(1) > 0, where, "expected a 2-D weight, got ", q.shape_str());
  kernels::Int8Weights qw;
  qw.N = q.size(0);
  qw.K = q.size(1);
  const int8_t* qp = q.data<int8_t>();
  qw.q.assign(qp, qp + qw.N * qw.K);
  Tensor s = store.get_f32(name + kScale);
  ENCORE_CHECK(s.shape() == Shape{qw.N}, where, "scale has shape ", s.shape_str(), ", expected (", qw.N, ")");
  qw.scale.assign(s.data<float>(), s.data<float>() + qw.N);
  for (float v : qw.scale) ENCORE_CHECK(std::isfinite(v) && v > 0.f, where, "scales must be finite and positive");
  const bool has_columns = store.contains(name + kColumns), has_values = store.contains(name + kColumnValues);
  ENCORE_CHECK(has_columns == has_values, where, "'", name + kColumns, "' and '", name + kColumnValues,
               "' must come together");
  if (has_columns) {
    Tensor c = store.get_i64(name + kColumns);
    ENCORE_CHECK(c.dim() == 1, where, "outlier columns must be 1-D, got ", c.shape_str());
    const int64_t C = c.size(0);
    qw.columns.assign(c.data<int64_t>(), c.data<int64_t>() + C);
    for (int64_t i = 0; i < C; ++i)
      ENCORE_CHECK(qw.columns[i] >= 0 && qw.columns[i] < qw.K && (i == 0 || qw.columns[i] > qw.columns[i - 1]), where,
                   "outlier columns must be ascending indices in [0, ", qw.K, ")");
    Tensor v = store.get_f32(name + kColumnValues);
    ENCORE_CHECK(v.shape() == (Shape{qw.N, C}), where, "outlier column values have shape ", v.shape_str(),
                 ", expected (", qw.N, ", ", C, ")");
    qw.column_values.assign(v.data<float>(), v.data<float>() + qw.N * C);
  }
  Tensor w = Tensor::empty({qw.N, qw.K});
  kernels::dequantize_linear_int8(w.data<float>(), qw);
  return w;
}

}  // namespace encore::models

namespace encore {

QuantizeSummary quantize_checkpoint(const std::string& model_dir, const std::string& out_dir, DType dtype,
                                    const QuantizeOptions& options) {
  using namespace models;
  ENCORE_CHECK(dtype == DType::i8, "quantize: only int8 checkpoints are supported, got ", dtype_name(dtype));
  ENCORE_CHECK(fs::is_directory(model_dir), "model directory '", model_dir, "' does not exist");
  ENCORE_CHECK(!out_dir.empty(), "quantize: empty output directory");
  const fs::path in = fs::canonical(model_dir), out = fs::weakly_canonical(fs::absolute(out_dir));
  ENCORE_CHECK(out != in, "quantize: the output directory is the model directory '", model_dir,
               "'; write the quantized copy to a new directory");
  ENCORE_CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)), "quantize: '", out_dir,
               "' already exists and is not an empty directory; refusing to overwrite it");
  const fs::path parent = out.parent_path();
  ENCORE_CHECK(fs::is_directory(parent), "quantize: the parent directory of '", out_dir, "' does not exist");
  const HfConfig cfg = HfConfig::load(model_dir);
  ENCORE_CHECK(!cfg.has("encore_quantization"), "quantize: '", model_dir, "' is already a quantized checkpoint");
  const bool calibrated = !options.calibration_texts.empty();
  for (size_t i = 0; i < options.calibration_texts.size(); ++i)
    ENCORE_CHECK_AS(InputError, tok::is_valid_utf8(options.calibration_texts[i]), "quantize: calibration text ", i + 1,
                    " is not valid UTF-8");
  std::map<std::string, kernels::Int8StaticInput> ranges;
  if (calibrated) ranges = calibrate_input_ranges(model_dir, options);

  const std::vector<std::string> linear_names = encoder_linear_weight_names(model_dir);
  const std::set<std::string> linear(linear_names.begin(), linear_names.end());
  const io::WeightStore store = io::WeightStore::open_dir(model_dir);
  QuantizeSummary summary;
  std::vector<io::TensorToWrite> tensors;
  std::deque<Tensor> keep;                     // f32 tensors being written
  std::deque<kernels::Int8Weights> quantized;  // int8 weights being written
  for (const std::string& name : store.names()) {
    for (const std::string* suffix : {&kScale, &kColumns, &kColumnValues, &kInt8InputRange, &kInt8InputColumns})
      ENCORE_CHECK(name.size() < suffix->size() || name.compare(name.size() - suffix->size(), suffix->size(), *suffix),
                   "quantize: '", model_dir, "' has a tensor named '", name, "', a name quantized checkpoints reserve");
    const io::TensorInfo& info = store.info(name);
    summary.bytes_in += static_cast<int64_t>(info.end - info.begin);
    if (linear.count(name)) {
      Tensor w = store.get_f32(name).contiguous();
      kernels::Int8Weights qw = kernels::quantize_linear_int8(w.data<float>(), w.size(0), w.size(1));
      if (kernels::int8_round_trip_exact(qw)) {
        const kernels::Int8Weights& q = quantized.emplace_back(std::move(qw));
        const int64_t N = q.N, K = q.K, C = static_cast<int64_t>(q.columns.size());
        tensors.push_back({name, io::StDType::I8, {N, K}, q.q.data(), static_cast<uint64_t>(N * K)});
        tensors.push_back({name + kScale, io::StDType::F32, {N}, q.scale.data(), static_cast<uint64_t>(4 * N)});
        if (C > 0) {
          tensors.push_back({name + kColumns, io::StDType::I64, {C}, q.columns.data(), static_cast<uint64_t>(8 * C)});
          tensors.push_back({name + kColumnValues, io::StDType::F32, {N, C}, q.column_values.data(),
                             static_cast<uint64_t>(4 * N * C)});
        }
        ++summary.quantized;
        continue;
      }
      // A column max within rounding of the outlier-column threshold: stored f32, so loading it and
      // quantizing on the fly still agree exactly.
      summary.kept_f32.push_back(name);
      const Tensor& t = keep.emplace_back(w);
      tensors.push_back({name, io::StDType::F32, t.shape(), t.data<float>(), static_cast<uint64_t>(4 * t.numel())});
    } else if (is_float(info.dtype)) {
      const Tensor& t = keep.emplace_back(store.get_f32(name).contiguous());
      tensors.push_back({name, io::StDType::F32, t.shape(), t.data<float>(), static_cast<uint64_t>(4 * t.numel())});
    } else {  // integer/bool buffers (position_ids...) as they are
      tensors.push_back({name, info.dtype, info.shape, store.raw_data(name), info.end - info.begin});
    }
  }
  ENCORE_CHECK(summary.quantized + static_cast<int64_t>(summary.kept_f32.size()) == static_cast<int64_t>(linear.size()),
               "quantize: internal error: not every encoder Linear weight was found in '", model_dir, "'");
  for (const std::string& name : calibrated ? linear_names : std::vector<std::string>{}) {
    auto it = ranges.find(name);
    ENCORE_CHECK(it != ranges.end(), "quantize: internal error: calibration gave no input range for '", name, "'");
    const kernels::Int8StaticInput& in = it->second;
    const float lo_hi[2] = {in.lo, in.hi};
    const float* range = keep.emplace_back(Tensor::from_floats({2}, lo_hi)).data<float>();
    tensors.push_back({name + kInt8InputRange, io::StDType::F32, {2}, range, 8});
    const int64_t C = static_cast<int64_t>(in.columns.size());
    if (C > 0)
      tensors.push_back({name + kInt8InputColumns, io::StDType::I64, {C}, in.columns.data(), static_cast<uint64_t>(8 * C)});
    ++summary.static_ranges;
    summary.f32_input_channels += C;
  }

  // Everything goes to a temporary sibling directory renamed into place at the end: no half-written output.
  std::string tmp_name = ".";  // appended piecewise: GCC 12's -Wrestrict misfires on "." + std::string&&
  tmp_name += out.filename().string();
  tmp_name += ".tmp-XXXXXX";
  std::string tmp = (parent / tmp_name).string();
  ENCORE_CHECK(::mkdtemp(tmp.data()) != nullptr, "quantize: cannot create a temporary directory in '",
               parent.string(), "': ", std::strerror(errno));
  try {
    ::chmod(tmp.c_str(), 0755);
    const fs::path t(tmp);
    std::map<std::string, std::string> metadata = {{"format", "pt"}, {"encore_quantization", "int8"}};
    io::write_safetensors((t / "model.safetensors").string(), tensors, metadata);
    summary.bytes_out = static_cast<int64_t>(fs::file_size(t / "model.safetensors"));
    for (const auto& entry : fs::directory_iterator(in))
      if (entry.is_regular_file() && copied_root_file(entry.path()))
        fs::copy_file(entry.path(), t / entry.path().filename());
    for (const fs::path& rel : module_dirs(in)) {
      fs::create_directories(t / rel);
      fs::copy(in / rel, t / rel, fs::copy_options::recursive);
    }
    Json config = cfg.json();
    config["encore_quantization"] = {{"dtype", "int8"},
                                     {"format_version", kFormatVersion},
                                     {"scheme", calibrated
                                                    ? "weights: int8 symmetric per output channel, outlier input columns "
                                                      "f32; activations: a static range per Linear input from a "
                                                      "calibration corpus, outlier input channels f32"
                                                    : "weights: int8 symmetric per output channel, outlier input columns "
                                                      "f32; activations quantized per token at run time"},
                                     {"activations", calibrated ? "static" : "dynamic"},
                                     {"quantized_linear_weights", summary.quantized},
                                     {"f32_linear_weights", summary.kept_f32.size()}};
    if (calibrated) {
      config["encore_quantization"]["range_rule"] = options.range_rule;
      config["encore_quantization"]["f32_channel_ratio"] = options.f32_channel_ratio;
      config["encore_quantization"]["calibration_texts"] = options.calibration_texts.size();
    }
    {
      std::ofstream f(t / "config.json");
      f << config.dump(2) << "\n";
      ENCORE_CHECK(f.good(), "quantize: cannot write '", (t / "config.json").string(), "'");
    }
    fs::rename(t, out);  // replaces an empty directory
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  if (verbose())
    std::fprintf(stderr, "encore: quantize: %lld Linear weights int8, %zu kept f32\n",
                 static_cast<long long>(summary.quantized), summary.kept_f32.size());
  return summary;
}

}  // namespace encore
