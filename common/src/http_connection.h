#pragma once
// The connection machinery behind common/http_server.h, private to it: the server's shared state,
// the responder's state, and one connection (read a request, hand it to the handler, write the
// response: strings, files with sendfile, streamed chunks). http_connection.cc defines the
// connection's methods, http_connection_tls.cc the TLS ones (detection of plaintext clients,
// the handshake, the peer's identity, files without sendfile), http_server.cc the server's.
//
// The connection is a template on its stream: beast::tcp_stream for plain HTTP, an ssl_stream
// over it for TLS. Both are instantiated once (explicitly, in the .cc files), so the plain path
// is the same code it was before TLS existed: no virtual call per read or write. The server
// holds connections through connection_base, whose few virtual methods are per connection or
// per response (start, stop, shed, answer).
#include "common/http_server.h"
#include "common/http_range.h"

#include <sys/sendfile.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

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
#include <type_traits>
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

class connection_base;
using connection_ptr = std::shared_ptr<connection_base>;

// Connections are counted per client address: an IPv4 address, or the /64 of an IPv6 one (one
// host usually holds a whole /64). IPv4-mapped IPv6 addresses count as the IPv4 address.
using addr_key = std::array<unsigned char, 16>;
addr_key address_key(const net::ip::address& a);
std::string address_key_text(const addr_key& k);

struct server::impl : std::enable_shared_from_this<server::impl> {
  struct conn_entry {
    std::weak_ptr<connection_base> conn;
    addr_key addr{};
    std::uint64_t seq = 0;  // accept order: lower is older
    bool shedding = false;  // picked for eviction, close pending on its strand
  };
  struct addr_entry {
    std::size_t count = 0;
    std::map<std::uint64_t, connection_base*> by_age;  // seq → connection
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
  std::unordered_map<connection_base*, conn_entry> conns;
  std::map<addr_key, addr_entry> addrs;
  std::set<std::pair<std::size_t, addr_key>> ranking;
  std::uint64_t next_seq = 0;
  std::size_t shedding = 0;  // entries with shedding set
  std::atomic<std::uint64_t> refused{0}, evicted{0};
  // Accept strand only: the last "connections shed" log line and the counts it reported.
  std::chrono::steady_clock::time_point shed_logged{};
  std::uint64_t logged_refused = 0, logged_evicted = 0;
  // TLS refusals (server::tls_refused) and the budget of their log lines.
  std::atomic<std::uint64_t> tls_plaintext{0}, tls_failed{0};
  std::mutex tls_log_mu;
  std::chrono::steady_clock::time_point tls_log_window{};  // under tls_log_mu
  int tls_log_lines = 0;                                   // under tls_log_mu
  std::uint64_t tls_log_suppressed = 0;                    // under tls_log_mu

  impl(net::io_context& c, server_options o, handler hh)
      : ioc(c), opts(std::move(o)), h(std::move(hh)), acceptor(net::make_strand(c)) {}

  void do_accept();
  void on_accept(tcp::socket s);
  void on_accept_error(const beast::error_code& ec);
  // Admission of a connection from `k` (under mu): nullptr means refuse; otherwise the new
  // connection, registered, and `victim` maybe set to a waiting connection to close for room.
  // `trusted` is the seam for authenticated nodes (reserved_connections); false for now.
  connection_ptr admit(tcp::socket& s, const addr_key& k, bool trusted, connection_ptr& victim);
  // A new connection of the right kind (plain, or TLS with the context's current certificate).
  connection_ptr make_connection(tcp::socket&& s);
  // The oldest waiting connection of the biggest holder with more than `newcomer_count`
  // connections, marked shedding; nullptr when there is none (under mu).
  connection_ptr pick_victim(std::size_t newcomer_count);
  void set_count(addr_entry& e, const addr_key& k, std::size_t n);  // under mu
  void remove(connection_base* c);
  void unmark_shedding(connection_base* c);
  void log_shedding();
  // Whether a TLS refusal may be logged now: at most 20 lines per 10 s; the first line of the
  // next window says how many were left out.
  bool tls_log_allowed(std::uint64_t& suppressed);
};

// Holds the connection alive while a handler works on the request (nothing else does then).
struct responder::state {
  connection_ptr conn;
  strand_t ex;
  std::atomic<bool> sent{false};
  std::atomic<bool> gone{false};
  state(connection_ptr c, strand_t e) : conn(std::move(c)), ex(std::move(e)) {}
  ~state();
};

// What the server and responders see of a connection. Lives on: its strand (every method but
// waiting() must run there).
class connection_base : public std::enable_shared_from_this<connection_base> {
 public:
  explicit connection_base(std::shared_ptr<server::impl> srv) : srv_(std::move(srv)) {}
  virtual ~connection_base() { srv_->remove(this); }  // in case no path closed it
  connection_base(const connection_base&) = delete;
  connection_base& operator=(const connection_base&) = delete;

  virtual strand_t executor() = 0;
  virtual void start() = 0;
  // Called by server::stop on the strand.
  virtual void on_stop() = 0;
  virtual void force_close() = 0;
  // Shedding (server::impl::pick_victim): close if still waiting for a request.
  virtual void shed() = 0;
  virtual void on_response(response&& r) = 0;
  // True while the connection waits for a request or a TLS handshake (readable from any
  // thread).
  [[nodiscard]] bool waiting() const { return waiting_.load(std::memory_order_relaxed); }

