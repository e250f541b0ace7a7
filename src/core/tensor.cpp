#include "encore/tensor.hpp"

#include "core/allocator.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include <sys/mman.h>
#include <unistd.h>

namespace encore {

namespace {
std::atomic<int64_t> g_current_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};

void note_alloc(int64_t bytes) {
  int64_t now = g_current_bytes.fetch_add(bytes) + bytes;
  int64_t peak = g_peak_bytes.load();
  while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

MemoryStats memory_stats() { return {g_current_bytes.load(), g_peak_bytes.load()}; }
void reset_peak_memory() { g_peak_bytes.store(g_current_bytes.load()); }

// Owned storage is 64-byte aligned, comes from the caching allocator and is counted in memory_stats() at its
// requested size; wrapped storage is neither.
class Storage {
 public:
  explicit Storage(size_t bytes) : bytes_(bytes) {
    data_ = core::storage_allocate(bytes, &capacity_);
    owned_ = true;
    note_alloc(static_cast<int64_t>(bytes_));
  }
  // bytes: the extent of the wrapped memory; needed only for a file mapping (make_writable copies that much).
  Storage(void* data, std::shared_ptr<void> owner, bool file_mapping = false, size_t bytes = 0)
      : data_(data), bytes_(file_mapping ? bytes : 0), owner_(std::move(owner)), file_mapping_(file_mapping) {}
  ~Storage() {
    if (owned_) {
      core::storage_release(data_, capacity_);
      g_current_bytes.fetch_sub(static_cast<int64_t>(bytes_));
    }
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  bool file_mapping() const { return file_mapping_; }

  // Copy-on-write for a read-only file mapping: the bytes move to owned memory, every handle of this storage
  // (views included) sees the copy, and the mapping's keep-alive is dropped. A no-op for any other storage.
  void make_writable() {
    if (!file_mapping_) return;
    void* copy = core::storage_allocate(bytes_, &capacity_);
    if (bytes_) std::memcpy(copy, data_, bytes_);
    data_ = copy;
    owned_ = true;
    file_mapping_ = false;
    owner_.reset();
    note_alloc(static_cast<int64_t>(bytes_));
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0, capacity_ = 0;
  bool owned_ = false;
  std::shared_ptr<void> owner_;
  bool file_mapping_ = false;  // read-only private file mapping: pages may be dropped and re-read
};

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32" || name == "f32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "float16" || name == "f16") return DType::f16;
  if (name == "int8" || name == "i8") return DType::i8;
  throw UsageError("unknown dtype '" + name + "' (fp32, bf16, fp16, int8)");
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

static int64_t product(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

static void check_new_shape(const Shape& shape) {
  for (int64_t s : shape) ENCORE_CHECK(s >= 0, "invalid tensor shape ", encore::shape_str(shape), ": negative size");
  // Reject absurd sizes before allocating: 2^40 elements is far beyond any encoder.
  int64_t n = 1;
  for (int64_t s : shape) {
    ENCORE_CHECK(s == 0 || n <= (int64_t{1} << 40) / s, "tensor shape ", encore::shape_str(shape), " is too large");
    n *= s;
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  check_new_shape(shape);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(product(shape)) * dtype_size(dtype));
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, static_cast<size_t>(t.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape, DType::f32);
  t.fill(value);
  return t;
}

Tensor Tensor::from_floats(const Shape& shape, const float* data) {
  Tensor t = empty(shape, DType::f32);
  std::memcpy(t.raw_data(), data, static_cast<size_t>(t.numel()) * sizeof(float));
  return t;
}

Tensor Tensor::wrap_storage(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                            const Shape& strides, bool file_mapping) {
  check_new_shape(shape);
  Tensor t;
  const size_t bytes = static_cast<size_t>(std::accumulate(shape.begin(), shape.end(), int64_t{1},
                                                          std::multiplies<int64_t>())) * dtype_size(dtype);
  t.storage_ = std::make_shared<Storage>(data, std::move(owner), file_mapping, bytes);
  t.shape_ = shape;
  t.strides_ = strides.empty() ? contiguous_strides(shape) : strides;
  ENCORE_CHECK(t.strides_.size() == shape.size(), "wrap: ", strides.size(), " strides for shape ",
               encore::shape_str(shape));
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                    const Shape& strides) {
  return wrap_storage(data, shape, dtype, std::move(owner), strides, /*file_mapping=*/false);
}

Tensor Tensor::wrap_file_mapping(const void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner) {
  return wrap_storage(const_cast<void*>(data), shape, dtype, std::move(owner), {}, /*file_mapping=*/true);
}

bool Tensor::is_file_mapping() const { return defined() && storage_->file_mapping(); }

void Tensor::make_writable() {
  if (defined()) storage_->make_writable();
}

// The whole pages covering a view's elements ([lowest, highest] bytes), advised with `advice`; the bytes advised,
// 0 for a tensor not wrapped with wrap_file_mapping or when the kernel refuses (advice only).
int64_t Tensor::advise_file_pages(int advice) const {
  if (!defined() || !storage_->file_mapping() || numel() == 0) return 0;
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < shape_.size(); ++d) (strides_[d] < 0 ? lo : hi) += (shape_[d] - 1) * strides_[d];
  const size_t elem = dtype_size(dtype_);
  const uintptr_t first = reinterpret_cast<uintptr_t>(raw_data()) + static_cast<uintptr_t>(lo * static_cast<int64_t>(elem));
  const uintptr_t last = reinterpret_cast<uintptr_t>(raw_data()) + static_cast<uintptr_t>(hi * static_cast<int64_t>(elem)) + elem;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = first & ~(page - 1), end = (last + page - 1) & ~(page - 1);
  if (madvise(reinterpret_cast<void*>(begin), end - begin, advice) != 0) return 0;
  return static_cast<int64_t>(end - begin);
}

int64_t Tensor::release_resident_pages() const {
  // A page shared with a neighbouring tensor is harmless to drop too: the mapping is read-only and private, so it
  // holds no changes of ours, and the neighbour's next read brings the page back from the file.
  return advise_file_pages(MADV_DONTNEED);
}

int64_t Tensor::map_resident_pages() const {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL and the pages fault in on first read
#endif
  return advise_file_pages(MADV_POPULATE_READ);
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  ENCORE_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for shape ", shape_str());
  return shape_[d];
}

int64_t Tensor::numel() const { return product(shape_); }

bool Tensor::is_contiguous() const {
  int64_t stride = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != stride) return false;
    stride *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  ENCORE_CHECK(storage_, "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  ENCORE_CHECK(is_contiguous(), "view: tensor of shape ", shape_str(), " is not contiguous");
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      ENCORE_CHECK(infer < 0, "view: more than one -1 in ", encore::shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    ENCORE_CHECK(known > 0 && numel() % known == 0, "view: cannot view ", shape_str(), " as ",
                 encore::shape_str(shape));
    s[infer] = numel() / known;
  }
  ENCORE_CHECK(product(s) == numel(), "view: cannot view ", shape_str(), " as ", encore::shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  int64_t n = dim();
  if (d < 0) d += n;
  ENCORE_CHECK(d >= 0 && d < n, "slice: dimension ", d, " out of range for shape ", shape_str());
  ENCORE_CHECK(0 <= start && start <= end && end <= shape_[d], "slice: [", start, ", ", end,
               ") out of range for dimension ", d, " of shape ", shape_str());
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  int64_t n = dim();
  if (d < 0) d += n;
  Tensor t = slice(d, index, index + 1);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t n = dim();
  if (d0 < 0) d0 += n;
  if (d1 < 0) d1 += n;
  ENCORE_CHECK(d0 >= 0 && d0 < n && d1 >= 0 && d1 < n, "transpose: dims (", d0, ", ", d1,
               ") out of range for shape ", shape_str());
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n + 1;
  ENCORE_CHECK(d >= 0 && d <= n, "unsqueeze: dimension ", d, " out of range for shape ", shape_str());
  Tensor t = *this;
  int64_t stride = d < n ? shape_[d] * strides_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, stride);
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  t.copy_from(*this);
  return t;
}

// Strided element copy, recursing over leading dims; innermost contiguous runs use memcpy.
static void copy_strided(char* dst, const Shape& dst_strides, const char* src, const Shape& src_strides,
                         const Shape& shape, size_t d, size_t elem) {
  if (d + 1 == shape.size() || shape.empty()) {
    if (shape.empty()) {
      std::memcpy(dst, src, elem);
      return;
    }
    if (dst_strides[d] == 1 && src_strides[d] == 1) {
      std::memcpy(dst, src, static_cast<size_t>(shape[d]) * elem);
    } else {
      for (int64_t i = 0; i < shape[d]; ++i)
        std::memcpy(dst + i * dst_strides[d] * elem, src + i * src_strides[d] * elem, elem);
    }
    return;
  }
  for (int64_t i = 0; i < shape[d]; ++i)
    copy_strided(dst + i * dst_strides[d] * static_cast<int64_t>(elem), dst_strides,
                 src + i * src_strides[d] * static_cast<int64_t>(elem), src_strides, shape, d + 1, elem);
}

void Tensor::copy_from(const Tensor& src) {
  ENCORE_CHECK(src.shape_ == shape_, "copy_from: shape ", src.shape_str(), " does not match ", shape_str());
  ENCORE_CHECK(src.dtype_ == dtype_, "copy_from: dtype ", dtype_name(src.dtype_), " does not match ",
               dtype_name(dtype_));
  if (numel() == 0) return;
  make_writable();  // after the checks: a refused copy changes nothing
  copy_strided(static_cast<char*>(raw_data()), strides_, static_cast<const char*>(src.raw_data()), src.strides_,
               shape_, 0, dtype_size(dtype_));
}

void Tensor::fill(float value) {
  ENCORE_CHECK(dtype_ == DType::f32 && is_contiguous(), "fill: needs a contiguous float32 tensor");
  make_writable();
  float* p = data<float>();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

void check_shape(const Tensor& t, const char* name, const Shape& expected) {
  bool ok = t.defined() && t.dim() == static_cast<int64_t>(expected.size());
  for (size_t i = 0; ok && i < expected.size(); ++i) ok = expected[i] < 0 || expected[i] == t.shape()[i];
  if (ok) return;
  std::string want = "(";
  for (size_t i = 0; i < expected.size(); ++i) {
    if (i) want += ", ";
    want += expected[i] < 0 ? std::string("*") : std::to_string(expected[i]);
  }
  want += ")";
  throw Error(detail::concat(name, ": expected shape ", want, ", got ",
                             t.defined() ? t.shape_str() : std::string("an undefined tensor")));
}

void check_dtype(const Tensor& t, const char* name, DType expected) {
  ENCORE_CHECK(t.dtype() == expected, name, ": expected dtype ", dtype_name(expected), ", got ",
               dtype_name(t.dtype()));
}

}  // namespace encore
