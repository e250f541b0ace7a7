// Module plumbing (names, state_dict, init, train/eval) and the simple layers: Linear, LayerNorm, RMSNorm.
#include <atomic>
#include <cmath>
#include <limits>
#include <set>

#include "nn/common.hpp"
#include "ops/backward.hpp"

namespace encore::nn {

namespace {
// Per-thread context of the torch-shaped forward signatures, which have no argument to carry it (torch keeps
// the same context globally: forward hooks, torch.manual_seed, skip_init's meta device). Thread-local, not
// global, because forward() may run on one module from several threads at once (nn.hpp), each with its own
// trace and its own dropout stream.
thread_local Observer t_observer;  // stays: ScopedObserver's trace of this thread's forward calls (encore trace)
thread_local GradientReadyHook t_gradient_ready;  // stays: ScopedGradientReadyHook, this thread's backward announces layers
thread_local bool t_no_init = false;  // stays: NoInitGuard, constructors skip init for loaders that overwrite it
std::atomic<uint64_t> g_seed_state{0x5eed};
thread_local bool t_seed_scoped = false;  // stays: SeedScope replays a layer's dropout masks (checkpointing)
thread_local uint64_t t_seed_state = 0;   // stays: the stream SeedScope replays

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {  // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void manual_seed(uint64_t seed) { g_seed_state.store(seed); }

namespace detail {
uint64_t next_seed() {
  if (t_seed_scoped) return splitmix64(t_seed_state);
  uint64_t s = g_seed_state.fetch_add(0x9E3779B97F4A7C15ull);
  return splitmix64(s);
}
SeedScope::SeedScope(uint64_t seed) : previous_active_(t_seed_scoped), previous_state_(t_seed_state) {
  t_seed_scoped = true;
  t_seed_state = seed;
}
SeedScope::~SeedScope() {
  t_seed_scoped = previous_active_;
  t_seed_state = previous_state_;
}
void observe(const std::string& name, const Tensor& value) {
  if (t_observer) t_observer(name, value);
}
bool observing() { return static_cast<bool>(t_observer); }
void gradients_ready(Module& module) {
  if (t_gradient_ready) t_gradient_ready(module);
}
}  // namespace detail

NoInitGuard::NoInitGuard() : previous_(t_no_init) { t_no_init = true; }
NoInitGuard::~NoInitGuard() { t_no_init = previous_; }

ScopedObserver::ScopedObserver(Observer fn) : previous_(std::move(t_observer)) { t_observer = std::move(fn); }
ScopedObserver::~ScopedObserver() { t_observer = std::move(previous_); }

ScopedGradientReadyHook::ScopedGradientReadyHook(GradientReadyHook fn) : previous_(std::move(t_gradient_ready)) {
  t_gradient_ready = std::move(fn);
}
ScopedGradientReadyHook::~ScopedGradientReadyHook() { t_gradient_ready = std::move(previous_); }

void Module::observe(const char* what, const Tensor& value) const {
  if (detail::observing()) detail::observe(name_.empty() ? std::string(what) : name_ + "." + what, value);
}

void ParameterList::parameter(const std::string& name, Tensor& value, Tensor& grad) {
  if (value.defined()) out_.push_back({prefix_ + name, &value, &grad});
}

void ParameterList::child(const std::string& name, Module& module) { module.collect_parameters(prefix_ + name + ".", out_); }

void Module::collect_parameters(const std::string& prefix, std::vector<ParamRef>& out) {
  expose_parameters();
  ParameterList list(prefix, out);
  members(list);
}

void Module::for_each_child(const std::function<void(Module&, const std::string&)>& fn) {
  struct Children final : Members {
    const std::function<void(Module&, const std::string&)>& fn;
    explicit Children(const std::function<void(Module&, const std::string&)>& f) : fn(f) {}
    void parameter(const std::string&, Tensor&, Tensor&) override {}
    void child(const std::string& name, Module& module) override { fn(module, name); }
  } children(fn);
  members(children);
}

void Module::set_name(const std::string& name) {
  name_ = name;
  for_each_child([&](Module& child, const std::string& child_name) {
    child.set_name(name.empty() ? child_name : name + "." + child_name);
  });
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<ParamRef> refs;
  collect_parameters("", refs);
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& r : refs) out.emplace_back(r.name, r.param);
  return out;
}

Tensor& Module::grad_of(Tensor& grad, const Tensor& param) {
  if (!grad.defined() || grad.shape() != param.shape()) grad = Tensor::zeros(param.shape());
  return grad;
}

std::vector<ParamRef> Module::parameter_refs() {
  std::vector<ParamRef> refs;
  collect_parameters("", refs);
  return refs;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_grads() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& r : parameter_refs())
    if (r.grad->defined()) out.emplace_back(r.name, r.grad);
  return out;
}

void Module::zero_grad(bool set_to_none) {
  for (auto& r : parameter_refs()) {
    if (set_to_none)
      *r.grad = Tensor();  // the storage goes back to the caching allocator; the next backward takes it again
    else if (r.grad->defined())
      r.grad->fill(0.f);
  }
}

void Module::clear_saved() const {
  saved_.clear();
  const_cast<Module*>(this)->for_each_child(  // stays: the child listing hands out mutable children; this only
      [](Module& child, const std::string&) { child.clear_saved(); });  // touches their mutable saved_ stacks
}

StateDict Module::state_dict() {
  StateDict sd;
  for (auto& [name, t] : named_parameters()) sd.emplace(name, *t);
  return sd;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  auto params = named_parameters();
  std::set<std::string> known;
  std::vector<std::string> missing;
  for (auto& [name, t] : params) {
    known.insert(name);
    auto it = sd.find(name);
    if (it == sd.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = it->second;
    ENCORE_CHECK(src.dtype() == DType::f32, "load_state_dict: '", name, "' has dtype ", dtype_name(src.dtype()),
                 ", expected float32");
    ENCORE_CHECK(src.shape() == t->shape(), "load_state_dict: size mismatch for '", name, "': expected ",
                 t->shape_str(), ", got ", src.shape_str());
  }
  std::vector<std::string> unexpected;
  for (auto& [name, _] : sd)
    if (!known.count(name)) unexpected.push_back(name);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = "load_state_dict: ";
    if (!missing.empty()) {
      msg += "missing key(s):";
      for (auto& m : missing) msg += " '" + m + "'";
    }
    if (!unexpected.empty()) {
      msg += missing.empty() ? "unexpected key(s):" : "; unexpected key(s):";
      for (auto& u : unexpected) msg += " '" + u + "'";
    }
    throw Error(msg);
  }
  // All checks passed: only now copy, so a failed load leaves the module unchanged.
  drop_prepared();
  for (auto& [name, t] : params) {
    auto it = sd.find(name);
    if (it != sd.end()) t->copy_from(it->second);
  }
}

void Module::prepare_inference(DType dtype) {
  detail::precision_of(dtype);  // validates before anything changes
  prepare_own(dtype);
  for_each_child([&](Module& child, const std::string&) { child.prepare_inference(dtype); });
}

void Module::drop_prepared() {
  drop_own();
  for_each_child([&](Module& child, const std::string&) { child.drop_prepared(); });
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (auto& [_, t] : named_parameters()) n += t->numel();
  return n;
}

void Module::train(bool mode) {
  if (mode) drop_own();  // training changes weights: the inference snapshot would go stale
  if (!mode) saved_.clear();
  training_ = mode;
  for_each_child([&](Module& child, const std::string&) { child.train(mode); });
}

void Module::reset_parameters(uint64_t seed) {
  if (t_no_init) return;
  drop_prepared();
  for (auto& [name, t] : named_parameters()) {
    t->make_writable();
    float* p = t->data<float>();
    const int64_t n = t->numel();
    if (ends_with(name, "bias")) {
      for (int64_t i = 0; i < n; ++i) p[i] = 0.f;
    } else if (t->dim() == 1) {  // norm scales
      for (int64_t i = 0; i < n; ++i) p[i] = 1.f;
    } else {
      // Xavier-uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) for a (fan_out, fan_in) matrix.
      const double a = std::sqrt(6.0 / static_cast<double>(t->size(0) + t->size(1)));
      uint64_t state = seed ^ hash_name(name);
      for (int64_t i = 0; i < n; ++i) {
        const double u = static_cast<double>(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
        p[i] = static_cast<float>((2.0 * u - 1.0) * a);
      }
    }
  }
}

// ---------------- Linear ----------------

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  ENCORE_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in, " and ", out);
  weight = Tensor::empty({out, in});
  if (with_bias) bias = Tensor::empty({out});
  reset_parameters(detail::next_seed());
}

