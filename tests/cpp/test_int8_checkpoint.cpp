// The safetensors writer (read back by our reader; the Python safetensors library reads it in
// tests/python/test_int8.py) and the int8 weight form a quantized checkpoint stores.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "encore/error.hpp"
#include "io/safetensors.hpp"
#include "io/safetensors_writer.hpp"
#include "kernels/kernels.hpp"

using namespace encore;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("encore_int8_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(SafetensorsWriter, RoundTripsEveryDtypeAligned) {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "t.safetensors").string();
  std::vector<float> f = {1.5f, -2.f, 3.25f, 0.f, 7.f, -1e-30f};
  std::vector<int8_t> q = {-127, 0, 5, 127, -1};  // odd byte count, written last
  std::vector<int64_t> ids = {0, 1, 1ll << 40};
  std::vector<float> empty;
  io::write_safetensors(path,
                        {{"z.int8", io::StDType::I8, {5}, q.data(), 5},
                         {"a.f32", io::StDType::F32, {2, 3}, f.data(), 24},
                         {"m.ids", io::StDType::I64, {3}, ids.data(), 24},
                         {"e.empty", io::StDType::F32, {0, 4}, empty.data(), 0}},
                        {{"format", "pt"}});
  auto st = io::SafetensorsFile::open(path);
  EXPECT_EQ(st->metadata().at("format"), "pt");
  Tensor a = st->get_f32("a.f32");
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(a.data<float>(), f.data(), 24), 0);
  Tensor i = st->get_i64("m.ids");
  EXPECT_EQ(i.data<int64_t>()[2], 1ll << 40);
  Tensor z = st->get_i8("z.int8");
  EXPECT_EQ(std::memcmp(z.data<int8_t>(), q.data(), 5), 0);
  EXPECT_EQ(st->get_f32("e.empty").shape(), (Shape{0, 4}));
  for (auto& [name, info] : st->tensors())  // every tensor starts at a multiple of its element size
    EXPECT_EQ(info.begin % io::st_dtype_bytes(info.dtype), 0u) << name;
  // the data section starts at a multiple of 8
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  EXPECT_THROW(st->get_i8("a.f32"), Error);
  fs::remove_all(dir);
}

TEST(SafetensorsWriter, RefusesBadInputAndLeavesTheOldFile) {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "t.safetensors").string();
  std::vector<float> f(6, 1.f);
  io::write_safetensors(path, {{"w", io::StDType::F32, {6}, f.data(), 24}});
  const auto before = fs::file_size(path);
  EXPECT_THROW(io::write_safetensors(path, {{"w", io::StDType::F32, {2, 3}, f.data(), 20}}), Error);  // size
  EXPECT_THROW(io::write_safetensors(path, {{"w", io::StDType::F32, {6}, f.data(), 24},
                                            {"w", io::StDType::F32, {6}, f.data(), 24}}),
               Error);  // duplicate
  EXPECT_THROW(io::write_safetensors(path, {{"__metadata__", io::StDType::F32, {6}, f.data(), 24}}), Error);
  EXPECT_THROW(io::write_safetensors((dir / "missing" / "t.safetensors").string(),
                                     {{"w", io::StDType::F32, {6}, f.data(), 24}}),
               Error);  // no such directory
  EXPECT_EQ(fs::file_size(path), before);
  EXPECT_EQ(io::SafetensorsFile::open(path)->get_f32("w").numel(), 6);
  for (auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "t.safetensors") << "temporary left";
  fs::remove_all(dir);
}

TEST(Int8Checkpoint, StoredWeightsRequantizeToThemselves) {
  // What encore quantize stores and reads back: dequantize_linear_int8 then quantize_linear_int8 is the
  // identity on the int8 form, so a quantized checkpoint runs bit for bit like on-the-fly quantization.
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.f, 0.04f);
  int exact = 0, total = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t N = 48 + trial, K = 96 + 7 * trial;
    std::vector<float> w(N * K);
    for (auto& v : w) v = d(rng);
    for (int64_t n = 0; n < N; ++n) w[n * K + (trial * 5) % K] *= 30.f + trial;  // an outlier column
    const kernels::Int8Weights qw = kernels::quantize_linear_int8(w.data(), N, K);
    EXPECT_EQ(qw.columns.size(), 1u) << trial;
    exact += kernels::int8_round_trip_exact(qw);
    ++total;
  }
  EXPECT_EQ(exact, total);
}
