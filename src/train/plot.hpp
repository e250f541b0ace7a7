// The training plot `encore train --plot` writes: loss per optimizer step (top panel) and held-out accuracy
// (bottom panel, when there is any), with axes, ticks, tick labels and axis titles, as an SVG document (text,
// lines and polylines: any browser or viewer shows it, and the numbers can be read back). Internal header.
//   <g id="loss-panel">: text.ytick/.xtick tick labels at their ticks, polyline.loss (step i+1, loss i) points
//   <g id="eval-panel">: circle.eval-point per held-out evaluation (step, accuracy)
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace encore::train {

struct PlotData {
  std::vector<double> losses;                           // losses[i]: optimizer step i + 1
  std::vector<std::pair<int64_t, double>> eval_points;  // (optimizer step, accuracy in [0, 1])
  std::string eval_title = "held-out accuracy";          // the lower panel's title (any text)
};

// The SVG file's text; width x height user units (at least 200 x 150).
std::string render_training_plot(const PlotData& data, int width = 800, int height = 560);

}  // namespace encore::train
