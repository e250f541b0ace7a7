// Shared by the libFuzzer harnesses (tests/fuzz, scripts/fuzz.sh): the input as a file, invariant checks, and a
// tiny BERT model directory written once per process.
//
// Contract of every harness: whatever the bytes, the code under test returns or throws encore::Error (the
// documented boundary); anything else (another exception, a sanitizer report, a FUZZ_ASSERT) is a finding.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "encore/sentence_encoder.hpp"
#include "io/safetensors_writer.hpp"

namespace encore_fuzz {

// A directory private to this process under $TMPDIR (scripts/fuzz.sh points TMPDIR at a scratch directory).
inline std::string scratch_dir(const std::string& sub = "") {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/encore-fuzz-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  if (!sub.empty()) {
    dir += "/" + sub;
    ::mkdir(dir.c_str(), 0700);
  }
  return dir;
}

// Writes the bytes to <scratch>/<name> (readers that take a path: mmap, extension-based dispatch).
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name,
                               const std::string& sub = "") {
  const std::string path = scratch_dir(sub) + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  size_t off = 0;
  while (off < size) {
    const ssize_t w = ::write(fd, data + off, size - off);
    if (w <= 0) std::abort();
    off += static_cast<size_t>(w);
  }
  ::close(fd);
  return path;
}

// Invariant violations the harness checks itself (beyond the sanitizers): abort so libFuzzer reports them.
#define FUZZ_ASSERT(cond)                                                                  \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      __builtin_printf("fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

// The config.json of the tiny model: BERT, hidden 8, one layer, MiniLM's vocabulary (so its tokenizer fits).
inline std::string tiny_bert_config() {
  return R"({"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 30522, "hidden_size": 8,
  "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 64,
  "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
  "attention_probs_dropout_prob": 0.1, "pad_token_id": 0})";
}

// Writes model.safetensors of the tiny BERT into dir (random weights, fixed seed; LayerNorm weights 1).
inline void write_tiny_bert_weights(const std::string& dir) {
  const int64_t V = 30522, H = 8, I = 16, P = 64;
  std::vector<std::pair<std::string, encore::Shape>> shapes = {
      {"embeddings.word_embeddings.weight", {V, H}},     {"embeddings.position_embeddings.weight", {P, H}},
      {"embeddings.token_type_embeddings.weight", {2, H}}, {"embeddings.LayerNorm.weight", {H}},
      {"embeddings.LayerNorm.bias", {H}}};
  const std::string l = "encoder.layer.0.";
  for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
    shapes.push_back({l + m + ".weight", {H, H}});
    shapes.push_back({l + m + ".bias", {H}});
  }
  shapes.push_back({l + "attention.output.LayerNorm.weight", {H}});
  shapes.push_back({l + "attention.output.LayerNorm.bias", {H}});
  shapes.push_back({l + "intermediate.dense.weight", {I, H}});
  shapes.push_back({l + "intermediate.dense.bias", {I}});
  shapes.push_back({l + "output.dense.weight", {H, I}});
  shapes.push_back({l + "output.dense.bias", {H}});
  shapes.push_back({l + "output.LayerNorm.weight", {H}});
  shapes.push_back({l + "output.LayerNorm.bias", {H}});
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 0.2f);
  std::vector<std::vector<float>> data;
  std::vector<encore::io::TensorToWrite> tensors;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    const bool norm_weight = name.find("LayerNorm.weight") != std::string::npos;
    for (float& x : v) x = norm_weight ? 1.f : normal(rng);
    data.push_back(std::move(v));
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    tensors.push_back({shapes[i].first, encore::io::StDType::F32, shapes[i].second, data[i].data(),
                       data[i].size() * sizeof(float)});
  encore::io::write_safetensors(dir + "/model.safetensors", tensors);
}

// A loadable sentence-embedding directory: the tiny BERT with MiniLM's tokenizer (the default model's files).
inline std::string tiny_model_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const std::string d = scratch_dir("tiny-model");
    std::ofstream(d + "/config.json") << tiny_bert_config();
    write_tiny_bert_weights(d);
    const fs::path src = encore::default_model_dir();
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"})
      if (fs::exists(src / f)) fs::copy_file(src / f, fs::path(d) / f, fs::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

}  // namespace encore_fuzz
