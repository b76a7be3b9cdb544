#include "swarm/grants.h"

#include <libtorrent/aux_/socket_type.hpp>
#include <libtorrent/bdecode.hpp>
#include <libtorrent/entry.hpp>
#include <libtorrent/peer_connection.hpp>
#include <libtorrent/peer_connection_handle.hpp>
#include <libtorrent/ssl_stream.hpp>
#include <libtorrent/torrent_handle.hpp>
#include <openssl/ssl.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "common/log.h"
#include "common/peer_identity.h"
#include "common/tls.h"
#include "swarm/swarm.h"

namespace shoal::swarm {

// ---- grant_book

void grant_book::put(const lt::sha1_hash& swarm, std::string grant,
                     std::chrono::system_clock::time_point expires) {
  auto now = std::chrono::system_clock::now();
  std::lock_guard lk(mu_);
  if (by_swarm_.size() >= max_entries) {
    std::erase_if(by_swarm_, [&](const auto& kv) { return kv.second.expires <= now; });
  }
  if (by_swarm_.size() >= max_entries && !by_swarm_.contains(swarm)) {
    auto first = std::min_element(by_swarm_.begin(), by_swarm_.end(), [](auto& a, auto& b) {
      return a.second.expires < b.second.expires;
    });
    by_swarm_.erase(first);
  }
  by_swarm_[swarm] = entry{std::move(grant), expires};
}

std::string grant_book::get(const lt::sha1_hash& swarm) const {
  std::lock_guard lk(mu_);
  auto it = by_swarm_.find(swarm);
  if (it == by_swarm_.end() || it->second.expires <= std::chrono::system_clock::now()) return {};
  return it->second.grant;
}

std::size_t grant_book::size() const {
  std::lock_guard lk(mu_);
  return by_swarm_.size();
}

namespace {

// The TLS session under a libtorrent 2.0 connection: SSL* for its ssl_stream<> sockets, nullptr
// for plain ones.
template <class S>
SSL* ssl_of(lt::ssl_stream<S>& s) {
  return s.handle();
}
template <class S>
SSL* ssl_of(S&) {
  return nullptr;
}

// The node named in the verified certificate of the connection's other side, or why none.
result<std::string> peer_node(const lt::peer_connection_handle& h) {
  auto pc = h.native_handle();
  if (!pc) return fail(errc::unavailable, "connection closed");
  SSL* ssl = boost::apply_visitor([](auto& s) -> SSL* { return ssl_of(s); }, pc->get_socket());
  if (ssl == nullptr) return fail(errc::unauthorized, "not a TLS connection");
  const X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK)
    return fail(errc::unauthorized, "no verified certificate");
  std::string problem;
  auto id = tls::identity_from_certificate(cert, &problem);
  if (id.role != tls::peer_role::node) {
    return fail(errc::unauthorized,
                "certificate is not a node's (" +
                    (id.role == tls::peer_role::none ? problem : std::string(to_string(id.role))) +
                    ")");
  }
  return id.name;
}

struct torrent_ctx {
  lt::sha1_hash swarm;
  std::string swarm_hex;
  std::shared_ptr<grant_book> book;
  std::shared_ptr<grant::verifier> check;
  std::shared_ptr<grant_counters> counters;
};

class grants_peer final : public lt::peer_plugin {
 public:
  grants_peer(std::shared_ptr<const torrent_ctx> ctx, lt::peer_connection_handle h)
      : ctx_(std::move(ctx)), h_(std::move(h)) {}

  void add_handshake(lt::entry& e) override {
    std::string g = ctx_->book->get(ctx_->swarm);
    if (!g.empty()) e[std::string(grant::extension_key)] = std::move(g);
  }

  // Always true: false would remove this plugin from the connection, and with it the check.
  bool on_extension_handshake(lt::bdecode_node const& root) override {
    if (granted_) return true;
    auto v = root.dict_find_string_value(
        lt::string_view(grant::extension_key.data(), grant::extension_key.size()));
    if (v.empty()) {
      why_ = "no grant in its extension handshake";
      return true;
    }
    auto node = peer_node(h_);
    if (!node) {
      why_ = node.error().message;
      return true;
    }
    node_ = *node;
    grant::info_hash ih{};
    std::copy(ctx_->swarm.begin(), ctx_->swarm.end(), ih.begin());
    auto ok = ctx_->check->verify(std::string_view(v.data(), v.size()), ih, node_);
    if (!ok) {
      why_ = ok.error().message;
      return true;
    }
    granted_ = true;
    ctx_->counters->accepted.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  bool on_request(lt::peer_request const&) override {
    if (granted_) return false;
    if (!refused_) {
      refused_ = true;
      ctx_->counters->refused.fetch_add(1, std::memory_order_relaxed);
      auto ep = h_.remote();
      log::warn("swarm: refused pieces to a peer without a valid grant",
                log::kv("swarm", ctx_->swarm_hex), log::kv("peer", ep.address().to_string()),
                log::kv("node", node_.empty() ? std::string("-") : node_), log::kv("reason", why_));
      h_.disconnect(lt::errors::make_error_code(lt::errors::invalid_request),
                    lt::operation_t::bittorrent);
    }
    return true;  // handled: not served
  }

 private:
  std::shared_ptr<const torrent_ctx> ctx_;
  lt::peer_connection_handle h_;
  bool granted_ = false;
  bool refused_ = false;
  std::string node_;
  std::string why_ = "no extension handshake";
};

class grants_torrent final : public lt::torrent_plugin {
 public:
  explicit grants_torrent(std::shared_ptr<const torrent_ctx> ctx) : ctx_(std::move(ctx)) {}
  std::shared_ptr<lt::peer_plugin> new_connection(lt::peer_connection_handle const& pc) override {
    if (pc.type() != lt::connection_type::bittorrent) return nullptr;
    return std::make_shared<grants_peer>(ctx_, pc);
  }

 private:
  std::shared_ptr<const torrent_ctx> ctx_;
};

class grants final : public lt::plugin {
 public:
  grants(std::shared_ptr<grant_book> book, std::shared_ptr<grant::verifier> check,
         std::shared_ptr<grant_counters> counters)
      : book_(std::move(book)), check_(std::move(check)), counters_(std::move(counters)) {}

  std::shared_ptr<lt::torrent_plugin> new_torrent(lt::torrent_handle const& th,
                                                  lt::client_data_t) override {
    // info_hashes() reads the torrent directly; most other torrent_handle calls go through the
    // network thread and would deadlock here. The session adds this plugin only with SSL on, so
    // every torrent is an SSL torrent (a plain connection finds no certificate and no grant).
    auto ctx = std::make_shared<torrent_ctx>();
    ctx->swarm = th.info_hashes().v1;
    ctx->swarm_hex = hash_hex(ctx->swarm);
    ctx->book = book_;
    ctx->check = check_;
    ctx->counters = counters_;
    return std::make_shared<grants_torrent>(std::move(ctx));
  }

 private:
  std::shared_ptr<grant_book> book_;
  std::shared_ptr<grant::verifier> check_;
  std::shared_ptr<grant_counters> counters_;
};

}  // namespace

std::shared_ptr<lt::plugin> grants_plugin(std::shared_ptr<grant_book> book,
                                          std::shared_ptr<grant::verifier> check,
                                          std::shared_ptr<grant_counters> counters) {
  return std::make_shared<grants>(std::move(book), std::move(check), std::move(counters));
}

}  // namespace shoal::swarm
