// Backtracking regex over code points, and the hand-written GPT-2 split: see regex.hpp.
#include "tokenizer/regex.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <functional>

#include "encore/error.hpp"

namespace encore::tok {

// --- char sets ------------------------------------------------------------------------------------------

namespace {

enum class Cls { any_but_newline, space, digit, word, word_in_class, hspace, category };

struct ClassItem {
  Cls kind;
  bool negate = false;
  uint32_t cat_mask = 0;  // bit per utf8proc category, for Cls::category
};

bool class_item_matches(const ClassItem& it, char32_t c) {
  bool r = false;
  switch (it.kind) {
    case Cls::any_but_newline:
      r = c != U'\n';
      break;
    case Cls::space:
      r = is_whitespace(c);
      break;
    case Cls::digit:
      r = is_digit(c);
      break;
    case Cls::word:
      r = is_word_char(c);
      break;
    case Cls::word_in_class:  // Oniguruma: inside [...] \w is the Unicode Word property, without the Latin-1
      r = is_word_char(c) && !(c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE));  // table's extras
      break;
    case Cls::hspace:
      r = c == U' ' || c == U'\t' || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x202F ||
          c == 0x205F || c == 0x3000;
      break;
    case Cls::category:
      r = (it.cat_mask >> utf8proc_category(static_cast<utf8proc_int32_t>(c))) & 1u;
      break;
  }
  return r != it.negate;
}

uint32_t cat_bits(std::initializer_list<int> cats) {
  uint32_t m = 0;
  for (int c : cats) m |= 1u << c;
  return m;
}

// \p{NAME} -> category mask, or 0 when unknown.
uint32_t category_mask(std::string name) {
  name.erase(std::remove_if(name.begin(), name.end(), [](char ch) { return ch == '_' || ch == ' ' || ch == '-'; }),
             name.end());
  if (name.size() > 2 && (name.rfind("Is", 0) == 0)) name = name.substr(2);
  std::string lower;
  for (char ch : name) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  using namespace std;
  if (lower == "l" || lower == "letter")
    return cat_bits({UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM,
                     UTF8PROC_CATEGORY_LO});
  if (lower == "lu" || lower == "uppercaseletter") return cat_bits({UTF8PROC_CATEGORY_LU});
  if (lower == "ll" || lower == "lowercaseletter") return cat_bits({UTF8PROC_CATEGORY_LL});
  if (lower == "lt" || lower == "titlecaseletter") return cat_bits({UTF8PROC_CATEGORY_LT});
  if (lower == "lm" || lower == "modifierletter") return cat_bits({UTF8PROC_CATEGORY_LM});
  if (lower == "lo" || lower == "otherletter") return cat_bits({UTF8PROC_CATEGORY_LO});
  if (lower == "m" || lower == "mark" || lower == "combiningmark")
    return cat_bits({UTF8PROC_CATEGORY_MN, UTF8PROC_CATEGORY_MC, UTF8PROC_CATEGORY_ME});
  if (lower == "mn" || lower == "nonspacingmark") return cat_bits({UTF8PROC_CATEGORY_MN});
  if (lower == "mc" || lower == "spacingmark") return cat_bits({UTF8PROC_CATEGORY_MC});
  if (lower == "me" || lower == "enclosingmark") return cat_bits({UTF8PROC_CATEGORY_ME});
  if (lower == "n" || lower == "number")
    return cat_bits({UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO});
  if (lower == "nd" || lower == "decimalnumber") return cat_bits({UTF8PROC_CATEGORY_ND});
  if (lower == "nl" || lower == "letternumber") return cat_bits({UTF8PROC_CATEGORY_NL});
  if (lower == "no" || lower == "othernumber") return cat_bits({UTF8PROC_CATEGORY_NO});
  if (lower == "p" || lower == "punctuation" || lower == "punct")
    return cat_bits({UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PD, UTF8PROC_CATEGORY_PS, UTF8PROC_CATEGORY_PE,
                     UTF8PROC_CATEGORY_PI, UTF8PROC_CATEGORY_PF, UTF8PROC_CATEGORY_PO});
  if (lower == "pc" || lower == "connectorpunctuation") return cat_bits({UTF8PROC_CATEGORY_PC});
  if (lower == "pd" || lower == "dashpunctuation") return cat_bits({UTF8PROC_CATEGORY_PD});
  if (lower == "ps" || lower == "openpunctuation") return cat_bits({UTF8PROC_CATEGORY_PS});
  if (lower == "pe" || lower == "closepunctuation") return cat_bits({UTF8PROC_CATEGORY_PE});
  if (lower == "pi" || lower == "initialpunctuation") return cat_bits({UTF8PROC_CATEGORY_PI});
  if (lower == "pf" || lower == "finalpunctuation") return cat_bits({UTF8PROC_CATEGORY_PF});
  if (lower == "po" || lower == "otherpunctuation") return cat_bits({UTF8PROC_CATEGORY_PO});
  if (lower == "s" || lower == "symbol")
    return cat_bits({UTF8PROC_CATEGORY_SM, UTF8PROC_CATEGORY_SC, UTF8PROC_CATEGORY_SK, UTF8PROC_CATEGORY_SO});
  if (lower == "sm" || lower == "mathsymbol") return cat_bits({UTF8PROC_CATEGORY_SM});
  if (lower == "sc" || lower == "currencysymbol") return cat_bits({UTF8PROC_CATEGORY_SC});
  if (lower == "sk" || lower == "modifiersymbol") return cat_bits({UTF8PROC_CATEGORY_SK});
  if (lower == "so" || lower == "othersymbol") return cat_bits({UTF8PROC_CATEGORY_SO});
  if (lower == "z" || lower == "separator")
    return cat_bits({UTF8PROC_CATEGORY_ZS, UTF8PROC_CATEGORY_ZL, UTF8PROC_CATEGORY_ZP});
  if (lower == "zs" || lower == "spaceseparator") return cat_bits({UTF8PROC_CATEGORY_ZS});
  if (lower == "zl" || lower == "lineseparator") return cat_bits({UTF8PROC_CATEGORY_ZL});
  if (lower == "zp" || lower == "paragraphseparator") return cat_bits({UTF8PROC_CATEGORY_ZP});
  if (lower == "c" || lower == "other")
    return cat_bits({UTF8PROC_CATEGORY_CN, UTF8PROC_CATEGORY_CC, UTF8PROC_CATEGORY_CF, UTF8PROC_CATEGORY_CS,
                     UTF8PROC_CATEGORY_CO});
  if (lower == "cc" || lower == "control" || lower == "cntrl") return cat_bits({UTF8PROC_CATEGORY_CC});
  if (lower == "cf" || lower == "format") return cat_bits({UTF8PROC_CATEGORY_CF});
  if (lower == "co" || lower == "privateuse") return cat_bits({UTF8PROC_CATEGORY_CO});
  if (lower == "cn" || lower == "unassigned") return cat_bits({UTF8PROC_CATEGORY_CN});
  if (lower == "cs" || lower == "surrogate") return cat_bits({UTF8PROC_CATEGORY_CS});
  return 0;
}

char32_t simple_fold(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }

}  // namespace

