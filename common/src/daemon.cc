#include "common/daemon.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <nlohmann/json.hpp>

#include "common/log.h"

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
  for (unsigned i = 1; i < threads_; ++i) pool.emplace_back([this] { io_.run(); });
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
    resp.send(http::response::json(code, j.dump()));
    return true;
  }
  return false;
}

}  // namespace shoal::daemon
