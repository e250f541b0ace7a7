// src/io pieces of training checkpoints: StagedDir's all-or-nothing directory replacement. (The training plot is
// SVG, read back by tests/python/test_train_checkpoint.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "encore/error.hpp"
#include "io/staged_dir.hpp"

using namespace encore;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fs::path fresh_dir() {
  std::random_device rd;
  fs::path d = fs::temp_directory_path() / ("encore-staged-" + std::to_string(rd()));
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(StagedDir, ReplacesWholeOrNotAtAll) {
  const fs::path root = fresh_dir(), target = root / "ckpt";
  {
    io::StagedDir d(target.string());
    d.write_file("a.txt", "one");
    d.commit();
  }
  EXPECT_EQ(slurp(target / "a.txt"), "one");
  {
    io::StagedDir d(target.string());
    d.write_file("b.txt", "two");
    // not committed: the target is untouched and the staging directory disappears
  }
  EXPECT_EQ(slurp(target / "a.txt"), "one");
  EXPECT_FALSE(fs::exists(target / "b.txt"));
  {
    io::StagedDir d(target.string());
    d.write_file("b.txt", "two");
    d.commit();
  }
  EXPECT_FALSE(fs::exists(target / "a.txt"));  // replaced as a whole, not merged
  EXPECT_EQ(slurp(target / "b.txt"), "two");
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);  // no staging or previous version left beside it
  std::ofstream(root / "file") << "x";
  EXPECT_THROW(io::StagedDir((root / "file").string()), Error);          // exists, not a directory
  EXPECT_THROW(io::StagedDir((root / "file" / "sub").string()), Error);  // parent is a file
  EXPECT_THROW(io::StagedDir((root / "no" / "such").string()), Error);
  fs::remove_all(root);
}
