// encore::Tensor - an n-dimensional array with shared, 64-byte aligned storage and cheap views.
//
//   encore::Tensor x = encore::Tensor::zeros({2, 5, 64});   // (B, T, C), row-major, last dim contiguous
//   encore::Tensor row = x.select(0, 1);                      // view of batch 1: (5, 64)
//   float* p = x.data<float>();
//
// Ownership: a Tensor is a handle; copies share storage (like torch.Tensor). Storage is freed with its last
// handle; external memory (mmap, numpy) can be wrapped with a keep-alive owner. Tensors are not
// thread-safe for concurrent writes; concurrent reads are fine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "encore/error.hpp"

namespace encore {

enum class DType : uint8_t { f32, bf16, f16, i8, u8, i32, i64, boolean };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// "fp32"/"float32", "bf16"/"bfloat16", "int8", ... -> DType; throws listing the accepted names.
DType parse_dtype(const std::string& name);

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);  // "(2, 5, 64)"

// Bytes of tensor storage live now and at the peak since the last reset (all threads).
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};
MemoryStats memory_stats();
void reset_peak_memory();  // peak := current

// Owned tensor storage comes from a bounded caching allocator (src/core/allocator.hpp): blocks of 32 KiB and
// more are kept after their last tensor goes and reused for the next tensor of the same size class, so repeated
// inference calls stop mapping fresh memory. ENCORE_ALLOCATOR=system turns it off; ENCORE_ALLOCATOR_CACHE_MB
// (default 1024) bounds what it keeps. memory_stats() counts tensors' bytes only, never cached blocks.
struct AllocatorStats {
  int64_t system_allocations = 0;  // blocks of 32 KiB or more obtained from the system allocator since start
  int64_t system_bytes = 0;        // their total size
  int64_t small_allocations = 0;   // smaller blocks, always passed to malloc (never cached)
  int64_t reused_allocations = 0;  // requests served from the cache
  int64_t evictions = 0;           // cached blocks returned to the system to stay within the limit
  int64_t decayed = 0;             // cached blocks returned because no request took them within the decay time
  int64_t cached_bytes = 0;        // bytes held in free blocks now
};
AllocatorStats allocator_stats();
void release_cached_memory();  // returns every cached block, and the C heap's free pages, to the system
// Returns the cached blocks that no request took within ENCORE_ALLOCATOR_DECAY_MS (default 10 s). Allocations and
// releases apply the same rule as they go; an idle process (a server between requests) calls this.
void release_idle_cached_memory();

class Storage;

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, float value);
  // Copies numel floats from data.
  static Tensor from_floats(const Shape& shape, const float* data);
  // Wraps external memory without copying; owner keeps it alive. Strides in elements (empty = contiguous).
  static Tensor wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                     const Shape& strides = {});
  // The same for memory in a read-only private file mapping (a checkpoint's weights): its pages can be given
  // back to the OS and are read from the file again when touched (see release_resident_pages).
  static Tensor wrap_file_mapping(const void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner);

  // For a tensor wrapped with wrap_file_mapping: drops the pages that hold its elements from this process's
  // resident memory (madvise MADV_DONTNEED; the values do not change, a later read faults them in from the
  // file). Called once a weight has been copied into a prepared form, so that resident memory holds one copy
  // of it, not two. Returns the bytes advised; 0 for any other tensor (memory of our own is never dropped).
  int64_t release_resident_pages() const;
  // The opposite, for the same tensors: maps the pages that hold its elements into this process now, in one call
  // (madvise MADV_POPULATE_READ; from the page cache, or read from the file), so that a first read does not take
  // a page fault every few pages. Returns the bytes advised; 0 for any other tensor or where the kernel lacks it.
  int64_t map_resident_pages() const;
  bool is_file_mapping() const;  // wrapped with wrap_file_mapping
  // Copy-on-write for a tensor wrapped with wrap_file_mapping (whose memory is read-only: a write through
  // data<T>() would fault): its storage moves to owned memory first, and every handle sharing that storage,
  // views included, sees the copy; is_file_mapping() is false afterwards. A no-op for any other tensor.
  // copy_from and fill call it; code that writes through data<T>() into a tensor it did not create (optimizers,
  // initialisers) calls it before writing.
  void make_writable();

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  bool is_contiguous() const;
  std::string shape_str() const { return encore::shape_str(shape_); }

  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(raw_data());
  }
  void* raw_data() const;

  // Views share storage.
  Tensor view(const Shape& shape) const;  // contiguous only; one -1 allowed
  Tensor slice(int64_t d, int64_t start, int64_t end) const;
  Tensor select(int64_t d, int64_t index) const;  // drops dimension d
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor unsqueeze(int64_t d) const;

  Tensor contiguous() const;  // this if already contiguous, else a packed copy
  Tensor clone() const;       // always a packed copy
  void copy_from(const Tensor& src);  // same shape and dtype; any strides
  void fill(float value);             // f32 only

 private:
  static Tensor wrap_storage(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                             const Shape& strides, bool file_mapping);
  int64_t advise_file_pages(int advice) const;  // release_/map_resident_pages: madvise over the view's pages

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_, strides_;
  DType dtype_ = DType::f32;
};

Shape contiguous_strides(const Shape& shape);

// Shape-check helper for public entry points: throws "<name>: expected <what>, got (…)" on mismatch.
// expected entries of -1 match any size.
void check_shape(const Tensor& t, const char* name, const Shape& expected);
void check_dtype(const Tensor& t, const char* name, DType expected);

}  // namespace encore
