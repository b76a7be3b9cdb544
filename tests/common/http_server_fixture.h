#pragma once
// A common/http_server.h server on 127.0.0.1:0, run by an io_context on two threads, for tests in
// this process; it records every request_log so tests can wait for a request to finish.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/http_server.h"
#include "common/log.h"

namespace shoal::testing {

class server_fixture {
 public:
  explicit server_fixture(http::handler h, http::server_options o = {}) {
    using namespace std::chrono_literals;
    if (std::getenv("SHOAL_TEST_TRACE")) log::init(log::format::text, log::level::trace, "test");
    o.on_request_done = [this, user = o.on_request_done](const http::request_log& l) {
      {
        std::lock_guard lk(mu);
        logs.push_back(l);
      }
      cv.notify_all();
      if (user) user(l);
    };
    srv = std::make_unique<http::server>(ioc, o, std::move(h));
    auto st = srv->listen("127.0.0.1", 0);
    EXPECT_TRUE(st.has_value()) << (st ? "" : st.error().to_string());
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { ioc.run(); });
  }
  server_fixture(const server_fixture&) = delete;
  server_fixture& operator=(const server_fixture&) = delete;
  ~server_fixture() {
    using namespace std::chrono_literals;
    srv->stop(0ms);
    work.reset();
    // Give the stop a moment, then stop the context.
    std::this_thread::sleep_for(20ms);
    ioc.stop();
    for (auto& t : threads) t.join();
  }

  std::uint16_t port() const { return srv->port(); }

  bool wait_logs(std::size_t n, std::chrono::milliseconds t = std::chrono::milliseconds(5000)) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, t, [&] { return logs.size() >= n; });
  }

  // Waits until the server holds `n` connections.
  bool wait_connections(std::size_t n,
                        std::chrono::milliseconds t = std::chrono::milliseconds(3000)) const {
    auto end = std::chrono::steady_clock::now() + t;
    while (srv->connections() != n) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  boost::asio::io_context ioc;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work{
      ioc.get_executor()};
  std::unique_ptr<http::server> srv;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<http::request_log> logs;
};

}  // namespace shoal::testing
