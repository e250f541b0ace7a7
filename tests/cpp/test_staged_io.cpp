// src/io pieces of training checkpoints: the PNG encoder's checksums (against the published check values of
// CRC-32 and Adler-32) and StagedDir's all-or-nothing directory replacement. The PNG as a whole is decoded with
// zlib in tests/python/test_train_checkpoint.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "encore/error.hpp"
#include "io/png.hpp"
#include "io/staged_dir.hpp"

using namespace encore;
namespace fs = std::filesystem;

namespace {

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

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

TEST(Png, ChecksumsMatchTheirCheckValues) {
  // CRC-32/ISO-HDLC check value (RFC 1952's CRC) and the Adler-32 example of RFC 1950's literature.
  EXPECT_EQ(io::crc32(bytes("123456789"), 9), 0xCBF43926u);
  EXPECT_EQ(io::adler32(bytes("Wikipedia"), 9), 0x11E60398u);
  // Incremental use equals one pass.
  EXPECT_EQ(io::crc32(bytes("6789"), 4, io::crc32(bytes("12345"), 5)), 0xCBF43926u);
  EXPECT_EQ(io::adler32(bytes("pedia"), 5, io::adler32(bytes("Wiki"), 4)), 0x11E60398u);
}

TEST(Png, LayoutAndMultipleStoredBlocks) {
  // 200 x 120 RGB = 72,120 bytes of scanlines: two stored blocks (65,535 + the rest).
  const int w = 200, h = 120;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7);
  const std::string png = io::encode_png_rgb(w, h, rgb.data());
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  const size_t raw = static_cast<size_t>(w * 3 + 1) * h;
  // signature 8 + IHDR 25 + IDAT (12 + zlib: 2 + 2 x 5 block headers + raw + 4) + IEND 12
  EXPECT_EQ(png.size(), 8 + 25 + 12 + 2 + 10 + raw + 4 + 12);
  EXPECT_THROW(io::encode_png_rgb(0, 5, rgb.data()), Error);
}

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
