#pragma once
// What every Shoal daemon shares at run time: logging and HTTP listener config sections, an
// io_context on a small thread pool that runs until SIGTERM/SIGINT, and the operational
// endpoints (/metrics in Prometheus text, /healthz and /readyz as JSON).

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/http_server.h"
#include "common/metrics.h"

namespace shoal::daemon {

struct log_config {
  std::string level = "info";   // trace|debug|info|warn|error
  std::string format = "text";  // text|json
  std::string file;             // empty: stderr
};
void describe(config::binder& b, log_config& c);
[[nodiscard]] status init_logging(const log_config& c, std::string_view component);

struct http_config {
  std::string listen;  // host:port
  config::byte_size max_header_bytes = config::byte_size::kib(64);
  config::byte_size max_body_bytes = config::byte_size::mib(1);
  config::duration idle_timeout = std::chrono::seconds(60);
  config::duration read_timeout = std::chrono::seconds(30);
  config::duration write_timeout = std::chrono::seconds(60);
  config::duration header_timeout = std::chrono::seconds(10);
  std::uint64_t max_connections = 10000;
  std::uint64_t max_connections_per_address = 256;
};
// `default_listen` documents the daemon's own default.
void describe(config::binder& b, http_config& c);
// Also raises the open-file soft limit to the hard limit (raise_fd_limit) and lowers
// max_connections, with a warning, when the limit cannot hold that many connections besides the
// daemon's other files.
[[nodiscard]] http::server_options server_options_from(const http_config& c, std::string name);
// Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the soft limit now in force.
std::uint64_t raise_fd_limit();
// The most HTTP connections that fit `fd_limit` descriptors, leaving a quarter (at least 256, at
// most 4096) for the daemon's own files, sockets and libraries.
[[nodiscard]] std::uint64_t connections_for_fd_limit(std::uint64_t fd_limit);
// Starts `s` listening on `c.listen` ("host:port"); errors name the key.
[[nodiscard]] status listen(http::server& s, const http_config& c);
// The debug log line every daemon writes for an answered request.
void log_request(const http::request_log& l);

// An io_context running on `threads` threads. run() blocks until SIGTERM or SIGINT (or stop()),
// calls `on_signal` once on an io thread (the daemon begins its graceful shutdown there), then
// waits until the context runs out of work or `drain` passes, and joins the threads.
class runtime {
 public:
  explicit runtime(unsigned threads);
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  [[nodiscard]] boost::asio::io_context& io() noexcept { return io_; }
  // `drained` (optional) tells when in-flight work is done, so shutdown need not wait out `drain`.
  void run(std::function<void()> on_signal,
           std::chrono::milliseconds drain = std::chrono::seconds(10),
           std::function<bool()> drained = {});
  // Requests the same shutdown a signal would. Safe from any thread.
  void stop();

 private:
  void begin_stop();  // on an io thread
  void tick_drain();

  boost::asio::io_context io_;
  unsigned threads_;
  std::atomic<bool> stopping_{false};
  std::function<void()> on_stop_;
  std::chrono::milliseconds drain_{10000};
  std::function<bool()> drained_;
  std::chrono::steady_clock::time_point drain_deadline_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  boost::asio::signal_set signals_{io_, SIGINT, SIGTERM};
  boost::asio::steady_timer drain_timer_{io_};
};

// Health as /healthz reports it: "ok" (200) or "degraded"/"failing" with reasons (503 when
// failing).
struct health {
  std::string status = "ok";
  std::vector<std::string> reasons;
};

// Answers /metrics, /healthz and /readyz; returns false (and does not answer) for other paths.
bool serve_ops(const http::request& req, const http::responder& resp, const metrics::registry& reg,
               const std::function<health()>& check);

}  // namespace shoal::daemon
