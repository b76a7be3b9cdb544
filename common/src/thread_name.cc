#include "common/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/post.hpp>

namespace shoal {

void name_this_thread(std::string_view name) noexcept {
  std::array<char, 16> buf{};  // 15 bytes and the terminator: the kernel's TASK_COMM_LEN
  const auto n = std::min(name.size(), buf.size() - 1);
  std::memcpy(buf.data(), name.data(), n);
  (void)::pthread_setname_np(::pthread_self(), buf.data());
}

named_thread_pool::named_thread_pool(std::size_t threads, std::string_view name)
    : boost::asio::thread_pool(threads) {
  struct gate {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t arrived = 0;
  };
  auto g = std::make_shared<gate>();
  for (std::size_t i = 0; i < threads; ++i) {
    boost::asio::post(*this, [g, threads, n = std::string(name)] {
      name_this_thread(n);
      std::unique_lock lk(g->mu);
      if (++g->arrived == threads) g->cv.notify_all();
      // Held so that no thread takes two of these tasks while another takes none.
      g->cv.wait_for(lk, std::chrono::seconds(1), [&] { return g->arrived >= threads; });
    });
  }
}

std::string name_of_this_thread() {
  std::array<char, 16> buf{};
  if (::pthread_getname_np(::pthread_self(), buf.data(), buf.size()) != 0) return {};
  return buf.data();
}

}  // namespace shoal
