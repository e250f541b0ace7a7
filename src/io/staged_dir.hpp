// A directory that appears complete or not at all: files are written into a fresh sibling `.<name>.tmp-XXXXXX`
// (each fsynced), and commit() swaps it with the target in one atomic rename (renameat2 RENAME_EXCHANGE when the
// target exists, else a plain rename), then deletes the previous version and fsyncs the parent. A crash at any
// point leaves the target as it was before or as committed; only a stray temporary sibling may remain, which the
// next successful commit to the same target removes.
//
//   encore::io::StagedDir d("runs/ckpt");
//   d.write_file("config.json", text);
//   encore::io::write_safetensors(d.file("model.safetensors"), tensors);   // (fsyncs itself)
//   d.commit();
#pragma once
#include <filesystem>
#include <string>

namespace encore::io {

class StagedDir {
 public:
  // Throws encore::Error naming `target` when its parent directory is missing or not writable, or when
  // `target` exists and is not a directory.
  explicit StagedDir(const std::string& target);
  ~StagedDir();  // removes the temporary directory unless committed
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  std::string file(const std::string& name) const { return (tmp_ / name).string(); }
  void write_file(const std::string& name, const std::string& bytes);  // written and fsynced
  void copy_file(const std::filesystem::path& from, const std::string& name);
  void commit();

 private:
  void remove_leftovers() const;
  std::filesystem::path target_, tmp_;
  bool committed_ = false;
};

// Writes `bytes` to `path` through a temporary file in the same directory, fsynced and renamed into place.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace encore::io