void Linear::members(Members& m) {
  m.parameter("weight", weight, dweight);
  m.parameter("bias", bias, dbias);
}

Tensor Linear::forward(const Tensor& input) const {
  ENCORE_CHECK(input.dim() >= 1 && input.size(-1) == in_features, "Linear: input: expected last dimension ",
               in_features, ", got ", input.shape_str());
  return detail::linear(*this, input, training_);
}

void Linear::prepare_own(DType dtype) {
  const Tensor w = weight.contiguous();
  // fp32's first forward reads a checkpoint's weight in place (kernels.hpp, PackedLinear): its pages are mapped
  // now, in one call per weight, rather than faulted in a few at a time by that forward. In SentenceEncoder::load
  // this runs while the tokenizer is read on the other thread.
  if (dtype == DType::f32) w.map_resident_pages();
  packed = kernels::PackedLinear::create(w.data<float>(), bias.defined() ? bias.contiguous().data<float>() : nullptr,
                                         out_features, in_features, detail::precision_of(dtype), detail::plain_weight(w));
  // Once the weight is packed (now, or for f32 on its second call) forward() reads the packed copy, and the
  // checkpoint's pages go (detail::plain_weight's after_pack).
}

// ---------------- LayerNorm / RMSNorm ----------------

namespace {
int64_t checked_norm_size(const Shape& shape, const char* what) {
  ENCORE_CHECK(!shape.empty(), what, ": normalized_shape must not be empty");
  int64_t n = 1;
  for (int64_t d : shape) {
    ENCORE_CHECK(d > 0, what, ": normalized_shape must be positive, got ", shape_str(shape));
    n *= d;
  }
  return n;
}

// The input's trailing dims must equal normalized_shape; returns the input with them flattened.
Tensor flatten_normalized(const Tensor& input, const Shape& shape, const char* what) {
  const int64_t k = static_cast<int64_t>(shape.size());
  bool ok = input.defined() && input.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = input.size(input.dim() - k + i) == shape[i];
  ENCORE_CHECK(ok, what, ": input: expected trailing dimensions ", shape_str(shape), ", got ",
               input.defined() ? input.shape_str() : "none");
  if (k == 1) return input;
  Shape flat(input.shape().begin(), input.shape().end() - k);
  flat.push_back(-1);
  return input.contiguous().view(flat);
}
}  // namespace

