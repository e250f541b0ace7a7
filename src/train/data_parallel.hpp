// Data-parallel pieces of the training loop (internal to src/train): every rank starts from rank 0's parameters,
// and after each step's backward the gradients are summed over ranks in buckets.
#pragma once
#include <cstdint>

#include "encore/collective.hpp"
#include "encore/nn.hpp"

namespace encore::train {

// Copies rank 0's parameters to every rank (as torch DDP's constructor does), so ranks agree bit for bit even
// if their loads differed.
void broadcast_parameters(nn::Module& module, Collective& comm);

// Sums every gradient over ranks, in place. The loop's micro-batch weights already make each rank's gradient its
// share of the step's mean, so a sum (not an average) gives the step's gradient. A parameter that no rank's
// backward reached keeps no gradient (AdamW skips it, as on one process); one reached on some ranks only gets
// zeros on the others first. Gradients travel in buckets of about bucket_bytes, in reverse registration order
// (the order backward produces them): one bucket is in flight while the next is packed. The allreduce starts
// after backward has finished (it is not yet overlapped with backward itself). Returns seconds spent here.
double allreduce_gradients(nn::Module& module, Collective& comm, int64_t bucket_bytes);

}  // namespace encore::train
