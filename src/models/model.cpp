#include "models/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <system_error>

#include "io/json_file.hpp"
#include "models/layer_stack.hpp"
#include "nn/common.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"
#include "runtime/parallel.hpp"

namespace encore::models {

namespace fs = std::filesystem;
using Json = nlohmann::json;

HfConfig HfConfig::load(const std::string& model_dir) {
  const fs::path p = fs::path(model_dir) / "config.json";
  ENCORE_CHECK_AS(InputError, fs::is_directory(model_dir), "model directory '", model_dir,
                  "' does not exist or is not a directory");
  ENCORE_CHECK_AS(ModelFormatError, fs::exists(fs::symlink_status(p)), "'", model_dir, "' has no config.json");
  Json j = io::read_json_file(p);  // special files (a directory named config.json, a FIFO) refused first
  ENCORE_CHECK_AS(ModelFormatError, j.is_object(), "'", p.string(), "' is not a JSON object");
  return HfConfig(std::move(j), p.string());
}

int64_t HfConfig::get_int(const std::string& key, std::optional<int64_t> fallback, int64_t lo, int64_t hi) const {
  if (!has(key)) {
    ENCORE_CHECK_AS(ModelFormatError, fallback.has_value(), "'", source_, "' /", key, ": missing required field");
    return *fallback;
  }
  return io::JsonAt(json_[key], source_, "/" + key).integer(lo, hi);
}

// The ranges every config.json number must respect, by name: a negative layer_norm_eps gives NaN everywhere.
static std::pair<double, double> double_range(const std::string& key) {
  constexpr double kMax = std::numeric_limits<double>::max();
  if (key.ends_with("eps") || key.ends_with("epsilon")) return {std::numeric_limits<double>::min(), 1.0};
  if (key.find("dropout") != std::string::npos) return {0.0, 1.0};
  if (key == "initializer_range") return {0.0, kMax};
  return {-kMax, kMax};
}

double HfConfig::get_double(const std::string& key, std::optional<double> fallback) const {
  if (!has(key)) {
    ENCORE_CHECK_AS(ModelFormatError, fallback.has_value(), "'", source_, "' /", key, ": missing required field");
    return *fallback;
  }
  const auto [lo, hi] = double_range(key);
  return io::JsonAt(json_[key], source_, "/" + key).number(lo, hi);
}

std::string HfConfig::get_string(const std::string& key, std::optional<std::string> fallback) const {
  if (!has(key)) {
    ENCORE_CHECK_AS(ModelFormatError, fallback.has_value(), "'", source_, "' /", key, ": missing required field");
    return *fallback;
  }
  return io::JsonAt(json_[key], source_, "/" + key).str();
}

namespace {
constexpr int64_t kPlaceholderLimit = int64_t{64} << 20;  // bytes of zeros standing in for missing tensors
constexpr int64_t kMissingLimit = 1000;                    // missing tensors listed before giving up
}  // namespace

Tensor Weights::take(const std::string& name, const Shape& expected) {
  const std::string full = prefix_ + name;
  if (!store_.contains(full)) {
    shared_->missing.push_back(full);
    // Placeholders let the loader list every missing tensor at once; their cost is checked before they are
    // allocated (a header-less file with a large config would otherwise allocate the whole model in zeros), and
    // so is their count: a config asking for a million tiny layers (ALBERT's num_hidden_groups x inner_group_num)
    // would otherwise build them all, ~10 GB of modules and names, before listing what is missing.
    int64_t elems = 1;
    for (int64_t d : expected) elems = d > 0 && elems > (int64_t{1} << 40) / d ? (int64_t{1} << 40) : elems * d;
    shared_->placeholder_bytes += elems * 4;
    if (store_.names().empty() || shared_->placeholder_bytes > kPlaceholderLimit ||
        static_cast<int64_t>(shared_->missing.size()) >= kMissingLimit)
      finish();
    return Tensor::zeros(expected);  // placeholder; finish() refuses the model
  }
  std::optional<Tensor> int8 = take_int8_weight(store_, full);  // quantized checkpoints (quantize.cpp)
  Tensor t = int8 ? *int8 : store_.get_f32(full);
  ENCORE_CHECK(t.shape() == expected, "weight '", full, "' in '", store_.source(), "' has shape ", t.shape_str(),
               " but config.json implies ", shape_str(expected));
  return t;
}

std::optional<Tensor> Weights::take_optional(const std::string& name, const Shape& expected) {
  if (!store_.contains(prefix_ + name)) return std::nullopt;
  return take(name, expected);
}

void Weights::finish() const {
  if (shared_->missing.empty()) return;
  std::string msg = "weights in '" + store_.source() + "' are missing " + std::to_string(shared_->missing.size()) +
                    " tensor(s) the model needs (never randomly initialised):";
  for (size_t i = 0; i < shared_->missing.size() && i < 50; ++i) msg += " '" + shared_->missing[i] + "'";
  if (shared_->missing.size() > 50) msg += " ...";
  if (store_.names().empty()) msg += " (the file holds no tensors at all)";
  else if (shared_->placeholder_bytes > kPlaceholderLimit || static_cast<int64_t>(shared_->missing.size()) >= kMissingLimit)
    msg += " (stopped looking: the model may need more)";
  throw ModelFormatError(msg);
}

Tensor cat_rows(const std::vector<Tensor>& parts) {
  ENCORE_CHECK(!parts.empty(), "cat_rows: nothing to concatenate");
  Shape s = parts[0].shape();
  int64_t rows = 0;
  for (auto& p : parts) {
    ENCORE_CHECK(p.dim() == static_cast<int64_t>(s.size()) && std::equal(s.begin() + 1, s.end(), p.shape().begin() + 1),
                 "cat_rows: shapes ", shape_str(s), " and ", p.shape_str(), " differ beyond dim 0");
    rows += p.size(0);
  }
  s[0] = rows;
  Tensor out = Tensor::empty(s);
  int64_t r = 0;
  for (auto& p : parts) {
    out.slice(0, r, r + p.size(0)).copy_from(p);
    p.release_resident_pages();
    r += p.size(0);
  }
  return out;
}

std::string activation_from_hf(const std::string& act, const std::string& source) {
  if (act == "gelu" || act == "gelu_python") return "gelu";
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return "gelu_tanh";
  if (act == "relu") return "relu";
  if (act == "silu" || act == "swish") return "silu";
  throw Error(source + ": hidden_act '" + act + "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)");
}

std::vector<std::string> LayerNames::hf_names(const std::string& local) const {
  const auto dot = local.rfind('.');
  const std::string module = local.substr(0, dot), kind = local.substr(dot + 1);  // "linear1", "weight"
  if (module == "self_attn" && (kind == "in_proj_weight" || kind == "in_proj_bias")) {
    const std::string suffix = kind == "in_proj_weight" ? ".weight" : ".bias";
    return {q + suffix, k + suffix, v + suffix};
  }
  const std::map<std::string, const std::string*> parts = {{"self_attn.out_proj", &o}, {"norm1", &attn_norm},
                                                            {"linear1", &ffn_in},       {"linear2", &ffn_out},
                                                            {"norm2", &ffn_norm}};
  auto it = parts.find(module);
  ENCORE_CHECK(it != parts.end(), "no checkpoint name is known for encoder-layer parameter '", local, "'");
  return {*it->second + "." + kind};
}

LayerNames bert_layer_names() {
  return {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
          "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"};
}

nn::TransformerEncoderLayer load_post_ln_layer(Weights& w, const std::string& prefix, const LayerNames& names,
                                               int64_t H, int64_t heads, int64_t I, const std::string& activation,
                                               double eps, int64_t& num_parameters) {
  nn::NoInitGuard no_init;
  nn::TransformerEncoderLayer layer(H, heads, I, 0.0, activation, eps, /*batch_first=*/true, /*norm_first=*/false);
  // Every parameter from the checkpoint tensors LayerNames names for it; the packed Q/K/V stacks three.
  for (auto& [local, param] : layer.named_parameters()) {
    num_parameters += param->numel();
    const std::vector<std::string> hf = names.hf_names(local);
    Shape part = param->shape();
    part[0] /= static_cast<int64_t>(hf.size());
    std::vector<Tensor> parts;
    for (const std::string& n : hf) parts.push_back(w.take(prefix + n, part));
    if (parts.size() == 1) {
      *param = parts[0];
      continue;
    }
    // Q/K/V rows of a mapped checkpoint are not stacked here: the preparation stacks them into a transient copy,
    // layers in parallel (MultiheadAttention::use_in_proj_rows). Stacked at load, every layer's copy was faulted
    // in on this thread before any preparation began: all-MiniLM-L6-v2, ~10% of the CPU time of
    // SentenceEncoder::load on an AVX2 VM (perf), ahead of the parallel part.
    if (local == "self_attn.in_proj_weight" &&
        std::all_of(parts.begin(), parts.end(), [](const Tensor& t) { return t.is_file_mapping(); })) {
      layer.self_attn.use_in_proj_rows(std::move(parts));  // param is not read again: the loop moves on
      continue;
    }
    *param = cat_rows(parts);
  }
  layer.eval();
  return layer;
}

std::pair<int64_t, int64_t> check_inputs(const Tensor& ids, const Tensor& mask, const Tensor& types) {
  ENCORE_CHECK(ids.defined() && ids.dim() == 2, "input_ids: expected (batch, seq_len), got ",
               ids.defined() ? ids.shape_str() : "none");
  check_dtype(ids, "input_ids", DType::i64);
  const int64_t B = ids.size(0), T = ids.size(1);
  ENCORE_CHECK(B > 0 && T > 0, "input_ids: empty input ", ids.shape_str());
  if (mask.defined()) {
    check_shape(mask, "attention_mask", {B, T});
    check_dtype(mask, "attention_mask", DType::i64);
  }
  if (types.defined()) {
    check_shape(types, "token_type_ids", {B, T});
    check_dtype(types, "token_type_ids", DType::i64);
  }
  return {B, T};
}

Tensor key_padding_from_attention_mask(const Tensor& mask, int64_t B, int64_t T) {
  if (!mask.defined()) return Tensor();
  Tensor m = mask.contiguous();
  Tensor out = Tensor::empty({B, T});
  const int64_t* p = m.data<int64_t>();
  float* o = out.data<float>();
  bool any = false;
  for (int64_t i = 0; i < B * T; ++i) {
    o[i] = p[i] != 0 ? 0.f : -std::numeric_limits<float>::infinity();
    any |= p[i] == 0;
  }
  return any ? out : Tensor();
}

std::vector<std::string> registered_families() {
  std::vector<std::string> out;
  for (auto& [k, _] : registry()) out.push_back(k);
  return out;
}

namespace {

// A task checkpoint whose head encore does not run (*ForQuestionAnswering, *ForMultipleChoice, ...) loads as its
// base model: warned, never silent (logits stay undefined). Not an error: the encoder underneath is what embedding
// and feature extraction use; the pipelines that need a head refuse the checkpoint by name. A head encore runs but
// whose weights the checkpoint lacks is not warned about: sentence-transformers saves base weights under the
// original architecture name (all-mpnet-base-v2 says MPNetForMaskedLM), and transformers loads those silently too.
// Likewise a *ForCausalLM checkpoint without an lm_head.weight (its head tied to the token embeddings): decoder-only
// embedders ship so (Qwen3-Embedding's architecture is Qwen3ForCausalLM), and only the base model runs for them.
void warn_if_head_ignored(const std::string& model_dir, const ModelInfo& info, const io::WeightStore& store) {
  const std::string& a = info.architecture;
  const bool task_model = a.find("For") != std::string::npos || a.find("LMHead") != std::string::npos;
  if (!task_model || !info.head.empty()) return;
  if (a.ends_with("ForCausalLM") && !store.contains("lm_head.weight")) return;
  for (const char* runs : {"ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering", "ForMaskedLM",
                           "ForPreTraining"})
    if (a.ends_with(runs)) return;
  warn("'" + model_dir + "' is a " + a + " checkpoint: encore does not run its task head (it runs "
       "*ForSequenceClassification, *ForTokenClassification, *ForQuestionAnswering and *ForMaskedLM heads); it loads as its base model, "
       "without logits");
}

// The first non-finite value of the encoder layers' Linear weights as the checkpoint stores them, in
// layer_linear_weight_names() order (layers ascending, as prepare_inference_weights reports the lowest failing
// layer), described as "weight '<name>' has a non-finite value (nan) at row r, column c"; empty if none has one.
// Only run after int8 preparation failed, to name what the quantizer (which sees one packed matrix: Q, K and V
// stacked, say) could only give a row of.
std::string describe_first_non_finite_layer_weight(EncoderModel& model, const io::WeightStore& store) {
  for (const std::string& name : model.layer_linear_weight_names()) {
    if (!store.contains(name)) continue;
    // an int8 checkpoint's weight is what the model runs: its codes times int8_scale, with int8_column_values
    const std::optional<Tensor> dequantized = take_int8_weight(store, name);
    const std::string where =
        dequantized ? io::describe_first_non_finite(*dequantized, "'" + name + "' (int8, dequantized with its int8_scale"
                                                                              " and int8_column_values)")
                    : io::describe_first_non_finite(store, name);
    if (!where.empty()) return "weight " + where;
  }
  return {};
}

}  // namespace

// Layers are prepared in one parallel region, each thread whole layers (their packing, quantization and
// population then run single-threaded, parallel_for being serial when nested). Per-Linear parallel regions left the
// second thread spinning between them while the first ran the serial parts (system calls, safetensors page faults),
// on a machine whose other core also loads the tokenizer and warms up the GEMMs. all-MiniLM-L6-v2's
// SentenceEncoder::load + first encode on a 2-vCPU AVX2 VM, medians of 20 interleaved fresh processes: fp32
// 84.2 -> 79.8 ms, int8 123.7 -> 102.1 ms. Every layer's prepared weights are what a serial loop makes; the error of
// the lowest failing layer is rethrown, as a serial loop would throw it. The families that prepare their own layers
// (ModernBERT, DeBERTa-v2, T5, Qwen3) call the same prepare_layers_in_parallel (model.hpp).
void EncoderModel::prepare_inference_weights(DType dtype) {
  std::vector<nn::TransformerEncoderLayer*> layers;
  for_each_layer([&](nn::TransformerEncoderLayer& layer) { layers.push_back(&layer); });
  prepare_layers_in_parallel(layers, [&](nn::TransformerEncoderLayer* layer) { layer->prepare_inference(dtype); });
}

std::unique_ptr<EncoderModel> load_model(const std::string& model_dir, DType dtype) {
  // oneDNN's process-wide GEMM kernels (kernels::warm_up_gemm_kernels) are made on a second thread while this
  // one reads and prepares the checkpoint, instead of in the first forward. all-MiniLM-L6-v2 on an AVX2 VM: load
  // + first 3-token encode 106 -> 90 ms (the load 77 -> 84 ms, the encode 30 -> 6 ms). Waited for before
  // returning (the future's destructor also waits when loading throws). A warm-up error, or no thread to run it
  // on, is dropped: the forward runs the same GEMMs and reports any error.
  std::future<void> gemm_kernels;
  if (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::i8) {
    const kernels::Precision precision = nn::detail::precision_of(dtype);
    if (kernels::gemm_kernels_need_warm_up(precision)) {
      try {
        gemm_kernels = std::async(std::launch::async, [precision] { kernels::warm_up_gemm_kernels(precision); });
      } catch (const std::system_error&) {
      }
    }
  }
  HfConfig cfg = HfConfig::load(model_dir);
  const std::string type = cfg.get_string("model_type");
  auto it = registry().find(type);
  if (it == registry().end()) {
    std::string list;
    for (auto& k : registered_families()) list += (list.empty() ? "" : ", ") + k;
    throw Error("'" + model_dir + "': model_type '" + type + "' is not supported; supported: " + list);
  }
  const bool quantized = read_quantization_marker(cfg);
  io::WeightStore store = io::WeightStore::open_dir(model_dir);
  std::unique_ptr<EncoderModel> model = it->second(cfg, store);
  model->info.model_type = type;
  model->eval();  // inference until AutoModel::train(); the loaders' layers are already in eval mode
  try {
    model->prepare_inference_weights(dtype);
  } catch (const kernels::NonFiniteWeightError&) {
    // int8 quantizes the float weights here and refuses NaN/Inf, knowing only a row of the matrix it packs; name
    // the checkpoint tensor and element instead (fp32 and bf16 load such weights, and their forward reports the
    // NaN/Inf it produces, naming the layer). Should the scan itself fail, or find nothing (a weight outside the
    // layers), the quantizer's error stands.
    const std::exception_ptr quantizer_error = std::current_exception();
    std::string where;
    try {
      where = describe_first_non_finite_layer_weight(*model, store);
    } catch (...) {
    }
    if (where.empty()) std::rethrow_exception(quantizer_error);
    throw ModelFormatError("'" + model_dir + "': int8 quantization needs finite weights: " + where);
  }
  if (quantized) apply_static_int8_ranges(*model, cfg, store, dtype);
  release_cached_memory();  // what preparation freed (the packed Q/K/V copies) goes back to the system
  if (quantized && std::getenv("ENCORE_VERBOSE") && std::string(std::getenv("ENCORE_VERBOSE")) == "1")
    std::fprintf(stderr, "encore: '%s' is an int8 checkpoint: %s\n", model_dir.c_str(),
                 dtype == DType::i8 ? "int8 as quantized" : "its dequantized weights run in the requested dtype");
  model->info.dtype = dtype_name(dtype);
  // The one place a model's dtype picks its attention precision (the fused kernel's contract:
  // kernels::attention_fused_bf16_ref). fp32 keeps exact fp32 attention. bf16 and int8 round the matmul inputs
  // to bf16, except int8 without VNNI: its 7-bit activations already spend the int8 accuracy budget (MiniLM min
  // cosine 0.99553 vs the 0.995 requirement, tests/python/test_int8.py; bf16 attention took it to 0.99447), and a
  // real CPU without VNNI has no AVX512-BF16 either, so there this changes nothing but the emulation in tests.
  model->bf16_attention = dtype == DType::bf16 ||
                          (dtype == DType::i8 && kernels::int8_path_for_this_cpu() == kernels::Int8Path::native8);
  model->info.stored_dtype = quantized ? "int8" : "float32";
  if (cfg.has("architectures") && cfg.json()["architectures"].is_array() && !cfg.json()["architectures"].empty() &&
      cfg.json()["architectures"][0].is_string())
    model->info.architecture = cfg.json()["architectures"][0].get<std::string>();
  warn_if_head_ignored(model_dir, model->info, store);
  if (gemm_kernels.valid()) gemm_kernels.wait();
  return model;
}

std::vector<std::string> encoder_linear_weight_names(const std::string& model_dir) {
  HfConfig cfg = HfConfig::load(model_dir);
  auto it = registry().find(cfg.get_string("model_type"));
  ENCORE_CHECK(it != registry().end(), "'", model_dir, "': model_type '", cfg.get_string("model_type"),
               "' is not supported");
  io::WeightStore store = io::WeightStore::open_dir(model_dir);
  return it->second(cfg, store)->layer_linear_weight_names();  // the structure as loaded, nothing prepared
}

std::string detect_prefix(const io::WeightStore& store, const std::string& base_prefix, const std::string& probe) {
  // "" also when neither is there: let Weights report what is missing
  return !store.contains(probe) && store.contains(base_prefix + probe) ? base_prefix : "";
}

std::optional<PackedBatch> PackedBatch::plan(const Tensor& key_padding, const ForwardOptions& options, bool training) {
  if (training || !options.skip_padding || options.output_attentions || !key_padding.defined()) return std::nullopt;
  if (key_padding.dim() != 2) return std::nullopt;
  PackedBatch p;
  p.B = key_padding.size(0);
  p.T = key_padding.size(1);
  p.cu_seqlens.assign(p.B + 1, 0);
  const Tensor kp = key_padding.contiguous();
  const float* m = kp.data<float>();
  bool padded = false;
  for (int64_t b = 0; b < p.B; ++b) {
    const float* row = m + b * p.T;
    int64_t n = 0;
    while (n < p.T && row[n] == 0.f) ++n;
    if (n == 0) return std::nullopt;  // an empty sequence: the padded path defines what it gets
    for (int64_t t = n; t < p.T; ++t)
      if (row[t] != -std::numeric_limits<float>::infinity()) return std::nullopt;  // not right padding
    padded |= n < p.T;
    p.cu_seqlens[b + 1] = p.cu_seqlens[b] + n;
  }
  if (!padded) return std::nullopt;
  return p;
}

Tensor PackedBatch::gather(const Tensor& x_in) const {
  check_shape(x_in, "hidden states", {B, T, -1});
  const Tensor x = x_in.contiguous();
  const int64_t C = x.size(2);
  Tensor out = Tensor::empty({1, cu_seqlens.back(), C});
  runtime::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      std::memcpy(out.data<float>() + cu_seqlens[b] * C, x.data<float>() + b * T * C,
                  sizeof(float) * (cu_seqlens[b + 1] - cu_seqlens[b]) * C);
  });
  return out;
}

