// Fine-tunes a small sentence classifier: writes a toy sentiment data set (JSONL, `text` + `label`), fine-tunes
// all-MiniLM-L6-v2 (a classification head is added) and saves a checkpoint that transformers'
// AutoModelForSequenceClassification loads, and that ./classify reads.
//   ./train_classifier OUTPUT_DIR [MODEL_DIR]
// Exits 1 if the held-out accuracy stays under 90% (the check scripts/test.sh relies on).
#include <encore/sentence_encoder.hpp>
#include <encore/trainer.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>

namespace {

// Every subject x opinion combination; the held-out file takes subjects the training file never saw.
void write_data(const std::string& path, const std::vector<std::string>& subjects) {
  const std::vector<std::pair<std::string, std::string>> opinions = {
      {"was wonderful, I loved it", "positive"},   {"was a delight from start to end", "positive"},
      {"is the best I have seen this year", "positive"}, {"made me happy", "positive"},
      {"was terrible, I hated it", "negative"},    {"was a boring waste of time", "negative"},
      {"is the worst I have seen this year", "negative"}, {"made me angry", "negative"}};
  std::ofstream out(path);
  for (const auto& s : subjects)
    for (const auto& [opinion, label] : opinions)
      out << "{\"text\": \"" << s << " " << opinion << ".\", \"label\": \"" << label << "\"}\n";
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_classifier OUTPUT_DIR [MODEL_DIR]\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const std::filesystem::path data_dir = out.string() + ".data";
  std::filesystem::create_directories(data_dir);
  write_data((data_dir / "train.jsonl").string(),
             {"The film", "This movie", "The concert", "The book", "The meal", "Our trip", "The show", "The game"});
  write_data((data_dir / "eval.jsonl").string(), {"The play", "That album", "The restaurant"});

  encore::train::TrainConfig cfg;
  cfg.model_dir = argc > 2 ? argv[2] : encore::default_model_dir();
  cfg.data = (data_dir / "train.jsonl").string();
  cfg.eval_data = (data_dir / "eval.jsonl").string();
  cfg.epochs = 6;
  cfg.batch_size = 16;
  cfg.lr = 1e-4;
  cfg.max_length = 32;
  cfg.output_dir = out.string();
  const encore::train::TrainReport report =
      encore::train::fine_tune_classifier(cfg, [](const encore::train::TrainProgress& p) {
        if (p.step % 4 == 0 || p.step == p.total)
          std::printf("step %lld/%lld  loss %.4f\n", static_cast<long long>(p.step),
                      static_cast<long long>(p.total), p.loss);
      });
  const double accuracy = report.eval_accuracy.back();
  std::printf("trained on %lld examples, held-out accuracy %.1f%% on %lld, checkpoint in %s\n",
              static_cast<long long>(report.train_examples), 100 * accuracy,
              static_cast<long long>(report.eval_examples), out.c_str());
  return accuracy >= 0.9 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_classifier: %s\n", e.what());
  return 1;
}
