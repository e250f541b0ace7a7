#include "io/safetensors_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace encore::io {

namespace fs = std::filesystem;

namespace {

// Writes all of [p, p + n) or throws.
void write_all(int fd, const void* p, uint64_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t w = ::write(fd, c, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw ResourceError("cannot write '" + path + "': " + std::strerror(errno));
    c += w;
    n -= static_cast<uint64_t>(w);
  }
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  auto fail = [&](const std::string& why) { throw ResourceError("writing safetensors file '" + path + "': " + why); };
  std::vector<const TensorToWrite*> order;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") fail("invalid tensor name '" + t.name + "'");
    if (!names.insert(t.name).second) fail("duplicate tensor name '" + t.name + "'");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("tensor '" + t.name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * st_dtype_bytes(t.dtype) != t.bytes)
      fail("tensor '" + t.name + "': shape " + shape_str(t.shape) + " x " + st_dtype_name(t.dtype) + " needs " +
           std::to_string(numel * st_dtype_bytes(t.dtype)) + " bytes, got " + std::to_string(t.bytes));
    if (t.bytes > 0 && t.data == nullptr) fail("tensor '" + t.name + "' has no data");
    order.push_back(&t);
  }
  // Larger elements first: every tensor then starts at a multiple of its element size.
  std::stable_sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    const uint64_t sa = st_dtype_bytes(a->dtype), sb = st_dtype_bytes(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const TensorToWrite* t : order) {
    header[t->name] = {{"dtype", st_dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes}}};
    offset += t->bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // data section starts at a multiple of 8
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail(std::string("cannot create a temporary file in '") + dir.string() + "': " + std::strerror(errno));
  try {
    write_all(fd, len, 8, path);
    write_all(fd, text.data(), text.size(), path);
    for (const TensorToWrite* t : order) write_all(fd, t->data, t->bytes, path);
    if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) fail(std::string("cannot sync: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail("cannot close: " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail("cannot rename the temporary file into place: " + why);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // the rename itself survives a crash
    ::close(dfd);
  }
}

}  // namespace encore::io
