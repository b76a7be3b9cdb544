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

namespace {

std::string http_date() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

bool status_has_no_body(unsigned status) {
  return (status >= 100 && status < 200) || status == 204 || status == 304;
}

}  // namespace

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

responder::state::~state() {
  if (!sent.load() && conn) {
    net::post(ex, [c = conn] { c->on_response(response::text(500, "handler did not answer\n")); });
  }
}

void responder::send(response r) const {
  if (state_->sent.exchange(true)) return;
  net::post(state_->ex,
            [c = state_->conn, r = std::move(r)]() mutable { c->on_response(std::move(r)); });
}

bool responder::client_gone() const { return state_->gone.load(); }

void connection::close_now() {
  if (closed_) return;
  closed_ = true;
  if (auto st = current_.lock()) st->gone = true;
  if (source_) {
    source_->cancel();
    source_.reset();
  }
  beast::error_code ec;
  timer_.cancel();
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  srv_->remove(this);
}

void connection::arm_write_timer() {
  timer_.expires_after(srv_->opts.write_timeout);
  timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
    if (ec) return;
    if (auto c = weak.lock()) {
      beast::error_code e2;
      c->stream_.socket().cancel(e2);
    }
  });
}

void connection::on_response(response&& r) {
  if (closed_ || !busy_) return;  // a late answer for a request already handled
  if (auto st = current_.lock()) st->sent = true;
  status_ = r.status;
  sent_ = 0;
  if (r.close) keep_alive_ = false;

  // Work out the body length and apply Range.
  std::optional<std::uint64_t> length;
  if (auto* s = std::get_if<std::string>(&r.body))
    length = s->size();
  else if (auto* f = std::get_if<file_body>(&r.body))
    length = f->length;
  else if (auto* sb = std::get_if<stream_body>(&r.body))
    length = sb->length;
  else
    length = 0;

  std::uint64_t body_off = 0;
  std::optional<std::uint64_t> body_len = length;
  if (r.rangeable && r.status == 200 && length) {
    r.headers.set(bhttp::field::accept_ranges, "bytes");
    auto spec = parse_range(range_header_, *length);
    if (spec.kind == range_kind::single) {
      r.status = 206;
      r.headers.set(bhttp::field::content_range, content_range(spec.range, *length));
      body_off = spec.range.first;
      body_len = spec.range.length();
    } else if (spec.kind == range_kind::unsatisfiable) {
      r.status = 416;
      r.headers.set(bhttp::field::content_range, unsatisfied_range(*length));
      r.headers.set(bhttp::field::content_type, "text/plain; charset=utf-8");
      r.body = std::string("range not satisfiable\n");
      body_off = 0;
      body_len = std::string("range not satisfiable\n").size();
    }
  }
  status_ = r.status;

  header_ = {};
  header_.result(r.status);
  header_.version(11);
  for (const auto& f : r.headers) header_.insert(f.name_string(), f.value());
  header_.result(r.status);
  if (header_.find(bhttp::field::server) == header_.end())
    header_.set(bhttp::field::server, srv_->opts.name);
  header_.set(bhttp::field::date, http_date());
  header_.keep_alive(keep_alive_);
  chunked_ = false;
  const bool no_body = status_has_no_body(r.status);
  if (no_body) {
    header_.erase(bhttp::field::content_length);
  } else if (body_len) {
    bool explicit_len = std::holds_alternative<std::monostate>(r.body) && head_ &&
                        header_.find(bhttp::field::content_length) != header_.end();
    if (!explicit_len) header_.set(bhttp::field::content_length, std::to_string(*body_len));
  } else {
    header_.set(bhttp::field::transfer_encoding, "chunked");
    chunked_ = true;
  }

  if (head_ || no_body) {
    write_header([this] { finish(); });
    return;
  }
  if (auto* s = std::get_if<std::string>(&r.body)) {
    std::string b =
        s->substr(static_cast<std::size_t>(body_off), static_cast<std::size_t>(*body_len));
    write_header([this, b = std::move(b)]() mutable { send_string(std::move(b)); });
  } else if (auto* f = std::get_if<file_body>(&r.body)) {
    auto fd = f->fd;
    std::uint64_t off = f->offset + body_off;
    std::uint64_t len = *body_len;
    write_header(
        [this, fd, off, len] { send_file(fd->get(), off, len, [this, fd] { finish(); }); });
  } else if (auto* sb = std::get_if<stream_body>(&r.body)) {
    std::uint64_t len = body_len ? *body_len : UINT64_MAX;
    source_ = sb->open ? sb->open(body_off, len) : nullptr;
    if (!source_) {
      // Headers not sent yet: we can still answer properly.
      response e = response::text(500, "body source unavailable\n");
      busy_ = true;
      return on_response(std::move(e));
    }
    remaining_ = body_len;
    ++source_gen_;
    write_header([this] { pump(); });
  } else {
    write_header([this] { finish(); });
  }
}