// One matcher of a single code point: ranges and classes, possibly negated, possibly case-insensitive.
struct CharSet {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  std::vector<ClassItem> classes;
  bool negate = false;
  bool icase = false;
  bool matches_raw(char32_t c) const {
    for (const auto& [lo, hi] : ranges)
      if (c >= lo && c <= hi) return true;
    for (const ClassItem& it : classes)
      if (class_item_matches(it, c)) return true;
    return false;
  }
  bool matches(char32_t c) const {
    bool r = matches_raw(c);
    if (!r && icase) {
      const char32_t lo = simple_fold(c);
      const char32_t up = static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
      r = (lo != c && matches_raw(lo)) || (up != c && matches_raw(up));
    }
    return r != negate;
  }
};

enum class NodeKind { chars, seq, alt, repeat, look, bol, eol };

struct RegexNode {
  NodeKind kind;
  CharSet set;                     // chars
  std::vector<RegexNode*> kids;    // seq, alt; repeat/look: kids[0]
  int min = 0, max = -1;           // repeat; max -1 = unbounded
  bool greedy = true;              // repeat
  bool negate = false;             // look
};

// --- parser ---------------------------------------------------------------------------------------------

class RegexParser {
 public:
  RegexParser(Regex& re, std::string_view pattern) : re_(re), cps_(to_chars(pattern)) {}

  RegexNode* parse() {
    RegexNode* n = parse_alt();
    if (pos_ != cps_.size()) fail("unbalanced ')'");
    return n;
  }

