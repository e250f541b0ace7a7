// The training plot as SVG: text, axes and curves as vector elements any browser or viewer shows.
#include "train/plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "encore/error.hpp"

namespace encore::train {

namespace {

constexpr const char* kLossColour = "#1f77b4";
constexpr const char* kAccuracyColour = "#e66e14";

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Coordinates with two decimals: exact enough to read a value back to 1e-4 of a panel's range.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

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
  if (std::fabs(v) >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1e", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

// One panel: frame, grid, ticks and labels; maps data coordinates to SVG user units (y grows downwards).
struct Panel {
  double left, top, right, bottom;  // plot area
  double x0, x1, y0, y1;            // data range
  double px(double x) const { return left + (x - x0) / (x1 - x0) * (right - left); }
  double py(double y) const { return bottom - (y - y0) / (y1 - y0) * (bottom - top); }

  // <g id="id"> with the frame, grid, ticks, tick labels, the title above and the y-axis label at the left.
  std::string axes(const std::string& id, const std::string& title, const std::string& y_label, bool x_labels) const {
    std::string s = "<g id=\"" + id + "\">\n";
    s += "<text class=\"title\" x=\"" + num(left) + "\" y=\"" + num(top - 10) + "\" font-size=\"15\">" +
         xml_escape(title) + "</text>\n";
    int dx = 0, dy = 0;
    for (double t : nice_ticks(y0, y1, 5, dy)) {
      const std::string y = num(py(t));
      s += "<line class=\"grid\" x1=\"" + num(left) + "\" y1=\"" + y + "\" x2=\"" + num(right) + "\" y2=\"" + y +
           "\" stroke=\"#e1e1e1\"/>\n";
      s += "<line class=\"tick\" x1=\"" + num(left - 5) + "\" y1=\"" + y + "\" x2=\"" + num(left) + "\" y2=\"" + y +
           "\" stroke=\"black\"/>\n";
      s += "<text class=\"ytick\" x=\"" + num(left - 8) + "\" y=\"" + y +
           "\" text-anchor=\"end\" dominant-baseline=\"middle\">" + format_tick(t, dy) + "</text>\n";
    }
    for (double t : nice_ticks(x0, x1, 6, dx)) {
      const std::string x = num(px(t));
      s += "<line class=\"grid\" x1=\"" + x + "\" y1=\"" + num(top) + "\" x2=\"" + x + "\" y2=\"" + num(bottom) +
           "\" stroke=\"#e1e1e1\"/>\n";
      s += "<line class=\"tick\" x1=\"" + x + "\" y1=\"" + num(bottom) + "\" x2=\"" + x + "\" y2=\"" +
           num(bottom + 5) + "\" stroke=\"black\"/>\n";
      if (x_labels)
        s += "<text class=\"xtick\" x=\"" + x + "\" y=\"" + num(bottom + 18) + "\" text-anchor=\"middle\">" +
             format_tick(t, dx) + "</text>\n";
    }
    s += "<rect class=\"frame\" x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(right - left) +
         "\" height=\"" + num(bottom - top) + "\" fill=\"none\" stroke=\"black\"/>\n";
    const double cy = (top + bottom) / 2;
    s += "<text class=\"ylabel\" x=\"20\" y=\"" + num(cy) + "\" text-anchor=\"middle\" transform=\"rotate(-90 20 " +
         num(cy) + ")\">" + xml_escape(y_label) + "</text>\n";
    return s;
  }
};

}  // namespace

std::string render_training_plot(const PlotData& d, int width, int height) {
  ENCORE_CHECK(width >= 200 && height >= 150 && width <= 10000 && height <= 10000,
               "plot: size must be between 200x150 and 10000x10000, got ", width, "x", height);
  const bool has_eval = !d.eval_points.empty();
  const double left = 80, right = width - 24, top = 34, bottom_all = height - 56;
  const double split = has_eval ? top + (bottom_all - top) * 0.6 : bottom_all;
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
  Panel loss{left, top, right, split - (has_eval ? 24 : 0), x0, x1, lo - pad, hi + pad};
  if (lo >= 0 && loss.y0 < 0) loss.y0 = 0;

  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  std::to_string(width) + "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
                  std::to_string(width) + " " + std::to_string(height) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<title>encore train: training loss per optimizer "
                  "step" + (has_eval ? ", " + xml_escape(d.eval_title) : std::string()) + "</title>\n" +
                  "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += loss.axes("loss-panel", "training loss", "loss", !has_eval);
  // The loss per step as polylines (a non-finite loss breaks the line; a lone finite point is a dot).
  std::string points;
  size_t run = 0;
  auto flush = [&]() {
    if (run == 1) {
      const size_t comma = points.find(',');
      s += "<circle class=\"loss-point\" cx=\"" + points.substr(0, comma) + "\" cy=\"" +
           points.substr(comma + 1, points.size() - comma - 2) + "\" r=\"1.5\" fill=\"" + kLossColour + "\"/>\n";
    } else if (run > 1) {
      points.pop_back();
      s += "<polyline class=\"loss\" fill=\"none\" stroke=\"" + std::string(kLossColour) +
           "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
    }
    points.clear();
    run = 0;
  };
  for (size_t i = 0; i < d.losses.size(); ++i) {
    if (!std::isfinite(d.losses[i])) {
      flush();
      continue;
    }
    points += num(loss.px(static_cast<double>(i + 1))) + "," + num(loss.py(d.losses[i])) + " ";
    ++run;
  }
  flush();
  s += "</g>\n";
  if (has_eval) {
    Panel acc{left, split + 28, right, bottom_all, x0, x1, 0.0, 1.0};
    s += acc.axes("eval-panel", d.eval_title, "accuracy", true);
    std::string pts;
    for (const auto& [step, a] : d.eval_points) {
      pts += (pts.empty() ? "" : " ") + num(acc.px(static_cast<double>(step))) + "," + num(acc.py(a));
      s += "<circle class=\"eval-point\" cx=\"" + num(acc.px(static_cast<double>(step))) + "\" cy=\"" +
           num(acc.py(a)) + "\" r=\"4\" fill=\"" + kAccuracyColour + "\"><title>step " + std::to_string(step) +
           ": " + format_tick(a, 4) + "</title></circle>\n";
    }
    if (d.eval_points.size() > 1)
      s += "<polyline class=\"eval\" fill=\"none\" stroke=\"" + std::string(kAccuracyColour) +
           "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    s += "</g>\n";
  }
  s += "<text class=\"xlabel\" x=\"" + num((left + right) / 2) + "\" y=\"" + num(height - 16.0) +
       "\" text-anchor=\"middle\">optimizer step</text>\n</svg>\n";
  return s;
}

}  // namespace encore::train
