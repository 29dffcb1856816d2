#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace glm::cpu {
namespace {

// Set on pool workers and on a caller while it runs a parallel call: a
// ParallelFor from inside a body runs inline instead of waiting on the pool.
thread_local bool inside_parallel = false;

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads_; ++i)
      workers_.emplace_back([this, i] { Work(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  int threads() const { return threads_; }

  void Run(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    std::lock_guard<std::mutex> one_call(call_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      n_ = n;
      pending_ = threads_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    RunChunk(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    body_ = nullptr;
  }

 private:
  void RunChunk(int index) {
    const int64_t chunk = (n_ + threads_ - 1) / threads_;
    const int64_t begin = std::min(n_, index * chunk);
    const int64_t end = std::min(n_, begin + chunk);
    if (begin < end) (*body_)(begin, end);
  }

  void Work(int index) {
    inside_parallel = true;
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      RunChunk(index);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel call at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(NumThreads());
  return *pool;
}

}  // namespace

int NumThreads() {
  static const int threads = [] {
    if (const char* env = std::getenv("GLM_CPU_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) return n;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return threads;
}

void ParallelFor(int64_t n, int64_t work,
                 const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  if (work < kMinParallelWork || n == 1 || NumThreads() == 1 ||
      inside_parallel) {
    body(0, n);
    return;
  }
  inside_parallel = true;
  Pool().Run(n, body);
  inside_parallel = false;
}

}  // namespace glm::cpu
