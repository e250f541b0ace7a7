// Bindings for training: encore.optim (AdamW, clip_grad_norm_, learning_rate_at) and encore.losses (each
// returning (loss, gradient...)), numpy in and out.
#include <algorithm>
#include <type_traits>
#include <variant>

#include "encore/sentence_encoder.hpp"
#include "encore/train.hpp"
#include "encore/trainer.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

void bind_train(py::module_& m) {
  py::module_ optim = m.def_submodule("optim", "optimisers with torch.optim's semantics");
  py::class_<encore::train::AdamW>(optim, "AdamW", "torch.optim.AdamW (decoupled weight decay) over the parameters of an nn.Module")
      .def(py::init([](nn::Module& module, double lr, std::pair<double, double> betas, double eps, double weight_decay) {
             encore::train::AdamWOptions o;
             o.lr = lr;
             o.beta1 = betas.first;
             o.beta2 = betas.second;
             o.eps = eps;
             o.weight_decay = weight_decay;
             return std::make_unique<encore::train::AdamW>(module, o);
           }),
           py::arg("module"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2, py::keep_alive<1, 2>(),
           "torch.optim.AdamW over every parameter of `module` (takes the module, not its parameters); a parameter "
           "without a gradient at step() is skipped, as torch skips .grad None")
      .def("step", &encore::train::AdamW::step, py::call_guard<py::gil_scoped_release>(),
           "One AdamW update of every parameter that has a gradient")
      .def("zero_grad", &encore::train::AdamW::zero_grad, py::arg("set_to_none") = true,
           "Drops the module's gradients (set_to_none) or zeroes them")
      .def_property("lr", &encore::train::AdamW::lr, &encore::train::AdamW::set_lr, "the learning rate of the next step")
      .def_property_readonly("steps", &encore::train::AdamW::steps, "updates done so far");
  optim.def("clip_grad_norm_", &encore::train::clip_grad_norm, py::arg("module"), py::arg("max_norm"),
            "scale all gradients so their global norm is at most max_norm; returns the norm before clipping");
  optim.def(
      "learning_rate_at",
      [](int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps, const std::string& schedule) {
        return encore::train::learning_rate_at(step, base_lr, warmup_steps, total_steps,
                                               encore::train::parse_schedule(schedule));
      },
      py::arg("step"), py::arg("base_lr"), py::arg("warmup_steps"), py::arg("total_steps"),
      py::arg("schedule") = "linear",
      "The learning rate at optimizer step `step` (from 0): linear warm-up over warmup_steps, then 'constant', "
      "'linear' decay to 0 at total_steps, or 'cosine' (transformers' schedules)");

  // train(model, data, **options): the options are TrainConfig's fields by the keywords of train_options() (one
  // table); defaults come from a default TrainConfig, never restated here. The signature line help() and the
  // stub generator read is written from the same table (pybind11's own would say **kwargs).
  std::string train_doc = "train(model: str, data: str, *, task: str = 'classification'";
  {
    const encore::train::TrainConfig defaults;
    for (const auto& o : encore::train::train_options()) {
      if (std::string(o.name) == "model" || std::string(o.name) == "data") continue;
      std::visit(
          [&](auto member) {
            using T = std::remove_cvref_t<decltype(defaults.*member)>;
            const char* type = std::is_same_v<T, std::string> ? "str"
                               : std::is_same_v<T, bool>      ? "bool"
                               : std::is_same_v<T, double>    ? "float"
                                                              : "int";
            train_doc += std::string(", ") + o.name + ": " + type + " = " +
                         static_cast<std::string>(py::repr(py::cast(defaults.*member)));
          },
          o.member);
    }
  }
  train_doc +=
      ") -> dict\n\n"
      "The engine of `encore train`: task 'classification' fine-tunes for sequence classification (text[, "
      "text_pair], label), 'token-classification' for token classification / NER (JSONL tokens + labels per word, "
      "labels on each word's first sub-token), 'embedding' a sentence-transformers model on pairs with MultipleNegativesRankingLoss "
      "(eval_accuracy is then held-out retrieval accuracy, eval_before the same before training). The options "
      "are `encore train`'s (docs/training.md): log = --log CSV, output = --output DIR, resume = --resume DIR, "
      "plot = --plot FILE.svg. Returns a report dict (losses, eval_accuracy with eval_epochs/eval_steps, "
      "examples_trained, ...). Ctrl-C stops it after the current step (KeyboardInterrupt).";
  py::options signatures;
  signatures.disable_function_signatures();  // the line above is the signature
  m.def(
      "train",
      [](const std::string& model, const std::string& data, const py::kwargs& options) {
        encore::train::TrainConfig c;
        c.model_dir = model;
        c.data = data;
        std::string task = "classification";
        for (const auto& [key, value] : options) {
          const std::string name = key.cast<std::string>();
          if (name == "task") {
            task = value.cast<std::string>();
            continue;
          }
          const auto& table = encore::train::train_options();
          auto it = std::find_if(table.begin(), table.end(), [&](const auto& o) { return name == o.name; });
          if (it == table.end() || name == "model" || name == "data") {
            std::string known;
            for (const auto& o : table) known += std::string(known.empty() ? "" : ", ") + o.name;
            throw py::type_error("train() got an unexpected keyword argument '" + name + "' (options: task, " +
                                 known + ")");
          }
          std::visit(
              [&](auto member) {
                using T = std::remove_reference_t<decltype(c.*member)>;
                const bool is_bool = py::isinstance<py::bool_>(value);
                if (std::is_same_v<T, bool> != is_bool || (std::is_same_v<T, std::string> && !py::isinstance<py::str>(value)))
                  throw py::type_error("train(): " + name + " must be " +
                                       (std::is_same_v<T, bool>          ? "a bool"
                                        : std::is_same_v<T, std::string> ? "a str"
                                        : std::is_same_v<T, double>      ? "a number"
                                                                         : "an int") +
                                       ", got " + py::str(py::type::of(value).attr("__name__")).cast<std::string>());
                c.*member = value.cast<T>();
              },
              it->member);
        }
        encore::train::TrainReport r;
        {
          py::gil_scoped_release nogil;
          r = encore::train::fine_tune(task, c, [](const encore::train::TrainProgress&) { check_python_signals(); });
        }
        py::dict d;
        d["losses"] = r.losses;
        d["first_step"] = r.first_step;
        d["total_steps"] = r.total_steps;
        d["eval_accuracy"] = r.eval_accuracy;
        d["eval_epochs"] = r.eval_epochs;
        d["eval_steps"] = r.eval_steps;
        d["eval_before"] = r.eval_before;
        d["labels"] = r.labels;
        d["train_examples"] = r.train_examples;
        d["examples_trained"] = r.examples_trained;
        d["eval_examples"] = r.eval_examples;
        d["tokens"] = r.tokens;
        d["seconds"] = r.seconds;
        return d;
      },
      py::arg("model"), py::arg("data"), train_doc.c_str());
  signatures.enable_function_signatures();

  m.def(
      "embedding_loss_backward",
      [](encore::SentenceEncoder& encoder, const std::vector<std::string>& anchors,
         const std::vector<std::string>& positives, double scale, double grad_weight) {
        py::gil_scoped_release nogil;
        return encore::train::embedding_loss_backward(encoder, anchors, positives, scale, nullptr, grad_weight);
      },
      py::arg("encoder"), py::arg("anchors"), py::arg("positives"), py::arg("scale") = 20.0,
      py::arg("grad_weight") = 1.0,
      "one MultipleNegativesRankingLoss forward + backward through the pipeline (encoder.model in training mode): "
      "accumulates grad_weight x the loss's parameter gradients (a micro-batch's share of an accumulated step), "
      "returns the loss");

  py::module_ losses = m.def_submodule("losses", "losses returning (mean loss, gradient(s) of the mean loss)");
  losses.def(
      "cross_entropy",
      [](const py::object& logits, const py::object& labels, int64_t ignore_index) {
        Tensor z = float_tensor(logits, "logits"), y = int_tensor(labels, "labels"), g;
        double loss = encore::train::cross_entropy_loss(z, y, &g, ignore_index);
        return py::make_tuple(loss, to_numpy(g));
      },
      py::arg("logits"), py::arg("labels"), py::arg("ignore_index") = -100,
      "torch.nn.functional.cross_entropy (mean over labels != ignore_index) of logits (N, C) float32 and labels (N,) "
      "int64: returns (loss, d loss / d logits)");
  losses.def(
      "mse",
      [](const py::object& pred, const py::object& target) {
        Tensor p = float_tensor(pred, "pred"), t = float_tensor(target, "target"), g;
        double loss = encore::train::mse_loss(p, t, &g);
        return py::make_tuple(loss, to_numpy(g));
      },
      py::arg("pred"), py::arg("target"),
      "torch.nn.functional.mse_loss (mean): returns (loss, d loss / d pred)");
  losses.def(
      "multiple_negatives_ranking",
      [](const py::object& anchors, const py::object& positives, double scale) {
        Tensor a = float_tensor(anchors, "anchors"), p = float_tensor(positives, "positives"), da, dp;
        double loss = encore::train::multiple_negatives_ranking_loss(a, p, scale, &da, &dp);
        return py::make_tuple(loss, to_numpy(da), to_numpy(dp));
      },
      py::arg("anchors"), py::arg("positives"), py::arg("scale") = 20.0,
      "sentence-transformers' MultipleNegativesRankingLoss on embeddings (N, D): cross-entropy of scale x cosine "
      "similarities with the other positives as negatives; returns (loss, d anchors, d positives)");
}

}  // namespace encore_py
