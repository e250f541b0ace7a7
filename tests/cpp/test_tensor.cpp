// Tensor core: views, copies, memory accounting and error messages.
#include <gtest/gtest.h>

#include "encore/nn.hpp"
#include "encore/tensor.hpp"

using encore::Shape;
using encore::Tensor;

TEST(Tensor, StorageIs64ByteAligned) {
  for (int64_t n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  }
}

TEST(Tensor, ViewsShareStorageAndCopiesDoNot) {
  Tensor t = Tensor::zeros({2, 3, 4});
  for (int64_t i = 0; i < 24; ++i) t.data<float>()[i] = float(i);
  Tensor s = t.select(0, 1);  // (3, 4) starting at 12
  EXPECT_EQ(s.shape(), (Shape{3, 4}));
  EXPECT_EQ(s.data<float>()[0], 12.f);
  Tensor tr = t.transpose(1, 2);  // (2, 4, 3), non-contiguous
  EXPECT_FALSE(tr.is_contiguous());
  Tensor c = tr.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  // c[0][1][2] = t[0][2][1] = 9
  EXPECT_EQ(c.data<float>()[1 * 3 + 2], 9.f);
  Tensor sl = t.slice(2, 1, 3);  // (2, 3, 2)
  Tensor slc = sl.contiguous();
  EXPECT_EQ(slc.data<float>()[0], 1.f);
  EXPECT_EQ(slc.data<float>()[1], 2.f);
  EXPECT_EQ(slc.data<float>()[2], 5.f);
  s.data<float>()[0] = -1.f;
  EXPECT_EQ(t.data<float>()[12], -1.f);
  Tensor cl = t.clone();
  cl.data<float>()[12] = 5.f;
  EXPECT_EQ(t.data<float>()[12], -1.f);
  EXPECT_EQ(t.view({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3, 4}));
}

TEST(Tensor, MemoryStatsTrackLiveAndPeakBytes) {
  encore::reset_peak_memory();
  const auto before = encore::memory_stats();
  {
    Tensor a = Tensor::empty({1000});
    Tensor b = Tensor::empty({500});
    EXPECT_EQ(encore::memory_stats().current_bytes - before.current_bytes, 6000);
  }
  EXPECT_EQ(encore::memory_stats().current_bytes, before.current_bytes);
  EXPECT_EQ(encore::memory_stats().peak_bytes - before.current_bytes, 6000);
}

TEST(Tensor, ErrorsNameTheArgumentAndShape) {
  Tensor t = Tensor::zeros({2, 5, 60});
  try {
    encore::check_shape(t, "src", {-1, -1, 64});
    FAIL() << "expected an error";
  } catch (const encore::Error& e) {
    EXPECT_NE(std::string(e.what()).find("src: expected shape (*, *, 64), got (2, 5, 60)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.view({7, -1}), encore::Error);
  EXPECT_THROW(t.slice(1, 3, 9), encore::Error);
  EXPECT_THROW(Tensor::empty({-1}), encore::Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 30, int64_t{1} << 30}), encore::Error);  // rejected before allocating
}

TEST(Layers, ModuleErrorsNameKeysAndShapes) {
  encore::nn::TransformerEncoderLayer layer(16, 4, 32);
  auto sd = layer.state_dict();
  sd["linear1.weight"] = Tensor::zeros({32, 15});
  try {
    layer.load_state_dict(sd);
    FAIL();
  } catch (const encore::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'linear1.weight': expected (32, 16), got (32, 15)"), std::string::npos) << e.what();
  }
  sd = layer.state_dict();
  sd.erase("norm2.bias");
  sd["bogus"] = Tensor::zeros({1});
  try {
    layer.load_state_dict(sd);
    FAIL();
  } catch (const encore::Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("missing key(s): 'norm2.bias'"), std::string::npos) << w;
    EXPECT_NE(w.find("unexpected key(s): 'bogus'"), std::string::npos) << w;
  }
  EXPECT_THROW(layer.forward(Tensor::zeros({3, 2, 15})), encore::Error);
  EXPECT_THROW(encore::nn::MultiheadAttention(10, 3), encore::Error);  // 10 % 3 != 0
  EXPECT_THROW(encore::nn::TransformerEncoderLayer(16, 4, 32, 0.1, "tanh"), encore::Error);
}

TEST(Layers, DeepCopiedStackLayersDoNotShareStorage) {
  encore::nn::TransformerEncoderLayer layer(8, 2, 16);
  encore::nn::TransformerEncoder enc(layer, 3);
  auto sd = enc.state_dict();
  EXPECT_EQ(sd.size(), 3 * layer.state_dict().size());
  EXPECT_NE(sd["layers.0.linear1.weight"].raw_data(), sd["layers.1.linear1.weight"].raw_data());
  encore::nn::TransformerEncoder shared(layer, 3, std::nullopt, /*share_parameters=*/true);
  EXPECT_EQ(shared.state_dict().size(), layer.state_dict().size());  // ALBERT-style: one set of weights
}
