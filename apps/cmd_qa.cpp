// encore qa: extractive question answering with a *ForQuestionAnswering model (encore::QuestionAnswerer), one JSON
// line per (question, context), as transformers' pipeline("question-answering") answers:
//   {"score": 0.98, "start": 34, "end": 40, "answer": "Berlin"}      (a list of such when --top-k finds several)
//
//   encore qa --model distilbert-squad --question "Where do I live?" --context "My name is Wolfgang and I live in Berlin"
//   encore qa --model DIR --question "Who wrote it?" --context-file report.txt --top-k 3
//   encore qa --model DIR -i pairs.jsonl                 # {"question": ..., "context": ...} per line
// Contexts come as --context C, or as `encore embed` takes texts (arguments, or -i FILE: text lines, JSONL, CSV; '-' = stdin), each
// asked --question; without --question, -i names a JSONL/CSV file whose records carry both (--question-field,
// --field). Long contexts are read in windows of --max-seq-len tokens overlapping by --doc-stride.
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common.hpp"
#include "encore/files.hpp"
#include "encore/question_answerer.hpp"
#include "encore/records.hpp"

namespace encore::cli {

namespace {

struct QaArgs {
  TextTaskArgs task;  // contexts or -i FILE, --model, --batch-size, --threads, --dtype
  std::optional<std::string> question;
  std::vector<std::string> contexts;  // --context (repeatable), the same as contexts given as arguments
  std::string question_field = "question", context_file;
  QuestionAnswerOptions options;
  bool no_align_to_words = false;
};

// The (question, context) pairs the options name (see the header comment); usage errors say what is missing.
std::vector<std::pair<std::string, std::string>> read_pairs(const CLI::App& cmd, QaArgs& a) {
  std::vector<std::pair<std::string, std::string>> pairs;
  a.task.texts.insert(a.task.texts.end(), a.contexts.begin(), a.contexts.end());
  if (!a.context_file.empty()) {
    ENCORE_CHECK_AS(UsageError, a.task.texts.empty() && a.task.input.empty(),
                    "--context-file is the context: give no contexts as arguments or with -i");
    ENCORE_CHECK_AS(UsageError, a.question.has_value(), "--context-file needs --question");
    a.task.texts.push_back(read_text_file(a.context_file, "context file"));
  }
  if (a.question) {
    ENCORE_CHECK_AS(UsageError, cmd.count("--question-field") == 0,
                    "--question-field reads questions from -i FILE: leave out --question");
    for (std::string& context : read_task_texts(cmd, a.task, "answer")) pairs.emplace_back(*a.question, std::move(context));
    return pairs;
  }
  ENCORE_CHECK_AS(UsageError, a.task.texts.empty(), "contexts given as arguments need --question");
  ENCORE_CHECK_AS(UsageError, !a.task.input.empty(),
                  "nothing to answer: give --question and a context (argument, --context-file or -i FILE), or -i "
                  "FILE of JSONL/CSV records with question and context fields");
  parse_inference_dtype(a.task.dtype);
  const RecordFormat format = checked_input_format(cmd, a.task.input, a.task.input_format, a.task.field);
  ENCORE_CHECK_AS(UsageError, format != RecordFormat::text, "'", a.task.input,
                  "' is read as plain text (one context per line): give --question, or a JSONL/CSV file with '",
                  a.question_field, "' and '", a.task.field, "' fields");
  apply_threads(a.task.threads);
  RecordReader reader(a.task.input, format, {.what = "input file", .allow_pipe = true});
  for (Record r; reader.next(r);) pairs.emplace_back(reader.field(r, a.question_field), reader.field(r, a.task.field));
  ENCORE_CHECK_AS(UsageError, !pairs.empty(), "nothing to answer: '", a.task.input, "' has no records");
  return pairs;
}

nlohmann::ordered_json answer_json(const Answer& x) {
  nlohmann::ordered_json row;
  row["score"] = x.score;
  row["start"] = x.start;
  row["end"] = x.end;
  row["answer"] = x.answer;
  return row;
}

}  // namespace

void register_qa(CLI::App& app) {
  static QaArgs a;
  a.task.field = "context";
  auto* cmd = app.add_subcommand("qa", "extractive question answering: the span of each context that answers the "
                                       "question (JSON lines)");
  add_text_task_options(*cmd, a.task, "contexts", "a *ForQuestionAnswering directory (config.json, weights, tokenizer)");
  cmd->add_option("-q,--question", a.question, "the question asked of every context");
  cmd->add_option("-c,--context", a.contexts, "a context (repeatable; the same as giving it as an argument)")
      ->allow_extra_args(false);
  cmd->add_option("--context-file", a.context_file, "a file whose whole text is the context");
  cmd->add_option("--question-field", a.question_field, "the JSONL/CSV field holding the question (without --question)")
      ->capture_default_str();
  cmd->add_option("-k,--top-k", a.options.top_k, "answers per question")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--doc-stride", a.options.doc_stride,
                  "tokens a window of a long context repeats from the one before (default: min(max-seq-len / 2, 128))")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--max-answer-len", a.options.max_answer_len, "the longest answer, in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-seq-len", a.options.max_seq_len,
                  "tokens per window, question and special tokens included (default: min(model_max_length, 384))")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--handle-impossible-answer", a.options.handle_impossible_answer,
                "the empty answer (start 0, end 0) competes with the spans, scored by the first token");
  cmd->add_flag("--no-align-to-words", a.no_align_to_words,
                "answers are the tokens' own character spans, not widened to whole words");
  cmd->callback([cmd] {
    const std::vector<std::pair<std::string, std::string>> pairs = read_pairs(*cmd, a);
    const QuestionAnswerer qa = QuestionAnswerer::load(a.task.model, parse_dtype(a.task.dtype));
    QuestionAnswerOptions o = a.options;
    o.align_to_words = !a.no_align_to_words;
    o.batch_size = a.task.batch_size;
    for (const std::vector<Answer>& answers : qa.answer(pairs, o)) {
      nlohmann::ordered_json line = nlohmann::ordered_json::array();
      for (const Answer& x : answers) line.push_back(answer_json(x));
      if (answers.size() == 1) line = answer_json(answers[0]);  // the pipeline's shape: one answer is a dict
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    }
  });
}

}  // namespace encore::cli