LayerNorm::LayerNorm(int64_t shape, double eps_, bool affine, bool with_bias)
    : LayerNorm(Shape{shape}, eps_, affine, with_bias) {}

LayerNorm::LayerNorm(const Shape& shape, double eps_, bool affine, bool with_bias) : normalized_shape(shape), eps(eps_) {
  checked_norm_size(shape, "LayerNorm");
  if (affine) {
    weight = Tensor::full(shape, 1.f);
    if (with_bias) bias = Tensor::zeros(shape);
  }
}

void LayerNorm::members(Members& m) {
  m.parameter("weight", weight, dweight);
  m.parameter("bias", bias, dbias);
}

namespace {
// What a norm's backward needs: its input flattened to (..., C), the per-row statistics (mean for a LayerNorm only).
struct NormSaved {
  Tensor x, mean, rstd;
  Shape input_shape;
};

// y = norm(input) over the trailing dims normalized_shape, weight/bias (normalized_shape) or undefined; fills sv
// when non-null. The one body of LayerNorm, RMSNorm and Norm.
Tensor norm_apply(NormKind kind, const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps, NormSaved* sv) {
  const bool rms = kind == NormKind::rms_norm;
  Tensor x = flatten_normalized(input, normalized_shape, rms ? "RMSNorm" : "LayerNorm").contiguous();
  const int64_t C = x.size(-1);
  const Tensor w = weight.defined() ? weight.view({C}) : Tensor();
  Tensor y = rms ? ops::rmsnorm_forward(x, w, eps, sv ? &sv->rstd : nullptr)
                 : ops::layernorm_forward(x, w, bias.defined() ? bias.view({C}) : Tensor(), eps,
                                          sv ? &sv->mean : nullptr, sv ? &sv->rstd : nullptr);
  if (sv) {
    sv->x = x;
    sv->input_shape = input.shape();
  }
  return y.view(input.shape());
}

// The gradient of the input for the forward sv saved; accumulates the weight's (and bias') gradient.
Tensor norm_backward(NormKind kind, const Tensor& grad_output, const NormSaved& sv, const Tensor& weight,
                     Tensor& dweight, const Tensor& bias, Tensor& dbias) {
  const bool rms = kind == NormKind::rms_norm;
  ENCORE_CHECK(grad_output.shape() == sv.input_shape, rms ? "RMSNorm" : "LayerNorm",
               ".backward: grad_output: expected shape ", shape_str(sv.input_shape), ", got ", grad_output.shape_str());
  const int64_t C = sv.x.size(-1);
  Tensor dout = grad_output.contiguous().view(sv.x.shape());
  Tensor dx;
  Tensor dw = weight.defined() ? Module::grad_of(dweight, weight).view({C}) : Tensor();
  const Tensor w = weight.defined() ? weight.view({C}) : Tensor();
  if (rms) {
    // forward: out = x·rstd·weight, rstd = (Σx²/C + eps)^(-1/2) per row (ops::rmsnorm_backward)
    ops::rmsnorm_backward(&dx, weight.defined() ? &dw : nullptr, dout, sv.rstd, sv.x, w);
  } else {
    Tensor db = bias.defined() ? Module::grad_of(dbias, bias).view({C}) : Tensor();
    ops::layernorm_backward(&dx, weight.defined() ? &dw : nullptr, bias.defined() ? &db : nullptr, dout, sv.mean,
                            sv.rstd, sv.x, w);
  }
  return dx.view(sv.input_shape);
}
}  // namespace

