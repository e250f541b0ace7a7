// The shared training loop (loop.hpp): one optimizer step = grad_accum micro-batches of batch_size examples
// taken in order from a per-epoch shuffled permutation, then clipping and AdamW; the state a checkpoint stores
// is everything that loop reads, so a resumed run repeats an uninterrupted one bit for bit.
#include "train/loop.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>

#include "encore/collective.hpp"
#include "io/json_file.hpp"
#include "io/staged_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/data_parallel.hpp"
#include "train/plot.hpp"

namespace encore::train {

using Json = nlohmann::json;

std::vector<std::string> class_names(const std::set<std::string>& labels) {
  const bool integers = std::all_of(labels.begin(), labels.end(), [](const std::string& l) {
    return !l.empty() && l.find_first_not_of("0123456789") == std::string::npos;
  });
  if (!integers) return {labels.begin(), labels.end()};
  // Integer labels are class ids 0..max: the head gets max+1 rows, so the largest id is checked (its cost:
  // hidden x classes floats) before anything is allocated; a 20-digit id would not even fit int64.
  constexpr int64_t kMaxClasses = int64_t{1} << 16;
  int64_t n = 0;
  for (const auto& l : labels) {
    const size_t digits = l.size() - std::min(l.find_first_not_of('0'), l.size());
    ENCORE_CHECK_AS(InputError, digits <= 6 && std::stoll(l) < kMaxClasses, "train: integer label ", l,
                    " is a class id, and at most ", kMaxClasses, " classes (ids 0..", kMaxClasses - 1,
                    ") are supported; use string labels for names");
    n = std::max<int64_t>(n, std::stoll(l) + 1);
  }
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

void Fingerprint::add(const std::string& s) {
  for (unsigned char c : s) h_ = (h_ ^ c) * 1099511628211ull;
  h_ = (h_ ^ 0xFF) * 1099511628211ull;  // field separator
}

std::string Fingerprint::hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
  return buf;
}

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Where training stands: what a checkpoint stores beyond the weights and the optimizer.
struct LoopState {
  int64_t step = 0;   // optimizer steps done
  int64_t epoch = -1; // current pass over the data (0-based; -1 before the first)
  int64_t pos = 0;    // next index into `order`; == n: the epoch is done
  std::vector<int64_t> order;
  std::mt19937_64 rng;
  std::vector<double> losses;                           // every step so far, resumed ones included
  std::vector<std::pair<int64_t, double>> eval_points;  // (step, held-out metric)
};

template <typename T>
T state_field(const Json& j, const char* key, const std::string& where) {
  ENCORE_CHECK(j.contains(key), where, ": missing '", key, "'");
  try {
    return j[key].get<T>();
  } catch (const Json::exception& e) {
    throw ModelFormatError(detail::concat(where, " /", key, ": has the wrong type or range (found ",
                                          j[key].type_name(), ")"));
  }
}

// JSON writes NaN as null: read a number or null back as a double.
double number_or_nan(const Json& v, const std::string& where, const char* what) {
  ENCORE_CHECK(v.is_number() || v.is_null(), where, ": '", what, "' must hold numbers");
  return v.is_null() ? std::nan("") : v.get<double>();
}

// Rewrites the CSV log keeping the header and the rows of steps <= last_step (a resumed run appends after them).
void truncate_log(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string out, line;
  bool header = true;
  while (std::getline(in, line)) {
    if (!header && !line.empty()) {
      const std::string step = line.substr(0, line.find(','));
      ENCORE_CHECK(!step.empty() && step.size() < 16 && step.find_first_not_of("0123456789") == std::string::npos, "--resume: the log '",
                   path, "' has a row that does not start with a step number: '", line, "'");
      if (std::stoll(step) > last_step) continue;
    }
    out += line + "\n";
    header = false;
  }
  in.close();
  std::ofstream f(path, std::ios::trunc);
  f << out;
  ENCORE_CHECK(f.good(), "cannot write the log '", path, "'");
}

// Restores `st` and the optimizer from a checkpoint's trainer state after checking that the run is the same.
void restore(const TrainConfig& cfg, TrainTask& task, const Json& resumed, int64_t total, int world, LoopState& st,
             AdamW& opt) {
  const std::string where = "'" + cfg.resume_dir + "/trainer_state.json'";
  const int64_t n = task.train_examples();
  const std::string was = io::JsonAt(resumed, cfg.resume_dir + "/trainer_state.json").get_or("task", "classification");
  ENCORE_CHECK(was == task.name(), "--resume: the checkpoint was trained for the ", was, " task, this run is ",
               task.name(), " (", where, ")");
  auto must_match = [&](const std::string& key, const Json& now) {
    ENCORE_CHECK(resumed.contains(key) && resumed[key] == now, "--resume: ", key, " is ", now.dump(),
                 " but the checkpoint was trained with ", resumed.contains(key) ? resumed[key].dump() : "nothing",
                 " (", where, "); resuming needs the same value");
  };
  const Json identity = task.identity();  // (a temporary's items() would dangle in the range-for)
  for (const auto& [key, value] : identity.items()) must_match(key, value);
  must_match("train_examples", n);
  must_match("data_fingerprint", task.data_fingerprint());
  // Another number of ranks resumes when the step is the same size: batch_size x grad_accum x world_size.
  const int64_t was_world = resumed.value("world_size", int64_t{1});
  if (was_world == world) {
    must_match("batch_size", cfg.batch_size);
    must_match("grad_accum", cfg.grad_accum);
  } else {
    const int64_t was = resumed.value("batch_size", int64_t{0}) * resumed.value("grad_accum", int64_t{0}) * was_world;
    ENCORE_CHECK(was == cfg.batch_size * cfg.grad_accum * world, "--resume: the checkpoint was trained on ",
                 was_world, " rank(s) with steps of ", was, " examples (batch_size x grad_accum x world_size); this run's"
                 " steps have ", cfg.batch_size, " x ", cfg.grad_accum, " x ", world, " = ",
                 cfg.batch_size * cfg.grad_accum * world, " (", where, "); choose --batch-size/--grad-accum to match");
  }
  must_match("seed", cfg.seed);
  must_match("shuffle", cfg.shuffle);
  st.step = state_field<int64_t>(resumed, "global_step", where);
  st.epoch = state_field<int64_t>(resumed, "epoch", where);
  st.pos = state_field<int64_t>(resumed, "position", where);
  st.order = state_field<std::vector<int64_t>>(resumed, "order", where);
  for (const Json& l : state_field<Json>(resumed, "losses", where)) st.losses.push_back(number_or_nan(l, where, "losses"));
  st.eval_points = state_field<std::vector<std::pair<int64_t, double>>>(resumed, "eval_accuracy", where);
  std::istringstream rng_text(state_field<std::string>(resumed, "shuffle_rng", where));
  rng_text >> st.rng;
  ENCORE_CHECK(!rng_text.fail(), where, ": 'shuffle_rng' is not a generator state");
  std::vector<int64_t> sorted = st.order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < static_cast<int64_t>(sorted.size()); ++i)
    ENCORE_CHECK(sorted[i] == i, where, ": 'order' is not a permutation of the ", n, " examples");
  ENCORE_CHECK(static_cast<int64_t>(st.order.size()) == n && st.pos >= 0 && st.pos <= n && st.step >= 0 &&
                   st.epoch >= -1 && static_cast<int64_t>(st.losses.size()) == st.step,
               where, ": inconsistent step/epoch/position/losses");
  ENCORE_CHECK(st.step < total, "--resume: the checkpoint is at step ", st.step, ", the run ends at step ", total,
               ": nothing left to train (raise --steps/--epochs)");
  load_optimizer_state(cfg.resume_dir, opt);
  ENCORE_CHECK(opt.steps() == st.step, where, ": global_step ", st.step, " disagrees with the optimizer's step ",
               opt.steps());
}

}  // namespace

