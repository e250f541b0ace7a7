#include "io/staged_dir.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "encore/error.hpp"

namespace encore::io {

namespace fs = std::filesystem;

namespace {

std::string why() { return std::strerror(errno); }

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + p.string() + "' to sync it: " + why());
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? why() : "";
  ::close(fd);
  if (rc != 0) throw ResourceError("cannot sync '" + p.string() + "': " + err);
}

// Writes all bytes to a new file (mode 0644) and fsyncs it.
void write_synced(const fs::path& p, const std::string& bytes) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create '" + p.string() + "': " + why());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string err = why();
      ::close(fd);
      throw ResourceError("cannot write '" + p.string() + "': " + err);
    }
    done += static_cast<size_t>(w);
  }
  const bool ok = ::fsync(fd) == 0;
  const std::string err = ok ? "" : why();
  if (::close(fd) != 0 || !ok) throw ResourceError("cannot sync '" + p.string() + "': " + (ok ? why() : err));
}

fs::path parent_of(const fs::path& target) {
  return target.has_parent_path() ? target.parent_path() : fs::path(".");
}

// mkdtemp/mkstemp template beside `target`: ".<name><kind>XXXXXX" (kind ".tmp-" or ".old-").
std::string sibling_template(const fs::path& target, const char* kind) {
  std::string name = ".";
  name += target.filename().string();
  name += kind;
  name += "XXXXXX";
  return (parent_of(target) / name).string();
}

}  // namespace

StagedDir::StagedDir(const std::string& target_str) {
  ENCORE_CHECK(!target_str.empty(), "output directory: empty path");
  target_ = fs::path(target_str);
  if (target_.filename().empty()) target_ = target_.parent_path();  // "dir/" -> "dir"
  const fs::path parent = parent_of(target_);
  std::error_code ec;
  ENCORE_CHECK(fs::is_directory(parent, ec), "cannot write '", target_str, "': its parent directory '",
               parent.string(), "' does not exist or is not a directory");
  ENCORE_CHECK(!fs::exists(target_, ec) || fs::is_directory(target_, ec), "cannot write '", target_str,
               "': it exists and is not a directory");
  std::string tmp = sibling_template(target_, ".tmp-");
  if (::mkdtemp(tmp.data()) == nullptr)
    throw Error("cannot write '" + target_str + "': cannot create a directory in '" + parent.string() + "': " + why());
  ::chmod(tmp.c_str(), 0755);
  tmp_ = tmp;
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void StagedDir::write_file(const std::string& name, const std::string& bytes) { write_synced(tmp_ / name, bytes); }

void StagedDir::copy_file(const fs::path& from, const std::string& name) {
  std::ifstream in(from, std::ios::binary);
  ENCORE_CHECK(in.good(), "cannot read '", from.string(), "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ENCORE_CHECK(!in.bad(), "cannot read '", from.string(), "'");
  write_synced(tmp_ / name, bytes);
}

void StagedDir::commit() {
  ENCORE_CHECK(!committed_, "StagedDir: committed twice");
  fsync_path(tmp_, true);  // the directory entries of the new files
  std::error_code ec;
  if (fs::exists(target_, ec)) {
    // Atomic swap: the target is the complete old or the complete new version at every instant.
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS)
        throw Error("cannot replace '" + target_.string() + "': " + why());
      // No RENAME_EXCHANGE on this file system: move the old one aside first (a crash in between leaves it
      // there as .<name>.old-XXXXXX).
      std::string old = sibling_template(target_, ".old-");
      if (::mkdtemp(old.data()) == nullptr || ::rmdir(old.c_str()) != 0 ||
          ::rename(target_.c_str(), old.c_str()) != 0)
        throw Error("cannot replace '" + target_.string() + "': " + why());
      if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
        const std::string err = why();
        ::rename(old.c_str(), target_.c_str());
        throw Error("cannot replace '" + target_.string() + "': " + err);
      }
      tmp_ = old;
    }
    committed_ = true;
    fs::remove_all(tmp_, ec);  // now the previous version
  } else {
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) throw Error("cannot create '" + target_.string() + "': " + why());
    committed_ = true;
  }
  remove_leftovers();
  fsync_path(parent_of(target_), true);
}

void StagedDir::remove_leftovers() const {
  // Staging (or set-aside) directories of saves that were killed: ".<name>.tmp-XXXXXX" / ".<name>.old-XXXXXX".
  const std::string name = target_.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent_of(target_), ec)) {
    const std::string n = e.path().filename().string();
    for (const char* kind : {".tmp-", ".old-"}) {
      const std::string stem = "." + name + kind;
      if (n.size() == stem.size() + 6 && n.compare(0, stem.size(), stem) == 0 && e.is_directory(ec))
        fs::remove_all(e.path(), ec);
    }
  }
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const fs::path p(path), parent = parent_of(p);
  std::string tmp = sibling_template(p, ".tmp-");
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw Error("cannot write '" + path + "': cannot create a file in '" + parent.string() + "': " + why());
  ::close(fd);
  try {
    write_synced(tmp, bytes);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot write '" + path + "': " + why());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_path(parent, true);
}

}  // namespace encore::io
