// encore::train::Collective - the few collectives data-parallel training needs, behind one small interface so
// the transport can change (MPI today; gloo's TCP rendezvous or another backend implements the same six calls).
//
//   auto comm = encore::train::mpi_collective(/*timeout_seconds=*/300);   // MPI_Init; ranks from mpirun -np N
//   encore::train::TrainConfig cfg; cfg.collective = comm;               // encore train --distributed
//   encore::train::fine_tune_classifier(cfg);
//
// Contract: every rank makes the same calls in the same order with the same sizes (as MPI and torch DDP
// require). A collective that does not complete within the timeout - a rank died, hung or diverged - ends the
// whole job with a message naming this rank and the operation (the MPI backend calls MPI_Abort, which makes
// mpirun stop every rank); it never waits forever. Not thread-safe: one thread per rank drives it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace encore::train {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "mpi"
  // Starts an in-place sum over ranks of data[0, n); `data` must stay valid until wait_all(). Requests complete
  // in the order they were started, so a caller can keep packing the next bucket while one is in flight.
  virtual void start_allreduce_sum(float* data, int64_t n, const std::string& what) = 0;
  // Completes every started allreduce, or ends the job after the timeout (see above).
  virtual void wait_all() = 0;
  // Lets started allreduces advance without waiting for them (a transport that moves data only inside its own
  // calls, as Open MPI's nonblocking collectives do, gets a call in between compute). Never blocks.
  virtual void progress() {}
  // Blocking in-place sum of a few doubles (losses, counters, flags).
  virtual void allreduce_sum(double* data, int64_t n, const std::string& what) = 0;
  // Blocking broadcast of data[0, n) from `root` to every rank.
  virtual void broadcast(float* data, int64_t n, int root, const std::string& what) = 0;
  // Ends every rank of the job now with `message` on this rank's stderr (a rank that cannot continue).
  [[noreturn]] virtual void abort(const std::string& message) = 0;
};

// Whether this build has the MPI backend (CMake option ENCORE_WITH_MPI, on when OpenMPI's development files are
// found).
bool has_mpi();
// The MPI backend over MPI_COMM_WORLD (MPI_Init on first call; MPI_Finalize at exit). Collectives poll their
// requests and abort the job after `timeout_seconds` without completion. Throws encore::Error when the build has
// no MPI.
std::shared_ptr<Collective> mpi_collective(double timeout_seconds);

}  // namespace encore::train