Tensor PackedBatch::scatter(const Tensor& x_in) const {
  check_shape(x_in, "packed hidden states", {1, cu_seqlens.back(), -1});
  const Tensor x = x_in.contiguous();
  const int64_t C = x.size(2);
  Tensor out = Tensor::empty({B, T, C});
  runtime::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n = cu_seqlens[b + 1] - cu_seqlens[b];
      float* o = out.data<float>() + b * T * C;
      std::memcpy(o, x.data<float>() + cu_seqlens[b] * C, sizeof(float) * n * C);
      std::memset(o + n * C, 0, sizeof(float) * (T - n) * C);
    }
  });
  return out;
}

Tensor run_layers(const std::vector<const nn::TransformerEncoderLayer*>& layers, Tensor x, const Tensor& attn_mask,
                  const Tensor& key_padding, const ForwardOptions& options, ModelOutput& out) {
  const std::optional<PackedBatch> packed =
      PackedBatch::plan(key_padding, options, !layers.empty() && layers.front()->is_training());
  if (packed) x = packed->gather(x);
  const Tensor& kpm = packed ? Tensor() : key_padding;
  const std::vector<int64_t>* cu_seqlens = packed ? &packed->cu_seqlens : nullptr;
  const StackRecorder record{options, packed ? &*packed : nullptr, out};
  record.input(x);
  for (const auto* layer : layers) {
    Tensor weights;
    x = layer->forward_batch_first(x, attn_mask, kpm, false, options.output_attentions ? &weights : nullptr,
                                   cu_seqlens);
    record.layer(x, weights);
  }
  return packed ? packed->scatter(x) : x;
}

