#include "io/safetensors.hpp"

#include "encore/files.hpp"
#include "io/json_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace encore::io {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* st_dtype_name(StDType d) {
  switch (d) {
    case StDType::F64: return "F64";
    case StDType::F32: return "F32";
    case StDType::F16: return "F16";
    case StDType::BF16: return "BF16";
    case StDType::I64: return "I64";
    case StDType::I32: return "I32";
    case StDType::I16: return "I16";
    case StDType::I8: return "I8";
    case StDType::U8: return "U8";
    case StDType::BOOL: return "BOOL";
  }
  return "?";
}

namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;

uint64_t dtype_bytes(StDType d) {
  switch (d) {
    case StDType::F64: case StDType::I64: return 8;
    case StDType::F32: case StDType::I32: return 4;
    case StDType::F16: case StDType::BF16: case StDType::I16: return 2;
    case StDType::I8: case StDType::U8: case StDType::BOOL: return 1;
  }
  return 0;
}

bool parse_dtype(const std::string& s, StDType& out) {
  static const std::pair<const char*, StDType> table[] = {
      {"F64", StDType::F64}, {"F32", StDType::F32}, {"F16", StDType::F16}, {"BF16", StDType::BF16},
      {"I64", StDType::I64}, {"I32", StDType::I32}, {"I16", StDType::I16}, {"I8", StDType::I8},
      {"U8", StDType::U8},   {"BOOL", StDType::BOOL}};
  for (auto& [name, d] : table)
    if (s == name) {
      out = d;
      return true;
    }
  return false;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while (!(m & 0x400));
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

uint64_t st_dtype_bytes(StDType d) { return dtype_bytes(d); }

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto fail = [&](const std::string& why) -> void { throw ModelFormatError("safetensors file '" + path + "': " + why); };
  check_readable_file(path, "safetensors file");  // a FIFO would block open() below
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail("truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail(std::string("mmap failed: ") + std::strerror(errno));
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->mapping_ = std::shared_ptr<void>(map, [size](void* p) { munmap(p, size); });
  const uint8_t* base = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian u64
  if (header_len > kMaxHeader) fail("header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  if (header_len > size - 8)
    fail("truncated: header length " + std::to_string(header_len) + " but only " + std::to_string(size - 8) +
         " bytes follow");
  f->data_ = base + 8 + header_len;
  f->data_size_ = size - 8 - header_len;

  json header;
  const std::string_view header_text(reinterpret_cast<const char*>(base + 8), header_len);
  if (const size_t at = json_too_deep_at(header_text); at != std::string::npos)
    fail("header: " + json_too_deep_message(at));
  try {
    header = json::parse(header_text);
  } catch (const json::exception& e) {
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  // the JSON library would keep the last entry of a name given twice
  if (const std::optional<std::string> duplicate = json_duplicate_top_level_key(header_text))
    fail("duplicate tensor name '" + *duplicate + "' in the header");
  if (!header.is_object()) fail("header is not a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("__metadata__ is not an object");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail("__metadata__ value for '" + k + "' is not a string");
        f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!entry.is_object()) fail(where + "entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(where + "missing dtype");
    TensorInfo info{};
    if (!parse_dtype(entry["dtype"].get<std::string>(), info.dtype))
      fail(where + "unknown dtype '" + entry["dtype"].get<std::string>() +
           "' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
    if (!entry.contains("shape") || !entry["shape"].is_array()) fail(where + "missing shape");
    uint64_t numel = 1;
    for (auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) fail(where + "shape entries must be non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t{1} << 40) || (v != 0 && numel > std::numeric_limits<uint64_t>::max() / v))
        fail(where + "shape is too large");
      numel *= v;
      info.shape.push_back(static_cast<int64_t>(v));
    }
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2 ||
        !entry["data_offsets"][0].is_number_unsigned() || !entry["data_offsets"][1].is_number_unsigned())
      fail(where + "data_offsets must be [begin, end] non-negative integers");
    info.begin = entry["data_offsets"][0].get<uint64_t>();
    info.end = entry["data_offsets"][1].get<uint64_t>();
    if (info.begin > info.end) fail(where + "data_offsets begin > end");
    if (info.end > f->data_size_)
      fail(where + "data_offsets end " + std::to_string(info.end) + " is past the data section (" +
           std::to_string(f->data_size_) + " bytes): file truncated or corrupt");
    const uint64_t esz = dtype_bytes(info.dtype);
    if (numel > std::numeric_limits<uint64_t>::max() / esz || numel * esz != info.end - info.begin)
      fail(where + "shape " + shape_str(info.shape) + " x " + st_dtype_name(info.dtype) + " needs " +
           std::to_string(numel * esz) + " bytes but data_offsets span " + std::to_string(info.end - info.begin));
    if (info.begin != info.end) ranges.emplace_back(info.begin, info.end);
    f->tensors_.emplace(name, std::move(info));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail("tensor data ranges overlap");
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

Tensor SafetensorsFile::get_f32(const std::string& name) const {
  auto it = tensors_.find(name);
  ENCORE_CHECK(it != tensors_.end(), "safetensors file '", path_, "': no tensor named '", name, "'");
  const TensorInfo& info = it->second;
  const uint8_t* p = data_of(info);
  const int64_t n = static_cast<int64_t>((info.end - info.begin) / dtype_bytes(info.dtype));
  if (info.dtype == StDType::F32 && reinterpret_cast<uintptr_t>(p) % 4 == 0)
    return Tensor::wrap_file_mapping(p, info.shape, DType::f32, mapping_);
  Tensor t = Tensor::empty(info.shape);
  float* out = t.data<float>();
  switch (info.dtype) {
    case StDType::F32: std::memcpy(out, p, static_cast<size_t>(n) * 4); break;
    case StDType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      break;
    case StDType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = half_to_float(h);
      }
      break;
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(out + i, &bits, 4);
      }
      break;
    default:
      throw Error("safetensors file '" + path_ + "': tensor '" + name + "' has dtype " + st_dtype_name(info.dtype) +
                  ", expected a floating-point type");
  }
  return t;
}

Tensor SafetensorsFile::get_i64(const std::string& name) const {
  auto it = tensors_.find(name);
  ENCORE_CHECK(it != tensors_.end(), "safetensors file '", path_, "': no tensor named '", name, "'");
  const TensorInfo& info = it->second;
  const uint8_t* p = data_of(info);
  Tensor t = Tensor::empty(info.shape, DType::i64);
  const int64_t n = t.numel();
  int64_t* out = t.data<int64_t>();
  if (info.dtype == StDType::I64) {
    std::memcpy(out, p, static_cast<size_t>(n) * 8);
  } else if (info.dtype == StDType::I32) {
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
    }
  } else {
    throw Error("safetensors file '" + path_ + "': tensor '" + name + "' has dtype " + st_dtype_name(info.dtype) +
                ", expected I64 or I32");
  }
  return t;
}

Tensor SafetensorsFile::get_i8(const std::string& name) const {
  auto it = tensors_.find(name);
  ENCORE_CHECK(it != tensors_.end(), "safetensors file '", path_, "': no tensor named '", name, "'");
  ENCORE_CHECK(it->second.dtype == StDType::I8, "safetensors file '", path_, "': tensor '", name, "' has dtype ",
               st_dtype_name(it->second.dtype), ", expected I8");
  return Tensor::wrap_file_mapping(data_of(it->second), it->second.shape, DType::i8, mapping_);
}

const uint8_t* SafetensorsFile::raw_data(const std::string& name) const {
  auto it = tensors_.find(name);
  ENCORE_CHECK(it != tensors_.end(), "safetensors file '", path_, "': no tensor named '", name, "'");
  return data_of(it->second);
}

WeightStore WeightStore::open_file(const std::string& path) {
  WeightStore w;
  w.source_ = path;
  w.files_.push_back(SafetensorsFile::open(path));
  for (auto& [name, _] : w.files_[0]->tensors()) w.index_[name] = 0;
  return w;
}

WeightStore WeightStore::open_dir(const std::string& dir) {
  const fs::path d(dir);
  ENCORE_CHECK(fs::is_directory(d), "model directory '", dir, "' does not exist or is not a directory");
  if (fs::exists(fs::symlink_status(d / "model.safetensors"))) {  // a symlink loop is refused by open()
    WeightStore w = open_file((d / "model.safetensors").string());
    w.source_ = dir;
    return w;
  }
  const fs::path index_path = d / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    WeightStore w;
    w.source_ = dir;
    json index;
    index = read_json_file(index_path);
    ENCORE_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), "'",
                 index_path.string(), "' has no weight_map object");
    std::map<std::string, size_t> shard_ids;
    const fs::path root = fs::weakly_canonical(d);
    for (auto& [tensor, shard] : index["weight_map"].items()) {
      ENCORE_CHECK(shard.is_string(), "'", index_path.string(), "': shard for '", tensor, "' is not a string");
      const std::string s = shard.get<std::string>();
      const fs::path p = fs::weakly_canonical(d / s);
      const std::string rel = p.lexically_relative(root).string();
      ENCORE_CHECK(fs::path(s).is_relative() && !rel.empty() && rel.rfind("..", 0) != 0 && p.parent_path() == root,
                   "'", index_path.string(), "': shard '", s, "' for '", tensor, "' is outside the model directory");
      auto [it, added] = shard_ids.emplace(s, w.files_.size());
      if (added) w.files_.push_back(SafetensorsFile::open(p.string()));
      ENCORE_CHECK(w.files_[it->second]->contains(tensor), "'", index_path.string(), "' maps '", tensor, "' to '", s,
                   "', which does not contain it");
      w.index_[tensor] = it->second;
    }
    return w;
  }
  if (fs::exists(d / "pytorch_model.bin"))
    throw Error("'" + dir + "' only has pytorch_model.bin, a pickle, which encore never loads. Convert it once with "
                "Python: `from transformers import AutoModel; AutoModel.from_pretrained(DIR).save_pretrained(DIR, "
                "safe_serialization=True)`, which writes model.safetensors.");
  throw Error("'" + dir + "' has no model.safetensors or model.safetensors.index.json");
}

