#include "common/daemon.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/log.h"
#include "common/thread_name.h"
#include "common/json_text.h"

namespace shoal::daemon {

void describe(config::binder& b, log_config& c) {
  b.field("level", c.level, "Minimum level logged.",
          {.one_of = {"trace", "debug", "info", "warn", "error"}});
  b.field("format", c.format, "Line format: text (key=value) or json (one object per line).",
          {.one_of = {"text", "json"}});
  b.field("file", c.file, "Append logs to this file instead of stderr (empty: stderr).");
}

status init_logging(const log_config& c, std::string_view component) {
  log::level l;
  log::format f;
  if (!log::parse_level(c.level, l))
    return fail(errc::config_error, "log.level: unknown level " + c.level);
  if (!log::parse_format(c.format, f))
    return fail(errc::config_error, "log.format: unknown format " + c.format);
  log::init(f, l, component, c.file);
  return {};
}

void describe(config::binder& b, http_config& c) {
  b.field("listen", c.listen, "Address and port the HTTP API listens on (host:port).");
  b.field("max_header_bytes", c.max_header_bytes,
          "Largest request line plus headers; larger requests get 431.",
          {.min = config::byte_size::kib(1), .max = config::byte_size::mib(16)});
  b.field("max_body_bytes", c.max_body_bytes, "Largest request body; larger bodies get 413.");
  b.field("idle_timeout", c.idle_timeout, "Close a keep-alive connection idle this long.",
          {.min = std::chrono::milliseconds(10)});
  b.field("read_timeout", c.read_timeout,
          "Give up on a request body that does not finish arriving.",
          {.min = std::chrono::milliseconds(10)});
  b.field("write_timeout", c.write_timeout,
          "Drop a client that accepts no bytes for this long (or a body source silent this long).",
          {.min = std::chrono::milliseconds(10)});
  b.field("header_timeout", c.header_timeout,
          "Close a connection whose request header is not complete this long after it was "
          "accepted (or, on a keep-alive connection, after the next request's first byte): "
          "slow and half-sent headers. Waiting for that first byte is idle_timeout's.",
          {.min = std::chrono::milliseconds(10)});
  b.field("max_connections", c.max_connections,
          "Open client connections at most. When full, the oldest connection waiting for a "
          "request of the address holding the most is closed so that a new client is served. "
          "Lowered at start (with a warning) to what the open-file limit holds: the soft limit "
          "is raised to the hard one, and a quarter of it (256 to 4096) is left for other files.",
          {.min = std::uint64_t{1}});
  b.field("max_connections_per_address", c.max_connections_per_address,
          "Open connections one client address may hold (an IPv6 client: its /64); further "
          "ones are closed at once. 0: no per-address cap.");
}

std::uint64_t raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) {
      rl = want;
    } else {
      log::warn("cannot raise the open-file limit", log::kv("soft", rl.rlim_cur),
                log::kv("hard", rl.rlim_max), log::kv("error", std::strerror(errno)));
    }
  }
  return rl.rlim_cur == RLIM_INFINITY ? std::numeric_limits<std::uint64_t>::max() : rl.rlim_cur;
}

std::uint64_t connections_for_fd_limit(std::uint64_t fd_limit) {
  const std::uint64_t reserve = std::clamp<std::uint64_t>(fd_limit / 4, 256, 4096);
  return fd_limit > reserve + 16 ? fd_limit - reserve : 16;
}

http::server_options server_options_from(const http_config& c, std::string name) {
  http::server_options o;
  o.name = std::move(name);
  o.max_header_bytes = static_cast<std::size_t>(c.max_header_bytes.bytes());
  o.max_body_bytes = c.max_body_bytes.bytes();
  auto ms = [](const config::duration& d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d.get());
  };
  o.idle_timeout = ms(c.idle_timeout);
  o.read_timeout = ms(c.read_timeout);
  o.write_timeout = ms(c.write_timeout);
  o.source_timeout = ms(c.write_timeout);
  o.header_timeout = ms(c.header_timeout);
  const std::uint64_t fds = raise_fd_limit();
  const std::uint64_t fit = connections_for_fd_limit(fds);
  std::uint64_t maxc = c.max_connections;
  if (maxc > fit) {
    log::warn("http.max_connections lowered to fit the open-file limit",
              log::kv("configured", maxc), log::kv("used", fit), log::kv("fd_limit", fds));
    maxc = fit;
  }
  o.max_connections = static_cast<std::size_t>(maxc);
  o.max_connections_per_address = static_cast<std::size_t>(c.max_connections_per_address);
  return o;
}

status listen(http::server& s, const http_config& c) {
  auto hp = http::split_host_port(c.listen);
  if (!hp) return fail(hp.error().wrap("http.listen"));
  return s.listen(hp->first, hp->second);
}

void log_request(const http::request_log& l) {
  log::debug(
      "request", log::kv("method", l.method), log::kv("target", l.target),
      log::kv("status", l.status), log::kv("bytes", l.body_bytes_sent),
      log::kv("aborted", l.aborted), log::kv("error", l.error),
      log::kv("ms", std::chrono::duration_cast<std::chrono::milliseconds>(l.duration).count()));
}

runtime::runtime(unsigned threads) : threads_(threads == 0 ? 1 : threads) {}
runtime::~runtime() = default;

void runtime::stop() {
  boost::asio::post(io_, [this] { begin_stop(); });
}

void runtime::begin_stop() {
  if (stopping_.exchange(true)) return;
  boost::system::error_code ec;
  signals_.cancel(ec);
  if (on_stop_) on_stop_();
  // Let in-flight work finish; then stop the context whatever is left.
  work_.reset();
  drain_deadline_ = std::chrono::steady_clock::now() + drain_;
  tick_drain();
}

void runtime::tick_drain() {
  if (std::chrono::steady_clock::now() >= drain_deadline_ || (drained_ && drained_())) {
    io_.stop();
    return;
  }
  drain_timer_.expires_after(std::chrono::milliseconds(50));
  drain_timer_.async_wait([this](boost::system::error_code e) {
    if (!e) tick_drain();
  });
}

void runtime::run(std::function<void()> on_signal, std::chrono::milliseconds drain,
                  std::function<bool()> drained) {
  on_stop_ = std::move(on_signal);
  drain_ = drain;
  drained_ = std::move(drained);
  work_.emplace(io_.get_executor());
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    log::info("signal received, shutting down", log::kv("signal", sig));
    begin_stop();
  });
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads_; ++i)
    pool.emplace_back([this] {
      name_this_thread("io-pool");
      io_.run();
    });
  io_.run();
  for (auto& t : pool) t.join();
}

bool serve_ops(const http::request& req, const http::responder& resp, const metrics::registry& reg,
               const std::function<health()>& check) {
  if (req.path == "/metrics") {
    auto r = http::response::text(200, reg.expose(), std::string(metrics::content_type));
    resp.send(std::move(r));
    return true;
  }
  if (req.path == "/healthz" || req.path == "/readyz") {
    health h = check ? check() : health{};
    nlohmann::json j = {{"status", h.status}, {"reasons", h.reasons}};
    unsigned code = h.status == "failing" ? 503 : 200;
    if (req.path == "/readyz" && h.status != "ok") code = 503;
    resp.send(http::response::json(code, json_text(j)));
    return true;
  }
  return false;
}

}  // namespace shoal::daemon