TokenEmbeddings TokenEmbeddings::load(Weights& w, const HfConfig& cfg, int64_t E, bool with_types) {
  TokenEmbeddings e;
  const int64_t V = cfg.get_int("vocab_size", std::nullopt, 1, 10'000'000);
  const int64_t P = cfg.get_int("max_position_embeddings", 512, 1, 1'000'000);
  e.word_embeddings = nn::Embedding(w.take("embeddings.word_embeddings.weight", {V, E}));
  e.position_embeddings = nn::Embedding(w.take("embeddings.position_embeddings.weight", {P, E}));
  if (with_types) {
    const int64_t types = cfg.get_int("type_vocab_size", 2, 0, 1'000'000);
    if (types > 0) e.token_type_embeddings = nn::Embedding(w.take("embeddings.token_type_embeddings.weight", {types, E}));
    // 0 means no token-type term; a stored table would then be dropped silently (transformers refuses the shape)
    ENCORE_CHECK_AS(ModelFormatError, types > 0 || !w.has("embeddings.token_type_embeddings.weight"), "'",
                    cfg.source(), "' /type_vocab_size: 0 (no token-type embeddings), but the checkpoint stores ",
                    "embeddings.token_type_embeddings.weight: config.json and the weights disagree");
  }
  e.norm = nn::LayerNorm(E, cfg.get_double("layer_norm_eps", 1e-12));
  e.norm.weight = w.take("embeddings.LayerNorm.weight", {E});
  e.norm.bias = w.take("embeddings.LayerNorm.bias", {E});
  return e;
}

