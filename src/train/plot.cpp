// Rasterises the training curves into an RGB canvas (lines, ticks, a 5x7 bitmap font) and encodes it as PNG.
#include "train/plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>

#include "encore/error.hpp"
#include "io/png.hpp"

namespace encore::train {

namespace {

struct Rgb {
  uint8_t r, g, b;
};
constexpr Rgb kWhite{255, 255, 255}, kBlack{0, 0, 0}, kGrid{225, 225, 225}, kLoss{31, 119, 180},
    kAccuracy{230, 110, 20};

// 5x7 glyphs, one string of 5 cells per row, '#' = ink (only the characters the plot prints).
const std::map<char, std::array<const char*, 7>>& font() {
  static const std::map<char, std::array<const char*, 7>> f = {
      {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
      {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
      {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
      {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
      {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
      {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
      {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
      {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
      {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
      {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
      {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
      {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
      {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
      {' ', {".....", ".....", ".....", ".....", ".....", ".....", "....."}},
      {'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}},
      {'c', {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."}},
      {'d', {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}},
      {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
      {'g', {".....", ".####", "#...#", "#...#", ".####", "....#", ".###."}},
      {'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
      {'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}},
      {'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
      {'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
      {'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}},
      {'p', {".....", ".....", "####.", "#...#", "####.", "#....", "#...."}},
      {'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}},
      {'s', {".....", ".....", ".####", "#....", ".###.", "....#", "####."}},
      {'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}},
      {'u', {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}},
      {'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
      {'y', {".....", ".....", "#...#", "#...#", ".####", "....#", ".###."}},
  };
  return f;
}

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h * 3, 255) {}
  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
    p[0] = c.r, p[1] = c.g, p[2] = c.b;
  }
  void fill(int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = y0; y <= y1; ++y)
      for (int x = x0; x <= x1; ++x) set(x, y, c);
  }
  // Bresenham, `thick` pixels wide (a square brush).
  void line(int x0, int y0, int x1, int y1, Rgb c, int thick = 1) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
      fill(x0 - (thick - 1) / 2, y0 - (thick - 1) / 2, x0 + thick / 2, y0 + thick / 2, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  // Text with its top-left corner at (x, y); each font cell is scale x scale pixels, 1 cell between glyphs.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 2) {
    for (char ch : s) {
      auto it = font().find(ch);
      if (it != font().end())
        for (int r = 0; r < 7; ++r)
          for (int col = 0; col < 5; ++col)
            if (it->second[r][col] == '#')
              fill(x + col * scale, y + r * scale, x + col * scale + scale - 1, y + r * scale + scale - 1, c);
      x += 6 * scale;
    }
  }
  static int text_width(const std::string& s, int scale = 2) { return static_cast<int>(s.size()) * 6 * scale - scale; }
  std::string png() const { return io::encode_png_rgb(w_, h_, px_.data()); }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

// Tick positions at 1, 2 or 5 x 10^k covering [lo, hi] with about `target` intervals, and the decimals to print.
std::vector<double> nice_ticks(double lo, double hi, int target, int& decimals) {
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double step = (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
  decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string format_tick(double v, int decimals) {
  char buf[32];
  if (std::fabs(v) >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, std::fabs(v) < 1e-12 ? 0.0 : v);
  }
  return buf;
}

// One panel: frame, grid, ticks and labels; maps data coordinates to pixels.
struct Panel {
  int left, top, right, bottom;  // plot area in pixels (inclusive)
  double x0, x1, y0, y1;         // data range
  int px(double x) const { return left + static_cast<int>(std::lround((x - x0) / (x1 - x0) * (right - left))); }
  int py(double y) const { return bottom - static_cast<int>(std::lround((y - y0) / (y1 - y0) * (bottom - top))); }

  void draw_axes(Canvas& c, const std::string& title, bool x_labels) const {
    int dx = 0, dy = 0;
    for (double t : nice_ticks(y0, y1, 5, dy)) {
      c.line(left, py(t), right, py(t), kGrid);
      const std::string s = format_tick(t, dy);
      c.line(left - 5, py(t), left, py(t), kBlack);
      c.text(left - 9 - Canvas::text_width(s), py(t) - 7, s, kBlack);
    }
    for (double t : nice_ticks(x0, x1, 6, dx)) {
      c.line(px(t), top, px(t), bottom, kGrid);
      c.line(px(t), bottom, px(t), bottom + 5, kBlack);
      if (x_labels) {
        const std::string s = format_tick(t, dx);
        c.text(px(t) - Canvas::text_width(s) / 2, bottom + 10, s, kBlack);
      }
    }
    c.line(left, top, left, bottom, kBlack);
    c.line(left, bottom, right, bottom, kBlack);
    c.line(right, top, right, bottom, kBlack);
    c.line(left, top, right, top, kBlack);
    c.text(left, top - 20, title, kBlack);  // above the frame, clear of the curve
  }
};

}  // namespace

std::string render_training_plot(const PlotData& d, int width, int height) {
  ENCORE_CHECK(width >= 200 && height >= 150 && width <= 10000 && height <= 10000,
               "plot: size must be between 200x150 and 10000x10000, got ", width, "x", height);
  Canvas c(width, height);
  const bool has_eval = !d.eval_points.empty();
  const int left = 90, right = width - 24, top = 30, bottom_all = height - 56;
  const int split = has_eval ? top + (bottom_all - top) * 62 / 100 : bottom_all;
  // x: optimizer steps 1..N (a single step gets a range around it)
  const double n = static_cast<double>(std::max<size_t>(d.losses.size(), 1));
  double x0 = 1, x1 = std::max(n, 2.0);
  for (auto& [s, _] : d.eval_points) x1 = std::max(x1, static_cast<double>(s));
  double lo = INFINITY, hi = -INFINITY;
  for (double v : d.losses)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (hi - lo < 1e-9 * std::max(1.0, std::fabs(hi))) lo -= 0.5, hi += 0.5;
  const double pad = (hi - lo) * 0.05;
  Panel loss{left, top, right, split - (has_eval ? 20 : 0), x0, x1, std::max(0.0, lo - pad), hi + pad};
  if (lo >= 0 && loss.y0 < 0) loss.y0 = 0;
  loss.draw_axes(c, "training loss", !has_eval);
  for (size_t i = 0; i < d.losses.size(); ++i) {
    if (!std::isfinite(d.losses[i])) continue;
    const int x = loss.px(static_cast<double>(i + 1)), y = loss.py(d.losses[i]);
    if (i > 0 && std::isfinite(d.losses[i - 1]))
      c.line(loss.px(static_cast<double>(i)), loss.py(d.losses[i - 1]), x, y, kLoss, 2);
    else
      c.fill(x - 1, y - 1, x + 1, y + 1, kLoss);
  }
  if (has_eval) {
    Panel acc{left, split + 24, right, bottom_all, x0, x1, 0.0, 1.0};
    acc.draw_axes(c, d.eval_title, true);
    for (size_t i = 0; i < d.eval_points.size(); ++i) {
      const int x = acc.px(static_cast<double>(d.eval_points[i].first)), y = acc.py(d.eval_points[i].second);
      if (i > 0)
        c.line(acc.px(static_cast<double>(d.eval_points[i - 1].first)), acc.py(d.eval_points[i - 1].second), x, y,
               kAccuracy, 2);
      c.fill(x - 4, y - 4, x + 4, y + 4, kAccuracy);
    }
  }
  c.text((left + right) / 2 - Canvas::text_width("step") / 2, height - 22, "step", kBlack);
  return c.png();
}

}  // namespace encore::train
