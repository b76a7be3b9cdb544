// The HTTP server of common/http_server.h: accepting, tracking and stopping connections
// (http_connection.h has the connection itself).
#include "http_connection.h"

#include <utility>

#include "common/metrics.h"
#include "common/tls.h"

namespace shoal::http {

using namespace server_detail;

// ---------------------------------------------------------------------------------------------
// server

addr_key address_key(const net::ip::address& a) {
  addr_key k{};
  net::ip::address_v6 v6;
  if (a.is_v4()) {
    v6 = net::ip::make_address_v6(net::ip::v4_mapped, a.to_v4());
  } else {
    v6 = a.to_v6();
  }
  auto b = v6.to_bytes();
  std::copy(b.begin(), b.end(), k.begin());
  // IPv6 proper (not v4-mapped): the /64 is the unit.
  if (!v6.is_v4_mapped()) std::fill(k.begin() + 8, k.end(), 0);
  return k;
}

std::string address_key_text(const addr_key& k) {
  net::ip::address_v6::bytes_type b;
  std::copy(k.begin(), k.end(), b.begin());
  net::ip::address_v6 v6(b);
  if (v6.is_v4_mapped()) return net::ip::make_address_v4(net::ip::v4_mapped, v6).to_string();
  return v6.to_string() + "/64";
}

void server::impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc),
                        [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
                          if (ec) return self->on_accept_error(ec);
                          if (self->stopping) return;
                          self->on_accept(std::move(s));
                          // Never stop accepting: a refused connection is closed above, and the
                          // loop goes on.
                          self->do_accept();
                        });
}

void server::impl::on_accept_error(const beast::error_code& ec) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  // EMFILE and friends: free a descriptor by closing the oldest waiting connection of the
  // biggest holder, and try again shortly (the close runs on that connection's strand).
  connection_ptr victim;
  if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
    std::lock_guard lk(mu);
    victim = pick_victim(0);
  }
  if (victim) {
    evicted.fetch_add(1, std::memory_order_relaxed);
    net::post(victim->executor(), [victim] { victim->shed(); });
  }
  log::warn("http accept failed", log::kv("error", ec.message()),
            log::kv("closing_waiting_connection", victim != nullptr));
  auto t = std::make_shared<net::steady_timer>(
      ioc, victim ? std::chrono::milliseconds(5) : std::chrono::milliseconds(50));
  t->async_wait([self = shared_from_this(), t](beast::error_code) {
    if (!self->stopping) self->do_accept();
  });
}

void server::impl::on_accept(tcp::socket s) {
  beast::error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) {  // gone already
    s.close(ec);
    return;
  }
  // A header and its body are two writes (connection::write_header, then the body): with Nagle
  // a small body would wait for the client's ACK of the header, which clients delay up to 40 ms.
  s.set_option(tcp::no_delay(true), ec);
  const addr_key k = address_key(ep.address());
  connection_ptr victim;
  connection_ptr c;
  {
    std::lock_guard lk(mu);
    c = admit(s, k, /*trusted=*/false, victim);
  }
  if (!c) {
    refused.fetch_add(1, std::memory_order_relaxed);
    s.close(ec);
  } else {
    c->start();
  }
  if (victim) {
    evicted.fetch_add(1, std::memory_order_relaxed);
    net::post(victim->executor(), [victim] { victim->shed(); });
  }
  if (!c || victim) log_shedding();
}

connection_ptr server::impl::admit(tcp::socket& s, const addr_key& k, bool trusted,
                                   connection_ptr& victim) {
  auto it = addrs.find(k);
  const std::size_t mine = it == addrs.end() ? 0 : it->second.count;
  if (opts.max_connections_per_address > 0 && mine >= opts.max_connections_per_address)
    return nullptr;
  // Anonymous connections leave reserved_connections free; `trusted` ones (authenticated
  // nodes, once the identity work lands) may use them.
  std::size_t cap = opts.max_connections;
  if (!trusted) cap = cap > opts.reserved_connections ? cap - opts.reserved_connections : 0;
  if (conns.size() - shedding >= cap) {
    // Full: make room by closing a waiting connection of an address holding more than this
    // one does; a client that holds the most already is the one refused.
    victim = pick_victim(mine);
    if (!victim) return nullptr;
  }
  auto c = make_connection(std::move(s));
  if (it == addrs.end()) it = addrs.emplace(k, addr_entry{}).first;
  const std::uint64_t seq = next_seq++;
  conns[c.get()] = conn_entry{c, k, seq, false};
  it->second.by_age.emplace(seq, c.get());
  set_count(it->second, k, mine + 1);
  return c;
}

connection_ptr server::impl::make_connection(tcp::socket&& s) {
  if (opts.tls)
    return std::make_shared<connection<tls_stream>>(std::move(s), opts.tls->current(),
                                                    shared_from_this());
  return std::make_shared<connection<plain_stream>>(std::move(s), shared_from_this());
}

