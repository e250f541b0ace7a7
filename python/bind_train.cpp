// Bindings for training: encore.optim (AdamW, clip_grad_norm_, learning_rate_at) and encore.losses (each
// returning (loss, gradient...)), numpy in and out.
#include "encore/train.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

void bind_train(py::module_& m) {
  py::module_ optim = m.def_submodule("optim", "optimisers with torch.optim's semantics");
  py::class_<encore::train::AdamW>(optim, "AdamW")
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
           "torch.optim.AdamW over every parameter of `module` (takes the module, not its parameters)")
      .def("step", &encore::train::AdamW::step, py::call_guard<py::gil_scoped_release>())
      .def("zero_grad", &encore::train::AdamW::zero_grad)
      .def_property("lr", &encore::train::AdamW::lr, &encore::train::AdamW::set_lr)
      .def_property_readonly("steps", &encore::train::AdamW::steps);
  optim.def("clip_grad_norm_", &encore::train::clip_grad_norm, py::arg("module"), py::arg("max_norm"),
            "scale all gradients so their global norm is at most max_norm; returns the norm before clipping");
  optim.def(
      "learning_rate_at",
      [](int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps, const std::string& schedule) {
        return encore::train::learning_rate_at(step, base_lr, warmup_steps, total_steps,
                                               encore::train::parse_schedule(schedule));
      },
      py::arg("step"), py::arg("base_lr"), py::arg("warmup_steps"), py::arg("total_steps"),
      py::arg("schedule") = "linear");

  py::module_ losses = m.def_submodule("losses", "losses returning (mean loss, gradient(s) of the mean loss)");
  losses.def(
      "cross_entropy",
      [](const py::object& logits, const py::object& labels, int64_t ignore_index) {
        Tensor z = float_tensor(logits, "logits"), y = int_tensor(labels, "labels"), g;
        double loss = encore::train::cross_entropy_loss(z, y, &g, ignore_index);
        return py::make_tuple(loss, to_numpy(g));
      },
      py::arg("logits"), py::arg("labels"), py::arg("ignore_index") = -100);
  losses.def(
      "mse",
      [](const py::object& pred, const py::object& target) {
        Tensor p = float_tensor(pred, "pred"), t = float_tensor(target, "target"), g;
        double loss = encore::train::mse_loss(p, t, &g);
        return py::make_tuple(loss, to_numpy(g));
      },
      py::arg("pred"), py::arg("target"));
  losses.def(
      "multiple_negatives_ranking",
      [](const py::object& anchors, const py::object& positives, double scale) {
        Tensor a = float_tensor(anchors, "anchors"), p = float_tensor(positives, "positives"), da, dp;
        double loss = encore::train::multiple_negatives_ranking_loss(a, p, scale, &da, &dp);
        return py::make_tuple(loss, to_numpy(da), to_numpy(dp));
      },
      py::arg("anchors"), py::arg("positives"), py::arg("scale") = 20.0);
}

}  // namespace encore_py
