// encore classify: label texts with a *ForSequenceClassification checkpoint (encore::TextClassifier), as
// transformers' text-classification pipeline does. JSON lines out, one per text in input order, each the text's
// labels best first:
//   [{"label": "POSITIVE", "score": 0.9987}]
//
//   encore classify --model distilbert-sst2 "This movie is great!" "Dull."
//   encore classify --model DIR -i texts.jsonl --field text --all-labels --function sigmoid
// Texts come as `encore embed` takes them: arguments, or -i FILE (text lines, JSONL, CSV; '-' = stdin).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common.hpp"
#include "encore/text_classifier.hpp"

namespace encore::cli {

void register_classify(CLI::App& app) {
  static TextTaskArgs a;
  static std::string function;
  static int64_t top_k = 1;
  static bool all_labels = false, no_truncation = false;
  auto* cmd = app.add_subcommand("classify", "label texts with a sequence classifier (JSON lines: labels best first)");
  add_text_task_options(*cmd, a, "texts", "a *ForSequenceClassification directory (e.g. what `encore train` wrote)");
  auto* k = cmd->add_option("-k,--top-k", top_k, "labels per text, best first")
                ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
                ->capture_default_str();
  cmd->add_flag("--all-labels", all_labels, "every label per text, best first")->excludes(k);
  cmd->add_option("--function", function, "sigmoid, softmax or none over the logits (default: the pipeline's "
                  "choice: none for regression, sigmoid for multi-label or one label, softmax otherwise)")
      ->check(CLI::IsMember({"sigmoid", "softmax", "none"}));
  cmd->add_flag("--no-truncation", no_truncation, "fail on texts longer than the model's max length instead of "
                "truncating");
  cmd->callback([cmd] {
    const std::vector<std::string> texts = read_task_texts(*cmd, a, "classify");
    const TextClassifier clf = TextClassifier::load(a.model, parse_dtype(a.dtype));
    ClassifyOptions opt;
    opt.batch_size = a.batch_size;
    opt.truncate = !no_truncation;
    if (!function.empty()) opt.function = parse_classification_function(function);
    for (const auto& labels : clf.classify(texts, all_labels ? -1 : top_k, opt)) {
      nlohmann::json row = nlohmann::json::array();
      for (const LabelScore& l : labels) row.push_back({{"label", l.label}, {"score", l.score}});
      std::printf("%s\n", row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  });
}

}  // namespace encore::cli