 private:
  Regex& re_;
  std::vector<char32_t> cps_;
  size_t pos_ = 0;
  bool icase_ = false;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(detail::concat("regex /", re_.pattern_, "/: ", what, " at character ", pos_));
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  char32_t peek(size_t k = 0) const { return pos_ + k < cps_.size() ? cps_[pos_ + k] : 0; }
  RegexNode* make(NodeKind k) {
    re_.nodes_.push_back(std::make_unique<RegexNode>());
    re_.nodes_.back()->kind = k;
    return re_.nodes_.back().get();
  }

  RegexNode* parse_alt() {
    std::vector<RegexNode*> alts{parse_seq()};
    while (!at_end() && peek() == U'|') {
      ++pos_;
      alts.push_back(parse_seq());
    }
    if (alts.size() == 1) return alts[0];
    RegexNode* n = make(NodeKind::alt);
    n->kids = std::move(alts);
    return n;
  }

  RegexNode* parse_seq() {
    RegexNode* n = make(NodeKind::seq);
    while (!at_end() && peek() != U'|' && peek() != U')') {
      RegexNode* atom = parse_atom();
      if (!atom) continue;
      n->kids.push_back(parse_quantifier(atom));
    }
    return n;
  }

  bool parse_int(int* out) {
    size_t start = pos_;
    long v = 0;
    while (!at_end() && peek() >= U'0' && peek() <= U'9') {
      v = v * 10 + static_cast<long>(peek() - U'0');
      if (v > 100000) fail("repetition count too large");
      ++pos_;
    }
    *out = static_cast<int>(v);
    return pos_ > start;
  }

  RegexNode* parse_quantifier(RegexNode* atom) {
    for (;;) {
      int mn = 0, mx = -1;
      const char32_t c = peek();
      if (c == U'*') {
        ++pos_;
      } else if (c == U'+') {
        mn = 1;
        ++pos_;
      } else if (c == U'?') {
        mx = 1;
        ++pos_;
      } else if (c == U'{') {
        const size_t save = pos_;
        ++pos_;
        int a = 0, b = -1;
        const bool has_a = parse_int(&a);
        if (peek() == U',') {
          ++pos_;
          if (!parse_int(&b)) b = -1;
        } else {
          b = a;
        }
        if (!has_a || peek() != U'}') {  // not a quantifier: a literal '{'
          pos_ = save;
          return atom;
        }
        ++pos_;
        if (b >= 0 && b < a) fail("bad repetition range");
        mn = a;
        mx = b;
      } else {
        return atom;
      }
      RegexNode* r = make(NodeKind::repeat);
      r->kids = {atom};
      r->min = mn;
      r->max = mx;
      if (peek() == U'?') {
        r->greedy = false;
        ++pos_;
      } else if (peek() == U'+') {
        ++pos_;  // possessive: treated as greedy
      }
      atom = r;
    }
  }

  RegexNode* chars_node(CharSet set) {
    RegexNode* n = make(NodeKind::chars);
    set.icase = icase_;
    n->set = std::move(set);
    return n;
  }

  RegexNode* parse_atom() {
    const char32_t c = peek();
    if (c == U'(') return parse_group();
    if (c == U'[') return chars_node(parse_class());
    if (c == U'.') {
      ++pos_;
      CharSet s;
      s.classes.push_back({Cls::any_but_newline});
      return chars_node(s);
    }
    if (c == U'^') {
      ++pos_;
      return make(NodeKind::bol);
    }
    if (c == U'$') {
      ++pos_;
      return make(NodeKind::eol);
    }
    if (c == U'*' || c == U'+' || c == U'?') fail("nothing to repeat");
    if (c == U'\\') {
      if (peek(1) == U'A') {
        pos_ += 2;
        return make(NodeKind::bol);
      }
      if (peek(1) == U'z' || peek(1) == U'Z') {
        pos_ += 2;
        return make(NodeKind::eol);
      }
      CharSet s;
      parse_escape(s);
      return chars_node(s);
    }
    ++pos_;
    CharSet s;
    s.ranges.emplace_back(c, c);
    return chars_node(s);
  }

  RegexNode* parse_group() {
    ++pos_;  // (
    const bool saved_icase = icase_;
    RegexNode* look = nullptr;
    if (peek() == U'?') {
      const char32_t k = peek(1);
      if (k == U':') {
        pos_ += 2;
      } else if (k == U'=' || k == U'!') {
        pos_ += 2;
        look = make(NodeKind::look);
        look->negate = k == U'!';
      } else if (k == U'i' || k == U'-') {
        pos_ += 1;
        bool on = true;
        while (!at_end() && peek() != U':' && peek() != U')') {
          if (peek() == U'-')
            on = false;
          else if (peek() == U'i')
            icase_ = on;
          else
            fail("unsupported inline flag");
          ++pos_;
        }
        if (peek() == U')') {  // (?i) applies to the rest of the enclosing group
          ++pos_;
          return nullptr;
        }
        ++pos_;  // ':'
      } else {
        fail("unsupported group syntax (?" + std::string(1, static_cast<char>(k)));
      }
    }
    RegexNode* inner = parse_alt();
    if (peek() != U')') fail("missing ')'");
    ++pos_;
    icase_ = saved_icase;
    if (look) {
      look->kids = {inner};
      return look;
    }
    return inner;
  }

