// train_options(): the one table of TrainConfig fields by keyword (include/encore/trainer.hpp).
#include "encore/trainer.hpp"

namespace encore::train {

const std::vector<TrainOption>& train_options() {
  using C = TrainConfig;
  static const std::vector<TrainOption> options = {
      {"model", &C::model_dir},
      {"data", &C::data},
      {"eval_data", &C::eval_data},
      {"eval_fraction", &C::eval_fraction},
      {"steps", &C::steps},
      {"epochs", &C::epochs},
      {"batch_size", &C::batch_size},
      {"lr", &C::lr},
      {"weight_decay", &C::weight_decay},
      {"warmup_steps", &C::warmup_steps},
      {"schedule", &C::schedule},
      {"max_grad_norm", &C::max_grad_norm},
      {"max_length", &C::max_length},
      {"seed", &C::seed},
      {"shuffle", &C::shuffle},
      {"grad_accum", &C::grad_accum},
      {"dropout", &C::dropout},
      {"gradient_checkpointing", &C::gradient_checkpointing},
      {"log", &C::log_csv},
      {"output", &C::output_dir},
      {"save_every", &C::save_every},
      {"resume", &C::resume_dir},
      {"plot", &C::plot_svg},
  };
  return options;
}

}  // namespace encore::train