void TokenEmbeddings::members(nn::Members& m) {
  m.child("word_embeddings", word_embeddings);
  m.child("position_embeddings", position_embeddings);
  if (token_type_embeddings) m.child("token_type_embeddings", *token_type_embeddings);
  m.child("LayerNorm", norm);
}

struct TokenEmbeddingsSaved {
  uint64_t seed = 0;
};

Tensor TokenEmbeddings::forward(const Tensor& ids, const Tensor& position_ids, const Tensor& types) const {
  Tensor x = word_embeddings.apply(ids, "input_ids");
  Tensor pos = position_embeddings.apply(position_ids, "position_ids");
  Tensor type_rows;
  if (token_type_embeddings)
    type_rows = token_type_embeddings->apply(types.defined() ? types : Tensor::zeros(ids.shape(), DType::i64),
                                             "token_type_ids");
  if (!training_) {  // layernorm(word + position + type), the last sum fused with the norm (in x's storage)
    if (!type_rows.defined()) return norm.add_apply(x, pos, /*keep_sum=*/false);
    ops::add_forward_(x, pos);
    return norm.add_apply(x, type_rows, /*keep_sum=*/false);
  }
  // out = dropout(LayerNorm(word[ids] + position[pos] + token_type[types])); the norm saves the sum
  ops::add_forward_(x, pos);
  if (type_rows.defined()) ops::add_forward_(x, type_rows);
  auto sv = std::make_shared<TokenEmbeddingsSaved>();
  Tensor y = norm.apply(x);
  sv->seed = nn::detail::next_seed();
  push_saved(sv);
  return ops::dropout_forward(y, dropout, true, sv->seed);
}

