#pragma once
// What the http_client tests share: a callback collector with bounded waits and small helpers.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "support/test_http_server.h"

namespace shoal::http::client_test {

using namespace std::chrono_literals;
using shoal::testing::recorded_request;
using steady = std::chrono::steady_clock;

// Every wait in these tests is bounded by this.
constexpr auto kWait = 10s;

inline std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Collects one request's callbacks and lets the test wait for completion with a bound.
struct collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<response_head> heads;
  std::string body;
  int chunks = 0;
  int completions = 0;
  std::optional<result<completion>> done;
  bool chunk_before_complete = false;
  std::function<bool(std::string_view)> data_hook;

  callbacks make() {
    callbacks cb;
    cb.on_response = [this](const response_head& h) {
      std::lock_guard lock(mu);
      heads.push_back(h);
      return true;
    };
    cb.on_data = [this](std::string_view chunk) {
      bool go = true;
      {
        std::lock_guard lock(mu);
        body.append(chunk);
        chunks++;
        if (completions == 0) chunk_before_complete = true;
        cv.notify_all();
      }
      if (data_hook) go = data_hook(chunk);
      return go;
    };
    cb.on_complete = [this](result<completion> r) {
      std::lock_guard lock(mu);
      completions++;
      done = std::move(r);
      cv.notify_all();
    };
    return cb;
  }

  bool wait(std::chrono::milliseconds bound = kWait) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, bound, [&] { return done.has_value(); });
  }
  bool wait_for_bytes(std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kWait, [&] { return body.size() >= n || done.has_value(); });
  }
};

inline client_request get(std::string url) {
  client_request r;
  r.url = std::move(url);
  return r;
}

// A port on 127.0.0.1 with nothing listening: bind, read the port, close.
inline std::uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

inline std::uint64_t range_start(const recorded_request& req) {
  auto r = req.header("Range");
  if (!r || !r->starts_with("bytes=")) return 0;
  return std::stoull(r->substr(6));
}

inline long long ms_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

}  // namespace shoal::http::client_test
