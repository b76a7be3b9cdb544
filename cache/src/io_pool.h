#pragma once
// io_pool: a few threads that run blocking file writes for object writers, so that a writer can
// hash a buffer on its own thread while the pool copies the same buffer into the page cache.
// Streaming ingest is then bounded by sha256 alone instead of sha256 + write(2).
//
// Lifecycle: owned by the core; the destructor finishes queued tasks and joins. Thread-safe.

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace shoal::cache::detail {

class io_pool {
 public:
  explicit io_pool(unsigned threads);
  ~io_pool();
  io_pool(const io_pool&) = delete;
  io_pool& operator=(const io_pool&) = delete;

  // Queues `fn`; the future becomes ready when it has run. `fn` must not throw.
  [[nodiscard]] std::future<void> submit(std::function<void()> fn);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;  // mu_
  bool stop_ = false;                             // mu_
  std::vector<std::thread> threads_;
};

}  // namespace shoal::cache::detail
