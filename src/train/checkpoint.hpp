// Training checkpoints (internal to src/train): a directory transformers loads as it is, plus what resuming needs.
//
//   DIR/model.safetensors      every parameter under transformers' names (AutoModel::export_hf), float32
//   DIR/config.json            the source config.json with architectures, num_labels, id2label, label2id set
//   DIR/tokenizer files        copied from the source model directory
//   DIR/optimizer.safetensors  AdamW "step" and, per parameter it updated, exp_avg / exp_avg_sq / step (encore's
//                              names)
//   DIR/trainer_state.json     task, step, epoch, data position and order, shuffle RNG, history (kTrainerStateFormat)
//   DIR/training.svg           the plot, when one is drawn into the checkpoint
// The directory is staged and swapped into place (io/staged_dir.hpp): a crash never leaves a mix.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "encore/model.hpp"
#include "encore/train.hpp"
#include "io/staged_dir.hpp"

namespace encore::train {

inline constexpr const char* kTrainerStateFormat = "encore-trainer-state";
inline constexpr int kTrainerStateVersion = 1;

struct CheckpointContents {
  const AutoModel* model = nullptr;
  std::string source_dir;                // config.json and tokenizer files come from here
  std::vector<std::string> labels;       // class names in id order
  const AdamW* optimizer = nullptr;
  nlohmann::json trainer_state;
  std::string plot_svg;                  // written as training.svg when not empty
};

// Fails before any training when `dir` cannot be written (parent missing or unwritable) or exists and is not
// a checkpoint this writer made (an empty directory is fine): a save never deletes unrelated files.
void check_output_dir(const std::string& dir);
void save_checkpoint(const std::string& dir, const CheckpointContents& c);
// model.safetensors into a staged directory: every parameter under transformers' names, float32 (also used by
// the embedding trainer's sentence-transformers output). Returns the export (its tensors share the model's memory).
HfExport write_hf_weights(io::StagedDir& out, const AutoModel& model);

// What resuming needs, into a staged checkpoint directory: optimizer.safetensors (AdamW::state_dict),
// trainer_state.json, and training.svg when plot_svg is not empty. Every task's checkpoint carries these.
void write_training_state(io::StagedDir& out, const AdamW& optimizer, const nlohmann::json& trainer_state,
                          const std::string& plot_svg);

// trainer_state.json of a checkpoint, parsed and checked for format and version (errors name the file).
nlohmann::json read_trainer_state(const std::string& dir);
// optimizer.safetensors into `optimizer` (which checks every name and shape).
void load_optimizer_state(const std::string& dir, AdamW& optimizer);

}  // namespace encore::train
