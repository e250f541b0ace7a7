// numpy <-> encore::Tensor conversion shared by the binding files. Inputs are copied (so C++ never reads
// Python memory without the GIL); outputs are zero-copy views kept alive by a capsule.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>

#include "encore/nn.hpp"
#include "encore/tensor.hpp"

namespace encore_py {

namespace py = pybind11;
using encore::DType;
using encore::Shape;
using encore::Tensor;
namespace nn = encore::nn;


// A Python str as UTF-8; a str that cannot be UTF-8 (a lone surrogate such as '\ud800') is an
// encore.InputError naming `what` and the character, not pybind11's "Unable to cast Python instance".
inline std::string utf8_text(const py::handle& obj, const std::string& what) {
  if (!py::isinstance<py::str>(obj))
    throw encore::UsageError(what + ": expected a str, got " + py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    const Py_ssize_t n = PyUnicode_GetLength(obj.ptr());
    Py_ssize_t at = 0;
    for (; at < n; ++at) {
      const Py_UCS4 c = PyUnicode_ReadChar(obj.ptr(), at);
      if (c >= 0xD800 && c <= 0xDFFF) break;
    }
    throw encore::InputError(what + ": not valid Unicode text: a lone surrogate at character " + std::to_string(at) +
                             " cannot be encoded as UTF-8 (decode bytes with errors='replace' first)");
  }
  return std::string(data, static_cast<size_t>(size));
}

inline std::string type_name_of(const py::handle& obj) {
  return py::str(py::type::of(obj).attr("__name__")).cast<std::string>();
}

// An integer argument (int, or anything with __index__ such as numpy.int64; not bool, not float) as int64, or an
// encore.UsageError naming `what` and the value: pybind11's own cast said "Unable to cast ... to C++ type '?'".
inline int64_t int_arg(const py::handle& obj, const std::string& what) {
  if (py::isinstance<py::bool_>(obj) || !PyIndex_Check(obj.ptr()))
    throw encore::UsageError(what + " must be an int, got " + type_name_of(obj) + " " +
                             py::str(py::repr(obj)).cast<std::string>().substr(0, 40));
  int overflow = 0;
  const py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) throw py::error_already_set();
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0)
    throw encore::UsageError(what + " is out of range: " + py::str(index).cast<std::string>().substr(0, 40));
  return static_cast<int64_t>(v);
}

// A truth value spelled as one (True/False, numpy.bool_, or the ints 0 and 1): 'yes' or 2 is an encore.UsageError
// (Python's truthiness would take any non-empty string as True).
inline bool bool_arg(const py::handle& obj, const std::string& what) {
  if (py::isinstance<py::bool_>(obj) || type_name_of(obj) == "bool_" || type_name_of(obj) == "bool")
    return obj.cast<bool>();
  if (py::isinstance<py::int_>(obj)) {
    const py::int_ v = py::reinterpret_borrow<py::int_>(obj);
    if (v.equal(py::int_(0)) || v.equal(py::int_(1))) return v.equal(py::int_(1));
  }
  throw encore::UsageError(what + " must be True or False, got " + type_name_of(obj) + " " +
                           py::str(py::repr(obj)).cast<std::string>().substr(0, 40));
}

// "left"/"right" for padding and truncation sides; anything else is an error, never silently "right".
inline bool is_left_side(const std::string& direction, const char* what) {
  if (direction != "left" && direction != "right")
    throw encore::UsageError(std::string(what) + ": direction must be 'left' or 'right', got '" + direction + "'");
  return direction == "left";
}

// For long C++ calls made with the GIL released (encode, training): called between batches, it takes the GIL
// briefly and lets Python run its signal handlers. A pending KeyboardInterrupt (Ctrl-C) becomes
// py::error_already_set, which unwinds the C++ call (nothing in the library catches it) and reaches Python as
// that KeyboardInterrupt: Ctrl-C stops the work within one batch instead of when the call returns.
inline void check_python_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

inline std::string numpy_dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// A numpy float32 array as a Tensor (copied, so the C++ side never touches Python memory without the GIL).
inline Tensor float_tensor(const py::handle& obj, const char* name) {
  if (!py::isinstance<py::array>(obj))
    throw encore::Error(std::string(name) + ": expected a numpy.ndarray of float32, got " +
                        py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<float>()))
    throw encore::Error(std::string(name) + ": expected dtype float32, got " + numpy_dtype_name(a));
  auto c = py::array_t<float, py::array::c_style>::ensure(a);
  Shape shape(c.shape(), c.shape() + c.ndim());
  Tensor t = Tensor::empty(shape);
  if (t.numel()) std::memcpy(t.raw_data(), c.data(), static_cast<size_t>(t.numel()) * sizeof(float));
  return t;
}


