// The MPI backend of encore::train::Collective (include/encore/collective.hpp). Every collective is nonblocking
// (MPI_Iallreduce / MPI_Ibcast) and completed by polling MPI_Testall against a deadline, so a dead or hung peer
// ends the job with a message instead of a hang. Built only with ENCORE_WITH_MPI (see CMakeLists.txt); without it
// mpi_collective() throws.
#include "encore/collective.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "encore/error.hpp"

#ifdef ENCORE_WITH_MPI
#include <mpi.h>
#endif

namespace encore::train {

#ifdef ENCORE_WITH_MPI

namespace {

class MpiCollective final : public Collective {
 public:
  explicit MpiCollective(double timeout_seconds) : timeout_(timeout_seconds) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);  // only the main thread calls MPI
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    // Errors come back as codes (checked below) instead of MPI's default abort without a word about what failed.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void start_allreduce_sum(float* data, int64_t n, const std::string& what) override {
    for (int64_t off = 0; off < n; off += kMaxCount) {  // MPI counts are int
      MPI_Request r;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min<int64_t>(kMaxCount, n - off)),
                           MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r),
            what);
      pending_.push_back(r);
    }
    pending_what_ = what;
  }

  void wait_all() override {
    wait(pending_, pending_what_);
    pending_.clear();
  }

  void progress() override {
    if (pending_.empty()) return;
    int done = 0;  // completed requests become MPI_REQUEST_NULL; wait_all() then finds them done
    check(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE),
          pending_what_);
  }

  void allreduce_sum(double* data, int64_t n, const std::string& what) override {
    std::vector<MPI_Request> r(1);
    check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[0]), what);
    wait(r, what);
  }

  void broadcast(float* data, int64_t n, int root, const std::string& what) override {
    std::vector<MPI_Request> rs;
    for (int64_t off = 0; off < n; off += kMaxCount) {
      MPI_Request r;
      check(MPI_Ibcast(data + off, static_cast<int>(std::min<int64_t>(kMaxCount, n - off)), MPI_FLOAT, root,
                       MPI_COMM_WORLD, &r),
            what);
      rs.push_back(r);
    }
    wait(rs, what);
  }

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "encore: error: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; in case an implementation does
  }

 private:
  static constexpr int64_t kMaxCount = int64_t{1} << 30;

  void check(int code, const std::string& what) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    abort(what + ": MPI error: " + std::string(text, static_cast<size_t>(len)));
  }

  // Polls until every request completes; past the deadline the job ends. Open MPI advances a nonblocking
  // collective only inside MPI calls, so a ring allreduce of a 25 MB bucket needs many MPI_Testall calls in quick
  // succession: sleeping between them (as this loop first did, up to 1 ms) made two ranks 5.6x slower per step
  // than one. So the loop polls without sleeping, yielding the core between calls, for the first kSpinSeconds of
  // a wait; only a wait that long (a much slower or stuck peer) falls back to 1 ms sleeps, which spare the core.
  void wait(std::vector<MPI_Request>& rs, const std::string& what) {
    if (rs.empty()) return;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      int done = 0;
      check(MPI_Testall(static_cast<int>(rs.size()), rs.data(), &done, MPI_STATUSES_IGNORE), what);
      if (done) return;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_) {
        abort(detail::concat(what, " did not complete within ", timeout_, " s: another rank died, hung or is not "
                             "running the same training; ending the job (--dist-timeout sets the limit)"));
      }
      if (waited < kSpinSeconds) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

  static constexpr double kSpinSeconds = 2.0;

  double timeout_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;
  std::string pending_what_;
};

}  // namespace

bool has_mpi() { return true; }

std::shared_ptr<Collective> mpi_collective(double timeout_seconds) {
  ENCORE_CHECK(timeout_seconds > 0, "distributed timeout must be > 0 seconds, got ", timeout_seconds);
  return std::make_shared<MpiCollective>(timeout_seconds);
}

#else

bool has_mpi() { return false; }

std::shared_ptr<Collective> mpi_collective(double) {
  throw Error("this encore was built without MPI: install OpenMPI's development files (Debian: libopenmpi-dev) "
              "and rebuild (scripts/setup.sh), or train without --distributed");
}

#endif

}  // namespace encore::train