  uint32_t parse_hex(size_t max_digits) {
    uint32_t v = 0;
    size_t n = 0;
    while (n < max_digits && !at_end()) {
      const char32_t h = peek();
      int d = -1;
      if (h >= U'0' && h <= U'9') d = static_cast<int>(h - U'0');
      if (h >= U'a' && h <= U'f') d = static_cast<int>(h - U'a' + 10);
      if (h >= U'A' && h <= U'F') d = static_cast<int>(h - U'A' + 10);
      if (d < 0) break;
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
      ++n;
    }
    if (n == 0) fail("bad hex escape");
    return v;
  }

  // Parses an escape at pos_ ('\\') into `s` (adds a range or a class).
  void parse_escape(CharSet& s, bool in_class = false) {
    ++pos_;  // backslash
    if (at_end()) fail("trailing backslash");
    const char32_t e = peek();
    ++pos_;
    auto lit = [&](char32_t c) { s.ranges.emplace_back(c, c); };
    switch (e) {
      case U'n': return lit(U'\n');
      case U'r': return lit(U'\r');
      case U't': return lit(U'\t');
      case U'f': return lit(U'\f');
      case U'v': return lit(U'\v');
      case U'e': return lit(0x1B);
      case U'a': return lit(0x07);
      case U'0': return lit(0);
      case U's': s.classes.push_back({Cls::space, false}); return;
      case U'S': s.classes.push_back({Cls::space, true}); return;
      case U'd': s.classes.push_back({Cls::digit, false}); return;
      case U'D': s.classes.push_back({Cls::digit, true}); return;
      case U'w': s.classes.push_back({in_class ? Cls::word_in_class : Cls::word, false}); return;
      case U'W': s.classes.push_back({in_class ? Cls::word_in_class : Cls::word, true}); return;
      case U'h': s.classes.push_back({Cls::hspace, false}); return;
      case U'H': s.classes.push_back({Cls::hspace, true}); return;
      case U'x':
        if (peek() == U'{') {
          ++pos_;
          const uint32_t v = parse_hex(8);
          if (peek() != U'}') fail("missing '}' in \\x{...}");
          ++pos_;
          return lit(v);
        }
        return lit(parse_hex(2));
      case U'u': return lit(parse_hex(4));
      case U'p':
      case U'P': {
        std::string name;
        if (peek() == U'{') {
          ++pos_;
          bool neg = false;
          if (peek() == U'^') {
            neg = true;
            ++pos_;
          }
          while (!at_end() && peek() != U'}') {
            name.push_back(static_cast<char>(peek()));
            ++pos_;
          }
          if (at_end()) fail("missing '}' in \\p{...}");
          ++pos_;
          const uint32_t mask = category_mask(name);
          if (!mask) fail("unsupported Unicode property \\p{" + name + "}");
          s.classes.push_back({Cls::category, (e == U'P') != neg, mask});
          return;
        }
        name.push_back(static_cast<char>(peek()));
        ++pos_;
        const uint32_t mask = category_mask(name);
        if (!mask) fail("unsupported Unicode property \\p" + name);
        s.classes.push_back({Cls::category, e == U'P', mask});
        return;
      }
      default:
        if ((e >= U'a' && e <= U'z') || (e >= U'A' && e <= U'Z') || (e >= U'1' && e <= U'9'))
          fail(std::string("unsupported escape \\") + static_cast<char>(e));
        return lit(e);  // escaped punctuation (or any other char) stands for itself
    }
  }

