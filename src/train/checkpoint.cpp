#include "train/checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <set>

#include "io/json_file.hpp"
#include "io/safetensors.hpp"
#include "io/safetensors_writer.hpp"
#include "io/staged_dir.hpp"

namespace encore::train {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// Tokenizer files of a model directory (transformers' and sentencepiece's names).
bool is_tokenizer_file(const fs::path& p) {
  static const std::set<std::string> names = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                              "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt"};
  return names.count(p.filename().string()) || p.extension() == ".model";
}

io::TensorToWrite f32_entry(const std::string& name, const Tensor& t) {
  ENCORE_CHECK(t.dtype() == DType::f32 && t.is_contiguous(), "checkpoint: tensor '", name,
               "' is not contiguous float32");
  return {name, io::StDType::F32, t.shape(), t.data<float>(), static_cast<uint64_t>(t.numel()) * 4};
}

}  // namespace

void check_output_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec))
    ENCORE_CHECK(fs::exists(fs::path(dir) / "trainer_state.json"), "--output '", dir,
                 "' exists and is not a checkpoint written by encore train (no trainer_state.json); refusing to "
                 "replace it: choose a new or empty directory");
  io::StagedDir probe(dir);  // creates (and on destruction removes) a sibling: the location is writable
}

HfExport write_hf_weights(io::StagedDir& out, const AutoModel& model) {
  HfExport hf = model.export_hf();
  std::vector<io::TensorToWrite> tensors;
  for (const auto& [name, t] : hf.tensors) tensors.push_back(f32_entry(name, t));
  io::write_safetensors(out.file("model.safetensors"), tensors, {{"format", "pt"}});
  return hf;
}

void write_training_state(io::StagedDir& out, const AdamW& optimizer, const Json& trainer_state,
                          const std::string& plot_svg) {
  const std::map<std::string, Tensor> opt = optimizer.state_dict();
  std::vector<io::TensorToWrite> tensors;
  for (const auto& [name, t] : opt) {
    if (t.dtype() == DType::i64) {
      tensors.push_back({name, io::StDType::I64, t.shape(), t.data<int64_t>(), static_cast<uint64_t>(t.numel()) * 8});
    } else {
      tensors.push_back(f32_entry(name, t));
    }
  }
  io::write_safetensors(out.file("optimizer.safetensors"), tensors, {{"format", "encore-adamw"}});
  out.write_file("trainer_state.json", trainer_state.dump(1) + "\n");
  if (!plot_svg.empty()) out.write_file("training.svg", plot_svg);
}

void save_checkpoint(const std::string& dir, const CheckpointContents& c) {
  ENCORE_CHECK(c.model && c.optimizer, "save_checkpoint: model and optimizer are required");
  io::StagedDir out(dir);
  const HfExport hf = write_hf_weights(out, *c.model);
  write_training_state(out, *c.optimizer, c.trainer_state, c.plot_svg);

  Json config = io::read_json_file(fs::path(c.source_dir) / "config.json");
  config["architectures"] = Json::array({hf.architecture});
  config["num_labels"] = c.labels.size();
  Json id2label = Json::object(), label2id = Json::object();
  for (size_t i = 0; i < c.labels.size(); ++i) {
    id2label[std::to_string(i)] = c.labels[i];
    label2id[c.labels[i]] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
  config["torch_dtype"] = "float32";  // what model.safetensors holds
  config.erase("encore_quantization");  // the weights written are plain float32
  out.write_file("config.json", config.dump(2) + "\n");
  for (const auto& entry : fs::directory_iterator(c.source_dir))
    if (entry.is_regular_file() && is_tokenizer_file(entry.path()))
      out.copy_file(entry.path(), entry.path().filename().string());
  out.commit();
}

Json read_trainer_state(const std::string& dir) {
  const fs::path p = fs::path(dir) / "trainer_state.json";
  ENCORE_CHECK(fs::exists(p), "--resume '", dir, "' has no trainer_state.json: not a checkpoint written by encore "
               "train --output");
  Json j = io::read_json_file(p);
  const io::JsonAt at(j, p.string());
  ENCORE_CHECK_AS(ModelFormatError, at.get_or("format", "") == kTrainerStateFormat, "'", p.string(),
                  "' is not an encore trainer state (\"format\" must be \"", kTrainerStateFormat, "\")");
  const int64_t version = at["version"].integer();
  ENCORE_CHECK_AS(ModelFormatError, version == kTrainerStateVersion, "'", p.string(), "' has version ", version,
                  ", this encore reads version ", kTrainerStateVersion);
  return j;
}

void load_optimizer_state(const std::string& dir, AdamW& optimizer) {
  const std::string path = (fs::path(dir) / "optimizer.safetensors").string();
  ENCORE_CHECK(fs::exists(path), "--resume '", dir, "' has no optimizer.safetensors");
  auto file = io::SafetensorsFile::open(path);
  std::map<std::string, Tensor> state;
  for (const auto& [name, info] : file->tensors())
    state[name] = info.dtype == io::StDType::I64 ? file->get_i64(name) : file->get_f32(name);
  try {
    optimizer.load_state_dict(state);
  } catch (const Error& e) {
    throw Error(std::string("'") + path + "' does not fit this model: " + e.what());
  }
}

}  // namespace encore::train
