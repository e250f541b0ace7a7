// Data-parallel pieces of the training loop (internal to src/train): every rank starts from rank 0's parameters,
// and each step's gradients are summed over ranks in buckets, started while backward still runs.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "encore/collective.hpp"
#include "encore/nn.hpp"

namespace encore::train {

// Copies rank 0's parameters to every rank (as torch DDP's constructor does), so ranks agree bit for bit even
// if their loads differed.
void broadcast_parameters(nn::Module& module, Collective& comm);

// Sums every gradient over ranks, in place, overlapped with backward (torch DDP's Reducer, per layer):
//
//   GradientAllreducer reducer(model, comm, 25 << 20);           // once: the bucket layout and its buffers
//   { nn::ScopedGradientReadyHook overlap(reducer.hook());        // around this rank's last backward of the step
//     backward(...); }                                            // layers announce their final gradients
//   reducer.finish();                                             // the rest, then wait; gradients hold the sums
//
// Buckets: every parameter, in the order backward finishes them - the layers' (the modules below the model that
// the layer stacks announce: nn::TransformerEncoderLayer and the families' own nn::AnnouncedLayer types) last
// layer first, then the rest (heads, pooler, norms, final only when backward returns) in reverse
// registration order - packed into persistent buffers of about bucket_bytes (a larger tensor alone). A model with
// no announced layers gets every bucket after backward (correct, not overlapped).
// Embedding tables (nn::Embedding, e.g. a 30,522 x 384 word table: half of MiniLM's gradient) are summed by rows
// instead: a step touches the rows of its tokens only, so after backward the ranks agree on the rows that hold a
// nonzero bit on any rank (a flag allreduce) and sum those rows alone; every other row is +0 on every rank, which
// is its sum. A table whose gradient is dense (tied to an output head) just sends every row.
// A bucket's allreduce starts when all its gradients are final, buckets strictly in index order, so every rank
// starts the same collectives in the same order whatever its timing. The values summed are the gradients
// backward produced, whenever they are packed, so the result is bitwise the one of an allreduce after backward.
// The loop's micro-batch weights already make each rank's gradient its share of the step's mean, so a sum (not
// an average) gives the step's gradient. A parameter that no rank's backward reached keeps no gradient (AdamW
// skips it, as on one process); one reached on some ranks only gets zeros on the others.
class GradientAllreducer {
 public:
  GradientAllreducer(nn::Module& module, Collective& comm, int64_t bucket_bytes);
  // The hook to install around the backward of this rank's last micro-batch of the step.
  nn::GradientReadyHook hook();
  // After backward: starts the buckets not started yet, waits for every one and writes the sums into the
  // gradients. Returns the seconds this step spent in the reducer (packing in the hooks included).
  double finish();
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Of the last finished step: how many buckets started inside backward (before finish()).
  int64_t started_in_backward() const { return started_in_backward_; }
  // Since construction: seconds spent in the hooks (packing, starting buckets during backward), in finish()
  // waiting for the collectives, and in finish() otherwise (packing, flags, unpacking); rows of embedding tables
  // sent and rows they hold (all steps).
  struct Totals {
    double in_backward = 0, waiting = 0, after_backward = 0;
    int64_t table_rows_sent = 0, table_rows = 0;
  };
  const Totals& totals() const { return totals_; }
  // Of the last finished step: seconds spent in the hooks (inside backward).
  double last_in_backward() const { return last_in_backward_; }

 private:
  struct Bucket {
    size_t first, last;  // positions [first, last) of grads_
    std::vector<float> buf;
    size_t pending = 0;  // gradients not final yet this step
  };
  struct Table {  // an embedding table's gradient, summed by rows (see above)
    nn::ParamRef ref;
    int64_t rows, cols;
    size_t first_flag;  // its row flags' position in the flag vector
    std::vector<float> buf;
    std::vector<int64_t> sent;  // the rows summed this step
  };
  void gradients_ready(nn::Module& module);
  void mark_ready(size_t pos);
  void start_ready_buckets();

  Collective& comm_;
  std::vector<nn::ParamRef> grads_;  // reverse registration order
  std::unordered_map<const Tensor*, size_t> position_;  // gradient slot -> position in grads_
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<bool> ready_;
  std::vector<double> reached_;  // 1 where this rank's backward produced the gradient
  std::vector<Table> tables_;
  std::vector<double> flags_;  // reached_, then per table: reached, then one flag per row (1: a nonzero bit here)
  size_t next_ = 0;               // the next bucket to start
  bool in_step_ = false;
  int64_t started_in_backward_ = 0;
  double seconds_ = 0, last_in_backward_ = 0;
  Totals totals_;
};

}  // namespace encore::train
