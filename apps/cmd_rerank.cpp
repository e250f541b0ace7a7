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
#include "encore/records.hpp"

namespace encore::cli {

namespace {

struct RerankArgs {
  std::string model, query, input, input_format, field = "text", dtype = "fp32";
  std::vector<std::string> documents;
  std::optional<int64_t> top_k;
  int64_t batch_size = 32;
  int threads = 0;
  bool no_documents = false;
};

}  // namespace

void register_rerank(CLI::App& app) {
  static RerankArgs a;
  auto* cmd = app.add_subcommand("rerank", "score documents against a query with a cross-encoder, best first");
  cmd->add_option("documents", a.documents, "documents to rank (or -i FILE)");
  cmd->add_option("--model", a.model, "a cross-encoder: a *ForSequenceClassification directory with one label")
      ->required();
  cmd->add_option("-q,--query", a.query, "the query")->required();
  cmd->add_option("-k,--top-k", a.top_k, "print only the k best (default: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--batch-size", a.batch_size, "pairs per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1 << 16}))
      ->capture_default_str();
  cmd->add_flag("--no-documents", a.no_documents, "leave each document's text out of the output");
  add_threads_option(*cmd, a.threads);
  add_dtype_option(*cmd, a.dtype, "encoder GEMMs: fp32, bf16 or int8 (docs/quantization.md)");
  add_input_options(*cmd, a.input, a.input_format, a.field, nullptr);
  cmd->callback([cmd] {
    parse_inference_dtype(a.dtype);
    const RecordFormat format = checked_input_format(*cmd, a.input, a.input_format, a.field);
    apply_threads(a.threads);
    const CrossEncoder ce = CrossEncoder::load(a.model, parse_dtype(a.dtype));
    const std::vector<std::string> docs = read_input_texts(a.documents, a.input, format, a.field);
    ENCORE_CHECK_AS(UsageError, !docs.empty(), "nothing to rank: give documents as arguments or with -i FILE");
    PredictOptions opt;
    opt.batch_size = a.batch_size;
    nlohmann::json out = nlohmann::json::array();
    for (const RankedDocument& r : ce.rank(a.query, docs, a.top_k.value_or(-1), opt)) {
      nlohmann::json row = {{"corpus_id", r.corpus_id}, {"score", r.score}};
      if (!a.no_documents) row["text"] = docs[static_cast<size_t>(r.corpus_id)];
      out.push_back(std::move(row));
    }
    std::printf("%s\n", out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  });
}

}  // namespace encore::cli