bool WeightStore::contains(const std::string& name) const { return index_.count(name) != 0; }

Tensor WeightStore::get_f32(const std::string& name) const {
  auto it = index_.find(name);
  ENCORE_CHECK(it != index_.end(), "weights in '", source_, "' have no tensor named '", name, "'");
  return files_[it->second]->get_f32(name);
}

Tensor WeightStore::get_i64(const std::string& name) const {
  auto it = index_.find(name);
  ENCORE_CHECK(it != index_.end(), "weights in '", source_, "' have no tensor named '", name, "'");
  return files_[it->second]->get_i64(name);
}

Tensor WeightStore::get_i8(const std::string& name) const {
  auto it = index_.find(name);
  ENCORE_CHECK(it != index_.end(), "weights in '", source_, "' have no tensor named '", name, "'");
  return files_[it->second]->get_i8(name);
}

const TensorInfo& WeightStore::info(const std::string& name) const {
  auto it = index_.find(name);
  ENCORE_CHECK(it != index_.end(), "weights in '", source_, "' have no tensor named '", name, "'");
  return files_[it->second]->tensors().at(name);
}

const uint8_t* WeightStore::raw_data(const std::string& name) const {
  auto it = index_.find(name);
  ENCORE_CHECK(it != index_.end(), "weights in '", source_, "' have no tensor named '", name, "'");
  return files_[it->second]->raw_data(name);
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : index_) out.push_back(n);
  return out;
}

