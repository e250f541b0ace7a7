// torch-style printing for encore.nn modules (repr = the class, its extra_repr, then each child, indented, with
// identical consecutive numbered children collapsed as torch's ModuleList does: "(0-5): 6 x Layer(...)"), plus
// what torch.nn has and encore's Python side lacked: nn.Linear, per-site dropout of an encoder layer and the
// sinusoidal positional-encoding table. Binding code only.
#include <sstream>

#include "encore/nn.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

namespace {

std::string py_bool(bool b) { return b ? "True" : "False"; }

std::string fmt(double v) {  // Python's repr of a float: 0.1, 1e-05
  return py::repr(py::float_(v)).cast<std::string>();
}

std::string indent(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}

bool is_index(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

std::string shape_repr(const Shape& s) {  // Python's tuple repr: (24,), (2, 3)
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += std::to_string(s[i]) + (s.size() == 1 ? "," : i + 1 < s.size() ? ", " : "");
  return out + ")";
}

std::string layer_norm_extra(const Shape& shape, double eps, const Tensor& weight, const Tensor& bias) {
  return shape_repr(shape) + ", eps=" + fmt(eps) + ", elementwise_affine=" + py_bool(weight.defined()) +
         ", bias=" + py_bool(bias.defined());
}

std::string rms_norm_extra(const Shape& shape, double eps, const Tensor& weight) {
  return shape_repr(shape) + ", eps=" + fmt(eps) + ", elementwise_affine=" + py_bool(weight.defined());
}

// A layer's norm (nn::Norm, not a Python class) shows as the torch module it is: LayerNorm(...) or RMSNorm(...).
std::string norm_child_repr(const nn::Norm& n) {
  return n.kind == nn::NormKind::rms_norm ? "RMSNorm(" + rms_norm_extra(n.normalized_shape, n.eps, n.weight) + ")"
                                          : "LayerNorm(" + layer_norm_extra(n.normalized_shape, n.eps, n.weight, n.bias) + ")";
}

std::string module_repr(const py::object& self) {
  nn::Module& m = self.cast<nn::Module&>();
  const std::string type = py::str(py::type::of(self).attr("__name__")).cast<std::string>();
  const std::string extra = py::str(self.attr("extra_repr")()).cast<std::string>();
  std::vector<std::pair<std::string, std::string>> children;  // (name, repr)
  m.for_each_child([&](nn::Module& child, const std::string& name) {
    const std::string leaf = name.substr(name.rfind('.') + 1);
    if (const auto* norm = dynamic_cast<const nn::Norm*>(&child))
      children.emplace_back(leaf, norm_child_repr(*norm));
    else
      children.emplace_back(leaf, py::repr(py::cast(&child, py::return_value_policy::reference)).cast<std::string>());
  });
  if (children.empty()) return type + "(" + extra + ")";
  std::string s = type + "(";
  if (!extra.empty()) s += "\n  " + indent(extra);
  for (size_t i = 0; i < children.size();) {
    size_t j = i + 1;
    if (is_index(children[i].first))
      while (j < children.size() && is_index(children[j].first) && children[j].second == children[i].second) ++j;
    if (j - i > 1)
      s += "\n  (" + children[i].first + "-" + children[j - 1].first + "): " + std::to_string(j - i) + " x " +
           indent(children[i].second);
    else
      s += "\n  (" + children[i].first + "): " + indent(children[i].second);
    i = j;
  }
  return s + "\n)";
}

// Methods added to classes bound elsewhere: named (py::name), so help() and the stub generator read a typed
// signature from the docstring.
template <typename T, typename F>
void extra_repr(py::module_& mnn, const char* cls, F f) {
  py::object c = mnn.attr(cls);
  py::setattr(c, "extra_repr",
              py::cpp_function([f](const T& self) { return f(self); }, py::name("extra_repr"), py::is_method(c),
                               "the module's own settings in its repr (torch's extra_repr)"));
}

// ", norm=rms_norm" for a layer built with RMSNorm; nothing for torch's LayerNorm layers (their repr is torch's).
std::string norm_repr(nn::NormKind kind) {
  return kind == nn::NormKind::rms_norm ? std::string(", norm=") + nn::norm_name(kind) : std::string();
}

std::string dropout_repr(const nn::EncoderLayerDropout& d) {
  return "dropout(attention_probs=" + fmt(d.attention_probs) + ", attention_output=" + fmt(d.attention_output) +
         ", ffn_hidden=" + fmt(d.ffn_hidden) + ", ffn_output=" + fmt(d.ffn_output) + ")";
}

}  // namespace

void bind_repr(py::module_& mnn) {
  py::class_<nn::Linear, nn::Module>(mnn, "Linear", "torch.nn.Linear: y = x Wᵀ + b, weight (out, in)")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true,
           "torch.nn.Linear(in_features, out_features, bias=True): weight (out_features, in_features), Xavier-uniform "
           "(encore's init for every layer, seeded by encore.manual_seed; torch's Linear uses Kaiming-uniform), "
           "bias zero")
      .def_readonly("in_features", &nn::Linear::in_features, "size of each input sample (the last dimension)")
      .def_readonly("out_features", &nn::Linear::out_features, "size of each output sample")
      .def(
          "forward",
          [](const nn::Linear& self, const py::object& x) {
            Tensor t = float_tensor(x, "input");
            py::gil_scoped_release nogil;
            Tensor out = self.forward(t);
            py::gil_scoped_acquire gil;
            return to_numpy(out);
          },
          py::arg("input"), "y = input Wᵀ + b for input (..., in_features) float32; returns (..., out_features)")
      .def("__call__", [](py::object self, const py::object& x) { return self.attr("forward")(x); }, py::arg("input"));

