// The training plot `encore train --plot` writes: loss per optimizer step (top panel) and held-out accuracy
// (bottom panel, when there is any), with axes, ticks and tick labels, as a PNG (io/png.hpp). Internal header.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace encore::train {

struct PlotData {
  std::vector<double> losses;                           // losses[i]: optimizer step i + 1
  std::vector<std::pair<int64_t, double>> eval_points;  // (optimizer step, accuracy in [0, 1])
  std::string eval_title = "held-out accuracy";          // the lower panel's title (lower-case letters, '-', ' ')
};

// The PNG file's bytes; width x height pixels (at least 200 x 150).
std::string render_training_plot(const PlotData& data, int width = 800, int height = 560);

}  // namespace encore::train