Tensor* grad_buffer(Tensor& g, const Tensor& p) { return &nn::Module::grad_of(g, p); }

void TokenEmbeddings::backward(const Tensor& dout) {
  auto sv = pop_saved<TokenEmbeddingsSaved>("embeddings");
  // in the forward pass this was:  out = dropout(LayerNorm(word[ids] + position[pos] + token_type[types]))
  Tensor dnorm;
  ops::dropout_backward(&dnorm, dout.contiguous(), dropout, true, sv->seed);
  const Tensor dsum = norm.backward(dnorm);
  word_embeddings.backward(dsum);
  position_embeddings.backward(dsum);
  if (token_type_embeddings) token_type_embeddings->backward(dsum);
}

void EncoderModel::materialize() {
  for (auto& [name, t] : named_parameters()) *t = t->clone();  // owned, writable, 64-byte aligned
  drop_prepared();
}

Tensor absolute_position_ids(int64_t B, int64_t T) {
  Tensor p = Tensor::empty({B, T}, DType::i64);
  int64_t* d = p.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) d[b * T + t] = t;
  return p;
}

Tensor padding_offset_position_ids(const Tensor& input_ids, int64_t padding_idx) {
  Tensor ids = input_ids.contiguous();
  const int64_t B = ids.size(0), T = ids.size(1);
  Tensor p = Tensor::empty({B, T}, DType::i64);
  const int64_t* in = ids.data<int64_t>();
  int64_t* d = p.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t count = 0;
    for (int64_t t = 0; t < T; ++t) {
      const bool real = in[b * T + t] != padding_idx;
      count += real;
      d[b * T + t] = real ? padding_idx + count : padding_idx;
    }
  }
  return p;
}

