// encore ner: the entities of each text with a token-classification model (encore::TokenClassifier), one JSON
// line per text, as transformers' pipeline("ner", aggregation_strategy=...) gives them:
//   [{"entity_group": "PER", "score": 0.99, "word": "Wolfgang", "start": 11, "end": 19}, ...]
//
//   encore ner --model bert-base-NER --aggregation simple "My name is Wolfgang and I live in Berlin"
//   encore ner --model DIR -i texts.jsonl --field text --aggregation first
// Texts come as `encore embed` takes them: arguments, or -i FILE (text lines, JSONL, CSV; '-' = stdin).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common.hpp"
#include "encore/records.hpp"
#include "encore/token_classifier.hpp"

namespace encore::cli {

namespace {

struct NerArgs {
  TextTaskArgs task;  // texts or -i FILE, --model, --batch-size, --threads, --dtype
  std::string aggregation = "none";
  std::vector<std::string> ignore_labels = {"O"};
  std::optional<int64_t> stride;
};

}  // namespace

void register_ner(CLI::App& app) {
  static NerArgs a;
  auto* cmd = app.add_subcommand("ner", "the entities of each text with a token-classification model (JSON lines)");
  add_text_task_options(*cmd, a.task, "texts", "a *ForTokenClassification directory (config.json id2label, tokenizer)");
  cmd->add_option("--aggregation,--aggregation-strategy", a.aggregation,
                  "none (one entity per token), simple, first, average or max (transformers' aggregation_strategy)")
      ->check(CLI::IsMember({"none", "simple", "first", "average", "max"}, CLI::ignore_case))
      ->capture_default_str();
  cmd->add_option("--ignore-labels", a.ignore_labels,
                  "labels left out of the output, comma-separated or repeated (default: O; '' for none)")
      ->allow_extra_args(false)
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--stride", a.stride, "read long texts whole: windows of the model's length overlapping by this many "
                  "tokens (transformers' stride=; needs --aggregation other than none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->callback([cmd] {
    const std::vector<std::string> texts = read_task_texts(*cmd, a.task, "tag");
    const TokenClassifier classifier = TokenClassifier::load(a.task.model, parse_dtype(a.task.dtype));
    TokenClassifyOptions opt;
    opt.aggregation = parse_aggregation(a.aggregation);
    opt.ignore_labels.clear();
    for (const std::string& l : a.ignore_labels)
      if (!l.empty()) opt.ignore_labels.push_back(l);
    opt.batch_size = a.task.batch_size;
    opt.stride = a.stride;
    const bool grouped = opt.aggregation != Aggregation::none;
    for (const auto& entities : classifier.predict(texts, opt)) {
      nlohmann::ordered_json line = nlohmann::ordered_json::array();
      for (const TokenEntity& e : entities) {
        nlohmann::ordered_json row;
        row[grouped ? "entity_group" : "entity"] = e.entity;
        row["score"] = e.score;
        if (!grouped) row["index"] = e.index;
        row["word"] = e.word;
        row["start"] = e.start;
        row["end"] = e.end;
        line.push_back(std::move(row));
      }
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    }
  });
}

}  // namespace encore::cli
