// Semantic search over a small corpus: embeds the corpus once, then ranks it for each query by cosine
// similarity (the model normalizes its embeddings, so cosine is a dot product).
//   ./similarity_search [MODEL_DIR]
// Exits 1 if a query's best match is not the expected document (the check scripts/test.sh relies on).
#include <encore/sentence_encoder.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <numeric>

int main(int argc, char** argv) try {
  const encore::SentenceEncoder encoder =
      encore::SentenceEncoder::load(argc > 1 ? argv[1] : encore::default_model_dir());
  const std::vector<std::string> corpus = {
      "A man is eating food.",          "A man is riding a white horse on an enclosed ground.",
      "A monkey is playing drums.",     "Two men pushed carts through the woods.",
      "The new movie is awesome.",      "The cat sits outside.",
      "A woman is playing violin.",     "The stock market fell sharply on Monday.",
  };
  // (query, index of the document it should find first)
  const std::vector<std::pair<std::string, size_t>> queries = {
      {"Someone is having a meal.", 0}, {"A person rides a horse.", 1},
      {"A primate plays percussion.", 2}, {"Shares dropped at the start of the week.", 7}};

  const encore::Tensor docs = encoder.encode(corpus);  // (8, dim)
  std::vector<std::string> query_texts;
  for (const auto& q : queries) query_texts.push_back(q.first);
  const encore::Tensor qs = encoder.encode(query_texts);  // (4, dim)
  const int64_t dim = docs.shape()[1];

  int failures = 0;
  for (size_t q = 0; q < queries.size(); ++q) {
    std::vector<float> scores(corpus.size());
    for (size_t d = 0; d < corpus.size(); ++d) {
      const float* a = qs.data<float>() + q * dim;
      const float* b = docs.data<float>() + d * dim;
      scores[d] = std::inner_product(a, a + dim, b, 0.0f);
    }
    std::vector<size_t> order(corpus.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return scores[x] > scores[y]; });
    std::printf("query: %s\n", queries[q].first.c_str());
    for (size_t k = 0; k < 3; ++k) std::printf("  %.4f  %s\n", scores[order[k]], corpus[order[k]].c_str());
    if (order[0] != queries[q].second) {
      std::fprintf(stderr, "similarity_search: expected \"%s\" first\n", corpus[queries[q].second].c_str());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "similarity_search: %s\n", e.what());
  return 1;
}