Tensor LayerNorm::forward(const Tensor& input) const {
  if (training_) saved_.clear();
  return apply(input);
}

Tensor LayerNorm::apply(const Tensor& input) const {
  auto sv = training_ ? std::make_shared<NormSaved>() : nullptr;
  Tensor y = norm_apply(NormKind::layer_norm, input, normalized_shape, weight, bias, eps, sv.get());
  if (sv) push_saved(sv);
  return y;
}

Tensor LayerNorm::add_apply(Tensor& x, const Tensor& residual, bool keep_sum) const {
  if (training_ || normalized_shape.size() != 1 || !x.is_contiguous()) {  // saves for backward: the two ops
    ops::add_forward_(x, residual);
    return apply(x);
  }
  return ops::add_layernorm_forward_(x, residual, weight, bias, eps, keep_sum);
}

Tensor LayerNorm::backward(const Tensor& grad_output) {
  auto sv = pop_saved<NormSaved>("LayerNorm");
  return norm_backward(NormKind::layer_norm, grad_output, *sv, weight, dweight, bias, dbias);
}

RMSNorm::RMSNorm(int64_t shape, std::optional<double> eps_, bool affine) : RMSNorm(Shape{shape}, eps_, affine) {}

RMSNorm::RMSNorm(const Shape& shape, std::optional<double> eps_, bool affine)
    : normalized_shape(shape), eps(eps_.value_or(std::numeric_limits<float>::epsilon())) {
  checked_norm_size(shape, "RMSNorm");
  if (affine) weight = Tensor::full(shape, 1.f);
}

void RMSNorm::members(Members& m) { m.parameter("weight", weight, dweight); }

Tensor RMSNorm::forward(const Tensor& input) const {
  if (training_) saved_.clear();
  return apply(input);
}

