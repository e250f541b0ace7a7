// Unigram (SentencePiece) model: the most likely segmentation of a word under the piece log-probabilities,
// by Viterbi over byte positions, as HF's encode_optimized (itself sentencepiece's unigram_model.cc):
//   best[end] = max over pieces p = word[start, end) of best[start] + score(p)
// with an unknown char (no piece of exactly that char) scored min_score - 10. The trie yields the pieces
// starting at each position, so the cost is O(length x longest piece).
#include <algorithm>
#include <cstdio>
#include <memory>

#include "tokenizer/json_util.hpp"
#include "tokenizer/models.hpp"
#include "tokenizer/trie.hpp"
#include "tokenizer/word_cache.hpp"

namespace encore::tok {

namespace {

constexpr double kUnkPenalty = 10.0;

class Unigram final : public Model {
 public:
  Unigram(std::vector<std::string> pieces, std::vector<double> scores, std::optional<int64_t> unk_id,
          bool byte_fallback)
      : pieces_(std::move(pieces)), scores_(std::move(scores)), unk_id_(unk_id), byte_fallback_(byte_fallback),
        trie_(pieces_) {
    min_score_ = 0.0;
    bool first = true;
    to_id_.reserve(pieces_.size());
    for (size_t i = 0; i < pieces_.size(); ++i) {
      to_id_[pieces_[i]] = static_cast<int64_t>(i);
      if (first || scores_[i] < min_score_) min_score_ = scores_[i];
      first = false;
    }
  }

  void tokenize(std::string_view word, std::vector<Token>& out) const override {
    std::vector<Piece> scratch;
    for (const Piece& piece : cache_.get(word, [this](std::string_view w) { return encode(w); }, scratch)) {
      const std::string_view text = word.substr(piece.begin, piece.end - piece.begin);
      const Offsets offsets{piece.begin, piece.end};
      if (!piece.unknown) {
        out.push_back(Token{piece.id, std::string(text), offsets});
        continue;
      }
      if (auto it = to_id_.find(text); it != to_id_.end()) {
        out.push_back(Token{it->second, std::string(text), offsets});
        continue;
      }
      if (byte_fallback_) {
        const size_t first = out.size();
        char code[8];
        for (unsigned char b : text) {
          std::snprintf(code, sizeof code, "<0x%02X>", b);
          auto bt = to_id_.find(std::string_view(code));
          if (bt == to_id_.end()) break;
          out.push_back(Token{bt->second, code, offsets});
        }
        if (out.size() - first == text.size()) continue;
        out.resize(first);
      }
      if (!unk_id_) throw Error("Unigram: \"" + std::string(text) + "\" is not in the vocabulary and the model has no unk_id");
      out.push_back(Token{*unk_id_, std::string(text), offsets});
    }
  }

  std::optional<int64_t> token_to_id(std::string_view t) const override {
    auto it = to_id_.find(t);
    if (it == to_id_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(int64_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return std::nullopt;
    return pieces_[static_cast<size_t>(id)];
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  std::string type() const override { return "Unigram"; }
  std::optional<int64_t> unk_token_id() const override { return unk_id_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::optional<int64_t> unk_id_;
  bool byte_fallback_;
  ByteTrie trie_;
  StringMap<int64_t> to_id_;
  double min_score_ = 0.0;

  // A piece of the best segmentation: word[begin, end) with its id, or a run of unknown chars (and pieces whose
  // id is unk_id) fused into one, to be looked up by its text.
  struct Piece {
    size_t begin, end;
    int64_t id;
    bool unknown;
  };
  WordCache<std::vector<Piece>> cache_;  // word -> its segmentation

  std::vector<Piece> encode(std::string_view s) const {
    if (s.empty()) return {};
    struct Node {
      int64_t id = -1;
      double score = 0.0;
      size_t start = SIZE_MAX;  // SIZE_MAX: not reached yet
    };
    const size_t n = s.size();
    std::vector<Node> best(n + 1);
    const double unk_score = min_score_ - kUnkPenalty;
    size_t start = 0;
    while (start < n) {
      const double here = best[start].score;
      size_t mblen = 0;
      decode_utf8(s, start, &mblen);
      bool has_single = false;
      // the trie's value of a piece is its id (the last of duplicate pieces, as to_id_)
      trie_.prefixes(s, start, [&](size_t end, uint32_t id) {
        const double cand = scores_[id] + here;
        Node& t = best[end];
        if (t.start == SIZE_MAX || cand > t.score) t = Node{static_cast<int64_t>(id), cand, start};
        if (end - start == mblen) has_single = true;
      });
      if (!has_single) {
        if (!unk_id_) throw Error("Unigram: no piece covers \"" + std::string(s.substr(start, mblen)) +
                                  "\" and the model has no unk_id");
        Node& t = best[start + mblen];
        const double cand = unk_score + here;
        if (t.start == SIZE_MAX || cand > t.score) t = Node{*unk_id_, cand, start};
      }
      start += mblen;
    }
    std::vector<Piece> pieces;  // backwards
    size_t end = n;
    while (end > 0) {
      const Node& node = best[end];
      const bool unknown = unk_id_ && node.id == *unk_id_;
      if (unknown && !pieces.empty() && pieces.back().unknown)
        pieces.back().begin = node.start;  // fused with the unknown run after it
      else
        pieces.push_back(Piece{node.start, end, node.id, unknown});
      end = node.start;
    }
    std::reverse(pieces.begin(), pieces.end());
    return pieces;
  }
};

}  // namespace

std::unique_ptr<Model> make_unigram(const json& j, const std::string& path) {
  const json& vocab = field(j, path, "vocab");
  if (!vocab.is_array()) throw Error(path + ".vocab: expected an array of [piece, score], got " + json_kind(vocab));
  std::vector<std::string> pieces;
  std::vector<double> scores;
  pieces.reserve(vocab.size());
  scores.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const json& e = vocab[i];
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number()) {  // the entry's path only for errors
      pieces.push_back(e[0].get_ref<const std::string&>());
      scores.push_back(e[1].get<double>());
      continue;
    }
    const std::string p = path + ".vocab[" + std::to_string(i) + "]";
    if (!e.is_array() || e.size() != 2) throw Error(p + ": expected [piece, score], got " + e.dump().substr(0, 80));
    pieces.push_back(as_string(e[0], p + "[0]"));
    scores.push_back(as_number(e[1], p + "[1]"));
  }
  std::optional<int64_t> unk_id;
  if (has(j, "unk_id")) {
    unk_id = as_int(j["unk_id"], path + ".unk_id");
    if (*unk_id < 0 || static_cast<size_t>(*unk_id) >= pieces.size())
      throw Error(path + ".unk_id: " + std::to_string(*unk_id) + " is outside the vocabulary of " +
                  std::to_string(pieces.size()));
  }
  return std::make_unique<Unigram>(std::move(pieces), std::move(scores), unk_id, get_bool(j, path, "byte_fallback", false));
}

}  // namespace encore::tok
