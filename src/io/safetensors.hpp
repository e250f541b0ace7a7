// safetensors reader: the file is mmapped and every header field validated before any tensor is touched.
// F32 tensors whose data is 4-byte aligned are returned zero-copy (views into the mapping, kept alive by
// the returned Tensor); F16/BF16/F64 are converted to F32 on request.
//
//   auto st = encore::io::SafetensorsFile::open("model.safetensors");
//   encore::Tensor w = st->get_f32("embeddings.word_embeddings.weight");
//
// Validation: 8-byte header length within the file and at most 100 MB; the header a JSON object without
// duplicate keys; every entry has a known dtype, a shape of non-negative integers and data_offsets [begin,
// end] with end - begin == numel x dtype size computed with overflow checks, in bounds of the data section,
// non-overlapping. Errors name the file and the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "encore/tensor.hpp"

namespace encore::io {

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };
const char* st_dtype_name(StDType d);
uint64_t st_dtype_bytes(StDType d);  // bytes per element

struct TensorInfo {
  StDType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data section
};

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor as float32: zero-copy when stored as aligned F32, converted otherwise (floating types only).
  Tensor get_f32(const std::string& name) const;
  // Integer tensors (I64/I32) as int64.
  Tensor get_i64(const std::string& name) const;
  // An I8 tensor as int8, zero-copy (a view into the mapping).
  Tensor get_i8(const std::string& name) const;
  // A tensor's bytes as stored (little-endian), valid while this file is alive.
  const uint8_t* raw_data(const std::string& name) const;

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

 private:
  SafetensorsFile() = default;
  const uint8_t* data_of(const TensorInfo& info) const { return data_ + info.begin; }
  std::string path_;
  std::shared_ptr<void> mapping_;  // munmap on release
  const uint8_t* data_ = nullptr;  // start of the data section
  uint64_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All the weights of a model directory: model.safetensors, or the shards named by
// model.safetensors.index.json (shard names may not leave the directory). pytorch_model.bin is refused with
// instructions to convert it: pickles are never loaded.
class WeightStore {
 public:
  static WeightStore open_dir(const std::string& dir);
  static WeightStore open_file(const std::string& safetensors_path);
  bool contains(const std::string& name) const;
  Tensor get_f32(const std::string& name) const;  // throws naming the tensor and the directory if absent
  Tensor get_i64(const std::string& name) const;  // I64/I32 as int64
  Tensor get_i8(const std::string& name) const;   // I8, zero-copy
  const TensorInfo& info(const std::string& name) const;
  const uint8_t* raw_data(const std::string& name) const;  // as stored; valid while this store is alive
  std::vector<std::string> names() const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> index_;  // tensor name -> file
};

// NaN/Inf in a checkpoint, named for an error message (only run after something failed: each reads whole tensors).
// The first non-finite value of float tensor `name`: "'<name>' has a non-finite value (nan) at row r, column c"
// (rows: the last dimension's; "at index i" for 1-D), empty if it has none.
std::string describe_first_non_finite(const WeightStore& store, const std::string& name);
// The same for float32 values already read, described as "<label> has a non-finite value ...".
std::string describe_first_non_finite(const Tensor& values, const std::string& label);
// Every float tensor of the store, in natural name order (layer 2 before layer 10), until `max_bytes` of them are
// read: those with a non-finite value, described as above. A tensor that cannot be read is skipped.
struct NonFiniteTensors {
  static constexpr size_t kKept = 64;
  std::vector<std::pair<std::string, std::string>> found;  // (name, description), the first kKept
  int64_t count = 0;                                        // how many tensors hold NaN or Inf
  bool scanned_all = true;                                  // false: stopped at max_bytes (count is a lower bound)
};
NonFiniteTensors find_non_finite_tensors(const WeightStore& store, uint64_t max_bytes);

}  // namespace encore::io