  py::object module = mnn.attr("Module");
  py::setattr(module, "extra_repr",
              py::cpp_function([](const nn::Module&) { return std::string(); }, py::name("extra_repr"),
                               py::is_method(module), "the module's own settings in its repr (torch's extra_repr)"));
  py::setattr(module, "__repr__",
              py::cpp_function([](const py::object& self) { return module_repr(self); }, py::name("__repr__"),
                               py::is_method(module),
                               "torch's module repr: the class, extra_repr(), then each child indented"));

  extra_repr<nn::Linear>(mnn, "Linear", [](const nn::Linear& l) {
    return "in_features=" + std::to_string(l.in_features) + ", out_features=" + std::to_string(l.out_features) +
           ", bias=" + py_bool(l.bias.defined());
  });
  extra_repr<nn::LayerNorm>(mnn, "LayerNorm", [](const nn::LayerNorm& n) {
    return layer_norm_extra(n.normalized_shape, n.eps, n.weight, n.bias);
  });
  extra_repr<nn::RMSNorm>(mnn, "RMSNorm", [](const nn::RMSNorm& n) {
    return rms_norm_extra(n.normalized_shape, n.eps, n.weight);
  });
  extra_repr<nn::MultiheadAttention>(mnn, "MultiheadAttention", [](const nn::MultiheadAttention& a) {
    return "embed_dim=" + std::to_string(a.embed_dim) + ", num_heads=" + std::to_string(a.num_heads) +
           ", head_dim=" + std::to_string(a.head_dim) + ", dropout=" + fmt(a.dropout) +
           ", batch_first=" + py_bool(a.batch_first);
  });
  extra_repr<nn::TransformerEncoderLayer>(mnn, "TransformerEncoderLayer", [](const nn::TransformerEncoderLayer& l) {
    return "d_model=" + std::to_string(l.d_model) + ", nhead=" + std::to_string(l.self_attn.num_heads) +
           ", dim_feedforward=" + std::to_string(l.dim_feedforward) + ", activation=" +
           nn::activation_name(l.activation) + ", norm_first=" + py_bool(l.norm_first) +
           ", batch_first=" + py_bool(l.batch_first) + norm_repr(l.norm1.kind) + ",\n" + dropout_repr(l.dropout_sites());
  });
  extra_repr<nn::TransformerEncoder>(mnn, "TransformerEncoder", [](const nn::TransformerEncoder& e) {
    return "num_layers=" + std::to_string(e.num_layers) + ", batch_first=" + py_bool(e.batch_first);
  });
  extra_repr<nn::TransformerDecoderLayer>(mnn, "TransformerDecoderLayer", [](const nn::TransformerDecoderLayer& l) {
    return "d_model=" + std::to_string(l.d_model) + ", dim_feedforward=" + std::to_string(l.dim_feedforward) +
           ", dropout=" + fmt(l.dropout) + ", activation=" + nn::activation_name(l.activation) +
           ", norm_first=" + py_bool(l.norm_first) + ", batch_first=" + py_bool(l.batch_first) +
           norm_repr(l.norm1.kind);
  });
  extra_repr<nn::TransformerDecoder>(mnn, "TransformerDecoder", [](const nn::TransformerDecoder& d) {
    return "num_layers=" + std::to_string(d.num_layers) + ", batch_first=" + py_bool(d.batch_first);
  });
  extra_repr<nn::Transformer>(mnn, "Transformer", [](const nn::Transformer& t) {
    return "d_model=" + std::to_string(t.d_model) + ", nhead=" + std::to_string(t.nhead) +
           ", batch_first=" + py_bool(t.batch_first);
  });

  // Per-site dropout (nn::EncoderLayerDropout): torch's one `dropout` drops at all four sites; Hugging Face
  // layers drop the attention probabilities and the two sublayer outputs, not the FFN hidden.
  py::object layer = mnn.attr("TransformerEncoderLayer");
  py::setattr(layer, "set_dropout",
              py::cpp_function(
                  [](nn::TransformerEncoderLayer& self, double attention_probs, double attention_output,
                     double ffn_hidden, double ffn_output) {
                    self.set_dropout({attention_probs, attention_output, ffn_hidden, ffn_output});
                  },
                  py::name("set_dropout"), py::is_method(layer), py::arg("attention_probs") = 0.0,
                  py::arg("attention_output") = 0.0,
                  py::arg("ffn_hidden") = 0.0, py::arg("ffn_output") = 0.0,
                  "dropout probability at each site of the training forward, each in [0, 1]: the attention "
                  "probabilities, self_attn's output before the residual, the FFN hidden act(linear1(x)), and "
                  "linear2's output before the residual"));
  py::setattr(layer, "dropout_sites",
              py::cpp_function(
                  [](const nn::TransformerEncoderLayer& self) {
                    const nn::EncoderLayerDropout& d = self.dropout_sites();
                    py::dict out;
                    out["attention_probs"] = d.attention_probs;
                    out["attention_output"] = d.attention_output;
                    out["ffn_hidden"] = d.ffn_hidden;
                    out["ffn_output"] = d.ffn_output;
                    return out;
                  },
                  py::name("dropout_sites"), py::is_method(layer),
                  "the dropout probability at each site, as set_dropout takes them"));

  mnn.def(
      "sinusoidal_positions",
      [](int64_t length, int64_t d_model, int64_t start) {
        return to_numpy(nn::sinusoidal_positions(start, length, d_model));
      },
      py::arg("length"), py::arg("d_model"), py::arg("start") = 0,
      "the (length, d_model) sinusoidal positional-encoding table of 'Attention Is All You Need' for positions "
      "start .. start+length-1: pe[p, 2i] = sin(p / 10000^(2i/d_model)), pe[p, 2i+1] = cos(the same)");
}

}  // namespace encore_py