Tensor RMSNorm::apply(const Tensor& input) const {
  auto sv = training_ ? std::make_shared<NormSaved>() : nullptr;
  Tensor y = norm_apply(NormKind::rms_norm, input, normalized_shape, weight, Tensor(), eps, sv.get());
  if (sv) push_saved(sv);
  return y;
}

Tensor RMSNorm::backward(const Tensor& grad_output) {
  auto sv = pop_saved<NormSaved>("RMSNorm");
  Tensor no_bias, no_dbias;
  return norm_backward(NormKind::rms_norm, grad_output, *sv, weight, dweight, no_bias, no_dbias);
}

NormKind parse_norm(const std::string& name) {
  if (name == "layer_norm" || name == "LayerNorm") return NormKind::layer_norm;
  if (name == "rms_norm" || name == "RMSNorm") return NormKind::rms_norm;
  throw Error("norm should be one of layer_norm, rms_norm; got '" + name + "'");
}

const char* norm_name(NormKind kind) { return kind == NormKind::rms_norm ? "rms_norm" : "layer_norm"; }

Norm::Norm(NormKind kind_, int64_t shape, std::optional<double> eps_, bool with_bias)
    : Norm(kind_ == NormKind::rms_norm ? Norm(RMSNorm(shape, eps_))
                                       : Norm(LayerNorm(shape, eps_.value_or(1e-5), true, with_bias))) {}

Norm::Norm(const LayerNorm& n)
    : Module(n), kind(NormKind::layer_norm), weight(n.weight), bias(n.bias), normalized_shape(n.normalized_shape),
      eps(n.eps) {}

Norm::Norm(const RMSNorm& n)
    : Module(n), kind(NormKind::rms_norm), weight(n.weight), normalized_shape(n.normalized_shape), eps(n.eps) {}

void Norm::members(Members& m) {
  m.parameter("weight", weight, dweight);
  m.parameter("bias", bias, dbias);  // undefined (so not listed) for an RMSNorm
}

Tensor Norm::forward(const Tensor& input) const {
  if (training_) saved_.clear();
  return apply(input);
}

Tensor Norm::apply(const Tensor& input) const {
  auto sv = training_ ? std::make_shared<NormSaved>() : nullptr;
  Tensor y = norm_apply(kind, input, normalized_shape, weight, bias, eps, sv.get());
  if (sv) push_saved(sv);
  return y;
}

Tensor Norm::add_apply(Tensor& x, const Tensor& residual, bool keep_sum) const {
  if (kind == NormKind::layer_norm && !training_ && normalized_shape.size() == 1 && x.is_contiguous())
    return ops::add_layernorm_forward_(x, residual, weight, bias, eps, keep_sum);
  ops::add_forward_(x, residual);
  return apply(x);
}

Tensor Norm::backward(const Tensor& grad_output) {
  auto sv = pop_saved<NormSaved>(kind == NormKind::rms_norm ? "RMSNorm" : "LayerNorm");
  return norm_backward(kind, grad_output, *sv, weight, dweight, bias, dbias);
}

// ---------------- activations ----------------

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_tanh" || name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "swiglu") return Activation::swiglu;
  if (name == "geglu") return Activation::geglu;
  throw Error("activation should be one of relu, gelu, gelu_tanh, silu, swiglu, geglu; got '" + name + "'");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::silu: return "silu";
    case Activation::swiglu: return "swiglu";
    case Activation::geglu: return "geglu";
  }
  return "?";
}

Tensor generate_square_subsequent_mask(int64_t size) {
  ENCORE_CHECK(size >= 0, "generate_square_subsequent_mask: negative size ", size);
  Tensor m = Tensor::zeros({size, size});
  float* p = m.data<float>();
  for (int64_t i = 0; i < size; ++i)
    for (int64_t j = i + 1; j < size; ++j) p[i * size + j] = -std::numeric_limits<float>::infinity();
  return m;
}

