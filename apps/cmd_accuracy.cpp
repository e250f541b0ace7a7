// encore accuracy: how close a dtype's sentence embeddings are to fp32's on a corpus (cosine per text), and how
// much of fp32's task score the dtype keeps (include/encore/evaluation.hpp).
//
//   encore accuracy --dtype int8                       # a small built-in corpus
//   encore accuracy --dtype int8 -i corpus.jsonl       # JSONL (--field text) or a text file, one text per line
//   encore accuracy --model q8 --reference orig --dtype int8   # a quantized checkpoint vs its original in fp32
//   encore accuracy --dtype int8 --classify-train tr.jsonl --classify-eval ev.jsonl --pairs pairs.jsonl
//     classification: logistic regression (scikit-learn's C=1) trained on the training file's embeddings,
//     accuracy on the held-out file's ("text", "label" 0/1); retrieval: top-1 on ("anchor", "positive") pairs
//     (each text's most similar other text in the pool of both columns is its pair); each for fp32 and the
//     dtype, kept = dtype / fp32.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "apps/common.hpp"
#include "encore/evaluation.hpp"
#include "encore/files.hpp"
#include "encore/records.hpp"
#include "encore/runtime.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/similarity.hpp"

namespace encore::cli {

namespace {

// Varied on purpose: ordinary sentences, a question, code, numbers, non-Latin scripts, emoji, and the
// degenerate inputs (empty, punctuation only) whose embedding is mostly the special tokens' - the hardest
// case for per-token quantization.
const std::vector<std::string> kDefaultCorpus = {
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "How do I reset my password if I no longer have access to my email?",
    "The quarterly report shows revenue grew 12% year over year, driven by cloud services.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;",
    "Return a new sorted list from the items in iterable.",
    "The meeting has been moved to Thursday at 3 pm in room 204.",
    "Call +1-555-0100 or write to someone@example.org before 2024-05-01.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "La vie est belle quand on prend le temps de la regarder.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "東京は日本の首都です。",
    "Москва — столица России.",
    "สวัสดีชาวโลก",
    "I love this! 😍🔥 Best day ever 🎉",
    "lol ok",
    "?",
    "...",
    "",
    "a",
    "The the the the the the the the the the the the the the the the",
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.",
    "Transformers process all tokens of a sequence in parallel and use self-attention to relate every token to "
    "every other one, which made them the dominant architecture for language tasks within a few years of 2017.",
};

std::vector<std::string> read_corpus(const std::string& file, RecordFormat format, const std::string& field) {
  RecordReader in(file, format, {.allow_non_objects = false, .what = "corpus file"});
  std::vector<std::string> texts;
  for (Record r; in.next(r);) texts.push_back(in.field(r, field));
  return texts;
}

struct Labelled {
  std::vector<std::string> texts;
  std::vector<int64_t> labels;
};

// "text" and "label" (0 or 1, an integer or a string) of each record of a JSONL or CSV file.
Labelled read_labelled(const std::string& file) {
  RecordReader in(file, record_format_from_path(file), {.allow_non_objects = false, .what = "classification file"});
  Labelled out;
  for (Record r; in.next(r);) {
    out.texts.push_back(in.field(r, "text"));
    const std::string* label = in.scalar(r, "label");
    if (label == nullptr) in.fail(r, "no \"label\" field (0 or 1)");
    if (*label != "0" && *label != "1") in.fail(r, "label '" + *label + "' is not 0 or 1");
    out.labels.push_back(*label == "1");
  }
  ENCORE_CHECK(!out.texts.empty(), "the classification file '", file, "' has no records");
  return out;
}

// "anchor" and "positive" of each record of a JSONL or CSV file.
std::pair<std::vector<std::string>, std::vector<std::string>> read_pairs(const std::string& file) {
  RecordReader in(file, record_format_from_path(file), {.allow_non_objects = false, .what = "pairs file"});
  std::pair<std::vector<std::string>, std::vector<std::string>> out;
  for (Record r; in.next(r);) {
    out.first.push_back(in.field(r, "anchor"));
    out.second.push_back(in.field(r, "positive"));
  }
  ENCORE_CHECK(out.first.size() >= 2, "the pairs file '", file, "' needs at least 2 pairs, it has ",
               out.first.size());
  return out;
}

// A task score for fp32 and for the dtype.
struct Score {
  double fp32 = 0, dtype = 0;
  nlohmann::json json(const char* dtype_key) const {
    return {{"fp32", fp32}, {dtype_key, dtype}, {"kept", dtype / fp32}};
  }
};

}  // namespace

void register_accuracy(CLI::App& app) {
  struct Args {
    std::string model, reference, dtype, input, input_format, field = "text", classify_train, classify_eval, pairs;
    int64_t batch_size = 32;
    int threads = 0;
    bool json = false;
  };
  static Args a;
  auto* cmd = app.add_subcommand("accuracy", "cosine of a dtype's embeddings to fp32's on a corpus (min, mean, p1), "
                                             "and the task scores it keeps (classification, pair retrieval)");
  cmd->add_option("--model", a.model, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  cmd->add_option("--reference", a.reference, "fp32 reference model directory (default: --model)");
  cmd->add_option("--dtype", a.dtype, "dtype to compare with fp32: bf16 or int8 (fp32: the reference itself, or "
                                      "--model against --reference)")
      ->check(CLI::IsMember({"fp32", "float32", "bf16", "bfloat16", "int8"}))
      ->required();
  add_input_options(*cmd, a.input, a.input_format, a.field, nullptr);  // default corpus: 32 built-in varied texts
  cmd->add_option("--batch-size", a.batch_size, "texts per forward pass")->check(CLI::Range(int64_t{1}, int64_t{1 << 16}))->capture_default_str();
  add_threads_option(*cmd, a.threads);
  auto* train = cmd->add_option("--classify-train", a.classify_train,
                                "JSONL/CSV of \"text\" and \"label\" (0/1): logistic regression (C=1) is trained "
                                "on its embeddings")
                    ->check(CLI::ExistingFile);
  auto* eval = cmd->add_option("--classify-eval", a.classify_eval,
                               "JSONL/CSV of \"text\" and \"label\": the held-out split the accuracy is measured on")
                   ->check(CLI::ExistingFile);
  train->needs(eval);
  eval->needs(train);
  cmd->add_option("--pairs", a.pairs, "JSONL/CSV of \"anchor\" and \"positive\": top-1 retrieval accuracy (each "
                                      "text's most similar other text among all of them is its pair)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", a.json, "print one JSON object instead of text");
  cmd->callback([cmd] {
    const RecordFormat format = checked_input_format(*cmd, a.input, a.input_format, a.field);
    apply_threads(a.threads);
    const DType dtype = parse_dtype(a.dtype);
    const std::vector<std::string> texts =
        a.input.empty() ? kDefaultCorpus : read_corpus(a.input, format, a.field);
    ENCORE_CHECK(!texts.empty(), "the corpus '", a.input, "' has no texts");
    const std::string model = a.model.empty() ? default_model_dir() : a.model;
    const std::string reference = a.reference.empty() ? model : a.reference;
    EncodeOptions opt;
    opt.batch_size = a.batch_size;
    const SentenceEncoder ref_enc = SentenceEncoder::load(reference, DType::f32);
    const SentenceEncoder got_enc = SentenceEncoder::load(model, dtype);
    const Tensor ref = ref_enc.encode(texts, opt);
    const Tensor got = got_enc.encode(texts, opt);
    ENCORE_CHECK(ref.shape() == got.shape(), "the reference gives embeddings ", ref.shape_str(), ", the model ",
                 got.shape_str());
    // Task scores: the same computation on fp32's embeddings and on the dtype's.
    std::optional<Score> classification, retrieval;
    int64_t n_train = 0, n_eval = 0, n_pairs = 0;
    if (!a.classify_train.empty()) {
      const Labelled tr = read_labelled(a.classify_train), ev = read_labelled(a.classify_eval);
      n_train = static_cast<int64_t>(tr.texts.size());
      n_eval = static_cast<int64_t>(ev.texts.size());
      auto score = [&](const SentenceEncoder& enc) {
        const LogisticRegression lr = LogisticRegression::fit(enc.encode(tr.texts, opt), tr.labels);
        return classification_accuracy(lr.predict(enc.encode(ev.texts, opt)), ev.labels);
      };
      classification = Score{score(ref_enc), score(got_enc)};
    }
    if (!a.pairs.empty()) {
      const auto [anchors, positives] = read_pairs(a.pairs);
      n_pairs = static_cast<int64_t>(anchors.size());
      auto score = [&](const SentenceEncoder& enc) {
        return pair_retrieval_accuracy(enc.encode(anchors, opt), enc.encode(positives, opt));
      };
      retrieval = Score{score(ref_enc), score(got_enc)};
    }
    const Tensor cosines = pairwise_cos_sim(ref, got);
    const int64_t n = ref.size(0);
    const std::vector<double> cos(cosines.data<float>(), cosines.data<float>() + n);
    std::vector<double> sorted = cos;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (double c : cos) mean += c / static_cast<double>(n);
    const double p1 = sorted[static_cast<size_t>(std::floor(0.01 * static_cast<double>(n - 1)))];  // 1st percentile (lower)
    const int64_t worst = std::min_element(cos.begin(), cos.end()) - cos.begin();
    const std::string corpus = a.input.empty() ? "built-in corpus" : a.input;
    if (a.json) {
      nlohmann::json j = {{"dtype", dtype_name(dtype)}, {"model", model}, {"reference", reference},
                          {"corpus", corpus}, {"texts", n}, {"min", sorted.front()}, {"mean", mean}, {"p1", p1},
                          {"worst_index", worst}};
      if (classification) {
        j["classification"] = classification->json(dtype_name(dtype));
        j["classification"]["train"] = n_train;
        j["classification"]["eval"] = n_eval;
      }
      if (retrieval) {
        j["retrieval"] = retrieval->json(dtype_name(dtype));
        j["retrieval"]["pairs"] = n_pairs;
      }
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("%s vs fp32 on %lld texts (%s), cosine of embeddings:\n", dtype_name(dtype), (long long)n,
                corpus.c_str());
    std::printf("  min %.6f   mean %.6f   p1 %.6f\n", sorted.front(), mean, p1);
    std::string w = texts[worst].substr(0, 60);
    std::printf("  worst: #%lld %s\n", (long long)worst, nlohmann::json(w).dump(-1, ' ', false,
                                                                           nlohmann::json::error_handler_t::replace).c_str());
    if (classification)
      std::printf("classification accuracy (logistic regression, %lld training / %lld held-out texts):\n"
                  "  fp32 %.4f   %s %.4f   kept %.2f%%\n",
                  (long long)n_train, (long long)n_eval, classification->fp32, dtype_name(dtype),
                  classification->dtype, 100 * classification->dtype / classification->fp32);
    if (retrieval)
      std::printf("pair retrieval top-1 accuracy (%lld pairs, %lld texts):\n  fp32 %.4f   %s %.4f   kept %.2f%%\n",
                  (long long)n_pairs, (long long)(2 * n_pairs), retrieval->fp32, dtype_name(dtype), retrieval->dtype,
                  100 * retrieval->dtype / retrieval->fp32);
  });
}

}  // namespace encore::cli
