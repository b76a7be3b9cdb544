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

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
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

// Connections are counted per client address: an IPv4 address, or the /64 of an IPv6 one (one
// host usually holds a whole /64). IPv4-mapped IPv6 addresses count as the IPv4 address.
using addr_key = std::array<unsigned char, 16>;
addr_key address_key(const net::ip::address& a);
std::string address_key_text(const addr_key& k);

struct server::impl : std::enable_shared_from_this<server::impl> {
  struct conn_entry {
    std::weak_ptr<connection> conn;
    addr_key addr{};
    std::uint64_t seq = 0;  // accept order: lower is older
    bool shedding = false;  // picked for eviction, close pending on its strand
  };
  struct addr_entry {
    std::size_t count = 0;
    std::map<std::uint64_t, connection*> by_age;  // seq → connection
  };

  net::io_context& ioc;
  server_options opts;
  handler h;
  tcp::acceptor acceptor;
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;
  // Under mu: every open connection, the per-address counts, and the addresses ordered by count
  // (the biggest holder is ranking.rbegin()). std::map/set, not hashes: the keys are the
  // clients' addresses, so no one can choose them to collide.
  std::unordered_map<connection*, conn_entry> conns;
  std::map<addr_key, addr_entry> addrs;
  std::set<std::pair<std::size_t, addr_key>> ranking;
  std::uint64_t next_seq = 0;
  std::size_t shedding = 0;  // entries with shedding set
  std::atomic<std::uint64_t> refused{0}, evicted{0};
  // Accept strand only: the last "connections shed" log line and the counts it reported.
  std::chrono::steady_clock::time_point shed_logged{};
  std::uint64_t logged_refused = 0, logged_evicted = 0;

  impl(net::io_context& c, server_options o, handler hh)
      : ioc(c), opts(std::move(o)), h(std::move(hh)), acceptor(net::make_strand(c)) {}

  void do_accept();
  void on_accept(tcp::socket s);
  void on_accept_error(const beast::error_code& ec);
  // Admission of a connection from `k` (under mu): nullptr means refuse; otherwise the new
  // connection, registered, and `victim` maybe set to a waiting connection to close for room.
  // `trusted` is the seam for authenticated nodes (reserved_connections); false for now.
  std::shared_ptr<connection> admit(tcp::socket& s, const addr_key& k, bool trusted,
                                    std::shared_ptr<connection>& victim);
  // The oldest waiting connection of the biggest holder with more than `newcomer_count`
  // connections, marked shedding; nullptr when there is none (under mu).
  std::shared_ptr<connection> pick_victim(std::size_t newcomer_count);
  void set_count(addr_entry& e, const addr_key& k, std::size_t n);  // under mu
  void remove(connection* c);
  void unmark_shedding(connection* c);
  void log_shedding();
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

  ~connection() { srv_->remove(this); }  // in case no path closed it

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
  // Shedding (server::impl::pick_victim): close if still waiting for a request.
  void shed() {
    if (closed_) return;
    if (busy_) return srv_->unmark_shedding(this);
    close_now();
  }
  // True while the connection waits for a request (readable from any thread).
  [[nodiscard]] bool waiting() const { return waiting_.load(std::memory_order_relaxed); }

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
    waiting_ = true;
    if (first_ || buf_.size() > 0) {
      // A fresh connection, or the next request already (partly) arrived: the header deadline
      // runs from now (bounded by idle_timeout too on a fresh connection that sends nothing).
      auto d = srv_->opts.header_timeout;
      if (first_) d = std::min(d, srv_->opts.idle_timeout);
      first_ = false;
      return read_header(d);
    }
    // Keep-alive: wait up to idle_timeout for the first byte of the next request, then give
    // the rest of its header header_timeout.
    stream_.expires_after(srv_->opts.idle_timeout);
    stream_.async_read_some(buf_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (ec) return self->on_read_error(ec);
                              self->buf_.commit(n);
                              self->read_header(self->srv_->opts.header_timeout);
                            });
  }

  void read_header(std::chrono::milliseconds deadline) {
    stream_.expires_after(deadline);
    bhttp::async_read_header(
        stream_, buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    waiting_ = false;
    if (ec) return on_read_error(ec);
    busy_ = true;
    if (parser_->is_done()) return on_read(ec);
    stream_.expires_after(srv_->opts.read_timeout);
    bhttp::async_read(
        stream_, buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec2, std::size_t) { self->on_read(ec2); });
  }

  void on_read_error(beast::error_code ec) {
    waiting_ = false;
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
  bool first_ = true;  // no request read yet
  std::atomic<bool> waiting_{false};
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