void connection::write_header(std::function<void()> next) {
  serializer_.emplace(header_);
  stream_.expires_after(srv_->opts.write_timeout);
  bhttp::async_write_header(
      stream_, *serializer_,
      [self = shared_from_this(), next = std::move(next)](beast::error_code ec, std::size_t) {
        if (ec) return self->abort("write header: " + ec.message());
        next();
      });
}

void connection::send_string(std::string body) {
  auto buf = std::make_shared<std::string>(std::move(body));
  stream_.expires_after(srv_->opts.write_timeout);
  net::async_write(stream_, net::buffer(*buf),
                   [self = shared_from_this(), buf](beast::error_code ec, std::size_t n) {
                     self->sent_ += n;
                     if (ec) return self->abort("write body: " + ec.message());
                     self->finish();
                   });
}

void connection::send_file(int fd, std::uint64_t off, std::uint64_t len,
                           std::function<void()> next) {
  auto& sock = stream_.socket();
  beast::error_code ec;
  sock.non_blocking(true, ec);
  const int sfd = sock.native_handle();
  std::uint64_t budget = 8u << 20;  // yield to other connections after this many bytes
  while (len > 0) {
    off_t o = static_cast<off_t>(off);
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(len, 1u << 30));
    ssize_t n = ::sendfile(sfd, fd, &o, want);
    if (n > 0) {
      off += static_cast<std::uint64_t>(n);
      len -= static_cast<std::uint64_t>(n);
      sent_ += static_cast<std::uint64_t>(n);
      if (static_cast<std::uint64_t>(n) >= budget) {
        net::post(executor(),
                  [self = shared_from_this(), fd, off, len, next = std::move(next)]() mutable {
                    if (self->closed_) return;
                    self->send_file(fd, off, len, std::move(next));
                  });
        return;
      }
      budget -= static_cast<std::uint64_t>(n);
      continue;
    }
    if (n == 0) return abort("sendfile: file ended " + std::to_string(len) + " bytes early");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      arm_write_timer();
      sock.async_wait(tcp::socket::wait_write,
                      [self = shared_from_this(), fd, off, len,
                       next = std::move(next)](beast::error_code wec) mutable {
                        self->timer_.cancel();
                        if (self->closed_) return;
                        if (wec) {
                          return self->abort(wec == net::error::operation_aborted
                                                 ? "client stopped reading (write timeout)"
                                                 : "wait for socket: " + wec.message());
                        }
                        self->send_file(fd, off, len, std::move(next));
                      });
      return;
    }
    return abort(std::string("sendfile: ") + std::strerror(errno));
  }
  next();
}

void connection::pump() {
  if (closed_) return;
  if (remaining_ && *remaining_ == 0) {
    // All bytes sent: release the source before the next request.
    source_.reset();
    return finish();
  }
  std::size_t want = srv_->opts.stream_chunk_bytes;
  if (remaining_) want = static_cast<std::size_t>(std::min<std::uint64_t>(want, *remaining_));
  auto gen = source_gen_;
  // A producer that never answers must not pin the connection forever.
  timer_.expires_after(srv_->opts.source_timeout);
  timer_.async_wait([weak = weak_from_this(), gen](beast::error_code ec) {
    if (ec) return;
    auto self = weak.lock();
    if (!self || self->closed_ || self->source_gen_ != gen || !self->source_) return;
    self->abort("body source produced nothing for " +
                std::to_string(self->srv_->opts.source_timeout.count()) + " ms");
  });
  // The callback holds the connection alive while the producer works.
  source_->next(want, [self = shared_from_this(), gen](result<chunk> c) mutable {
    auto ex = self->executor();
    net::post(ex, [self = std::move(self), gen, c = std::move(c)]() mutable {
      if (self->closed_ || self->source_gen_ != gen || !self->source_) return;
      self->timer_.cancel();
      self->on_chunk(std::move(c));
    });
  });
}

