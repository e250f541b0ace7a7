// ByteTrie: a static byte trie in two flat arrays (nodes, sorted edges) for common-prefix search: all keys
// that are prefixes of text[pos..], shortest first, or only the longest. Used by Unigram's Viterbi (every
// vocab piece starting at each position), WordPiece (the longest vocab entry starting at a position) and the
// added-tokens matcher (leftmost-longest). Memory is ~12 bytes per trie node, so a 250k-piece vocabulary
// costs a few MB.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace encore::tok {

class ByteTrie {
 public:
  ByteTrie() = default;
  // value of a key = its index in `keys`; for duplicate keys the last index wins.
  explicit ByteTrie(const std::vector<std::string>& keys) : ByteTrie(std::vector<std::string_view>(keys.begin(), keys.end())) {}
  // The same over views (the bytes need only live while the constructor runs).
  explicit ByteTrie(const std::vector<std::string_view>& keys) {
    const std::vector<uint32_t> order = sorted_order(keys);
    size_t bytes = 0;  // every node but the root is the last byte of some key's prefix: at most this many
    for (std::string_view k : keys) bytes += k.size();
    nodes_.reserve(bytes + 1);
    edges_.reserve(bytes);
    nodes_.push_back(Node{});
    std::vector<Group> groups;
    build(keys, order, groups, 0, 0, order.size(), 0);
    for (uint32_t e = 0; e < nodes_[0].n_edges; ++e) starts_[edges_[e].label] = true;
  }

  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  static constexpr uint32_t kRoot = 0;

  // The node reached from `node` by the bytes of `s`, or kNone.
  uint32_t walk(std::string_view s, uint32_t node = kRoot) const {
    if (nodes_.empty()) return kNone;
    for (size_t i = 0; i < s.size() && node != kNone; ++i) node = child(node, static_cast<uint8_t>(s[i]));
    return node;
  }

  // The longest non-empty text[pos, end) such that (the bytes leading to `from`) + text[pos, end) is a key:
  // {end, value}, or {pos, -1} when there is none.
  std::pair<size_t, int32_t> longest(std::string_view text, size_t pos, uint32_t from = kRoot) const {
    std::pair<size_t, int32_t> best{pos, -1};
    if (from >= nodes_.size()) return best;
    uint32_t node = from;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node == kNone) break;
      if (nodes_[node].value >= 0) best = {i + 1, nodes_[node].value};
    }
    return best;
  }

  // Whether some key starts with byte b (a cheap filter before a search at each position).
  bool can_start(uint8_t b) const { return starts_[b]; }

  // Calls f(end_pos, value) for each key equal to text[pos, end_pos), in increasing end_pos.
  template <class F>
  void prefixes(std::string_view text, size_t pos, F&& f) const {
    if (nodes_.empty()) return;
    uint32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node == kNone) return;
      if (nodes_[node].value >= 0) f(i + 1, static_cast<uint32_t>(nodes_[node].value));
    }
  }

  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    int32_t value = -1;
    uint32_t first_edge = 0;
    uint32_t n_edges = 0;
  };
  struct Edge {
    uint8_t label;
    uint32_t child;
  };
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::array<bool, 256> starts_{};

  uint32_t child(uint32_t node, uint8_t c) const {
    const Node& n = nodes_[node];
    const Edge* b = edges_.data() + n.first_edge;
    const Edge* e = b + n.n_edges;
    const Edge* it = std::lower_bound(b, e, c, [](const Edge& x, uint8_t v) { return x.label < v; });
    return (it != e && it->label == c) ? it->child : kNone;
  }

  struct Group {
    uint8_t label;
    size_t lo, hi;
  };

  // Indices of `keys` in the order of std::stable_sort by bytewise (unsigned) comparison, without comparing
  // 30k strings ~15 times each (that sort was ~40% of Tokenizer.load for a BERT vocabulary): an LSD radix sort,
  // stable, of each key's first 8 bytes read big-endian (zero-padded), then a stable comparison sort inside
  // each run of equal prefixes (keys sharing 8 bytes, or short keys equal up to padding), usually a few keys.
  static std::vector<uint32_t> sorted_order(const std::vector<std::string_view>& keys) {
    const size_t n = keys.size();
    std::vector<uint64_t> prefix(n);
    for (size_t i = 0; i < n; ++i) {
      uint64_t p = 0;
      const size_t m = std::min<size_t>(8, keys[i].size());
      for (size_t b = 0; b < m; ++b) p |= uint64_t{static_cast<uint8_t>(keys[i][b])} << (56 - 8 * b);
      prefix[i] = p;
    }
    std::vector<uint32_t> order(n), tmp(n);
    std::iota(order.begin(), order.end(), 0u);
    for (int shift = 0; shift < 64; shift += 8) {
      std::array<size_t, 257> start{};
      for (uint32_t k : order) ++start[((prefix[k] >> shift) & 0xFF) + 1];
      if (std::count(start.begin() + 1, start.end(), n) == 1) continue;  // every key has the same byte here
      for (size_t b = 1; b < 257; ++b) start[b] += start[b - 1];
      for (uint32_t k : order) tmp[start[(prefix[k] >> shift) & 0xFF]++] = k;
      order.swap(tmp);
    }
    for (size_t lo = 0; lo < n;) {
      size_t hi = lo + 1;
      while (hi < n && prefix[order[hi]] == prefix[order[lo]]) ++hi;
      if (hi - lo > 1)
        std::stable_sort(order.begin() + static_cast<ptrdiff_t>(lo), order.begin() + static_cast<ptrdiff_t>(hi),
                         [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
      lo = hi;
    }
    return order;
  }

  // keys[order[lo..hi)] share their first `depth` bytes and are sorted. `groups` is scratch shared by the
  // recursion: this node's child groups are appended at its end and removed before returning.
  void build(const std::vector<std::string_view>& keys, const std::vector<uint32_t>& order, std::vector<Group>& groups,
             uint32_t node, size_t lo, size_t hi, size_t depth) {
    size_t i = lo;
    while (i < hi && keys[order[i]].size() == depth) {
      nodes_[node].value = static_cast<int32_t>(order[i]);  // stable order: the last duplicate wins
      ++i;
    }
    const size_t g0 = groups.size();
    while (i < hi) {
      const auto label = static_cast<uint8_t>(keys[order[i]][depth]);
      size_t j = i + 1;
      while (j < hi && static_cast<uint8_t>(keys[order[j]][depth]) == label) ++j;
      groups.push_back({label, i, j});
      i = j;
    }
    const size_t n_groups = groups.size() - g0;
    nodes_[node].first_edge = static_cast<uint32_t>(edges_.size());
    nodes_[node].n_edges = static_cast<uint32_t>(n_groups);
    for (size_t k = 0; k < n_groups; ++k) edges_.push_back({groups[g0 + k].label, 0});
    for (size_t k = 0; k < n_groups; ++k) {
      const auto child_id = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(Node{});
      edges_[nodes_[node].first_edge + k].child = child_id;
      const Group g = groups[g0 + k];  // a copy: the child's groups may reallocate the scratch
      build(keys, order, groups, child_id, g.lo, g.hi, depth + 1);
    }
    groups.resize(g0);
  }
};

}  // namespace encore::tok
