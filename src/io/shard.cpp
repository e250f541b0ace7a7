// Sharding rule, JSONL resume and durable appends (include/encore/shard.hpp).
#include "encore/shard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "encore/error.hpp"

namespace encore {

Shard Shard::parse(const std::string& spec) {
  const size_t slash = spec.find('/');
  Shard s;
  auto number = [&](size_t from, size_t to, int64_t* out) {
    const char* b = spec.data() + from;
    const char* e = spec.data() + to;
    const auto r = std::from_chars(b, e, *out);
    return b != e && r.ec == std::errc() && r.ptr == e;
  };
  const bool ok = slash != std::string::npos && number(0, slash, &s.index) && number(slash + 1, spec.size(), &s.count);
  ENCORE_CHECK_AS(UsageError, ok && s.count >= 1 && s.index >= 0 && s.index < s.count, "shard '", spec,
               "': expected I/N with 0 <= I < N, e.g. 0/4 for the first of four shards");
  return s;
}

RecordRange shard_records(int64_t n, int64_t block, const Shard& s) {
  ENCORE_CHECK(block >= 1, "shard block must be at least 1 record, got ", block);
  ENCORE_CHECK(n >= 0, "record count must be >= 0, got ", n);
  ENCORE_CHECK(s.count >= 1 && s.index >= 0 && s.index < s.count, "shard ", s.index, "/", s.count, " is not valid");
  const int64_t blocks = (n + block - 1) / block;
  // floor(I*B/N) in 128 bits: I*B may overflow for huge corpora with many shards.
  auto cut = [&](int64_t i) { return static_cast<int64_t>(static_cast<__int128>(i) * blocks / s.count); };
  RecordRange r;
  r.begin = std::min(n, cut(s.index) * block);
  r.end = std::min(n, cut(s.index + 1) * block);
  return r;
}

int64_t resume_jsonl(const std::string& path, const RecordRange& range, int64_t block) {
  ENCORE_CHECK(block >= 1, "shard block must be at least 1 record, got ", block);
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return range.begin;  // nothing written yet
  static constexpr char kPrefix[] = "{\"index\": ";
  const size_t prefix_len = sizeof(kPrefix) - 1;
  // keep = bytes up to the end of the last whole block; next = the record after it.
  int64_t keep = 0, offset = 0, expected = range.begin, next = range.begin;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: a torn last line, dropped
    ++line_no;
    int64_t index = -1;
    const bool parsed = line.compare(0, prefix_len, kPrefix) == 0 &&
                        std::from_chars(line.data() + prefix_len, line.data() + line.size(), index).ec == std::errc();
    ENCORE_CHECK_AS(InputError, parsed && !line.empty() && line.back() == '}', path, ":", line_no,
                 ": not a line encore embed writes ({\"index\": i, ...}); refusing to resume into it");
    ENCORE_CHECK_AS(InputError, index == expected && index < range.end, path, ":", line_no, ": record index ", index, " where ", expected,
                 " was expected: the file belongs to another shard or run (same --shard, --block and input needed)");
    offset += static_cast<int64_t>(line.size()) + 1;
    ++expected;
    if (expected % block == 0 || expected == range.end) {  // a block boundary (the last block may be short)
      keep = offset;
      next = expected;
    }
  }
  in.close();
  if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0)
    throw ResourceError(detail::concat("cannot truncate '", path, "' for resume: ", std::strerror(errno)));
  return next;
}

BlockAppender::BlockAppender(const std::string& path, bool truncate) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND), 0644);
  if (fd_ < 0) {
    const int e = errno;
    if (e == EISDIR) throw UsageError(detail::concat("output '", path, "' is a directory; give a file name"));
    if (e == ENOENT) throw InputError(detail::concat("output '", path, "': its directory does not exist"));
    throw ResourceError(detail::concat("cannot write '", path, "': ", std::strerror(e)));
  }
}

BlockAppender::~BlockAppender() {
  if (fd_ >= 0) ::close(fd_);
}

void BlockAppender::append(const std::string& bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t w = ::write(fd_, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw ResourceError(detail::concat("writing '", path_, "' failed: ", std::strerror(errno)));
    p += w;
    left -= static_cast<size_t>(w);
  }
}

void BlockAppender::sync() {
  if (fd_ < 0) throw std::logic_error("BlockAppender::sync after close");
  if (::fsync(fd_) != 0 && errno != EINVAL) throw ResourceError(detail::concat("fsync of '", path_, "' failed: ", std::strerror(errno)));
}

void BlockAppender::close() {
  if (fd_ < 0) return;
  sync();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR)
    throw ResourceError(detail::concat("closing '", path_, "' failed: ", std::strerror(errno)));
}

}  // namespace encore