namespace detail {

Tensor to_batch_first(const Tensor& x, bool batch_first, const char* name) {
  ENCORE_CHECK(x.defined() && x.dim() == 3, name, ": expected a 3-D tensor ",
               batch_first ? "(B, T, E)" : "(T, B, E)", ", got ", x.defined() ? x.shape_str() : "none");
  check_dtype(x, name, DType::f32);
  return batch_first ? x : x.transpose(0, 1).contiguous();
}

Tensor from_batch_first(const Tensor& x, bool batch_first) {
  return batch_first ? x : x.transpose(0, 1).contiguous();
}

void make_feed_forward(Linear& linear1, Linear& linear2, int64_t d_model, int64_t dim_feedforward,
                       Activation activation, bool bias, const char* who) {
  ENCORE_CHECK(dim_feedforward > 0, who, ": dim_feedforward must be positive, got ", dim_feedforward);
  linear1 = Linear(d_model, is_gated(activation) ? 2 * dim_feedforward : dim_feedforward, bias);
  linear2 = Linear(dim_feedforward, d_model, bias);
}

Tensor linear(const Linear& lin, const Tensor& x, bool training, kernels::Act act) {
  if (lin.packed && !training) return ops::linear_forward(x, *lin.packed, act);
  return ops::linear_forward(x, lin.weight, lin.bias, act);
}

Tensor linear_backward(Linear& lin, const Tensor& dout, const Tensor& x, const Tensor& pre, kernels::Act act) {
  Tensor dx;
  Tensor* db = lin.bias.defined() ? &Module::grad_of(lin.dbias, lin.bias) : nullptr;
  ops::linear_backward(&dx, &Module::grad_of(lin.dweight, lin.weight), db, dout.contiguous(), pre, x, lin.weight,
                       act);
  return dx;
}

kernels::Precision precision_of(DType dtype) {
  if (dtype == DType::f32) return kernels::Precision::f32;
  if (dtype == DType::bf16) return kernels::Precision::bf16;
  if (dtype == DType::i8) return kernels::Precision::int8;
  throw Error(std::string("inference dtype ") + dtype_name(dtype) + " is not supported (float32, bfloat16, int8)");
}

kernels::PackedLinear::PlainWeight plain_weight(const Tensor& contiguous_weight) {
  ENCORE_CHECK(contiguous_weight.is_contiguous(), "plain_weight: a contiguous weight is required");
  return {std::make_shared<const Tensor>(contiguous_weight),
          [w = contiguous_weight] { w.release_resident_pages(); }};
}

bool is_gated(Activation a) { return a == Activation::swiglu || a == Activation::geglu; }

kernels::Act pointwise_act(Activation a) {
  switch (a) {
    case Activation::relu: return kernels::Act::relu;
    case Activation::gelu: return kernels::Act::gelu_erf;
    case Activation::gelu_tanh: return kernels::Act::gelu_tanh;
    case Activation::silu: return kernels::Act::silu;
    case Activation::swiglu: return kernels::Act::silu;
    case Activation::geglu: return kernels::Act::gelu_erf;
  }
  return kernels::Act::none;
}

Tensor feed_forward(const Module& owner, const Tensor& x, const Linear& linear1, const Linear& linear2,
                    Activation activation, double dropout, bool training) {
  // Inference with nothing to observe between them: the pair in one call (int8: no f32 intermediate).
  if (!training && !is_gated(activation) && linear1.packed && linear2.packed && !observing()) {
    (void)next_seed();  // the (identity) dropout's seed, drawn as below so the seed stream stays the same
    return ops::linear_chain_forward(x, *linear1.packed, pointwise_act(activation), *linear2.packed);
  }
  Tensor hidden;
  if (is_gated(activation)) {
    hidden = ops::gated_forward(linear(linear1, x, training), pointwise_act(activation));
  } else {
    hidden = linear(linear1, x, training, pointwise_act(activation));
  }
  observe(owner.name() + ".ffn.hidden", hidden);
  hidden = ops::dropout_forward(hidden, dropout, training, next_seed());
  observe(owner.name() + ".ffn.dropout", hidden);  // torch's TransformerEncoderLayer.dropout (identity in eval)
  Tensor out = linear(linear2, hidden, training);
  observe(owner.name() + ".ffn.linear2", out);
  return out;
}

}  // namespace detail

}  // namespace encore::nn
