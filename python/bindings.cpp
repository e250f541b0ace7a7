// Python bindings: encore.nn mirrors torch.nn's Transformer modules over numpy arrays. Binding code only:
// argument conversion, torch's signatures and defaults, and the GIL released around the C++ compute.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "encore/nn.hpp"
#include "encore/runtime.hpp"
#include "encore/version.hpp"
#include "numpy_convert.hpp"

using namespace encore_py;

namespace {

// The Python error boundary (docs/errors.md): every C++ exception becomes an encore.Error subclass. encore.Error
// is a ValueError (as it always was); InternalError is also a RuntimeError and ResourceError a MemoryError, so
// code catching the builtin classes keeps working.
// The classes live for the whole process (references never dropped: nothing runs at exit after Python is gone).
PyObject* new_error_class(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  PyObject* cls = PyErr_NewExceptionWithDoc((std::string("encore._encore.") + name).c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  m.attr(name) = py::handle(cls);
  return cls;
}

void register_errors(py::module_& m) {
  static PyObject* error = new_error_class(
      m, "Error", PyExc_ValueError,
      "What encore raises (a ValueError): the message names the file, field or argument and what is allowed; "
      "the subclasses say whose fault it is (docs/errors.md).");
  static PyObject* usage = new_error_class(
      m, "UsageError", error, "An argument is out of its range or not one of the allowed values (CLI exit code 2).");
  static PyObject* input = new_error_class(
      m, "InputError", error, "User data is wrong: a text, a JSONL/CSV line, a data file (CLI exit code 3).");
  static PyObject* model_format = new_error_class(
      m, "ModelFormatError", input,
      "A model, tokenizer or config file is malformed or missing; the message names the file and the JSON pointer "
      "(CLI exit code 3).");
  static PyObject* nonfinite = new_error_class(
      m, "NonFiniteError", error,
      "A forward pass produced NaN/Inf (the message names the module) or a training loss became non-finite (CLI "
      "exit code 3).");
  static PyObject* resource = new_error_class(
      m, "ResourceError", py::make_tuple(py::handle(error), py::handle(PyExc_MemoryError)).release().ptr(),
      "Memory, disk, a size limit or a failed write (also a MemoryError; CLI exit code 4).");
  static PyObject* internal = new_error_class(
      m, "InternalError", py::make_tuple(py::handle(error), py::handle(PyExc_RuntimeError)).release().ptr(),
      "A bug in encore: an invariant broke (also a RuntimeError; CLI exit code 70). Please report it.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const encore::UsageError& e) {
      PyErr_SetString(usage, e.what());
    } catch (const encore::ModelFormatError& e) {
      PyErr_SetString(model_format, e.what());
    } catch (const encore::InputError& e) {
      PyErr_SetString(input, e.what());
    } catch (const encore::NonFiniteError& e) {
      PyErr_SetString(nonfinite, e.what());
    } catch (const encore::ResourceError& e) {
      PyErr_SetString(resource, e.what());
    } catch (const encore::InternalError& e) {
      PyErr_SetString(internal, e.what());
    } catch (const encore::Error& e) {
      PyErr_SetString(error, e.what());
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(model_format, (std::string("invalid JSON value: ") + e.what()).c_str());
    } catch (const std::filesystem::filesystem_error& e) {
      std::string what = e.code().message();
      if (!e.path1().empty()) what = "'" + e.path1().string() + "': " + what;
      PyErr_SetString(input, what.c_str());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(resource, "out of memory");
    } catch (const std::length_error& e) {
      PyErr_SetString(resource, (std::string("a size limit was exceeded: ") + e.what()).c_str());
    } catch (const std::exception& e) {
      PyErr_SetString(internal, (std::string("internal error (please report it): ") + e.what()).c_str());
    }
  });
}

// Module.backward(grad_output) -> the input's gradient, for modules with one input.
template <class M>
py::object input_backward(M& self, const py::object& grad_output) {
  Tensor g = float_tensor(grad_output, "grad_output");
  Tensor dx;
  {
    py::gil_scoped_release nogil;
    dx = self.backward(g);
  }
  return to_numpy(dx);
}
constexpr const char* kInputBackwardDoc =
    "gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())";

