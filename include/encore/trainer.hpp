// encore::train::fine_tune_classifier - fine-tunes a checkpoint for sequence classification on JSONL or CSV data,
// the engine behind `encore train --task classification` and encore.train_classifier() in Python.
//
//   encore::train::TrainConfig cfg;
//   cfg.model_dir = "/path/to/all-MiniLM-L6-v2"; cfg.data = "train.jsonl"; cfg.epochs = 3;
//   encore::train::TrainReport r = encore::train::fine_tune_classifier(cfg);
//
// Data: JSONL objects or CSV rows (header line) with `text`, optional `text_pair`, and `label` (an integer class
// id, or a string mapped to ids in sorted order). Held-out evaluation each epoch on `eval_data`, else on the last
// eval_fraction of the (unshuffled) file.
//
// The embedding task (fine_tune_embedding, below) runs the same loop with its own batches, loss and checkpoint.
//
// Checkpoints (output_dir, every save_every steps and at the end): a directory that transformers'
// AutoModelForSequenceClassification.from_pretrained loads as it is (model.safetensors with transformers'
// names, config.json with architectures / num_labels / id2label / label2id, the tokenizer files), plus
// optimizer.safetensors and trainer_state.json for resume_dir. Saving is atomic: the directory is written
// beside the target and swapped in, so a crash while saving leaves the previous checkpoint.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace encore {
class SentenceEncoder;
}