connection_ptr server::impl::pick_victim(std::size_t newcomer_count) {
  // Bounded work per accept: a few of the biggest holders, a few connections each (busy ones
  // are skipped; they are serving a request).
  int holders = 0;
  for (auto r = ranking.rbegin(); r != ranking.rend() && holders < 16; ++r, ++holders) {
    if (r->first <= newcomer_count) break;
    auto a = addrs.find(r->second);
    if (a == addrs.end()) continue;
    auto& e = a->second;
    int scanned = 0;
    for (auto& [seq, p] : e.by_age) {
      if (++scanned > 64) break;
      // Under mu every connection in `conns` is alive: its destructor removes it, under mu. Lock
      // only the one chosen, so no last reference is dropped (and no destructor run) here.
      auto ce_it = conns.find(p);
      if (ce_it == conns.end() || ce_it->second.shedding || !p->waiting()) continue;
      auto c = ce_it->second.conn.lock();
      if (!c) continue;
      ce_it->second.shedding = true;
      ++shedding;
      return c;
    }
  }
  return nullptr;
}

void server::impl::set_count(addr_entry& e, const addr_key& k, std::size_t n) {
  if (e.count > 0) ranking.erase({e.count, k});
  e.count = n;
  if (n > 0) ranking.insert({n, k});
}

void server::impl::remove(connection_base* c) {
  std::lock_guard lk(mu);
  auto it = conns.find(c);
  if (it == conns.end()) return;
  if (it->second.shedding) --shedding;
  auto a = addrs.find(it->second.addr);
  if (a != addrs.end()) {
    a->second.by_age.erase(it->second.seq);
    set_count(a->second, a->first, a->second.count - 1);
    if (a->second.count == 0) addrs.erase(a);
  }
  conns.erase(it);
}

void server::impl::unmark_shedding(connection_base* c) {
  std::lock_guard lk(mu);
  auto it = conns.find(c);
  if (it == conns.end() || !it->second.shedding) return;
  it->second.shedding = false;
  --shedding;
}

void server::impl::log_shedding() {
  // At most one line per 10 s: a flood must not become a flood of log lines.
  auto now = std::chrono::steady_clock::now();
  if (now - shed_logged < std::chrono::seconds(10)) return;
  shed_logged = now;
  const auto r = refused.load(), e = evicted.load();
  std::size_t open;
  std::string top;
  std::size_t top_count = 0;
  {
    std::lock_guard lk(mu);
    open = conns.size();
    if (!ranking.empty()) {
      top = address_key_text(ranking.rbegin()->second);
      top_count = ranking.rbegin()->first;
    }
  }
  log::warn("http connections shed", log::kv("refused", r - logged_refused),
            log::kv("evicted", e - logged_evicted), log::kv("open", open),
            log::kv("top_address", top), log::kv("top_address_connections", top_count));
  logged_refused = r;
  logged_evicted = e;
}

bool server::impl::tls_log_allowed(std::uint64_t& suppressed) {
  std::lock_guard lk(tls_log_mu);
  auto now = std::chrono::steady_clock::now();
  if (now - tls_log_window >= std::chrono::seconds(10)) {
    tls_log_window = now;
    tls_log_lines = 0;
  }
  if (tls_log_lines >= 20) {
    ++tls_log_suppressed;
    return false;
  }
  ++tls_log_lines;
  suppressed = std::exchange(tls_log_suppressed, 0);
  return true;
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

server::shed_counts server::shed() const { return {impl_->refused.load(), impl_->evicted.load()}; }

void register_tls_refusal_metrics(metrics::registry& reg, std::string_view prefix,
                                  std::function<const server*()> get) {
  const std::string p(prefix);
  reg.counter_fn(p + "_tls_plaintext_refused_total",
                 "Plaintext HTTP requests refused on the TLS port.", [get] {
                   const server* s = get();
                   return s ? static_cast<double>(s->tls_refused().plaintext) : 0.0;
                 });
  reg.counter_fn(
      p + "_tls_handshakes_failed_total",
      "TLS handshakes refused or timed out (no client certificate, another CA, expired).", [get] {
        const server* s = get();
        return s ? static_cast<double>(s->tls_refused().handshake_failed) : 0.0;
      });
}

server::tls_counts server::tls_refused() const {
  return {impl_->tls_plaintext.load(), impl_->tls_failed.load()};
}

void server::stop(std::chrono::milliseconds grace) {
  auto self = impl_;
  if (self->stopping.exchange(true)) return;
  net::post(self->acceptor.get_executor(), [self] {
    beast::error_code ec;
    self->acceptor.close(ec);
  });
  std::vector<connection_ptr> live;
  {
    std::lock_guard lk(self->mu);
    for (auto& [p, e] : self->conns) {
      if (auto c = e.conn.lock()) live.push_back(std::move(c));
    }
  }
  for (auto& c : live) net::post(c->executor(), [c] { c->on_stop(); });
  // After the grace period, close whatever is left.
  auto t = std::make_shared<net::steady_timer>(self->ioc, grace);
  t->async_wait([self, t](beast::error_code) {
    std::vector<connection_ptr> rest;
    {
      std::lock_guard lk(self->mu);
      for (auto& [p, e] : self->conns) {
        if (auto c = e.conn.lock()) rest.push_back(std::move(c));
      }
    }
    for (auto& c : rest) net::post(c->executor(), [c] { c->force_close(); });
  });
}

}  // namespace shoal::http