std::string describe_first_non_finite(const WeightStore& store, const std::string& name) {
  return describe_first_non_finite(store.get_f32(name), "'" + name + "'");
}

std::string describe_first_non_finite(const Tensor& values, const std::string& label) {
  const Tensor w = values.contiguous();
  const float* p = w.data<float>();
  const int64_t n = w.numel(), cols = w.dim() >= 2 ? w.size(-1) : n;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(p[i])) continue;
    const std::string value = std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf";
    const std::string at = w.dim() >= 2 ? "row " + std::to_string(i / cols) + ", column " + std::to_string(i % cols)
                                        : "index " + std::to_string(i);
    return label + " has a non-finite value (" + value + ") at " + at;
  }
  return {};
}

namespace {

// a < b with runs of digits compared as numbers ("encoder.layer.2" before "encoder.layer.10")
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i_end = i, j_end = j;
      while (i_end < a.size() && std::isdigit(static_cast<unsigned char>(a[i_end]))) ++i_end;
      while (j_end < b.size() && std::isdigit(static_cast<unsigned char>(b[j_end]))) ++j_end;
      const std::string_view x = std::string_view(a).substr(i, i_end - i), y = std::string_view(b).substr(j, j_end - j);
      const size_t x_zeros = x.find_first_not_of('0'), y_zeros = y.find_first_not_of('0');
      const std::string_view xs = x_zeros == std::string_view::npos ? "" : x.substr(x_zeros);
      const std::string_view ys = y_zeros == std::string_view::npos ? "" : y.substr(y_zeros);
      if (xs.size() != ys.size()) return xs.size() < ys.size();
      if (xs != ys) return xs < ys;
      i = i_end;
      j = j_end;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

NonFiniteTensors find_non_finite_tensors(const WeightStore& store, uint64_t max_bytes) {
  std::vector<std::string> names = store.names();
  std::sort(names.begin(), names.end(), natural_less);
  NonFiniteTensors out;
  uint64_t read = 0;
  for (const std::string& name : names) {
    const TensorInfo& t = store.info(name);
    if (t.dtype != StDType::F32 && t.dtype != StDType::F16 && t.dtype != StDType::BF16 && t.dtype != StDType::F64)
      continue;
    read += t.end - t.begin;
    if (read > max_bytes) {
      out.scanned_all = false;
      break;
    }
    std::string where;
    try {
      where = describe_first_non_finite(store, name);
    } catch (const std::exception&) {  // unreadable: the report names what it can
      continue;
    }
    if (where.empty()) continue;
    if (out.found.size() < NonFiniteTensors::kKept) out.found.emplace_back(name, std::move(where));
    ++out.count;
  }
  return out;
}

}  // namespace encore::io