namespace encore::train {

class Collective;  // encore/collective.hpp

struct TrainConfig {
  std::string model_dir, data, eval_data;
  double eval_fraction = 0.1;
  int64_t steps = 0;   // > 0: this many optimizer steps; else epochs
  int64_t epochs = 1;
  int64_t batch_size = 16;
  double lr = 2e-5, weight_decay = 0.01;
  int64_t warmup_steps = 0;
  std::string schedule = "linear";  // constant, linear, cosine
  double max_grad_norm = 1.0;       // <= 0: no clipping
  int64_t max_length = 128;
  uint64_t seed = 42;
  bool shuffle = true;
  int64_t grad_accum = 1;  // micro-batches of batch_size per optimizer step (the step's loss and gradient are
                           // the mean over all its examples, as one batch of grad_accum x batch_size)
  // Dropout at every site of the training forward (AutoModel::set_dropout); < 0: the model's own (its
  // config.json values where the family reads them). Masks are seeded from (seed, step): a resumed run repeats them.
  double dropout = -1;
  // Keep only each encoder layer's input and recompute its forward during backward (AutoModel::
  // set_gradient_checkpointing): less activation memory, about one more forward of compute, the same bits.
  bool gradient_checkpointing = false;
  // step,loss,lr,grad_norm,eval_accuracy per optimizer step (step counts from 1). On resume, rows past the
  // checkpoint's step are dropped and the run appends.
  std::string log_csv;
  std::string output_dir;  // checkpoint directory (see above); refused if it exists and is not a checkpoint
  int64_t save_every = 0;  // > 0: also save every this many optimizer steps
  // A checkpoint written by output_dir: model, tokenizer, optimizer state, step, data order and shuffle state
  // come from it (model_dir is not used). Data, labels, batch_size, grad_accum, seed and shuffle must match the
  // run that wrote it; lr, schedule and steps/epochs are taken from this config (same values: the exact run).
  std::string resume_dir;
  // SVG of the loss per step and held-out accuracy; "" with output_dir: <output_dir>/training.svg in every save.
  std::string plot_svg;
  // Data-parallel training (`encore train --distributed`, docs/scale.md): every rank runs the same config on
  // the same data file. A step takes batch_size x grad_accum x world_size examples of the one shuffled order
  // (the same on every rank); rank r trains on micro-batches r*grad_accum .. (r+1)*grad_accum-1 of them, the
  // gradients are summed over ranks (bucketed allreduce started during backward), and every rank applies the same clipping and AdamW
  // update. So N ranks x batch B is the step of 1 rank x batch N*B (bit-for-bit up to float summation order).
  // Rank 0 alone evaluates, logs, saves and reports progress. A checkpoint resumes with any number of ranks
  // whose batch_size x grad_accum x world_size equals the one that wrote it.
  std::shared_ptr<Collective> collective;  // null: one process
  int64_t bucket_bytes = 25 << 20;         // gradient allreduce bucket size (torch DDP's default 25 MB)
};

// Every TrainConfig field under the keyword the Python `encore.train(model, data, **options)` takes (the field's
// name, or its short form: model, log, output, resume, plot), with a pointer to it: bindings set options by name
// from this one table and read the defaults from a default TrainConfig, instead of restating them.
struct TrainOption {
  using Member = std::variant<std::string TrainConfig::*, double TrainConfig::*, int64_t TrainConfig::*,
                              uint64_t TrainConfig::*, bool TrainConfig::*>;
  const char* name;
  Member member;
};
const std::vector<TrainOption>& train_options();

struct TrainProgress {
  // start: once, before anything runs (step = the first step, total known); train: after each optimizer step;
  // evaluate: after each held-out batch (eval_done of eval_total examples or texts).
  enum class Phase { start, train, evaluate };
  Phase phase = Phase::train;
  int64_t step = 0, total = 0;  // optimizer steps done / to do (counting a resumed run's earlier steps)
  double loss = 0, lr = 0;
  int64_t tokens = 0;           // tokens trained on in this run so far
  double seconds = 0;           // since this run's training loop started
  int64_t first_step = 0;       // the step this run started from (0, or the resumed checkpoint's)
  int64_t eval_done = 0, eval_total = 0;
};

struct TrainReport {
  std::vector<double> losses;          // per optimizer step of this run, the batch loss before the update
  int64_t first_step = 0;              // optimizer steps done before this run (resume), 0 otherwise
  std::vector<double> eval_accuracy;   // per epoch (or once at the end with steps)
  std::vector<int64_t> eval_epochs;    // the epoch (from 1, counting a resumed run's) each eval_accuracy ends
  std::vector<int64_t> eval_steps;     // the optimizer step after which each eval_accuracy was measured
  double eval_before = std::nan("");   // embedding task: held-out retrieval accuracy before training
  std::vector<std::string> labels;     // class names in id order
  int64_t train_examples = 0, eval_examples = 0;  // examples in the data
  int64_t tokens = 0;                  // tokens trained this run, over every rank
  int64_t examples_trained = 0;        // examples this run's steps went through, over every rank (repeats counted)
  int64_t total_steps = 0;             // the run's last step (a resumed run counts the earlier ones)
  double seconds = 0;
  double allreduce_seconds = 0;  // distributed: time this rank spent summing gradients over ranks
  int world_size = 1;
};

// progress after each optimizer step.
TrainReport fine_tune_classifier(const TrainConfig& config,
                                 const std::function<void(const TrainProgress&)>& progress = {});

// `encore train --task rerank`: a cross-encoder from (query, document, relevance) rows - `text` (the query),
// `text_pair` (the document), `label` a relevance in [0, 1] - trained as sentence-transformers' CrossEncoder with
// BinaryCrossEntropyLoss: one logit (a checkpoint without a head gets a fresh 1-label one; a head with more
// labels is refused), BCE-with-logits, held-out accuracy of (logit > 0) against (label > 0.5). The checkpoint is
// a *ForSequenceClassification directory with one label, which encore::CrossEncoder and sentence-transformers'
// CrossEncoder load (sigmoid scores).
TrainReport fine_tune_reranker(const TrainConfig& config,
                               const std::function<void(const TrainProgress&)>& progress = {});

// ---- `encore train --task token-classification` (src/train/token_trainer.cpp) ----
// Fine-tunes for token classification (NER) as transformers' run_ner.py does: JSONL lines {"tokens": [words],
// "labels": [one label per word]} ("ner_tags" is read when "labels" is absent; labels are strings or integer ids).
// Each word is tokenized alone (as a fast tokenizer does with is_split_into_words=True: right for WordPiece
// models; byte-level BPE, which transformers runs with add_prefix_space=True, is not reproduced), the special tokens
// put around them and the whole cut to max_length; a word's label goes to its first sub-token, every other token
// is -100 (transformers' label_all_tokens=False). The loss is torch's cross-entropy over the labelled tokens of a
// batch (their mean). A *ForTokenClassification checkpoint keeps its head and label ids (config.json id2label;
// every data label must be one of them, by name or as an integer id); a base checkpoint gets a new head
// (normal(0, 0.02), labels as classification names them: integer ids, else sorted strings). eval_accuracy: the
// share of held-out labelled tokens whose arg-max label is right. The checkpoint is one
// AutoModelForTokenClassification.from_pretrained and encore::TokenClassifier load.
TrainReport fine_tune_token_classifier(const TrainConfig& config,
                                       const std::function<void(const TrainProgress&)>& progress = {});

// The tasks `encore train --task` and Python's train(task=) run: "classification", "token-classification",
// "embedding".
const std::vector<std::string>& train_tasks();
// Runs fine_tune_classifier, fine_tune_reranker, fine_tune_token_classifier or fine_tune_embedding by task name (UsageError naming the
// tasks for another).
TrainReport fine_tune(const std::string& task, const TrainConfig& config,
                      const std::function<void(const TrainProgress&)>& progress = {});

// ---- `encore train --task embedding` (src/train/embedding_trainer.cpp) ----
// Fine-tunes a sentence-transformers directory (modules.json: Transformer -> Pooling -> optional Normalize; a
// plain encoder directory is Transformer + mean pooling) on pairs - JSONL/CSV with `anchor` + `positive`, or
// `text` + `text_pair` - with in-batch MultipleNegativesRankingLoss (scale 20, cosine; the other positives of a
// batch are each anchor's negatives). eval_accuracy: held-out retrieval accuracy (share of anchors whose most
// similar held-out positive is their own), per epoch; eval_before: the same before training. With output_dir,
// the trained pipeline is written there as a sentence-transformers directory (SentenceTransformer(dir) loads it).
// Every option works as for classification (both run one loop): grad_accum makes each optimizer step
// grad_accum micro-batches, each with its own in-batch negatives, the step's loss the mean of theirs (as
// transformers' Trainer with gradient_accumulation_steps); output_dir (at the end and every save_every steps)
// also holds optimizer.safetensors and trainer_state.json, so resume_dir continues from it; plot_svg shows the
// loss per step and held-out retrieval accuracy. BERT's pooler gets no gradient and is left as loaded.
TrainReport fine_tune_embedding(const TrainConfig& config,
                                const std::function<void(const TrainProgress&)>& progress = {});

// One step's forward + backward of that loss on (anchors[i], positives[i]) pairs through `encoder` (its model in
// training mode): accumulates grad_weight x the loss's parameter gradients into encoder.model().module(), returns
// the mean loss (unweighted); *tokens receives the number of real (unpadded) tokens.
double embedding_loss_backward(SentenceEncoder& encoder, const std::vector<std::string>& anchors,
                               const std::vector<std::string>& positives, double scale = 20.0,
                               int64_t* tokens = nullptr, double grad_weight = 1.0);

// Writes `encoder`'s current weights as a sentence-transformers directory: every file of source_dir except the
// weights (modules.json, 1_Pooling/, tokenizer and configs), model.safetensors with transformers' names.
// run_json is written beside them as encore_train_embedding.json (what was trained, how). Atomic: the directory
// is staged and swapped into place.
void save_sentence_transformer(const SentenceEncoder& encoder, const std::string& source_dir,
                               const std::string& output_dir, const std::string& run_json);

}  // namespace encore::train
