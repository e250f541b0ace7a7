// SentenceEncoder::encode is const and documented to run concurrently (include/encore/sentence_encoder.hpp):
// several threads encoding with one encoder get what one thread gets. Also the tier scripts/test_sanitizers.sh
// runs under ThreadSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "encore/sentence_encoder.hpp"

namespace {

using namespace encore;

// Max |a - b| over two (n, dim) float tensors of the same shape.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::abs(double(a.data<float>()[i]) - double(b.data<float>()[i])));
  return worst;
}

// Four threads, one encoder, the same texts and options as the serial run, three rounds each. Tolerance 1e-6 max
// abs (as the engine test): the same batches run the same kernels, so any larger difference is shared state.
TEST(SentenceEncoder, ConcurrentEncodeFromThreadsMatchesSerial) {
  const SentenceEncoder enc = SentenceEncoder::load(default_model_dir());
  const std::vector<std::string> texts = {"A man is eating food.", "Someone is eating.", "x",
                                          "The new movie is awesome, and the review of it goes on and on and on",
                                          "Two dogs play in the snow.", "\xc3\xbcn\xc3\xaf" "c\xc3\xb8" "d\xc3\xa9"};
  EncodeOptions opt;
  opt.batch_size = 2;
  const Tensor expected = enc.encode(texts, opt);
  std::vector<double> worst(4, 0.0);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int round = 0; round < 3; ++round)
          worst[t] = std::max(worst[t], max_abs_diff(enc.encode(texts, opt), expected));
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_LE(worst[t], 1e-6) << "thread " << t;
  }
}

}  // namespace
