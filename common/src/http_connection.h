#pragma once
// The connection machinery behind common/http_server.h, private to it: the server's shared state,
// the responder's state, and one connection (read a request, hand it to the handler, write the
// response: strings, files with sendfile, streamed chunks). http_connection.cc defines the
// connection's methods, http_server.cc the server's.
#include "common/http_server.h"

#include <sys/sendfile.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <mutex>
#include <unordered_map>

#include "common/http_range.h"
#include "common/log.h"

namespace shoal::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using strand_t = net::any_io_executor;

namespace server_detail {

inline std::string http_date() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

inline bool status_has_no_body(unsigned status) {
  return (status >= 100 && status < 200) || status == 204 || status == 304;
}

}  // namespace server_detail

// ---------------------------------------------------------------------------------------------
// connection

class connection;

struct server::impl : std::enable_shared_from_this<server::impl> {
  net::io_context& ioc;
  server_options opts;
  handler h;
  tcp::acceptor acceptor;
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;
  std::unordered_map<connection*, std::weak_ptr<connection>> conns;

  impl(net::io_context& c, server_options o, handler hh)
      : ioc(c), opts(std::move(o)), h(std::move(hh)), acceptor(net::make_strand(c)) {}

  void do_accept();
  void add(const std::shared_ptr<connection>& c);
  void remove(connection* c);
};

// Holds the connection alive while a handler works on the request (nothing else does then).
struct responder::state {
  std::shared_ptr<connection> conn;
  strand_t ex;
  std::atomic<bool> sent{false};
  std::atomic<bool> gone{false};
  state(std::shared_ptr<connection> c, strand_t e) : conn(std::move(c)), ex(std::move(e)) {}
  ~state();
};

class connection : public std::enable_shared_from_this<connection> {
 public:
  connection(tcp::socket&& s, std::shared_ptr<server::impl> srv)
      : stream_(std::move(s)), srv_(std::move(srv)), timer_(stream_.get_executor()) {
    beast::error_code ec;
    remote_ = stream_.socket().remote_endpoint(ec);
  }

  strand_t executor() { return stream_.get_executor(); }

  void start() {
    net::dispatch(executor(), [self = shared_from_this()] { self->do_read(); });
  }

  // Called by server::stop on the strand.
  void on_stop() {
    if (!busy_)
      close_now();
    else
      keep_alive_ = false;
  }
  void force_close() { close_now(); }

  void on_response(response&& r);

 private:
  void do_read() {
    if (closed_) return;
    if (srv_->stopping.load()) {
      close_now();
      return;
    }
    parser_.emplace();
    parser_->header_limit(
        static_cast<std::uint32_t>(std::min<std::size_t>(srv_->opts.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(srv_->opts.max_body_bytes);
    busy_ = false;
    stream_.expires_after(srv_->opts.idle_timeout);
    bhttp::async_read_header(
        stream_, buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    busy_ = true;
    if (parser_->is_done()) return on_read(ec);
    stream_.expires_after(srv_->opts.read_timeout);
    bhttp::async_read(
        stream_, buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec2, std::size_t) { self->on_read(ec2); });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::operation_aborted || ec == beast::error::timeout ||
        ec == net::error::connection_reset) {
      return close_now();
    }
    unsigned status = 400;
    std::string why = "bad request: " + ec.message();
    if (ec == bhttp::error::header_limit) {
      status = 431;
      why = "request header fields too large (limit " +
            std::to_string(srv_->opts.max_header_bytes) + " bytes)";
    } else if (ec == bhttp::error::body_limit) {
      status = 413;
      why =
          "request body too large (limit " + std::to_string(srv_->opts.max_body_bytes) + " bytes)";
    }
    // Answer the error and close: the stream position is unknown after a parse failure.
    busy_ = true;
    keep_alive_ = false;
    head_ = false;
    method_ = "-";
    target_ = "-";
    started_ = std::chrono::steady_clock::now();
    response r = response::text(status, why + "\n");
    r.close = true;
    on_response(std::move(r));
  }

  void on_read(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    auto msg = parser_->release();
    request req;
    req.method = msg.method();
    req.method_string = std::string(msg.method_string());
    req.target = std::string(msg.target());
    auto q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) req.query = req.target.substr(q + 1);
    // Copy field by field: Beast keeps the method and target inside the fields object, so moving
    // it out would leave the message with dangling storage.
    for (const auto& f : msg) req.headers.insert(f.name_string(), f.value());
    req.body = std::move(msg.body());
    req.remote = remote_;
    req.version = msg.version();
    req.received = std::chrono::steady_clock::now();

    keep_alive_ = msg.keep_alive() && !srv_->stopping.load();
    head_ = req.method == verb::head;
    method_ = req.method_string;
    target_ = req.target;
    range_header_ = std::string(req.header("Range"));
    started_ = req.received;
    stream_.expires_never();

    auto st = std::make_shared<responder::state>(shared_from_this(), executor());
    current_ = st;
    responder resp(st);
    try {
      srv_->h(std::move(req), resp);
    } catch (const std::exception& e) {
      log::error("http handler threw", log::kv("target", target_), log::kv("error", e.what()));
      resp.send(response::text(500, "internal error\n"));
    } catch (...) {
      resp.send(response::text(500, "internal error\n"));
    }
  }

  void write_header(std::function<void()> next);
  void send_string(std::string body);
  void send_file(int fd, std::uint64_t off, std::uint64_t len, std::function<void()> next);
  void pump();
  void on_chunk(result<chunk> c);
  void finish();
  void abort(std::string why);
  void close_now();
  void arm_write_timer();

  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::shared_ptr<server::impl> srv_;
  net::steady_timer timer_;
  tcp::endpoint remote_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;

  // Per-request state.
  bool busy_ = false;
  bool closed_ = false;
  bool keep_alive_ = true;
  bool head_ = false;
  std::string method_, target_, range_header_;
  std::chrono::steady_clock::time_point started_;
  std::weak_ptr<responder::state> current_;
  unsigned status_ = 0;
  std::uint64_t sent_ = 0;
  bhttp::response<bhttp::empty_body> header_;
  std::optional<bhttp::response_serializer<bhttp::empty_body>> serializer_;
  std::unique_ptr<body_source> source_;
  std::optional<std::uint64_t> remaining_;  // for streamed bodies with a known length
  bool chunked_ = false;
  std::string chunk_buf_;
  std::uint64_t source_gen_ = 0;
};

}  // namespace shoal::http
