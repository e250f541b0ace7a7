// encore rerank: score documents against a query with a cross-encoder (encore::CrossEncoder) and print them best
// first, as sentence-transformers' CrossEncoder.rank():
//   [{"corpus_id": 2, "score": 0.97, "text": "..."}, ...]
//
//   encore rerank --model ms-marco-MiniLM-L6-v2 --query "how old is the moon" "doc one" "doc two"
//   encore rerank --model DIR --query Q -i docs.jsonl --field text --top-k 10
// Documents come as `encore embed` takes texts: arguments, or -i FILE (text lines, JSONL, CSV; '-' = stdin).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common.hpp"
#include "encore/cross_encoder.hpp"

namespace encore::cli {

void register_rerank(CLI::App& app) {
  static TextTaskArgs a;
  static std::string query;
  static std::optional<int64_t> top_k;
  static bool no_documents = false;
  auto* cmd = app.add_subcommand("rerank", "score documents against a query with a cross-encoder, best first");
  add_text_task_options(*cmd, a, "documents", "a cross-encoder: a *ForSequenceClassification directory with one label");
  cmd->add_option("-q,--query", query, "the query")->required();
  cmd->add_option("-k,--top-k", top_k, "print only the k best (default: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_flag("--no-documents", no_documents, "leave each document's text out of the output");
  cmd->callback([cmd] {
    const std::vector<std::string> docs = read_task_texts(*cmd, a, "rank");
    const CrossEncoder ce = CrossEncoder::load(a.model, parse_dtype(a.dtype));
    PredictOptions opt;
    opt.batch_size = a.batch_size;
    nlohmann::json out = nlohmann::json::array();
    for (const RankedDocument& r : ce.rank(query, docs, top_k.value_or(-1), opt)) {
      nlohmann::json row = {{"corpus_id", r.corpus_id}, {"score", r.score}};
      if (!no_documents) row["text"] = docs[static_cast<size_t>(r.corpus_id)];
      out.push_back(std::move(row));
    }
    std::printf("%s\n", out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  });
}

}  // namespace encore::cli