void connection::on_chunk(result<chunk> c) {
  if (!c) return abort("body source: " + c.error().to_string());
  switch (c->type) {
    case chunk::kind::eof:
      if (remaining_ && *remaining_ > 0) {
        return abort("body source ended " + std::to_string(*remaining_) + " bytes early");
      }
      source_.reset();
      if (chunked_) {
        auto tail = std::make_shared<std::string>("0\r\n\r\n");
        stream_.expires_after(srv_->opts.write_timeout);
        net::async_write(stream_, net::buffer(*tail),
                         [self = shared_from_this(), tail](beast::error_code ec, std::size_t) {
                           if (ec) return self->abort("write: " + ec.message());
                           self->finish();
                         });
        return;
      }
      return finish();
    case chunk::kind::data: {
      if (c->data.empty()) return pump();
      if (remaining_ && c->data.size() > *remaining_) {
        return abort("body source produced more bytes than announced");
      }
      const std::uint64_t payload = c->data.size();
      auto buf = std::make_shared<std::string>();
      if (chunked_) {
        char hdr[32];
        std::snprintf(hdr, sizeof hdr, "%zx\r\n", c->data.size());
        *buf = hdr;
        *buf += c->data;
        *buf += "\r\n";
      } else {
        *buf = std::move(c->data);
      }
      stream_.expires_after(srv_->opts.write_timeout);
      net::async_write(
          stream_, net::buffer(*buf),
          [self = shared_from_this(), buf, payload](beast::error_code ec, std::size_t) {
            if (ec) return self->abort("write: " + ec.message());
            self->sent_ += payload;
            if (self->remaining_) *self->remaining_ -= payload;
            self->pump();
          });
      return;
    }
    case chunk::kind::file: {
      if (c->length == 0) return pump();
      if (remaining_ && c->length > *remaining_) {
        return abort("body source produced more bytes than announced");
      }
      std::uint64_t len = c->length;
      auto after = [this, len] {
        if (remaining_) *remaining_ -= len;
        if (chunked_) {
          auto crlf = std::make_shared<std::string>("\r\n");
          net::async_write(stream_, net::buffer(*crlf),
                           [self = shared_from_this(), crlf](beast::error_code ec, std::size_t) {
                             if (ec) return self->abort("write: " + ec.message());
                             self->pump();
                           });
          return;
        }
        pump();
      };
      if (chunked_) {
        auto hdr = std::make_shared<std::string>();
        char h[32];
        std::snprintf(h, sizeof h, "%llx\r\n", static_cast<unsigned long long>(len));
        *hdr = h;
        int fd = c->fd;
        std::uint64_t off = c->offset;
        net::async_write(stream_, net::buffer(*hdr),
                         [self = shared_from_this(), hdr, fd, off, len, after](beast::error_code ec,
                                                                               std::size_t) {
                           if (ec) return self->abort("write: " + ec.message());
                           self->send_file(fd, off, len, after);
                         });
        return;
      }
      send_file(c->fd, c->offset, len, after);
      return;
    }
  }
}

void connection::finish() {
  if (closed_) return;
  source_.reset();
  if (srv_->opts.on_request_done) {
    request_log l{
        method_, target_, status_, sent_, false, {}, std::chrono::steady_clock::now() - started_,
        remote_};
    srv_->opts.on_request_done(l);
  }
  current_.reset();
  busy_ = false;
  if (!keep_alive_ || srv_->stopping.load()) {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    close_now();
    return;
  }
  do_read();
}

