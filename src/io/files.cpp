#include "encore/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ext/stdio_filebuf.h>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "encore/error.hpp"

namespace encore {

namespace {
const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}
}  // namespace

void check_readable_file(const std::string& path, const char* what, bool allow_pipe) {
  ENCORE_CHECK_AS(InputError, !path.empty(), what, ": empty file name");
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ELOOP)
      throw InputError(detail::concat(what, " '", path, "': a symbolic link loop (too many levels of symbolic links)"));
    if (e == ENOENT) throw InputError(detail::concat(what, " '", path, "' does not exist"));
    throw InputError(detail::concat(what, " '", path, "': ", std::strerror(e)));
  }
  if (allow_pipe && S_ISFIFO(st.st_mode)) return;
  if (!S_ISREG(st.st_mode))
    throw InputError(detail::concat(what, " '", path, "' is ", file_kind(st.st_mode), ", expected a regular file"));
  if (::access(path.c_str(), R_OK) != 0)
    throw InputError(detail::concat(what, " '", path, "': ", std::strerror(errno)));
}

std::string read_text_file(const std::string& path, const char* what) {
  check_readable_file(path, what);
  std::ifstream in(path, std::ios::binary);
  ENCORE_CHECK_AS(InputError, in.good(), what, " '", path, "': cannot open: ", std::strerror(errno));
  // One read into a string of the file's size (a stringstream grew by doubling and copied the text once more:
  // for a 466 KB tokenizer.json three allocate/copy/free rounds of fresh pages, on the tokenizer's thread while
  // the model loads). The size is a hint: a file that changes while read is read to its end all the same.
  std::string text;
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  text.resize(ec ? 0 : static_cast<size_t>(size));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in) {
    char chunk[1 << 14];
    while (in.read(chunk, sizeof chunk), in.gcount() > 0) text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  ENCORE_CHECK_AS(InputError, !in.bad(), what, " '", path, "': read error");
  return text;
}

namespace {

// The descriptor a path names: /dev/stdout (1), /dev/stderr (2), /dev/fd/N, /proc/self/fd/N; else -1. Their links
// (to /proc/self/fd/1, then "pipe:[N]" or the file the shell opened) must not be followed as paths: the write goes
// to the open descriptor, at its offset, as the shell set it up (>> appends; what was written before stays).
int descriptor_of(const std::filesystem::path& p) {
  const std::string s = p.lexically_normal().string();
  if (s == "/dev/stdout") return 1;
  if (s == "/dev/stderr") return 2;
  for (const char* dir : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string prefix(dir);
    if (s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 &&
        s.find_first_not_of("0123456789", prefix.size()) == std::string::npos && s.size() - prefix.size() < 9)
      return std::stoi(s.substr(prefix.size()));
  }
  return -1;
}

// Where a write to `path` lands: the path itself, or the file its symbolic links end at (a dangling link's target
// included, created there as the shell's `>` would), or a descriptor path (descriptor_of) met on the way. More
// than 40 links (ELOOP's bound) is refused.
std::filesystem::path resolve_output_links(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  for (int hops = 0;; ++hops) {
    std::error_code ec;
    if (descriptor_of(p) >= 0 || !fs::is_symlink(fs::symlink_status(p, ec))) return p;
    ENCORE_CHECK_AS(InputError, hops < 40, "output '", path, "': too many levels of symbolic links");
    const fs::path next = fs::read_symlink(p, ec);
    ENCORE_CHECK_AS(InputError, !ec, "output '", path, "': cannot read the symbolic link '", p.string(), "': ",
                    ec.message());
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
}

// A device or FIFO the user named (opened, truncated), or an open descriptor (descriptor >= 0: a duplicate of it,
// written at its offset): written in place with every write and the close checked. `name` is what errors call it
// (the user's path, and where its links led).
void write_in_place(const std::string& path, int descriptor, const std::string& name,
                    const std::function<void(std::ostream&)>& write) {
  const int fd = descriptor >= 0 ? ::fcntl(descriptor, F_DUPFD_CLOEXEC, 0) : ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  ENCORE_CHECK_AS(ResourceError, fd >= 0, "output ", name, ": cannot open it for writing: ", std::strerror(errno));
  __gnu_cxx::stdio_filebuf<char> buf(fd, std::ios::out | std::ios::binary);  // owns and closes fd
  std::ostream os(&buf);
  write(os);
  os.flush();
  const int e = errno;
  ENCORE_CHECK_AS(ResourceError, static_cast<bool>(os), "writing ", name, " failed: ", std::strerror(e ? e : EIO));
  ENCORE_CHECK_AS(ResourceError, buf.close() != nullptr, "writing ", name, " failed: ",
                  std::strerror(errno ? errno : EIO));
}

}  // namespace

bool is_stream_output(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target = resolve_output_links(path);
  std::error_code ec;
  const fs::file_status status = fs::status(target, ec);
  return descriptor_of(target) >= 0 || fs::is_fifo(status);
}

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  namespace fs = std::filesystem;
  ENCORE_CHECK_AS(UsageError, !path.empty(), "output: empty file name");
  const fs::path target = resolve_output_links(path);
  std::error_code ec;
  ENCORE_CHECK_AS(UsageError, !fs::is_directory(target, ec), "output '", path,
                  "' is a directory; give a file name");
  const std::string name = target == fs::path(path) ? "'" + path + "'"
                                                    : "'" + path + "' (a link to '" + target.string() + "')";
  if (const int descriptor = descriptor_of(target); descriptor >= 0) {
    errno = 0;
    return write_in_place(target.string(), descriptor, name, write);
  }
  const fs::file_status status = fs::status(target, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    ENCORE_CHECK_AS(UsageError, !fs::is_socket(status), "output '", path, "' is a socket; give a file name");
    errno = 0;
    return write_in_place(target.string(), -1, name, write);
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  ENCORE_CHECK_AS(InputError, fs::is_directory(dir, ec), "output '", path, "': the directory '", dir.string(),
                  "' does not exist");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  ENCORE_CHECK_AS(ResourceError, fd >= 0, "output '", path, "': cannot create a temporary file in '", dir.string(),
                  "': ", std::strerror(errno));
  ::fchmod(fd, 0644);
  auto fail = [&](const std::string& why) {
    ::unlink(tmp.c_str());
    throw ResourceError(detail::concat("writing '", path, "' failed: ", why));
  };
  try {
    __gnu_cxx::stdio_filebuf<char> buf(fd, std::ios::out | std::ios::binary);  // owns and closes fd
    std::ostream os(&buf);
    write(os);
    os.flush();
    if (!os) fail(std::strerror(errno ? errno : EIO));
    if (::fsync(fd) != 0 && errno != EINVAL) fail(std::strerror(errno));
    if (buf.close() == nullptr) fail(std::strerror(errno ? errno : EIO));
  } catch (const ResourceError&) {
    throw;
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw ResourceError(detail::concat("writing '", path, "' failed: cannot rename the temporary file: ",
                                       std::strerror(e)));
  }
}

}  // namespace encore
