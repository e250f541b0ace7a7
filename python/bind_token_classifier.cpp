// encore.TokenClassifier: transformers' pipeline("token-classification") call shape over encore::TokenClassifier
// (the aggregation is C++; this file only converts arguments and results).
#include <optional>

#include "encore/token_classifier.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

namespace {

struct PyTokenClassifier {
  encore::TokenClassifier classifier;
  encore::TokenClassifyOptions defaults;  // the constructor's aggregation_strategy / ignore_labels
};

// aggregation_strategy (transformers' name) or aggregation (the issue's); both given must agree.
std::optional<encore::Aggregation> aggregation_arg(const py::object& strategy, const py::object& aggregation) {
  std::optional<encore::Aggregation> a, b;
  if (!strategy.is_none()) a = encore::parse_aggregation(py::str(strategy).cast<std::string>());
  if (!aggregation.is_none()) b = encore::parse_aggregation(py::str(aggregation).cast<std::string>());
  if (a && b && *a != *b)
    throw encore::UsageError("aggregation_strategy='" + encore::aggregation_name(*a) + "' and aggregation='" +
                             encore::aggregation_name(*b) + "' disagree: give one of them");
  return a ? a : b;
}

std::vector<std::string> label_list(const py::object& labels) {
  if (py::isinstance<py::str>(labels)) throw encore::UsageError("ignore_labels must be a list of labels, not a str");
  std::vector<std::string> out;
  for (auto l : labels) out.push_back(py::str(l).cast<std::string>());
  return out;
}

// One entity as the pipeline's dict: entity, score, index, word, start, end (none) or entity_group, score, word,
// start, end (grouped), in that key order.
py::dict entity_dict(const encore::TokenEntity& e, bool grouped) {
  py::dict d;
  d[grouped ? "entity_group" : "entity"] = e.entity;
  d["score"] = e.score;
  if (!grouped) d["index"] = e.index;
  d["word"] = e.word;
  d["start"] = e.start;
  d["end"] = e.end;
  return d;
}

py::object call(const PyTokenClassifier& self, const py::object& inputs, const py::object& aggregation_strategy,
                const py::object& ignore_labels, int64_t batch_size, const py::object& aggregation,
                const py::object& stride) {
  const bool single = py::isinstance<py::str>(inputs);
  std::vector<std::string> texts;
  if (single) {
    texts.push_back(inputs.cast<std::string>());
  } else {
    if (!py::isinstance<py::iterable>(inputs)) throw encore::UsageError("inputs must be a str or a list of str");
    for (auto item : inputs) {
      if (!py::isinstance<py::str>(item))
        throw encore::UsageError("inputs[" + std::to_string(texts.size()) + "] is a " +
                                 py::str(py::type::handle_of(item).attr("__name__")).cast<std::string>() + ", not a str");
      texts.push_back(item.cast<std::string>());
    }
  }
  encore::TokenClassifyOptions o = self.defaults;
  if (auto a = aggregation_arg(aggregation_strategy, aggregation)) o.aggregation = *a;
  if (!ignore_labels.is_none()) o.ignore_labels = label_list(ignore_labels);
  if (!stride.is_none()) o.stride = stride.cast<int64_t>();
  o.batch_size = batch_size;
  std::vector<std::vector<encore::TokenEntity>> result;
  {
    py::gil_scoped_release nogil;
    result = self.classifier.predict(texts, o);
  }
  const bool grouped = o.aggregation != encore::Aggregation::none;
  py::list out;
  for (const auto& entities : result) {
    py::list row;
    for (const auto& e : entities) row.append(entity_dict(e, grouped));
    out.append(row);
  }
  return single ? py::object(out[0]) : py::object(out);
}

}  // namespace

void bind_token_classifier(py::module_& m) {
  py::class_<PyTokenClassifier>(
      m, "TokenClassifier",
      "A *ForTokenClassification checkpoint (NER, PII, part-of-speech) read as transformers' "
      "pipeline('token-classification', aggregation_strategy=...): per text a list of entities, dicts with "
      "'entity', 'score', 'index', 'word', 'start', 'end' (aggregation 'none') or 'entity_group', 'score', 'word', "
      "'start', 'end' (simple, first, average, max); start/end are character offsets into the text.\n\n"
      "TokenClassifier(path, aggregation_strategy='none', ignore_labels=['O'], dtype='fp32'). Calls release the GIL.")
      .def(py::init([](const py::object& path, const py::object& aggregation_strategy, const py::object& ignore_labels,
                       const std::string& dtype, const py::object& aggregation, const py::object& stride) {
             const std::string dir = py::str(path).cast<std::string>();
             const encore::DType d = encore::parse_dtype(dtype);
             encore::TokenClassifyOptions defaults;
             if (auto a = aggregation_arg(aggregation_strategy, aggregation)) defaults.aggregation = *a;
             if (!ignore_labels.is_none()) defaults.ignore_labels = label_list(ignore_labels);
             if (!stride.is_none()) defaults.stride = stride.cast<int64_t>();
             py::gil_scoped_release nogil;
             return PyTokenClassifier{encore::TokenClassifier::load(dir, d), std::move(defaults)};
           }),
           py::arg("path"), py::arg("aggregation_strategy") = py::none(), py::arg("ignore_labels") = py::none(),
           py::arg("dtype") = "fp32", py::arg("aggregation") = py::none(), py::arg("stride") = py::none(),
           "Loads a *ForTokenClassification directory; aggregation_strategy (or aggregation), ignore_labels and "
           "stride are the defaults of every call.")
      .def("__call__", &call, py::arg("inputs"), py::arg("aggregation_strategy") = py::none(),
           py::arg("ignore_labels") = py::none(), py::arg("batch_size") = 32, py::arg("aggregation") = py::none(),
           py::arg("stride") = py::none(),
           "Entities of one text (a list of dicts) or of each text of a list (a list of lists). "
           "aggregation_strategy: 'none', 'simple', 'first', 'average' or 'max' (aggregation= is the same); "
           "ignore_labels: labels left out (default ['O']); stride: read long texts whole, in windows of max_length "
           "tokens overlapping by stride tokens, as the pipeline's stride= (needs an aggregation other than 'none').")
      .def_property_readonly("labels", [](const PyTokenClassifier& s) { return s.classifier.labels(); },
                             "config.json's id2label, in label order ('LABEL_i' where it names none)")
      .def_property_readonly("num_labels", [](const PyTokenClassifier& s) { return s.classifier.num_labels(); },
                             "number of labels")
      .def_property_readonly("max_length", [](const PyTokenClassifier& s) { return s.classifier.max_length(); },
                             "tokens per text (special tokens included) before truncation: the tokenizer's "
                             "model_max_length, at most the model's positions")
      .def("__repr__", [](const PyTokenClassifier& s) {
        const encore::ModelInfo& mi = s.classifier.model().info();
        return "TokenClassifier(architecture='" + mi.architecture + "', dtype=" + mi.dtype +
               ", num_labels=" + std::to_string(s.classifier.num_labels()) + ", aggregation_strategy='" +
               encore::aggregation_name(s.defaults.aggregation) + "', max_length=" +
               std::to_string(s.classifier.max_length()) + ")";
      });
}

}  // namespace encore_py