// Every numeric option with its range, before any data is read: non-finite values are refused (an lr of inf
// would write a NaN checkpoint; an eval_fraction of NaN would silently become 0 or read out of bounds).
void check_common_options(const TrainConfig& cfg) {
  auto real = [](const char* name, double v, double lo, double hi, bool lo_open) {
    ENCORE_CHECK_AS(UsageError, std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi, "train: ", name,
                    ": expected a finite number in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", v);
  };
  auto integer = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    ENCORE_CHECK_AS(UsageError, v >= lo && v <= hi, "train: ", name, ": expected ", lo, "..", hi, ", got ", v);
  };
  real("eval_fraction (--eval-fraction)", cfg.eval_fraction, 0.0, 0.9, false);
  real("lr (--lr)", cfg.lr, 0.0, 10.0, false);  // 0: the weights stay (used to check data and dropout)
  real("weight_decay (--weight-decay)", cfg.weight_decay, 0.0, 10.0, false);
  ENCORE_CHECK_AS(UsageError, std::isfinite(cfg.max_grad_norm), "train: max_grad_norm (--max-grad-norm): expected a "
                  "finite number (<= 0: no clipping), got ", cfg.max_grad_norm);
  ENCORE_CHECK_AS(UsageError, std::isfinite(cfg.dropout) && cfg.dropout < 1, "train: dropout (--dropout): expected "
                  "[0, 1) (or < 0 for the model's own), got ", cfg.dropout);
  integer("batch_size (--batch-size)", cfg.batch_size, 1, 1 << 16);
  integer("max_length (--max-length)", cfg.max_length, 2, 1 << 20);
  integer("steps (--steps)", cfg.steps, 0, int64_t{1} << 40);
  integer("epochs (--epochs)", cfg.epochs, 0, 1 << 20);
  integer("warmup_steps (--warmup-steps)", cfg.warmup_steps, 0, int64_t{1} << 40);
  integer("grad_accum (--grad-accum)", cfg.grad_accum, 1, 1 << 16);
  integer("save_every (--save-every)", cfg.save_every, 0, int64_t{1} << 40);
  ENCORE_CHECK_AS(UsageError, cfg.save_every == 0 || !cfg.output_dir.empty(),
                  "train: save_every needs an output directory");
  ENCORE_CHECK_AS(UsageError, cfg.plot_svg.empty() || std::filesystem::path(cfg.plot_svg).extension() == ".svg",
                  "train: plot '", cfg.plot_svg, "': the plot is an SVG file, name it .svg");
}