  CharSet parse_class() {
    ++pos_;  // [
    CharSet s;
    if (peek() == U'^') {
      s.negate = true;
      ++pos_;
    }
    bool first = true;
    while (!at_end() && (peek() != U']' || first)) {
      first = false;
      if (peek() == U'[') fail("nested character classes are not supported");
      char32_t lo;
      if (peek() == U'\\') {
        CharSet tmp;
        parse_escape(tmp, /*in_class=*/true);
        if (!tmp.classes.empty()) {
          s.classes.insert(s.classes.end(), tmp.classes.begin(), tmp.classes.end());
          continue;
        }
        lo = tmp.ranges[0].first;
      } else {
        lo = peek();
        ++pos_;
      }
      char32_t hi = lo;
      if (peek() == U'-' && peek(1) != U']' && pos_ + 1 < cps_.size()) {
        ++pos_;
        if (peek() == U'\\') {
          CharSet tmp;
          parse_escape(tmp);
          if (!tmp.classes.empty()) fail("bad range in character class");
          hi = tmp.ranges[0].first;
        } else {
          hi = peek();
          ++pos_;
        }
        if (hi < lo) fail("bad range in character class");
      }
      s.ranges.emplace_back(lo, hi);
    }
    if (at_end()) fail("missing ']'");
    ++pos_;  // ]
    return s;
  }
};

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  if (!is_valid_utf8(pattern)) throw Error("regex: pattern is not valid UTF-8");
  RegexParser p(*this, pattern);
  root_ = p.parse();
}

Regex::~Regex() = default;

// --- matcher --------------------------------------------------------------------------------------------

namespace {

// What to match after the current node: a linked list on the C++ stack. A repeat continuation carries the
// iteration count reached so far.
struct Cont {
  const RegexNode* node;
  const Cont* next;
  int count = -1;         // >= 0: re-enter repeat `node` at this count
  size_t iter_start = 0;  // position where the current repeat iteration started
};

struct Matcher {
  const std::vector<char32_t>& text;
  size_t steps = 0;

  // Continue with k at pos. A repeat continuation re-enters its repeat, unless the iteration just finished
  // matched nothing: then the repeat stops there (no endless empty iterations).
  bool run(const Cont* k, size_t pos, size_t* end) {
    if (!k) {
      *end = pos;
      return true;
    }
    if (k->count >= 0) {
      if (pos == k->iter_start) return run(k->next, pos, end);
      return repeat_from(k->node, k->count, pos, k->next, end);
    }
    return match(k->node, pos, k->next, end);
  }

  // Repeat n has matched `count` iterations ending at pos: try more (greedy first) or stop.
  bool repeat_from(const RegexNode* n, int count, size_t pos, const Cont* k, size_t* end) {
    const bool can_more = n->max < 0 || count < n->max;
    const bool can_stop = count >= n->min;
    Cont again{n, k, count + 1, pos};
    if (n->greedy) {
      if (can_more && match(n->kids[0], pos, &again, end)) return true;
      return can_stop && run(k, pos, end);
    }
    if (can_stop && run(k, pos, end)) return true;
    return can_more && match(n->kids[0], pos, &again, end);
  }

  size_t depth = 0;
  struct DepthGuard {
    size_t& d;
    explicit DepthGuard(size_t& dd) : d(++dd) {}
    ~DepthGuard() { --d; }
  };