void connection::abort(std::string why) {
  if (closed_) return;
  if (srv_->opts.on_request_done) {
    request_log l{
        method_, target_, status_, sent_, true, why, std::chrono::steady_clock::now() - started_,
        remote_};
    srv_->opts.on_request_done(l);
  }
  log::debug("http response aborted", log::kv("target", target_), log::kv("reason", why),
             log::kv("bytes_sent", sent_));
  close_now();
}

// ---------------------------------------------------------------------------------------------
// server

void server::impl::do_accept() {
  acceptor.async_accept(
      net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
        if (ec) {
          if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
          // EMFILE and friends: log, pause briefly so we do not spin, then continue.
          log::warn("http accept failed", log::kv("error", ec.message()));
          auto t = std::make_shared<net::steady_timer>(self->ioc, std::chrono::milliseconds(50));
          t->async_wait([self, t](beast::error_code) {
            if (!self->stopping) self->do_accept();
          });
          return;
        }
        if (self->stopping) return;
        std::size_t n;
        {
          std::lock_guard lk(self->mu);
          n = self->conns.size();
        }
        if (n >= self->opts.max_connections) {
          beast::error_code e2;
          s.close(e2);
        } else {
          auto c = std::make_shared<connection>(std::move(s), self);
          self->add(c);
          c->start();
        }
        self->do_accept();
      });
}

void server::impl::add(const std::shared_ptr<connection>& c) {
  std::lock_guard lk(mu);
  conns[c.get()] = c;
}

void server::impl::remove(connection* c) {
  std::lock_guard lk(mu);
  conns.erase(c);
}

server::server(net::io_context& ioc, server_options opts, handler h)
    : impl_(std::make_shared<impl>(ioc, std::move(opts), std::move(h))) {
  // sendfile(2) to a socket whose client has gone raises SIGPIPE (it has no MSG_NOSIGNAL), and
  // its default action kills the whole daemon. Every write here handles EPIPE as an error, so
  // the signal is ignored process-wide, once, before the first connection.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { ::signal(SIGPIPE, SIG_IGN); });
}

server::~server() { stop(std::chrono::milliseconds(0)); }

status server::listen(const std::string& host, std::uint16_t port) {
  beast::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec)
    return fail(errc::invalid_argument, "listen: bad address \"" + host + "\": " + ec.message());
  tcp::endpoint ep(addr, port);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (ec)
    return fail(ec, "listen " + host + ":" + std::to_string(port) + ": open: " + ec.message());
  a.set_option(net::socket_base::reuse_address(true), ec);
  a.bind(ep, ec);
  if (ec)
    return fail(ec, "listen " + host + ":" + std::to_string(port) + ": bind: " + ec.message());
  a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail(ec, "listen " + host + ":" + std::to_string(port) + ": " + ec.message());
  net::dispatch(a.get_executor(), [self = impl_] { self->do_accept(); });
  return {};
}

std::uint16_t server::port() const { return local_endpoint().port(); }

tcp::endpoint server::local_endpoint() const {
  beast::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? tcp::endpoint{} : ep;
}

std::size_t server::connections() const {
  std::lock_guard lk(impl_->mu);
  return impl_->conns.size();
}

void server::stop(std::chrono::milliseconds grace) {
  auto self = impl_;
  if (self->stopping.exchange(true)) return;
  net::post(self->acceptor.get_executor(), [self] {
    beast::error_code ec;
    self->acceptor.close(ec);
  });
  std::vector<std::shared_ptr<connection>> live;
  {
    std::lock_guard lk(self->mu);
    for (auto& [p, w] : self->conns) {
      if (auto c = w.lock()) live.push_back(std::move(c));
    }
  }
  for (auto& c : live) net::post(c->executor(), [c] { c->on_stop(); });
  // After the grace period, close whatever is left.
  auto t = std::make_shared<net::steady_timer>(self->ioc, grace);
  t->async_wait([self, t](beast::error_code) {
    std::vector<std::shared_ptr<connection>> rest;
    {
      std::lock_guard lk(self->mu);
      for (auto& [p, w] : self->conns) {
        if (auto c = w.lock()) rest.push_back(std::move(c));
      }
    }
    for (auto& c : rest) net::post(c->executor(), [c] { c->force_close(); });
  });
}

}  // namespace shoal::http