void create_output_parents(const TrainConfig& cfg) {
  if (cfg.collective && cfg.collective->rank() != 0) return;
  for (const std::string& out : {cfg.output_dir, cfg.log_csv, cfg.plot_svg}) {
    if (out.empty()) continue;
    std::filesystem::path target(out);
    if (target.filename().empty()) target = target.parent_path();  // "dir/" -> "dir"
    const std::filesystem::path parent = target.parent_path();
    std::error_code ec;
    if (parent.empty() || std::filesystem::exists(parent, ec)) continue;  // an existing non-directory fails later
    std::filesystem::create_directories(parent, ec);
    ENCORE_CHECK_AS(InputError, !ec, "train: cannot create the directory '", parent.string(), "' for '", out,
                    "': ", ec.message());
  }
}

Json resume_state(const TrainConfig& cfg) { return cfg.resume_dir.empty() ? Json() : read_trainer_state(cfg.resume_dir); }

TrainReport run_training(const TrainConfig& cfg, TrainTask& task, const Json& resumed,
                         const std::function<void(const TrainProgress&)>& progress,
                         std::chrono::steady_clock::time_point t0) {
  const bool resuming = !cfg.resume_dir.empty();
  TrainReport report;
  report.train_examples = task.train_examples();
  report.eval_examples = task.eval_examples();
  const int64_t n = report.train_examples;
  Collective* comm = cfg.collective.get();
  const int world = comm ? comm->world_size() : 1, rank = comm ? comm->rank() : 0;
  const bool leader = rank == 0;  // evaluates, logs, saves, reports progress
  report.world_size = world;
  const int64_t step_examples = cfg.batch_size * cfg.grad_accum * world;
  const int64_t per_epoch = (n + step_examples - 1) / step_examples;
  const int64_t total = cfg.steps > 0 ? cfg.steps : per_epoch * cfg.epochs;
  const Schedule schedule = parse_schedule(cfg.schedule);
  const std::string model_dir = resuming ? cfg.resume_dir : cfg.model_dir;
  AutoModel& model = task.model();

  report.total_steps = total;
  const auto loop_start = std::chrono::steady_clock::now();
  auto report_progress = [&](TrainProgress p) {
    if (!progress || !leader) return;  // rank 0 alone reports
    p.total = total;
    p.tokens = report.tokens;
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
    p.first_step = report.first_step;
    progress(p);
  };
  auto evaluate = [&](int64_t step) {
    return task.evaluate([&](int64_t done, int64_t of) {
      TrainProgress p;
      p.phase = TrainProgress::Phase::evaluate;
      p.step = step;
      p.eval_done = done;
      p.eval_total = of;
      report_progress(p);
    });
  };
  report_progress({.phase = TrainProgress::Phase::start});
  if (task.evaluates_before_training() && leader) {  // a resumed run reports the first run's value
    report.eval_before = resuming ? number_or_nan(resumed.value("eval_before", Json()), cfg.resume_dir, "eval_before")
                                  : evaluate(0);
  }
  if (cfg.dropout >= 0) model.set_dropout(cfg.dropout);  // else the checkpoint's own rates
  model.set_gradient_checkpointing(cfg.gradient_checkpointing);
  model.train();
  nn::Module& params = model.module();
  AdamW opt(params, {cfg.lr, 0.9, 0.999, 1e-8, cfg.weight_decay});

  LoopState st;
  st.rng.seed(cfg.seed);
  st.order.resize(n);
  std::iota(st.order.begin(), st.order.end(), 0);
  st.pos = n;  // the first iteration starts epoch 0
  if (resuming) restore(cfg, task, resumed, total, world, st, opt);
  report.first_step = st.step;
  if (world > 1) broadcast_parameters(params, *comm);
  std::optional<GradientAllreducer> reducer;
  if (world > 1) reducer.emplace(params, *comm, cfg.bucket_bytes);
  const char* verbose_env = std::getenv("ENCORE_VERBOSE");
  const bool verbose = verbose_env && std::string(verbose_env) == "1";
  double compute_seconds = 0, update_seconds = 0;  // this rank's forward+backward and clip+AdamW (verbose)
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };

  std::ofstream log;
  if (!cfg.log_csv.empty() && leader) {
    const bool append = resuming && std::filesystem::exists(cfg.log_csv);
    if (append) truncate_log(cfg.log_csv, st.step);
    log.open(cfg.log_csv, append ? std::ios::app : std::ios::trunc);
    ENCORE_CHECK(log.good(), "cannot write the log '", cfg.log_csv, "'");
    if (!append) log << "step,loss,lr,grad_norm,eval_accuracy\n";
  }
  auto plot = [&]() { return render_training_plot({st.losses, st.eval_points, "held-out " + task.metric_name()}); };
  const std::string data_fingerprint = task.data_fingerprint();
  auto save = [&]() {
    std::ostringstream rng_text;
    rng_text << st.rng;
    Json state = {{"format", kTrainerStateFormat}, {"version", kTrainerStateVersion}, {"task", task.name()},
                  {"global_step", st.step}, {"epoch", st.epoch}, {"position", st.pos}, {"total_steps", total},
                  {"train_examples", n}, {"data_fingerprint", data_fingerprint}, {"batch_size", cfg.batch_size},
                  {"grad_accum", cfg.grad_accum}, {"seed", cfg.seed}, {"shuffle", cfg.shuffle}, {"lr", cfg.lr},
                  {"weight_decay", cfg.weight_decay}, {"schedule", cfg.schedule}, {"warmup_steps", cfg.warmup_steps},
                  {"data", cfg.data}, {"source_model", model_dir}, {"shuffle_rng", rng_text.str()},
                  {"order", st.order}, {"losses", st.losses}, {"eval_accuracy", st.eval_points},
                  {"world_size", world}};
    state.update(task.identity());
    if (task.evaluates_before_training()) state["eval_before"] = report.eval_before;  // NaN -> null
    task.save(cfg.output_dir, opt, state, cfg.plot_svg.empty() ? plot() : std::string());
    if (verbose)
      std::fprintf(stderr, "encore: train: saved the checkpoint of step %lld to '%s'\n",
                   static_cast<long long>(st.step), cfg.output_dir.c_str());
  };

  while (st.step < total) {
    if (st.pos >= n) {  // next epoch
      ++st.epoch;
      st.pos = 0;
      if (cfg.shuffle) std::shuffle(st.order.begin(), st.order.end(), st.rng);
    }
    const int64_t end = std::min(n, st.pos + step_examples), step_n = end - st.pos;
    const int64_t micro_batches = (step_n + cfg.batch_size - 1) / cfg.batch_size;  // over all ranks
    const double lr = learning_rate_at(st.step, cfg.lr, cfg.warmup_steps, total, schedule);
    opt.set_lr(lr);
    opt.zero_grad();
    // The step's loss and gradient: Σ weight·(micro-batch loss and its gradient), the weights from the task. This
    // rank's micro-batches are rank*grad_accum .. (rank+1)*grad_accum-1 of the step's (a short last step may
    // leave a rank none); the sum over ranks follows.
    double sums[2] = {0, 0};  // loss, tokens
    int64_t tokens = 0;
    const int64_t first_micro = rank * cfg.grad_accum;
    const int64_t last_micro = std::min(micro_batches, first_micro + cfg.grad_accum);
    const auto compute_start = std::chrono::steady_clock::now();
    for (int64_t micro = first_micro; micro < last_micro; ++micro) {
      const int64_t s = st.pos + micro * cfg.batch_size;
      nn::manual_seed(mix64(cfg.seed ^ mix64(static_cast<uint64_t>(st.step * cfg.grad_accum * world + micro))));  // dropout
      std::vector<int64_t> idx(st.order.begin() + s, st.order.begin() + std::min(end, s + cfg.batch_size));
      const double weight = task.micro_batch_weight(static_cast<int64_t>(idx.size()), step_n, micro_batches);
      // The last backward of the step on this rank starts the gradient allreduce as layers finish.
      std::optional<nn::ScopedGradientReadyHook> overlap;
      if (reducer && micro == last_micro - 1) overlap.emplace(reducer->hook());
      sums[0] += weight * task.train_micro_batch(idx, weight, &tokens);
    }
    sums[1] = static_cast<double>(tokens);
    compute_seconds += seconds_since(compute_start);
    if (reducer) {
      const double reduce = reducer->finish();
      report.allreduce_seconds += reduce;
      compute_seconds -= reducer->last_in_backward();  // the hooks ran inside backward
      comm->allreduce_sum(sums, 2, "allreduce of the step's loss");
      if (verbose)
        std::fprintf(stderr, "encore: train: rank %d: step %lld: %lld of %lld gradient buckets started during "
                     "backward\n", rank, static_cast<long long>(st.step + 1),
                     static_cast<long long>(reducer->started_in_backward()), static_cast<long long>(reducer->buckets()));
    }
    const double loss = sums[0];
    report.tokens += static_cast<int64_t>(sums[1]);
    report.examples_trained += end - st.pos;  // the step's examples, over every rank
    st.pos = end;
    const auto update_start = std::chrono::steady_clock::now();
    const double norm = cfg.max_grad_norm > 0 ? clip_grad_norm(params, cfg.max_grad_norm) : std::nan("");
    // A non-finite loss (or gradient) would poison every weight at opt.step(): stop before it, so the model and
    // the last checkpoint written stay the last good ones.
    if (!std::isfinite(loss) || (cfg.max_grad_norm > 0 && !std::isfinite(norm)))
      throw NonFiniteError(detail::concat(
          "train: the ", std::isfinite(loss) ? "gradient norm" : "loss", " became non-finite (loss ", loss,
          ", grad norm ", norm, ") at step ", st.step + 1, " (lr ", lr, "); stopped before updating the weights",
          cfg.output_dir.empty() ? std::string()
                                 : "; the last checkpoint in '" + cfg.output_dir + "' (if any) is the last good one",
          ". Lower --lr or check the data"));
    opt.step();
    update_seconds += seconds_since(update_start);
    ++st.step;
    st.losses.push_back(loss);
    report.losses.push_back(loss);
    const bool epoch_end = cfg.steps <= 0 && st.pos >= n;
    const bool last = st.step == total;
    double acc = std::nan("");
    if ((epoch_end || last) && leader) {
      acc = evaluate(st.step);
      if (!std::isnan(acc)) {
        report.eval_accuracy.push_back(acc);
        report.eval_epochs.push_back(st.epoch + 1);
        report.eval_steps.push_back(st.step);
        st.eval_points.emplace_back(st.step, acc);
      }
    }
    if (log.is_open()) {
      log << st.step << "," << loss << "," << lr << "," << norm << ",";
      if (!std::isnan(acc)) log << acc;
      log << "\n";
      log.flush();
    }
    if (leader && !cfg.output_dir.empty() && (last || (cfg.save_every > 0 && st.step % cfg.save_every == 0))) save();
    report_progress({.phase = TrainProgress::Phase::train, .step = st.step, .loss = loss, .lr = lr});
  }
  if (verbose) {
    // Where this rank's step time went; "waiting" includes waiting for a slower rank.
    const int64_t steps = st.step - report.first_step;
    std::string reduce;
    if (reducer) {
      const GradientAllreducer::Totals& t = reducer->totals();
      reduce = detail::concat(", gradient allreduce ", t.in_backward + t.waiting + t.after_backward, " s (in backward ",
                              t.in_backward, ", waiting ", t.waiting, ", packing and flags ", t.after_backward,
                              "; embedding table rows summed ", t.table_rows ? 100.0 * t.table_rows_sent / t.table_rows : 0.0,
                              "%)");
    }
    std::fprintf(stderr, "encore: train: rank %d: %lld steps: forward+backward %.3f s%s, clip+AdamW %.3f s\n", rank,
                 static_cast<long long>(steps), compute_seconds, reduce.c_str(), update_seconds);
  }
  model.eval();
  if (!cfg.plot_svg.empty() && leader) io::write_file_atomic(cfg.plot_svg, plot());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace encore::train
