// encore.QuestionAnswerer: transformers' pipeline("question-answering") call shape over encore::QuestionAnswerer
// (windows, span scoring and answer merging are C++; this file only converts arguments and results).
#include <optional>

#include "encore/question_answerer.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

namespace {

std::string str_arg(const py::handle& x, const std::string& what) {
  if (x.is_none()) throw encore::UsageError("`" + what + "` cannot be None");
  if (!py::isinstance<py::str>(x))
    throw encore::UsageError(what + " is a " + py::str(py::type::handle_of(x).attr("__name__")).cast<std::string>() +
                             ", not a str");
  return x.cast<std::string>();
}

// A {"question": ..., "context": ...} dict (the pipeline's other input form).
std::pair<std::string, std::string> pair_of_dict(const py::handle& item, size_t i) {
  if (!py::isinstance<py::dict>(item))
    throw encore::UsageError("inputs[" + std::to_string(i) + "] must be a dict with keys question and context");
  const py::dict d = py::reinterpret_borrow<py::dict>(item);
  if (!d.contains("question") || !d.contains("context"))
    throw encore::UsageError("You need to provide a dictionary with keys {question:..., context:...}");
  return {str_arg(d["question"], "question"), str_arg(d["context"], "context")};
}

// The pipeline's QuestionAnsweringArgumentHandler: question/context as str or lists (a list of questions with one
// context asks each of it), or inputs as one dict or a list of dicts. Returns the pairs and whether the pipeline
// would answer with one result (one example) rather than a list of results.
std::pair<std::vector<std::pair<std::string, std::string>>, bool> examples(const py::object& inputs,
                                                                           const py::object& question,
                                                                           const py::object& context) {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (!inputs.is_none()) {
    if (!question.is_none() || !context.is_none())
      throw encore::UsageError("give either inputs (dicts) or question= and context=, not both");
    if (py::isinstance<py::dict>(inputs)) {
      pairs.push_back(pair_of_dict(inputs, 0));
    } else {
      for (auto item : inputs) pairs.push_back(pair_of_dict(item, pairs.size()));
    }
  } else {
    if (question.is_none() || context.is_none()) throw encore::UsageError("question= and context= are both needed");
    const bool qs = py::isinstance<py::str>(question), cs = py::isinstance<py::str>(context);
    if (qs && cs) {
      pairs.emplace_back(question.cast<std::string>(), context.cast<std::string>());
    } else if (py::isinstance<py::list>(question) && cs) {
      for (auto q : question) pairs.emplace_back(str_arg(q, "question"), context.cast<std::string>());
    } else if (py::isinstance<py::list>(question) && py::isinstance<py::list>(context)) {
      const py::list ql = question, cl = context;
      if (ql.size() != cl.size()) throw encore::UsageError("Questions and contexts don't have the same lengths");
      for (size_t i = 0; i < ql.size(); ++i) pairs.emplace_back(str_arg(ql[i], "question"), str_arg(cl[i], "context"));
    } else {
      throw encore::UsageError("question and context must be str, or lists of str (a list of questions may share one "
                               "context)");
    }
  }
  if (pairs.empty()) throw encore::UsageError("no question to answer");
  return {std::move(pairs), pairs.size() == 1};
}

py::dict answer_dict(const encore::Answer& a) {
  py::dict d;
  d["score"] = a.score;
  d["start"] = a.start;
  d["end"] = a.end;
  d["answer"] = a.answer;
  return d;
}

// One example's answers as the pipeline returns them: one dict when there is exactly one, else a list.
py::object answers_object(const std::vector<encore::Answer>& answers) {
  if (answers.size() == 1) return answer_dict(answers[0]);
  py::list out;
  for (const auto& a : answers) out.append(answer_dict(a));
  return out;
}

}  // namespace

void bind_question_answerer(py::module_& m) {
  py::class_<encore::QuestionAnswerer>(
      m, "QuestionAnswerer",
      "A *ForQuestionAnswering checkpoint (extractive QA, SQuAD-style) read as transformers' "
      "pipeline('question-answering'): answers are dicts with 'score', 'start', 'end' (character offsets into the "
      "context) and 'answer'. Long contexts are read in windows of max_seq_len tokens overlapping by doc_stride.\n\n"
      "QuestionAnswerer(path, dtype='fp32'). Calls release the GIL.")
      .def(py::init([](const py::object& path, const std::string& dtype) {
             const std::string dir = py::str(path).cast<std::string>();
             const encore::DType d = encore::parse_dtype(dtype);
             py::gil_scoped_release nogil;
             return encore::QuestionAnswerer::load(dir, d);
           }),
           py::arg("path"), py::arg("dtype") = "fp32", "Loads a *ForQuestionAnswering directory.")
      .def(
          "__call__",
          [](const encore::QuestionAnswerer& self, const py::object& inputs, const py::object& question,
             const py::object& context, int64_t top_k, const py::object& doc_stride, int64_t max_answer_len,
             const py::object& max_seq_len, int64_t max_question_len, bool handle_impossible_answer,
             bool align_to_words, int64_t batch_size) {
            auto [pairs, one] = examples(inputs, question, context);
            encore::QuestionAnswerOptions o;
            o.top_k = top_k;
            if (!doc_stride.is_none()) o.doc_stride = doc_stride.cast<int64_t>();
            o.max_answer_len = max_answer_len;
            if (!max_seq_len.is_none()) o.max_seq_len = max_seq_len.cast<int64_t>();
            o.max_question_len = max_question_len;
            o.handle_impossible_answer = handle_impossible_answer;
            o.align_to_words = align_to_words;
            o.batch_size = batch_size;
            std::vector<std::vector<encore::Answer>> result;
            {
              py::gil_scoped_release nogil;
              result = self.answer(pairs, o);
            }
            if (one) return answers_object(result[0]);
            py::list out;
            for (const auto& answers : result) out.append(answers_object(answers));
            return py::object(out);
          },
          py::arg("inputs") = py::none(), py::kw_only(), py::arg("question") = py::none(),
          py::arg("context") = py::none(), py::arg("top_k") = 1, py::arg("doc_stride") = py::none(),
          py::arg("max_answer_len") = 15, py::arg("max_seq_len") = py::none(), py::arg("max_question_len") = 64,
          py::arg("handle_impossible_answer") = false, py::arg("align_to_words") = true, py::arg("batch_size") = 32,
          "Answers question= in context= (str, or lists: a list of questions may share one context), or inputs= "
          "{'question': ..., 'context': ...} dicts. One example gives its answer dict (a list of dicts when top_k > 1 "
          "finds several), several give one such result each. top_k: answers per question; doc_stride: tokens a "
          "window repeats from the one before (default min(max_seq_len // 2, 128)); max_answer_len: tokens; "
          "max_seq_len: tokens per window (default min(model_max_length, 384)); max_question_len: accepted as the "
          "pipeline's, which applies it only to slow tokenizers (the question is never truncated); "
          "handle_impossible_answer: the empty answer competes with its null score; align_to_words: answers cover "
          "whole words.")
      .def_property_readonly("max_seq_len", &encore::QuestionAnswerer::default_max_seq_len,
                             "the default tokens per window: min(model_max_length, 384, the model's positions)")
      .def("__repr__", [](const encore::QuestionAnswerer& s) {
        const encore::ModelInfo& mi = s.model().info();
        return "QuestionAnswerer(architecture='" + mi.architecture + "', dtype=" + mi.dtype +
               ", max_seq_len=" + std::to_string(s.default_max_seq_len()) + ")";
      });
}

}  // namespace encore_py
