// The HTTP server of common/http_server.h: accepting, tracking and stopping connections
// (http_connection.h has the connection itself).
#include "http_connection.h"

namespace shoal::http {

using namespace server_detail;

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