EncoderDims read_encoder_dims(const HfConfig& cfg, const std::string& default_act) {
  EncoderDims d;
  d.hidden = cfg.get_int("hidden_size", std::nullopt, 1, 65536);
  d.layers = cfg.get_int("num_hidden_layers", std::nullopt, 1, 1000);
  d.heads = cfg.get_int("num_attention_heads", std::nullopt, 1, 4096);
  d.intermediate = cfg.get_int("intermediate_size", std::nullopt, 1, 1 << 20);
  ENCORE_CHECK(d.hidden % d.heads == 0, cfg.source(), ": hidden_size ", d.hidden,
               " is not divisible by num_attention_heads ", d.heads);
  d.activation = activation_from_hf(cfg.get_string("hidden_act", default_act), cfg.source());
  d.eps = cfg.get_double("layer_norm_eps", 1e-12);
  return d;
}

void fill_info(ModelInfo& info, const HfConfig& cfg, const EncoderDims& d) {
  info.hidden_size = d.hidden;
  info.num_layers = d.layers;
  info.num_heads = d.heads;
  info.intermediate_size = d.intermediate;
  info.hidden_act = d.activation;
  info.vocab_size = cfg.get_int("vocab_size", 0, 0, 10'000'000);
  info.max_position_embeddings = cfg.get_int("max_position_embeddings", 512, 1, 1'000'000);
  // A row of the word embeddings (transformers' nn.Embedding(padding_idx=) refuses one past the table); an id out
  // of range would otherwise fail only when a batch needs padding, blaming the input.
  info.pad_token_id = cfg.get_int("pad_token_id", 0, 0, info.vocab_size > 0 ? info.vocab_size - 1 : 10'000'000);
}

