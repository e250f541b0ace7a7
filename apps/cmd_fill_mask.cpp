// encore fill-mask: the likeliest tokens for each mask token of each text with a masked-LM checkpoint
// (encore::FillMask), as transformers' fill-mask pipeline. JSON lines out, one per text in input order: a list of
// {"score", "token", "token_str", "sequence"} best first, or for a text with several masks one such list per mask.
//
//   encore fill-mask --model bert-base-uncased "Paris is the [MASK] of France."
//   encore fill-mask --model DIR -i texts.jsonl --field text --top-k 10
// Texts come as `encore embed` takes them: arguments, or -i FILE (text lines, JSONL, CSV; '-' = stdin).
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common.hpp"
#include "encore/fill_mask.hpp"

namespace encore::cli {

void register_fill_mask(CLI::App& app) {
  static TextTaskArgs a;
  static int64_t top_k = 5;
  static bool no_truncation = false;
  a.batch_size = FillMaskOptions{}.batch_size;
  auto* cmd = app.add_subcommand("fill-mask", "the likeliest tokens for each mask token of each text (JSON lines)");
  add_text_task_options(*cmd, a, "texts", "a *ForMaskedLM directory (e.g. bert-base-uncased, roberta-base)");
  cmd->add_option("-k,--top-k", top_k, "candidates per mask token, best first")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_flag("--no-truncation", no_truncation, "fail on texts longer than the model's max length instead of "
                "truncating");
  cmd->callback([cmd] {
    const std::vector<std::string> texts = read_task_texts(*cmd, a, "fill");
    const FillMask fm = FillMask::load(a.model, parse_dtype(a.dtype));
    FillMaskOptions opt;
    opt.top_k = top_k;
    opt.batch_size = a.batch_size;
    opt.truncate = !no_truncation;
    for (const auto& per_mask : fm.predict(texts, opt)) {
      nlohmann::json line = nlohmann::json::array();
      for (const auto& cands : per_mask) {
        nlohmann::json list = nlohmann::json::array();
        for (const FillMaskCandidate& c : cands)
          list.push_back({{"score", c.score}, {"token", c.token}, {"token_str", c.token_str}, {"sequence", c.sequence}});
        line.push_back(std::move(list));
      }
      if (per_mask.size() == 1) line = line[0];  // one mask: its list, as the pipeline
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  });
}

}  // namespace encore::cli