 protected:
  std::shared_ptr<server::impl> srv_;
  std::atomic<bool> waiting_{false};
};

using plain_stream = beast::tcp_stream;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

template <class Stream>
class connection final : public connection_base {
 public:
  static constexpr bool is_tls = std::is_same_v<Stream, tls_stream>;

  connection(tcp::socket&& s, std::shared_ptr<server::impl> srv) requires(!is_tls)
      : connection_base(std::move(srv)), stream_(std::move(s)), timer_(stream_.get_executor()) {
    init_remote();
  }
  connection(tcp::socket&& s, std::shared_ptr<net::ssl::context> ctx,
             std::shared_ptr<server::impl> srv) requires(is_tls)
      : connection_base(std::move(srv)),
        ctx_(std::move(ctx)),
        stream_(std::move(s), *ctx_),
        timer_(stream_.get_executor()) {
    init_remote();
    peer_.tls = true;
  }

  strand_t executor() override { return stream_.get_executor(); }

  void start() override {
    net::dispatch(executor(), [self = self()] {
      if constexpr (is_tls)
        self->handshake();
      else
        self->do_read();
    });
  }

  void on_stop() override {
    if (!busy_)
      close_now();
    else
      keep_alive_ = false;
  }
  void force_close() override { close_now(); }
  void shed() override {
    if (closed_) return;
    if (busy_) return srv_->unmark_shedding(this);
    close_now();
  }

  void on_response(response&& r) override;

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
    lowest().expires_after(srv_->opts.idle_timeout);
    stream_.async_read_some(buf_.prepare(4096),
                            [self = self()](beast::error_code ec, std::size_t n) {
                              if (ec) return self->on_read_error(ec);
                              self->buf_.commit(n);
                              self->read_header(self->srv_->opts.header_timeout);
                            });
  }

  void read_header(std::chrono::milliseconds deadline) {
    lowest().expires_after(deadline);
    bhttp::async_read_header(
        stream_, buf_, *parser_,
        [self = self()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    waiting_ = false;
    if (ec) return on_read_error(ec);
    busy_ = true;
    if (parser_->is_done()) return on_read(ec);
    lowest().expires_after(srv_->opts.read_timeout);
    bhttp::async_read(stream_, buf_, *parser_,
                      [self = self()](beast::error_code ec2, std::size_t) { self->on_read(ec2); });
  }

  void on_read_error(beast::error_code ec) {
    waiting_ = false;
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::operation_aborted || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::ssl::error::stream_truncated) {
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
    req.peer = peer_;
    req.version = msg.version();
    req.received = std::chrono::steady_clock::now();

    keep_alive_ = msg.keep_alive() && !srv_->stopping.load();
    head_ = req.method == verb::head;
    method_ = req.method_string;
    target_ = req.target;
    range_header_ = std::string(req.header("Range"));
    started_ = req.received;
    lowest().expires_never();

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

  std::shared_ptr<connection> self() {
    return std::static_pointer_cast<connection>(shared_from_this());
  }
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }
  tcp::socket& sock() { return lowest().socket(); }
  void init_remote() {
    beast::error_code ec;
    remote_ = sock().remote_endpoint(ec);
  }

  // TLS only (http_connection_tls.cc): tell a plaintext client apart, shake hands within the
  // header deadline, read the peer's identity; refusals are answered and logged there.
  void handshake();
  void on_detect(beast::error_code ec, bool is_tls_hello);
  void on_handshake(beast::error_code ec, std::size_t used);
  void refuse_plaintext();
  void drain_plaintext(std::size_t drained);
  void log_refusal(std::string_view what, std::string_view why);
  // Files without sendfile(2): pread into a buffer, then an encrypted write.
  void send_file_tls(int fd, std::uint64_t off, std::uint64_t len, std::function<void()> next);
  // Body bytes in TLS records: `data` sealed into records_ in one go (copied: the caller's buffer
  // is free on return), then one write of all of them to the socket.
  void write_sealed(const char* data, std::size_t len, std::function<void(beast::error_code)> done);

  // A body write: plain, straight into the socket; TLS, through write_sealed.
  void write_body(const char* data, std::size_t len, std::function<void(beast::error_code)> done);

  std::shared_ptr<const multipart_body> apply_range(response& r, std::uint64_t length,
                                                    std::uint64_t& body_off,
                                                    std::optional<std::uint64_t>& body_len);
  void write_header(std::function<void()> next);
  void send_string(std::string body);
  void send_file(int fd, std::uint64_t off, std::uint64_t len, std::function<void()> next);
  // A multipart/byteranges body from a file: part i's header, its bytes (sendfile), the next
  // part, then the closing boundary.
  void send_parts(std::shared_ptr<unique_fd> fd, std::uint64_t base,
                  std::shared_ptr<const multipart_body> mp, std::size_t i);
  void pump();
  void on_chunk(result<chunk> c);
  void finish();
  void abort(std::string why);
  void close_now();
  void arm_write_timer();

  std::shared_ptr<net::ssl::context> ctx_;  // TLS: the certificate this connection presents
  Stream stream_;
  beast::flat_buffer buf_;
  net::steady_timer timer_;
  tcp::endpoint remote_;
  tls::peer_identity peer_;  // TLS: set once the handshake is done
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;

  // Per-request state.
  bool first_ = true;  // no request read yet
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
  std::vector<char> file_buf_;  // TLS: a file region on its way into the TLS stream
  std::vector<char> records_;   // TLS: file_buf_ sealed into TLS records, being sent
};

}  // namespace shoal::http