Tensor first_token(const Tensor& x) { return x.select(1, 0).contiguous(); }

bool architecture_ends_with(const HfConfig& cfg, const std::string& suffix) {
  if (!cfg.has("architectures") || !cfg.json()["architectures"].is_array()) return false;
  for (auto& a : cfg.json()["architectures"]) {
    if (!a.is_string()) continue;
    const std::string s = a.get<std::string>();
    if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  }
  return false;
}

nn::Linear take_linear(Weights& w, const std::string& name, int64_t out, int64_t in) {
  nn::Linear l;
  l.weight = w.take(name + ".weight", {out, in});
  l.bias = w.take(name + ".bias", {out});
  l.in_features = in;
  l.out_features = out;
  return l;
}

void read_labels(const HfConfig& cfg, ModelInfo& info) {
  if (cfg.has("id2label") && cfg.json()["id2label"].is_object()) {
    const auto& m = cfg.json()["id2label"];
    info.id2label.assign(m.size(), "");
    for (auto& [k, v] : m.items()) {
      size_t idx = 0;
      try {
        idx = std::stoul(k);
      } catch (...) {
        throw Error(cfg.source() + ": id2label key '" + k + "' is not an integer");
      }
      ENCORE_CHECK(idx < m.size() && v.is_string(), cfg.source(), ": id2label entry '", k, "' is invalid");
      info.id2label[idx] = v.get<std::string>();
    }
  }
  info.num_labels = cfg.get_int("num_labels", static_cast<int64_t>(info.id2label.empty() ? 2 : info.id2label.size()),
                                1, 1 << 20);
}

