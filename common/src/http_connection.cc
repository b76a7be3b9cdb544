// One HTTP/1.1 connection of common/http_server.h (declared in http_connection.h).
#include "http_connection.h"

namespace shoal::http {

using namespace server_detail;

namespace {

// Several ranges of a streamed body as one multipart/byteranges body: each part's head, then the
// part's bytes from a source the body opens for that range alone (so each waits only for its own
// bytes), then the closing delimiter.
class multipart_source final : public body_source {
 public:
  multipart_source(std::shared_ptr<const multipart_body> mp, stream_body body)
      : st_(std::make_shared<state>()) {
    st_->mp = std::move(mp);
    st_->body = std::move(body);
  }
  void next(std::size_t max_bytes, std::function<void(result<chunk>)> done) override {
    step(st_, max_bytes, std::move(done));
  }
  void cancel() override {
    std::lock_guard lk(st_->mu);
    st_->cancelled = true;
    if (st_->inner) st_->inner->cancel();
  }
  // The current part's source says (between parts nothing waits on a producer).
  [[nodiscard]] std::optional<std::chrono::milliseconds> wait_limit() const override {
    std::lock_guard lk(st_->mu);
    return st_->inner ? st_->inner->wait_limit() : std::nullopt;
  }

 private:
  struct state {
    std::mutex mu;  // inner and cancelled (cancel() comes from the connection's thread)
    std::shared_ptr<const multipart_body> mp;
    stream_body body;
    std::size_t part = 0;
    bool in_body = false, ended = false, cancelled = false;
    std::unique_ptr<body_source> inner, retired;
  };
  static void step(const std::shared_ptr<state>& st, std::size_t max_bytes,
                   std::function<void(result<chunk>)> done) {
    const auto& mp = *st->mp;
    if (st->ended) return done(chunk::end());
    if (!st->in_body) {
      if (st->part == mp.ranges.size()) {
        st->ended = true;
        return done(chunk::bytes(mp.tail));
      }
      const auto& r = mp.ranges[st->part];
      auto src = st->body.open ? st->body.open(r.first, r.length()) : nullptr;
      if (!src) return done(fail(errc::internal, "body source unavailable for a range part"));
      {
        std::lock_guard lk(st->mu);
        if (st->cancelled) src->cancel();
        // The previous part's source may be the caller (its callback ended the part): kept
        // until the part after, never destroyed from inside its own callback.
        st->retired = std::move(st->inner);
        st->inner = std::move(src);
      }
      st->in_body = true;
      return done(chunk::bytes(mp.heads[st->part]));
    }
    body_source* inner;
    {
      std::lock_guard lk(st->mu);
      inner = st->inner.get();
    }
    inner->next(max_bytes, [st, max_bytes, done = std::move(done)](result<chunk> c) mutable {
      if (c && c->type == chunk::kind::eof) {
        // This part is complete: the next part's head (its source is opened there).
        st->in_body = false;
        ++st->part;
        return step(st, max_bytes, std::move(done));
      }
      done(std::move(c));
    });
  }
  std::shared_ptr<state> st_;
};

}  // namespace

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

template <class Stream>
void connection<Stream>::close_now() {
  if (closed_) return;
  closed_ = true;
  if (auto st = current_.lock()) st->gone = true;
  if (source_) {
    source_->cancel();
    source_.reset();
  }
  beast::error_code ec;
  timer_.cancel();
  sock().shutdown(tcp::socket::shutdown_both, ec);
  sock().close(ec);
  srv_->remove(this);
}

template <class Stream>
void connection<Stream>::arm_write_timer() {
  timer_.expires_after(srv_->opts.write_timeout);
  timer_.async_wait([weak = std::weak_ptr<connection>(self())](beast::error_code ec) {
    if (ec) return;
    if (auto c = weak.lock()) {
      beast::error_code e2;
      c->sock().cancel(e2);
    }
  });
}

// Applies the request's Range to a 200 the handler marked rangeable: 206 for one range (body_off
// and body_len narrowed), a multipart body for several (returned), 416 when none is satisfiable.
template <class Stream>
std::shared_ptr<const multipart_body> connection<Stream>::apply_range(
    response& r, std::uint64_t length, std::uint64_t& body_off,
    std::optional<std::uint64_t>& body_len) {
  std::shared_ptr<const multipart_body> parts;
  if (r.rangeable && r.status == 200) {
    r.headers.set(bhttp::field::accept_ranges, "bytes");
    auto spec = parse_range(range_header_, length);
    // Several ranges: multipart/byteranges. A string or a file is cut here (send_parts); a
    // streamed body (still arriving) becomes a stream of the parts, each from its own source.
    if (spec.kind == range_kind::multi) {
      auto ct = r.headers.find(bhttp::field::content_type);
      auto mp = std::make_shared<multipart_body>(make_multipart(
          spec.ranges, length,
          ct == r.headers.end() ? std::string_view{} : std::string_view(ct->value())));
      r.status = 206;
      r.headers.set(bhttp::field::content_type, mp->content_type);
      body_len = mp->length();
      if (auto* sb = std::get_if<stream_body>(&r.body)) {
        const std::uint64_t total = mp->length();
        r.body = stream_body{total, [mp, inner = std::move(*sb)](std::uint64_t, std::uint64_t) {
                               return std::make_unique<multipart_source>(mp, inner);
                             }};
        return nullptr;
      }
      parts = std::move(mp);
    } else if (spec.kind == range_kind::single) {
      r.status = 206;
      r.headers.set(bhttp::field::content_range, content_range(spec.range, length));
      body_off = spec.range.first;
      body_len = spec.range.length();
    } else if (spec.kind == range_kind::unsatisfiable) {
      r.status = 416;
      r.headers.set(bhttp::field::content_range, unsatisfied_range(length));
      r.headers.set(bhttp::field::content_type, "text/plain; charset=utf-8");
      r.body = std::string("range not satisfiable\n");
      body_off = 0;
      body_len = std::string("range not satisfiable\n").size();
    }
  }
  return parts;
}

template <class Stream>
void connection<Stream>::on_response(response&& r) {
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
  auto parts = length ? apply_range(r, *length, body_off, body_len) : nullptr;
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
  if (parts) {
    if (auto* s = std::get_if<std::string>(&r.body)) {
      std::string b;
      b.reserve(static_cast<std::size_t>(*body_len));
      for (std::size_t i = 0; i < parts->ranges.size(); ++i) {
        b += parts->heads[i];
        b.append(*s, static_cast<std::size_t>(parts->ranges[i].first),
                 static_cast<std::size_t>(parts->ranges[i].length()));
      }
      b += parts->tail;
      write_header([this, b = std::move(b)]() mutable { send_string(std::move(b)); });
    } else {
      auto& f = std::get<file_body>(r.body);
      write_header([this, fd = f.fd, base = f.offset, parts] { send_parts(fd, base, parts, 0); });
    }
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

template <class Stream>
void connection<Stream>::write_header(std::function<void()> next) {
  serializer_.emplace(header_);
  lowest().expires_after(srv_->opts.write_timeout);
  bhttp::async_write_header(
      stream_, *serializer_,
      [self = self(), next = std::move(next)](beast::error_code ec, std::size_t) {
        if (ec) return self->abort("write header: " + ec.message());
        next();
      });
}

template <class Stream>
void connection<Stream>::send_string(std::string body) {
  auto buf = std::make_shared<std::string>(std::move(body));
  write_body(buf->data(), buf->size(), [self = self(), buf](beast::error_code ec) {
    if (ec) return self->abort("write body: " + ec.message());
    self->sent_ += buf->size();
    self->finish();
  });
}

template <class Stream>
void connection<Stream>::write_body(const char* data, std::size_t len,
                                    std::function<void(beast::error_code)> done) {
  // In slices of 64 KiB, each with its own write_timeout: the timeout is for a client that takes
  // no bytes, not for a whole body (a large JSON answer, a 1 MiB stream chunk to a reader slower
  // than 17 KiB/s, which a deadline for the whole write cut off while it was reading).
  constexpr std::size_t slice = 64 * 1024;
  const std::size_t n = std::min(len, slice);
  auto next = [self = self(), data, len, n, done = std::move(done)](beast::error_code ec) mutable {
    if (ec || n == len) return done(ec);
    self->write_body(data + n, len - n, std::move(done));
  };
  lowest().expires_after(srv_->opts.write_timeout);
  if constexpr (is_tls) {
    return write_sealed(data, n, std::move(next));
  }
  net::async_write(
      stream_, net::buffer(data, n),
      [next = std::move(next)](beast::error_code ec, std::size_t) mutable { next(ec); });
}

template <class Stream>
void connection<Stream>::send_file(int fd, std::uint64_t off, std::uint64_t len,
                                   std::function<void()> next) {
  if constexpr (is_tls) {
    return send_file_tls(fd, off, len, std::move(next));
  }
  auto& sk = sock();
  beast::error_code ec;
  sk.non_blocking(true, ec);
  const int sfd = sk.native_handle();
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
        net::post(executor(), [self = self(), fd, off, len, next = std::move(next)]() mutable {
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
      sk.async_wait(tcp::socket::wait_write, [self = self(), fd, off, len, next = std::move(next)](
                                                 beast::error_code wec) mutable {
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

template <class Stream>
void connection<Stream>::send_parts(std::shared_ptr<unique_fd> fd, std::uint64_t base,
                                    std::shared_ptr<const multipart_body> mp, std::size_t i) {
  if (closed_) return;
  const bool last = i == mp->ranges.size();
  const std::string& head = last ? mp->tail : mp->heads[i];
  lowest().expires_after(srv_->opts.write_timeout);
  write_body(head.data(), head.size(),
             [self = self(), fd = std::move(fd), base, mp, i, last,
              n = head.size()](beast::error_code ec) mutable {
               if (ec) return self->abort("write body: " + ec.message());
               self->sent_ += n;
               if (last) return self->finish();
               const byte_range r = mp->ranges[i];
               int raw = fd->get();
               self->send_file(raw, base + r.first, r.length(),
                               [self, fd = std::move(fd), base, mp, i]() mutable {
                                 self->send_parts(std::move(fd), base, std::move(mp), i + 1);
                               });
             });
}

template <class Stream>
void connection<Stream>::pump() {
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
  const auto limit = source_->wait_limit().value_or(srv_->opts.source_timeout);
  timer_.expires_after(limit);
  timer_.async_wait([weak = std::weak_ptr<connection>(self()), gen, limit](beast::error_code ec) {
    if (ec) return;
    auto self = weak.lock();
    if (!self || self->closed_ || self->source_gen_ != gen || !self->source_) return;
    self->abort("body source produced nothing for " + std::to_string(limit.count()) + " ms");
  });
  // The callback holds the connection alive while the producer works.
  source_->next(want, [self = self(), gen](result<chunk> c) mutable {
    auto ex = self->executor();
    net::post(ex, [self = std::move(self), gen, c = std::move(c)]() mutable {
      if (self->closed_ || self->source_gen_ != gen || !self->source_) return;
      self->timer_.cancel();
      self->on_chunk(std::move(c));
    });
  });
}

template <class Stream>
void connection<Stream>::on_chunk(result<chunk> c) {
  if (!c) return abort("body source: " + c.error().to_string());
  switch (c->type) {
    case chunk::kind::eof:
      if (remaining_ && *remaining_ > 0) {
        return abort("body source ended " + std::to_string(*remaining_) + " bytes early");
      }
      source_.reset();
      if (chunked_) {
        auto tail = std::make_shared<std::string>("0\r\n\r\n");
        lowest().expires_after(srv_->opts.write_timeout);
        net::async_write(stream_, net::buffer(*tail),
                         [self = self(), tail](beast::error_code ec, std::size_t) {
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
      lowest().expires_after(srv_->opts.write_timeout);
      write_body(buf->data(), buf->size(), [self = self(), buf, payload](beast::error_code ec) {
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
          // A deadline of its own: sendfile kept its own timer, so the stream's is stale.
          lowest().expires_after(srv_->opts.write_timeout);
          net::async_write(stream_, net::buffer(*crlf),
                           [self = self(), crlf](beast::error_code ec, std::size_t) {
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
        // As above: the stream's deadline is from the last write that set one, long ago.
        lowest().expires_after(srv_->opts.write_timeout);
        net::async_write(
            stream_, net::buffer(*hdr),
            [self = self(), hdr, fd, off, len, after](beast::error_code ec, std::size_t) {
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

template <class Stream>
void connection<Stream>::finish() {
  if (closed_) return;
  source_.reset();
  if (srv_->opts.on_request_done) {
    request_log l{
        method_, target_, status_, sent_, false, {}, std::chrono::steady_clock::now() - started_,
        remote_, peer_};
    srv_->opts.on_request_done(l);
  }
  current_.reset();
  busy_ = false;
  if (!keep_alive_ || srv_->stopping.load()) {
    beast::error_code ec;
    sock().shutdown(tcp::socket::shutdown_send, ec);
    close_now();
    return;
  }
  do_read();
}

template <class Stream>
void connection<Stream>::abort(std::string why) {
  if (closed_) return;
  if (srv_->opts.on_request_done) {
    request_log l{
        method_, target_, status_, sent_, true, why, std::chrono::steady_clock::now() - started_,
        remote_, peer_};
    srv_->opts.on_request_done(l);
  }
  log::debug("http response aborted", log::kv("target", target_), log::kv("reason", why),
             log::kv("bytes_sent", sent_));
  close_now();
}

// Both kinds of connection, compiled here once (the TLS-only members are in
// http_connection_tls.cc).
template class connection<plain_stream>;
template class connection<tls_stream>;

}  // namespace shoal::http