// A stack's final norm: None, an encore.nn.LayerNorm or an encore.nn.RMSNorm (its parameters are copied).
std::optional<nn::Norm> optional_norm(const py::object& norm) {
  if (norm.is_none()) return std::nullopt;
  if (py::isinstance<nn::LayerNorm>(norm)) return nn::Norm(norm.cast<const nn::LayerNorm&>());
  if (py::isinstance<nn::RMSNorm>(norm)) return nn::Norm(norm.cast<const nn::RMSNorm&>());
  throw py::type_error("norm: expected None, encore.nn.LayerNorm or encore.nn.RMSNorm, got " +
                       py::str(py::type::of(norm)).cast<std::string>());
}

}  // namespace

PYBIND11_MODULE(_encore, m) {
  m.doc() = "encore: a C++ Transformer encoder engine (numpy twin of torch.nn's Transformer modules)";
  register_errors(m);
  // encore::warn -> a Python UserWarning (the warnings filters apply; a filter that makes it an error makes the
  // call that warned raise encore.Error with the message). The GIL is taken: warnings come from released sections.
  encore::set_warning_handler([](const std::string& message) {
    py::gil_scoped_acquire gil;
    if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) != 0) {
      py::error_already_set raised;  // fetched and cleared; the C++ error carries the message instead
      throw encore::Error(message);
    }
  });
  m.attr("__version__") = ENCORE_VERSION_STRING;

  m.def("set_num_threads", &encore::set_num_threads, py::arg("n"),
        "Threads for encore's parallel regions and oneDNN's GEMMs (default: $ENCORE_NUM_THREADS, else the cores)");
  m.def("get_num_threads", &encore::get_num_threads, "Threads in use (see set_num_threads)");
  m.def("runtime_info", &encore::runtime_info, "ISA, kernel table, GEMM engine, threads, OpenMP wait policy, int8 activation bits and when fp32 weights are packed");
  m.def("manual_seed", &nn::manual_seed, py::arg("seed"),
        "Seeds the generator of dropout masks and parameter initialisation (as torch.manual_seed)");
  m.def(
      "memory_stats",
      [] {
        const encore::MemoryStats s = encore::memory_stats();
        py::dict d;
        d["current_bytes"] = s.current_bytes;
        d["peak_bytes"] = s.peak_bytes;
        return d;
      },
      "bytes held by encore's own tensors now and at peak (not mapped checkpoint weights, not prepared GEMM "
      "weights, not cached free blocks)");


  py::module_ mnn = m.def_submodule("nn", "torch.nn-compatible Transformer modules on numpy arrays");

  py::class_<nn::Module>(mnn, "Module",
                  "Base of encore.nn modules (torch.nn.Module's state_dict / train / eval / grads over numpy arrays)")
      .def("state_dict", [](nn::Module& self) { return state_dict_to_python(self); },
           "{name: float32 array}: parameters under the state_dict keys torch uses")
      .def(
          "load_state_dict",
          [](nn::Module& self, const py::dict& sd, bool strict) {
            nn::StateDict s = state_dict_from_python(sd);
            self.load_state_dict(s, strict);
          },
          py::arg("state_dict"), py::arg("strict") = true,
          "Copies arrays in by the keys torch uses; strict: missing or unexpected keys are an error")
      .def(
          "train",
          [](py::object self, bool mode) {
            self.cast<nn::Module&>().train(mode);
            return self;
          },
          py::arg("mode") = true, "Training mode (dropout on, forward saves what backward needs). Returns self.")
      .def("eval",
           [](py::object self) {
             self.cast<nn::Module&>().eval();
             return self;
           }, "Inference mode (train(False)). Returns self.")
      .def_property_readonly("training", &nn::Module::is_training, "True in training mode (dropout, saved activations)")
      .def(
          "grads",
          [](nn::Module& self) {
            py::dict d;
            for (auto& [name, g] : self.named_grads()) d[py::str(name)] = to_numpy(*g);
            return d;
          },
          "parameter gradients by state_dict name (views of encore's buffers; backward accumulates into them); a "
          "parameter no backward reached since zero_grad() has none and is absent (torch: .grad is None)")
      .def("zero_grad", &nn::Module::zero_grad, py::arg("set_to_none") = true,
           "torch's zero_grad: drop the gradients (set_to_none), or fill the existing ones with zeros")
      .def("num_parameters", &nn::Module::num_parameters, "number of scalar parameters")
      .def("reset_parameters", &nn::Module::reset_parameters, py::arg("seed"),
           "re-initializes the parameters as torch does, from seed")
      .def(
          "prepare_inference",
          [](py::object self, const std::string& dtype) {
            self.cast<nn::Module&>().prepare_inference(encore::parse_dtype(dtype));
            return self;
          },
          py::arg("dtype") = "fp32",
          "Snapshot the weights for fast eval-mode inference (fp32, bf16 or int8); dropped by load_state_dict/train()");

  py::class_<nn::LayerNorm, nn::Module>(mnn, "LayerNorm",
                  "torch.nn.LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias over the last dims (normalized_shape)")
      .def("backward", input_backward<nn::LayerNorm>, py::arg("grad_output"), kInputBackwardDoc)
      .def(py::init<int64_t, double, bool, bool>(), py::arg("normalized_shape"), py::arg("eps") = 1e-5,
           py::arg("elementwise_affine") = true, py::arg("bias") = true)
      .def(py::init<const Shape&, double, bool, bool>(), py::arg("normalized_shape"), py::arg("eps") = 1e-5,
           py::arg("elementwise_affine") = true, py::arg("bias") = true)
      .def("forward", [](const nn::LayerNorm& self, const py::object& x) {
        Tensor t = float_tensor(x, "input");
        py::gil_scoped_release nogil;
        Tensor out = self.forward(t);
        py::gil_scoped_acquire gil;
        return to_numpy(out);
      }, py::arg("input"), py::doc("Normalizes input (..., *normalized_shape) float32; returns the same shape"))
      .def("__call__", [](py::object self, const py::object& x) { return self.attr("forward")(x); }, py::arg("input"));

  py::class_<nn::RMSNorm, nn::Module>(mnn, "RMSNorm",
                  "torch.nn.RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight over the last dims; eps None = float32 machine epsilon")
      .def("backward", input_backward<nn::RMSNorm>, py::arg("grad_output"), kInputBackwardDoc)
      .def(py::init<int64_t, std::optional<double>, bool>(), py::arg("normalized_shape"), py::arg("eps") = py::none(),
           py::arg("elementwise_affine") = true)
      .def(py::init<const Shape&, std::optional<double>, bool>(), py::arg("normalized_shape"),
           py::arg("eps") = py::none(), py::arg("elementwise_affine") = true)
      .def("forward", [](const nn::RMSNorm& self, const py::object& x) {
        Tensor t = float_tensor(x, "input");
        py::gil_scoped_release nogil;
        Tensor out = self.forward(t);
        py::gil_scoped_acquire gil;
        return to_numpy(out);
      }, py::arg("input"), py::doc("Normalizes input (..., *normalized_shape) float32; returns the same shape"))
      .def("__call__", [](py::object self, const py::object& x) { return self.attr("forward")(x); }, py::arg("input"));

  auto mha_forward = [](const nn::MultiheadAttention& self, const py::object& query, const py::object& key,
                        const py::object& value, const py::object& key_padding_mask, bool need_weights,
                        const py::object& attn_mask, bool average_attn_weights, bool is_causal) {
    Tensor q = float_tensor(query, "query");
    Tensor k = key.is(query) ? q : float_tensor(key, "key");
    Tensor v = value.is(key) ? k : (value.is(query) ? q : float_tensor(value, "value"));
    Tensor kpm = mask_tensor(key_padding_mask, "key_padding_mask");
    Tensor am = mask_tensor(attn_mask, "attn_mask");
    nn::AttentionResult r;
    {
      py::gil_scoped_release nogil;
      r = self.forward(q, k, v, kpm, need_weights, am, average_attn_weights, is_causal);
    }
    return py::make_tuple(to_numpy(r.output), to_numpy(r.weights));
  };
  py::class_<nn::MultiheadAttention, nn::Module>(mnn, "MultiheadAttention",
                  "torch.nn.MultiheadAttention: same arguments, defaults (batch_first=False), masks (True / -inf = ignore) and state_dict keys")
      .def("backward", input_backward<nn::MultiheadAttention>, py::arg("grad_output"), kInputBackwardDoc)
      .def(py::init<int64_t, int64_t, double, bool, bool, bool, std::optional<int64_t>, std::optional<int64_t>, bool>(),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0, py::arg("bias") = true,
           py::arg("add_bias_kv") = false, py::arg("add_zero_attn") = false, py::arg("kdim") = py::none(),
           py::arg("vdim") = py::none(), py::arg("batch_first") = false)
      .def_readonly("embed_dim", &nn::MultiheadAttention::embed_dim, "model width E")
      .def_readonly("num_heads", &nn::MultiheadAttention::num_heads, "attention heads")
      .def_readonly("batch_first", &nn::MultiheadAttention::batch_first, "inputs are (N, L, E) instead of (L, N, E)")
      .def("forward", mha_forward, py::doc("(attn_output, attn_weights or None): query (L, N, E), or (N, L, E) with batch_first; weights (N, L, S) averaged over heads, or per head"), py::arg("query"), py::arg("key"), py::arg("value"),
           py::arg("key_padding_mask") = py::none(), py::arg("need_weights") = true, py::arg("attn_mask") = py::none(),
           py::arg("average_attn_weights") = true, py::arg("is_causal") = false)
      .def("__call__", mha_forward, py::arg("query"), py::arg("key"), py::arg("value"),
           py::arg("key_padding_mask") = py::none(), py::arg("need_weights") = true, py::arg("attn_mask") = py::none(),
           py::arg("average_attn_weights") = true, py::arg("is_causal") = false);

  auto enc_layer_forward = [](const nn::TransformerEncoderLayer& self, const py::object& src, const py::object& src_mask,
                              const py::object& src_key_padding_mask, bool is_causal) {
    Tensor s = float_tensor(src, "src");
    Tensor mask = mask_tensor(src_mask, "src_mask");
    Tensor kpm = mask_tensor(src_key_padding_mask, "src_key_padding_mask");
    py::gil_scoped_release nogil;
    Tensor out = self.forward(s, mask, kpm, is_causal);
    py::gil_scoped_acquire gil;
    return to_numpy(out);
  };
  py::class_<nn::TransformerEncoderLayer, nn::Module>(mnn, "TransformerEncoderLayer",
                  "torch.nn.TransformerEncoderLayer: self-attention + feed-forward with residuals, Post-LN (norm_first=False) or Pre-LN")
      .def(
          "backward",
          [](nn::TransformerEncoderLayer& self, const py::object& grad_output) {
            Tensor g = float_tensor(grad_output, "grad_output");
            py::gil_scoped_release nogil;
            Tensor dx = self.backward(g);
            py::gil_scoped_acquire gil;
            return to_numpy(dx);
          },
          py::arg("grad_output"),
          "gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())")
      .def(py::init<int64_t, int64_t, int64_t, double, const std::string&, double, bool, bool, bool,
                    const std::string&>(),
           py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
           py::arg("activation") = "relu", py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
           py::arg("norm_first") = false, py::arg("bias") = true, py::arg("norm") = "layer_norm",
           "torch's arguments; norm=\"rms_norm\" makes the layer's norms RMSNorm(d_model, layer_norm_eps) (as torch "
           "after `layer.norm1 = nn.RMSNorm(d_model)`)")
      .def_readonly("norm_first", &nn::TransformerEncoderLayer::norm_first, "Pre-LN (True) or Post-LN (False)")
      .def_readonly("batch_first", &nn::TransformerEncoderLayer::batch_first, "inputs are (N, S, E) instead of (S, N, E)")
      .def("forward", enc_layer_forward, py::doc("src (S, N, E), or (N, S, E) with batch_first -> the same shape; src_key_padding_mask (N, S) True = padding"), py::arg("src"), py::arg("src_mask") = py::none(),
           py::arg("src_key_padding_mask") = py::none(), py::arg("is_causal") = false)
      .def("__call__", enc_layer_forward, py::arg("src"), py::arg("src_mask") = py::none(),
           py::arg("src_key_padding_mask") = py::none(), py::arg("is_causal") = false);

  auto encoder_forward = [](const nn::TransformerEncoder& self, const py::object& src, const py::object& mask,
                            const py::object& src_key_padding_mask, const py::object& is_causal) {
    Tensor s = float_tensor(src, "src");
    Tensor m = mask_tensor(mask, "mask");
    Tensor kpm = mask_tensor(src_key_padding_mask, "src_key_padding_mask");
    std::optional<bool> causal = optional_bool(is_causal);
    py::gil_scoped_release nogil;
    Tensor out = self.forward(s, m, kpm, causal);
    py::gil_scoped_acquire gil;
    return to_numpy(out);
  };
  py::class_<nn::TransformerEncoder, nn::Module>(mnn, "TransformerEncoder",
                  "torch.nn.TransformerEncoder: num_layers copies of encoder_layer, then the optional final norm")
      .def(
          "backward",
          [](nn::TransformerEncoder& self, const py::object& grad_output) {
            Tensor g = float_tensor(grad_output, "grad_output");
            py::gil_scoped_release nogil;
            Tensor dx = self.backward(g);
            py::gil_scoped_acquire gil;
            return to_numpy(dx);
          },
          py::arg("grad_output"),
          "gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())")
      .def(py::init([](const nn::TransformerEncoderLayer& layer, int64_t num_layers, const py::object& norm,
                       bool /*enable_nested_tensor*/, bool /*mask_check*/, bool share_parameters) {
             return nn::TransformerEncoder(layer, num_layers, optional_norm(norm), share_parameters);
           }),
           py::arg("encoder_layer"), py::arg("num_layers"), py::arg("norm") = py::none(),
           py::arg("enable_nested_tensor") = true, py::arg("mask_check") = true, py::arg("share_parameters") = false)
      .def_readonly("num_layers", &nn::TransformerEncoder::num_layers, "number of layers")
      .def_readwrite("gradient_checkpointing", &nn::TransformerEncoder::gradient_checkpointing,
                     "training: keep only layer inputs and recompute each layer's forward during backward")
      .def("forward", encoder_forward, py::doc("src (S, N, E), or (N, S, E) with batch_first -> the same shape, through every layer and the norm"), py::arg("src"), py::arg("mask") = py::none(),
           py::arg("src_key_padding_mask") = py::none(), py::arg("is_causal") = py::none())
      .def("__call__", encoder_forward, py::arg("src"), py::arg("mask") = py::none(),
           py::arg("src_key_padding_mask") = py::none(), py::arg("is_causal") = py::none());

  auto dec_layer_forward = [](const nn::TransformerDecoderLayer& self, const py::object& tgt, const py::object& memory,
                              const py::object& tgt_mask, const py::object& memory_mask,
                              const py::object& tgt_key_padding_mask, const py::object& memory_key_padding_mask,
                              bool tgt_is_causal, bool memory_is_causal) {
    Tensor t = float_tensor(tgt, "tgt"), mem = float_tensor(memory, "memory");
    Tensor tm = mask_tensor(tgt_mask, "tgt_mask"), mm = mask_tensor(memory_mask, "memory_mask");
    Tensor tk = mask_tensor(tgt_key_padding_mask, "tgt_key_padding_mask");
    Tensor mk = mask_tensor(memory_key_padding_mask, "memory_key_padding_mask");
    py::gil_scoped_release nogil;
    Tensor out = self.forward(t, mem, tm, mm, tk, mk, tgt_is_causal, memory_is_causal);
    py::gil_scoped_acquire gil;
    return to_numpy(out);
  };
  py::class_<nn::TransformerDecoderLayer, nn::Module>(mnn, "TransformerDecoderLayer",
                  "torch.nn.TransformerDecoderLayer: masked self-attention, cross-attention on memory, feed-forward")
      .def(py::init<int64_t, int64_t, int64_t, double, const std::string&, double, bool, bool, bool,
                    const std::string&>(),
           py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
           py::arg("activation") = "relu", py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
           py::arg("norm_first") = false, py::arg("bias") = true, py::arg("norm") = "layer_norm",
           "torch's arguments; norm=\"rms_norm\" makes the layer's norms RMSNorm(d_model, layer_norm_eps) (as torch "
           "after `layer.norm1 = nn.RMSNorm(d_model)`)")
      .def("forward", dec_layer_forward, py::doc("tgt (T, N, E) attending to memory (S, N, E) (batch-first with batch_first) -> the shape of tgt"), py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(),
           py::arg("memory_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
           py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = false,
           py::arg("memory_is_causal") = false)
      .def("__call__", dec_layer_forward, py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(),
           py::arg("memory_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
           py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = false,
           py::arg("memory_is_causal") = false)
      .def(
          "backward",
          [](nn::TransformerDecoderLayer& self, const py::object& grad_output) {
            Tensor g = float_tensor(grad_output, "grad_output");
            std::pair<Tensor, Tensor> d;
            {
              py::gil_scoped_release nogil;
              d = self.backward(g);
            }
            return py::make_tuple(to_numpy(d.first), to_numpy(d.second));
          },
          py::arg("grad_output"),
          "(gradient of tgt, gradient of memory) for the last training-mode forward; accumulates parameter gradients");

  auto decoder_forward = [](const nn::TransformerDecoder& self, const py::object& tgt, const py::object& memory,
                            const py::object& tgt_mask, const py::object& memory_mask,
                            const py::object& tgt_key_padding_mask, const py::object& memory_key_padding_mask,
                            const py::object& tgt_is_causal, bool memory_is_causal) {
    Tensor t = float_tensor(tgt, "tgt"), mem = float_tensor(memory, "memory");
    Tensor tm = mask_tensor(tgt_mask, "tgt_mask"), mm = mask_tensor(memory_mask, "memory_mask");
    Tensor tk = mask_tensor(tgt_key_padding_mask, "tgt_key_padding_mask");
    Tensor mk = mask_tensor(memory_key_padding_mask, "memory_key_padding_mask");
    std::optional<bool> causal = optional_bool(tgt_is_causal);
    py::gil_scoped_release nogil;
    Tensor out = self.forward(t, mem, tm, mm, tk, mk, causal, memory_is_causal);
    py::gil_scoped_acquire gil;
    return to_numpy(out);
  };
  py::class_<nn::TransformerDecoder, nn::Module>(mnn, "TransformerDecoder",
                  "torch.nn.TransformerDecoder: num_layers copies of decoder_layer, then the optional final norm")
      .def(py::init([](const nn::TransformerDecoderLayer& layer, int64_t num_layers, const py::object& norm) {
             return nn::TransformerDecoder(layer, num_layers, optional_norm(norm));
           }),
           py::arg("decoder_layer"), py::arg("num_layers"), py::arg("norm") = py::none())
      .def_readonly("num_layers", &nn::TransformerDecoder::num_layers, "number of layers")
      .def("forward", decoder_forward, py::doc("tgt (T, N, E) attending to memory (S, N, E) (batch-first with batch_first) -> the shape of tgt"), py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(),
           py::arg("memory_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
           py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = py::none(),
           py::arg("memory_is_causal") = false)
      .def("__call__", decoder_forward, py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask") = py::none(),
           py::arg("memory_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
           py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = py::none(),
           py::arg("memory_is_causal") = false);

  auto transformer_forward = [](const nn::Transformer& self, const py::object& src, const py::object& tgt,
                                const py::object& src_mask, const py::object& tgt_mask, const py::object& memory_mask,
                                const py::object& src_key_padding_mask, const py::object& tgt_key_padding_mask,
                                const py::object& memory_key_padding_mask, const py::object& src_is_causal,
                                const py::object& tgt_is_causal, bool memory_is_causal) {
    Tensor s = float_tensor(src, "src"), t = float_tensor(tgt, "tgt");
    Tensor sm = mask_tensor(src_mask, "src_mask"), tm = mask_tensor(tgt_mask, "tgt_mask");
    Tensor mm = mask_tensor(memory_mask, "memory_mask");
    Tensor sk = mask_tensor(src_key_padding_mask, "src_key_padding_mask");
    Tensor tk = mask_tensor(tgt_key_padding_mask, "tgt_key_padding_mask");
    Tensor mk = mask_tensor(memory_key_padding_mask, "memory_key_padding_mask");
    std::optional<bool> sc = optional_bool(src_is_causal), tc = optional_bool(tgt_is_causal);
    py::gil_scoped_release nogil;
    Tensor out = self.forward(s, t, sm, tm, mm, sk, tk, mk, sc, tc, memory_is_causal);
    py::gil_scoped_acquire gil;
    return to_numpy(out);
  };
  py::class_<nn::Transformer, nn::Module>(mnn, "Transformer",
                  "torch.nn.Transformer: encoder and decoder stacks with final LayerNorms")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t num_encoder_layers, int64_t num_decoder_layers,
                       int64_t dim_feedforward, double dropout, const std::string& activation,
                       const py::object& custom_encoder, const py::object& custom_decoder, double layer_norm_eps,
                       bool batch_first, bool norm_first, bool bias, const std::string& norm) {
             if (!custom_encoder.is_none() || !custom_decoder.is_none())
               throw encore::Error("Transformer: custom_encoder/custom_decoder are not supported; build a "
                                   "TransformerEncoder and TransformerDecoder instead");
             return nn::Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout,
                                    activation, layer_norm_eps, batch_first, norm_first, bias, norm);
           }),
           py::arg("d_model") = 512, py::arg("nhead") = 8, py::arg("num_encoder_layers") = 6,
           py::arg("num_decoder_layers") = 6, py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
           py::arg("activation") = "relu", py::arg("custom_encoder") = py::none(),
           py::arg("custom_decoder") = py::none(), py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false,
           py::arg("norm_first") = false, py::arg("bias") = true, py::arg("norm") = "layer_norm")
      .def_static("generate_square_subsequent_mask",
                  [](int64_t sz) { return to_numpy(nn::generate_square_subsequent_mask(sz)); }, py::arg("sz"))
      .def("forward", transformer_forward, py::doc("src (S, N, E), tgt (T, N, E) (batch-first with batch_first) -> (T, N, E), as torch.nn.Transformer.forward"), py::arg("src"), py::arg("tgt"), py::arg("src_mask") = py::none(),
           py::arg("tgt_mask") = py::none(), py::arg("memory_mask") = py::none(),
           py::arg("src_key_padding_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
           py::arg("memory_key_padding_mask") = py::none(), py::arg("src_is_causal") = py::none(),
           py::arg("tgt_is_causal") = py::none(), py::arg("memory_is_causal") = false)
      .def("__call__", transformer_forward, py::arg("src"), py::arg("tgt"), py::arg("src_mask") = py::none(),
           py::arg("tgt_mask") = py::none(), py::arg("memory_mask") = py::none(),
           py::arg("src_key_padding_mask") = py::none(), py::arg("tgt_key_padding_mask") = py::none(),
           py::arg("memory_key_padding_mask") = py::none(), py::arg("src_is_causal") = py::none(),
           py::arg("tgt_is_causal") = py::none(), py::arg("memory_is_causal") = false);
  bind_repr(mnn);
  // After encore.nn: their signatures name nn.Module, which must be registered first (help() and the stubs).
  bind_models(m);
  bind_text(m);
  bind_token_classifier(m);
  bind_question_answerer(m);
  bind_pipelines(m);
  bind_train(m);
  bind_functional(m);
}