std::optional<int64_t> read_model_max_length(const std::string& model_dir) {
  const std::filesystem::path file = std::filesystem::path(model_dir) / "tokenizer_config.json";
  if (!std::filesystem::exists(file)) return std::nullopt;
  const nlohmann::json j = io::read_json_file(file);
  if (!j.contains("model_max_length") || !j["model_max_length"].is_number()) return std::nullopt;
  const double v = j["model_max_length"].get<double>();
  if (!(v >= 1) || v > 1e15) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::string configured_special_token(const std::string& model_dir, const std::string& name) {
  for (const char* file_name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::filesystem::path file = std::filesystem::path(model_dir) / file_name;
    if (!std::filesystem::exists(file)) continue;
    const nlohmann::json j = io::read_json_file(file);
    const io::JsonAt root(j, file.string());
    if (!j.is_object() || !root.has(name.c_str())) continue;
    const io::JsonAt m = root[name.c_str()];
    return m.json().is_object() ? m["content"].str() : m.str();
  }
  return "";
}

void read_question_answering_labels(const HfConfig& cfg, ModelInfo& info) {
  ModelInfo labels;
  read_labels(cfg, labels);
  ENCORE_CHECK_AS(ModelFormatError, labels.num_labels == 2, cfg.source(), ": a question-answering head has 2 outputs "
                  "(start and end logits); num_labels is ", labels.num_labels);
  info.num_labels = 2;
  info.id2label.clear();
}

}  // namespace encore::models

namespace encore {

AutoModel::AutoModel(std::shared_ptr<models::EncoderModel> impl) : impl_(std::move(impl)) {}

AutoModel AutoModel::load(const std::string& model_dir, DType dtype) {
  return AutoModel(std::shared_ptr<models::EncoderModel>(models::load_model(model_dir, dtype)));
}

std::vector<std::string> AutoModel::supported_model_types() { return models::registered_families(); }
std::vector<AutoModel::Family> AutoModel::supported_families() {
  std::vector<Family> out;
  for (const auto& f : models::family_descriptions()) out.push_back({f.model_type, f.heads, f.attention});
  return out;
}

ModelOutput AutoModel::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                               const ForwardOptions& options) const {
  models::check_inputs(input_ids, attention_mask, token_type_ids);
  runtime::spread_team();  // no two of this call's threads on one CPU (runtime/parallel.hpp)
  const ops::AttentionPrecisionScope attention_precision(impl_->bf16_attention);  // decided by load_model
  return impl_->forward(input_ids, attention_mask, token_type_ids, options);
}

const ModelInfo& AutoModel::info() const { return impl_->info; }

void AutoModel::train(bool mode) {
  if (mode && !materialized_) {
    impl_->materialize();
    materialized_ = true;
  }
  impl_->train(mode);
}

void AutoModel::set_dropout(double p) {
  ENCORE_CHECK(p >= 0.0 && p < 1.0, "set_dropout: probability must be in [0, 1), got ", p);
  impl_->set_dropout(p);
}

void AutoModel::backward(const Tensor& d_last, const Tensor& d_pooler, const Tensor& d_logits) {
  impl_->backward(d_last, d_pooler, d_logits);
}

nn::Module& AutoModel::module() { return *impl_; }

void AutoModel::set_gradient_checkpointing(bool enabled) { impl_->set_gradient_checkpointing(enabled); }
bool AutoModel::gradient_checkpointing() const { return impl_->gradient_checkpointing; }

void AutoModel::add_sequence_classifier(int64_t num_labels, uint64_t seed) {
  impl_->add_sequence_classifier(num_labels, seed);
}
void AutoModel::add_token_classifier(int64_t num_labels, uint64_t seed) { impl_->add_token_classifier(num_labels, seed); }
int64_t AutoModel::max_sequence_length() const { return impl_->max_sequence_length(); }

}  // namespace encore