// A mask: bool (True = masked) or float32 (additive), or None.
inline Tensor mask_tensor(const py::object& obj, const char* name) {
  if (obj.is_none()) return Tensor();
  if (!py::isinstance<py::array>(obj))
    throw encore::Error(std::string(name) + ": expected a numpy bool or float32 array, got " +
                        py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (a.dtype().is(py::dtype::of<bool>())) {
    auto c = py::array_t<bool, py::array::c_style>::ensure(a);
    Tensor t = Tensor::empty(Shape(c.shape(), c.shape() + c.ndim()), DType::boolean);
    if (t.numel()) std::memcpy(t.raw_data(), c.data(), static_cast<size_t>(t.numel()));
    return t;
  }
  if (a.dtype().is(py::dtype::of<float>())) return float_tensor(a, name);
  throw encore::Error(std::string(name) + ": expected dtype bool or float32, got " + numpy_dtype_name(a));
}

// Zero-copy numpy view of a tensor (float32, int8, uint8 or int64); the capsule keeps the storage alive. A tensor
// in a checkpoint's read-only file mapping (a loaded model's weights before train(), export_hf of them) gives a
// read-only array: numpy refuses a write ("assignment destination is read-only") where the process would fault.
template <typename T>
py::object numpy_view(const Tensor& t) {
  auto* keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array_t<T> a(shape, t.data<T>(), owner);
  if (t.is_file_mapping()) a.attr("setflags")(py::arg("write") = false);
  return a;
}

inline py::object to_numpy(const Tensor& t_in) {
  if (!t_in.defined()) return py::none();
  Tensor t = t_in.contiguous();
  switch (t.dtype()) {
    case DType::i8: return numpy_view<int8_t>(t);
    case DType::u8: return numpy_view<uint8_t>(t);
    case DType::i64: return numpy_view<int64_t>(t);
    case DType::f32: return numpy_view<float>(t);
    default: throw encore::Error(std::string("to_numpy: no numpy view for dtype ") + encore::dtype_name(t.dtype()));
  }
}

inline nn::StateDict state_dict_from_python(const py::dict& d) {
  nn::StateDict sd;
  for (auto item : d) {
    std::string key = py::str(item.first).cast<std::string>();
    const py::handle& v = item.second;
    if (!py::isinstance<py::array>(v))
      throw encore::Error("load_state_dict: '" + key + "' must be a numpy.ndarray, got " +
                          py::str(py::type::of(v).attr("__name__")).cast<std::string>());
    py::array a = py::reinterpret_borrow<py::array>(v);
    if (!a.dtype().is(py::dtype::of<float>()))
      throw encore::Error("load_state_dict: '" + key + "' has dtype " + numpy_dtype_name(a) + ", expected float32");
    sd.emplace(key, float_tensor(a, key.c_str()));
  }
  return sd;
}

// Arrays share the parameters' memory, as torch's state_dict shares storage (read-only while a weight is still
// the checkpoint's mapping: see to_numpy).
inline py::dict state_dict_to_python(nn::Module& m) {
  py::dict d;
  for (auto& [name, t] : m.named_parameters()) d[py::str(name)] = to_numpy(*t);
  return d;
}

inline std::optional<bool> optional_bool(const py::object& o) {
  if (o.is_none()) return std::nullopt;
  return o.cast<bool>();
}


// An integer numpy array (any integer dtype) as an int64 Tensor; None gives an undefined tensor.
inline Tensor int_tensor(const py::object& obj, const char* name) {
  if (obj.is_none()) return Tensor();
  if (!py::isinstance<py::array>(obj))
    throw encore::Error(std::string(name) + ": expected a numpy integer array, got " +
                        py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(obj);
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'b')
    throw encore::Error(std::string(name) + ": expected an integer dtype, got " + numpy_dtype_name(a));
  auto c = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  Tensor t = Tensor::empty(Shape(c.shape(), c.shape() + c.ndim()), DType::i64);
  if (t.numel()) std::memcpy(t.raw_data(), c.data(), static_cast<size_t>(t.numel()) * sizeof(int64_t));
  return t;
}

void bind_models(py::module_& m);
void bind_functional(py::module_& m);
void bind_text(py::module_& m);
void bind_token_classifier(py::module_& m);
void bind_question_answerer(py::module_& m);
void bind_pipelines(py::module_& m);
void bind_train(py::module_& m);
void bind_repr(py::module_& mnn);  // after the nn classes are registered

}  // namespace encore_py
