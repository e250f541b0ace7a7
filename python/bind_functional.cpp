// Bindings for encore.functional (include/encore/functional.hpp): stateless forward/backward op pairs over numpy
// arrays, the GIL released around the compute. Binding code only.
#include "encore/functional.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

namespace F = encore::functional;

namespace {
// Runs fn with the GIL released and returns its tensor as a numpy array.
template <class Fn>
py::object compute(Fn&& fn) {
  Tensor out;
  {
    py::gil_scoped_release nogil;
    out = fn();
  }
  return to_numpy(out);
}
}  // namespace

void bind_functional(py::module_& m) {
  py::module_ f = m.def_submodule(
      "functional", "stateless forward/backward op pairs (torch.nn.functional's role): rotary embedding, gated "
                    "activations");
  f.def(
      "rotary_cos_sin",
      [](const py::object& position_ids, int64_t rotary_dim, double theta) {
        Tensor ids = int_tensor(position_ids, "position_ids");
        ENCORE_CHECK(ids.defined(), "position_ids: expected an integer array, got None");
        F::RotaryTables t;
        {
          py::gil_scoped_release nogil;
          t = F::rotary_cos_sin(ids, rotary_dim, theta);
        }
        return py::make_tuple(to_numpy(t.cos), to_numpy(t.sin));
      },
      py::arg("position_ids"), py::arg("rotary_dim"), py::arg("theta") = 10000.0,
      "(cos, sin), each position_ids.shape + (rotary_dim/2,): Hugging Face's default RotaryEmbedding tables, "
      "angle = position / theta^(2i/rotary_dim) in float32 (HF's cos/sin are these concatenated twice)");
  f.def(
      "rotary_embedding",
      [](const py::object& x, const py::object& cos, const py::object& sin) {
        Tensor xt = float_tensor(x, "input"), c = float_tensor(cos, "cos"), s = float_tensor(sin, "sin");
        return compute([&] { return F::rotary_embedding(xt, c, s); });
      },
      py::arg("input"), py::arg("cos"), py::arg("sin"),
      "HF's apply_rotary_pos_emb on input (..., T, heads, head_dim): x*cos + rotate_half(x)*sin over the first "
      "rotary_dim = 2*cos.shape[-1] dims of each head, the rest passed through; cos/sin (T, rotary_dim/2) or "
      "input's leading dims + (T, rotary_dim/2)");
  f.def(
      "rotary_embedding_backward",
      [](const py::object& grad_output, const py::object& cos, const py::object& sin) {
        Tensor g = float_tensor(grad_output, "grad_output"), c = float_tensor(cos, "cos"), s = float_tensor(sin, "sin");
        return compute([&] { return F::rotary_embedding_backward(g, c, s); });
      },
      py::arg("grad_output"), py::arg("cos"), py::arg("sin"),
      "gradient of rotary_embedding's input: the inverse rotation of grad_output");
  f.def(
      "gated_activation",
      [](const py::object& x, const std::string& activation, const std::string& gate) {
        Tensor xt = float_tensor(x, "input");
        return compute([&] { return F::gated_activation(xt, activation, gate); });
      },
      py::arg("input"), py::arg("activation") = "silu", py::arg("gate") = "first",
      "input (..., 2F) = [x0 | x1] -> act(x0)*x1 (gate='first') or act(x1)*x0 (gate='second'), (..., F); "
      "activation silu (SwiGLU), gelu (erf GeGLU), gelu_tanh, relu (swiglu/geglu accepted)");
  f.def(
      "gated_activation_backward",
      [](const py::object& grad_output, const py::object& x, const std::string& activation, const std::string& gate) {
        Tensor g = float_tensor(grad_output, "grad_output"), xt = float_tensor(x, "input");
        return compute([&] { return F::gated_activation_backward(g, xt, activation, gate); });
      },
      py::arg("grad_output"), py::arg("input"), py::arg("activation") = "silu", py::arg("gate") = "first",
      "gradient of gated_activation's input (..., 2F) for grad_output (..., F)");
}

}  // namespace encore_py