  bool match(const RegexNode* n, size_t pos, const Cont* k, size_t* end) {
    // Both limits turn a pathological pattern/input pair into an encore::Error instead of a hang or a stack
    // overflow. Real tokenizer patterns repeat single-char items, which loop instead of recursing.
    if (++steps > 10'000'000) throw Error("regex: match too complex (more than 1e7 backtracking steps at one position)");
    DepthGuard guard(depth);
    if (depth > 10'000) throw Error("regex: pattern recursion too deep for this input (a repeated group over > 10000 chars)");
    switch (n->kind) {
      case NodeKind::chars:
        return pos < text.size() && n->set.matches(text[pos]) && run(k, pos + 1, end);
      case NodeKind::bol:
        return pos == 0 && run(k, pos, end);
      case NodeKind::eol:
        return pos == text.size() && run(k, pos, end);
      case NodeKind::seq: {
        if (n->kids.empty()) return run(k, pos, end);
        std::vector<Cont> frames(n->kids.size(), Cont{nullptr, nullptr});
        const Cont* next = k;
        for (size_t i = n->kids.size(); i-- > 1;) {
          frames[i] = Cont{n->kids[i], next};
          next = &frames[i];
        }
        return match(n->kids[0], pos, next, end);
      }
      case NodeKind::alt:
        for (const RegexNode* a : n->kids)
          if (match(a, pos, k, end)) return true;
        return false;
      case NodeKind::look: {
        size_t e = 0;
        const bool ok = match(n->kids[0], pos, nullptr, &e);
        return ok != n->negate && run(k, pos, end);
      }
      case NodeKind::repeat: {
        const RegexNode* body = n->kids[0];
        if (body->kind != NodeKind::chars) return repeat_from(n, 0, pos, k, end);
        // single-char body: measure the run, then try lengths in order; no recursion per char
        size_t run_len = 0;
        const size_t room = text.size() - pos;
        const size_t limit = n->max < 0 ? room : std::min<size_t>(static_cast<size_t>(n->max), room);
        while (run_len < limit && body->set.matches(text[pos + run_len])) ++run_len;
        const size_t lo = static_cast<size_t>(n->min);
        if (run_len < lo) return false;
        if (n->greedy) {
          for (size_t c = run_len + 1; c-- > lo;)
            if (run(k, pos + c, end)) return true;
        } else {
          for (size_t c = lo; c <= run_len; ++c)
            if (run(k, pos + c, end)) return true;
        }
        return false;
      }
    }
    return false;
  }
};

}  // namespace

std::vector<Offsets> Regex::find_all(std::string_view s) const {
  std::vector<char32_t> cps;
  std::vector<size_t> byte_at;  // byte offset of each code point, plus the end
  cps.reserve(s.size());
  byte_at.reserve(s.size() + 1);
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    byte_at.push_back(i);
    cps.push_back(decode_utf8(s, i, &len));
  }
  byte_at.push_back(s.size());
  std::vector<Offsets> out;
  Matcher m{cps};
  size_t start = 0;
  while (start <= cps.size()) {
    bool found = false;
    for (size_t p = start; p <= cps.size(); ++p) {
      size_t e = 0;
      m.steps = 0;
      if (m.match(root_, p, nullptr, &e)) {
        out.emplace_back(byte_at[p], byte_at[e]);
        start = e > p ? e : p + 1;
        found = true;
        break;
      }
    }
    if (!found) break;
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char ch : literal) {
    if (std::string_view("\\.+*?()|[]{}^$#&-~").find(ch) != std::string_view::npos) out.push_back('\\');
    out.push_back(ch);
  }
  return out;
}

// --- GPT-2 split ----------------------------------------------------------------------------------------

std::vector<Offsets> gpt2_split(std::string_view s) {
  const std::vector<char32_t> cp = to_chars(s);
  const size_t n = cp.size();
  std::vector<Offsets> out;
  size_t byte = 0;  // byte offset of cp[i]
  size_t i = 0;
  auto bytes_of = [&](size_t from, size_t to) {
    size_t b = 0;
    for (size_t k = from; k < to; ++k) b += utf8_len(cp[k]);
    return b;
  };
  auto emit = [&](size_t to) {
    const size_t nb = bytes_of(i, to);
    out.emplace_back(byte, byte + nb);
    byte += nb;
    i = to;
  };
  auto other = [&](char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); };
  while (i < n) {
    const char32_t c = cp[i];
    // 's 't 're 've 'm 'll 'd
    if (c == U'\'' && i + 1 < n) {
      const char32_t a = cp[i + 1];
      if (a == U's' || a == U't' || a == U'm' || a == U'd') {
        emit(i + 2);
        continue;
      }
      if (i + 2 < n && ((a == U'r' && cp[i + 2] == U'e') || (a == U'v' && cp[i + 2] == U'e') ||
                        (a == U'l' && cp[i + 2] == U'l'))) {
        emit(i + 3);
        continue;
      }
    }
    const size_t j = (c == U' ' && i + 1 < n) ? i + 1 : i;  // optional leading space
    //  ?\p{L}+   ?\p{N}+   ?[^\s\p{L}\p{N}]+
    for (auto pred : {+[](char32_t x) { return is_letter(x); }, +[](char32_t x) { return is_number(x); }}) {
      if (j < n && pred(cp[j])) {
        size_t k = j + 1;
        while (k < n && pred(cp[k])) ++k;
        emit(k);
        goto next;
      }
    }
    if (j < n && other(cp[j])) {
      size_t k = j + 1;
      while (k < n && other(cp[k])) ++k;
      emit(k);
      continue;
    }
    if (is_whitespace(c)) {
      size_t k = i + 1;
      while (k < n && is_whitespace(cp[k])) ++k;
      // \s+(?!\S): the run, minus its last char when a non-space follows; else \s+
      if (k < n && k - i > 1)
        emit(k - 1);
      else
        emit(k);
      continue;
    }
    emit(i + 1);  // unreachable: every char is a letter, number, space or other
  next:;
  }
  return out;
}

}  // namespace encore::tok
