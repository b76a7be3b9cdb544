#include "swarm/swarm.h"

#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/bdecode.hpp>
#include <libtorrent/entry.hpp>
#include <libtorrent/error_code.hpp>
#include <libtorrent/extensions.hpp>
#include <libtorrent/peer_connection_handle.hpp>
#include <libtorrent/peer_info.hpp>
#include <libtorrent/settings_pack.hpp>
#include <libtorrent/torrent_info.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <random>

#include "common/log.h"
#include "swarm_tls.h"

namespace shoal::swarm {

lt::settings_pack lan_settings(const settings& s) {
  using sp = lt::settings_pack;
  sp p;
  p.set_str(sp::listen_interfaces, s.ssl ? detail::ssl_listen(s.listen) : s.listen);
  p.set_str(sp::user_agent, s.user_agent);
  p.set_str(sp::peer_fingerprint, s.peer_fingerprint);
  p.set_bool(sp::enable_dht, false);
  p.set_bool(sp::enable_lsd, false);
  p.set_bool(sp::enable_upnp, false);
  p.set_bool(sp::enable_natpmp, false);
  p.set_bool(sp::enable_outgoing_utp, false);
  p.set_bool(sp::enable_incoming_utp, false);
  p.set_int(sp::mixed_mode_algorithm, sp::prefer_tcp);
  p.set_int(sp::out_enc_policy, sp::pe_disabled);
  p.set_int(sp::in_enc_policy, sp::pe_disabled);
  p.set_bool(sp::allow_multiple_connections_per_ip, s.allow_multiple_connections_per_ip);
  p.set_int(sp::connections_limit, s.connections_limit);
  p.set_int(sp::upload_rate_limit,
            static_cast<int>(std::min<std::uint64_t>(s.upload_rate_limit, INT32_MAX)));
  p.set_int(sp::download_rate_limit,
            static_cast<int>(std::min<std::uint64_t>(s.download_rate_limit, INT32_MAX)));
  p.set_int(sp::alert_mask, lt::alert_category::error | lt::alert_category::status |
                                lt::alert_category::storage | lt::alert_category::tracker |
                                lt::alert_category::performance_warning |
                                lt::alert_category::piece_progress);
  p.set_int(sp::alert_queue_size, 100000);
  // Queueing is irrelevant (torrents are not auto-managed), but never let it bite.
  p.set_int(sp::active_downloads, -1);
  p.set_int(sp::active_seeds, -1);
  p.set_int(sp::active_limit, -1);
  p.set_int(sp::active_checking, 16);
  // LAN throughput: deep queues and buffers, everyone unchoked, fast reconnects.
  p.set_int(sp::unchoke_slots_limit, -1);
  p.set_int(sp::choking_algorithm, sp::fixed_slots_choker);
  p.set_int(sp::max_out_request_queue, 1500);
  p.set_int(sp::max_allowed_in_request_queue, 4000);
  p.set_int(sp::max_queued_disk_bytes, s.max_queued_disk_bytes);
  p.set_int(sp::send_buffer_watermark, s.send_buffer_watermark);
  p.set_int(sp::send_buffer_low_watermark, 1 << 20);
  p.set_int(sp::send_buffer_watermark_factor, 150);
  p.set_int(sp::send_not_sent_low_watermark, 512 * 1024);
  p.set_int(sp::max_peer_recv_buffer_size, 8 << 20);
  p.set_int(sp::listen_queue_size, 3000);
  p.set_int(sp::connection_speed, 500);
  p.set_int(sp::torrent_connect_boost, 100);
  p.set_int(sp::peer_connect_timeout, s.peer_connect_timeout_s);
  p.set_int(sp::min_reconnect_time, 2);
  p.set_int(sp::max_failcount, 5);
  p.set_int(sp::request_timeout, 10);
  p.set_int(sp::peer_timeout, 30);
  p.set_int(sp::inactivity_timeout, 60);
  p.set_int(sp::min_announce_interval, s.min_announce_interval_s);
  p.set_int(sp::aio_threads, s.aio_threads);
  p.set_int(sp::hashing_threads, s.hashing_threads);
  p.set_int(sp::file_pool_size, 500);
  p.set_int(sp::allowed_fast_set_size, 0);
  p.set_bool(sp::close_redundant_connections, s.close_redundant_connections);
  p.set_bool(sp::no_atime_storage, true);
  p.set_bool(sp::strict_end_game_mode, true);
  // A loopback tracker needs an /announce path; we use one. Local peers are allowed.
  p.set_bool(sp::ssrf_mitigation, false);
  // Trackers are the scheduler's replicas, all in one tier (tier 0, the preferred first), and
  // the replicas share one peer store: announcing to one of them is enough. libtorrent
  // announces to the first of the tier; when it fails (refused at once, hung past the
  // timeouts below) it moves that tracker to the back of the tier and announces to the next
  // at once (torrent::tracker_request_error). docs/scheduler.md "Clients fail over".
  p.set_bool(sp::announce_to_all_trackers, false);
  p.set_bool(sp::announce_to_all_tiers, true);
  // An announce is a small GET: one not answered within 3 s (30 by default) is taken for hung
  // and the next tracker is tried. In 2.0.8 only this bounds an HTTP announce
  // (http_tracker_connection.cpp); tracker_receive_timeout (10 s) is for UDP trackers.
  p.set_int(sp::tracker_receive_timeout, 2);
  p.set_int(sp::tracker_completion_timeout, 3);
  p.set_int(sp::stop_tracker_timeout, 2);
  // A failed tracker waits 5 s + fails^2 * 5 s * tracker_backoff / 100 before it is retried
  // (17, 55, 117 s... at the default 250); at 100, a set that was all down (a restart) is
  // retried after 10, 25, 50 s.
  p.set_int(sp::tracker_backoff, 100);
  return p;
}

status apply_overrides(lt::settings_pack& p, const std::map<std::string, std::string>& overrides) {
  using sp = lt::settings_pack;
  for (const auto& [key, value] : overrides) {
    int idx = lt::setting_by_name(key);
    if (idx < 0)
      return fail(errc::invalid_argument, "libtorrent setting " + key + ": no such setting");
    switch (idx & sp::type_mask) {
      case sp::string_type_base:
        p.set_str(idx, value);
        break;
      case sp::int_type_base: {
        std::int64_t v = 0;
        auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec != std::errc{} || ptr != value.data() + value.size() || v < INT32_MIN ||
            v > INT32_MAX) {
          return fail(errc::invalid_argument,
                      "libtorrent setting " + key + ": \"" + value + "\" is not an integer");
        }
        p.set_int(idx, static_cast<int>(v));
        break;
      }
      case sp::bool_type_base:
        if (value == "true" || value == "1") {
          p.set_bool(idx, true);
        } else if (value == "false" || value == "0") {
          p.set_bool(idx, false);
        } else {
          return fail(errc::invalid_argument,
                      "libtorrent setting " + key + ": \"" + value + "\" is not a boolean");
        }
        break;
      default:
        return fail(errc::invalid_argument, "libtorrent setting " + key + ": unsupported type");
    }
  }
  return {};
}

namespace {

// The piece count of an origin torrent, carried in add_torrent_params::userdata as the pointer
// value itself (never dereferenced), so the plugin needs no lifetime management and no
// synchronous torrent_handle call (those deadlock on the network thread, where plugins run).
struct superseed_tag;

bool has_prefix(const lt::peer_id& pid, std::string_view prefix) {
  return std::equal(prefix.begin(), prefix.end(), pid.begin());
}

// Per origin torrent: which connected peers hold each piece and which pieces are on offer. Lives
// on the network thread (every plugin callback runs there), so it needs no lock.
struct superseed_state {
  superseed_state(int n, int offers, bool ordered, int cap)
      : pieces(n),
        offers_per_peer(offers),
        max_in_flight(cap),
        in_order(ordered),
        have(n),
        offered(n) {}
  int pieces;
  // Pieces on offer at once: a lone node gets them all, N nodes offers_per_peer / N each (at least
  // one), all together at most max_in_flight. The origin's link sends the offered pieces side by
  // side, so each arrives only after all: 8 per node put 8 × N first copies at the end together
  // (1.46 × S/B at 8 nodes, 1.61 at 16; one per node: 1.23, 1.25), and without the bound every
  // piece of a small blob would be on offer in a large swarm (docs/p2p.md "Scale curve").
  int offers_per_peer;
  int max_in_flight;
  int in_flight = 0;
  int nodes = 0;  // connected peers that take offers (Shoal nodes)
  bool in_order;
  std::vector<std::uint16_t> have;     // connected peers that hold the piece
  std::vector<std::uint16_t> offered;  // outstanding offers of the piece
  std::minstd_rand rng{std::random_device{}()};

  // An offer of piece p made, and one taken up, expired or dropped with its connection.
  void hold(int p) {
    ++offered[static_cast<std::size_t>(p)];
    ++in_flight;
  }
  void release(int p) {
    --offered[static_cast<std::size_t>(p)];
    --in_flight;
  }

  // A first copy: no connected peer holds the piece and nobody has it on offer.
  [[nodiscard]] bool first_copy(int p) const {
    return have[static_cast<std::size_t>(p)] == 0 && offered[static_cast<std::size_t>(p)] == 0;
  }

  // The piece to offer a peer that holds `peer_has` and was already offered `announced`: nobody
  // holds it and it is not on offer if such a piece is left, else the least held one; ties go to
  // the lowest index (in_order) or are broken at random. -1: nothing to offer.
  int pick(const std::vector<bool>& peer_has, const std::vector<bool>& announced) {
    int best = -1;
    std::uint64_t best_score = UINT64_MAX;
    int ties = 0;
    for (int p = 0; p < pieces; ++p) {
      if (peer_has[static_cast<std::size_t>(p)] || announced[static_cast<std::size_t>(p)]) continue;
      std::uint64_t score =
          (static_cast<std::uint64_t>(offered[static_cast<std::size_t>(p)]) << 32) +
          have[static_cast<std::size_t>(p)];
      if (score < best_score) {
        best_score = score;
        best = p;
        ties = 1;
      } else if (score == best_score && !in_order &&
                 std::uniform_int_distribution<int>(0, ties++)(rng) == 0) {
        best = p;
      }
    }
    return best;
  }
};

// One connection of an origin torrent. Peers whose peer id says they understand Shoal super
// seeding (they ignore our have-all) are offered pieces with HAVE messages: a few at first, and
// one more each time they report an offered piece complete. Other peers see a plain seed.
//
// Only first copies are offered while the node is trading with other nodes: a piece some
// connected node holds (or has on offer) is offered again only to a node that completed no piece
// of another node's for `duplicate_after` (one that has no other peers, or whose peers lack what
// it needs). Every second copy the origin sends takes the origin's link, the swarm's bottleneck,
// from a first copy: with second copies offered freely the origin sent 1.12 copies to 4 nodes and
// 1.53 to 32, and the fan-out took as long as those bytes need on its link (docs/p2p.md).
class superseed_peer final : public lt::peer_plugin {
 public:
  superseed_peer(std::shared_ptr<superseed_state> st, lt::peer_connection_handle h)
      : st_(std::move(st)),
        h_(std::move(h)),
        has_(static_cast<std::size_t>(st_->pieces), false),
        announced_(static_cast<std::size_t>(st_->pieces), false) {}

  // Says "I super-seed this torrent" before the bitfield (libtorrent writes the extension
  // handshake first), for nodes that cannot tell from our peer id.
  void add_handshake(lt::entry& e) override { e[superseed_handshake_key] = 1; }

  ~superseed_peer() override {
    if (enabled_) --st_->nodes;
    for (int p = 0; p < st_->pieces; ++p) {
      if (has_[static_cast<std::size_t>(p)]) --st_->have[static_cast<std::size_t>(p)];
    }
    for (const auto& o : offers_) st_->release(o.piece);
  }

  bool on_have_none() override {
    start();
    return false;
  }
  bool on_have_all() override {
    for (int p = 0; p < st_->pieces; ++p) mark(p);
    return false;
  }
  bool on_bitfield(lt::bitfield const& bits) override {
    for (int p = 0; p < std::min(st_->pieces, bits.size()); ++p) {
      if (bits.get_bit(p)) mark(p);
    }
    start();
    return false;
  }
  bool on_have(lt::piece_index_t piece) override {
    int p = static_cast<int>(piece);
    if (p < 0 || p >= st_->pieces) return false;
    mark(p);
    auto it = std::find_if(offers_.begin(), offers_.end(),
                           [p](const offer_t& o) { return o.piece == p; });
    if (it != offers_.end()) {
      offers_.erase(it);
      st_->release(p);
      offer();
    } else {
      last_peer_piece_ = std::chrono::steady_clock::now();  // not ours: from another node
    }
    return false;
  }
  // An offer the node asked for is taken up: it may wait long in our upload queue (tick()).
  bool on_request(lt::peer_request const& r) override {
    for (auto& o : offers_) {
      if (o.piece == static_cast<int>(r.piece)) o.requested = true;
    }
    return false;
  }
  // Retries when nothing was left to offer, frees the slots of offers the peer has not asked
  // for within offer_expiry (it may not want the piece: a dataset node skips files it already
  // holds, and its bitfield does not show them), and starts peers that sent no bitfield at all.
  // An offer asked for lasts requested_expiry instead: on a busy origin link its blocks can wait
  // far longer than offer_expiry, and offering the piece again elsewhere would send it twice; the
  // longer bound only frees the slot of a node that asked and then lost interest.
  void tick() override {
    if (started_) {
      auto now = std::chrono::steady_clock::now();
      std::erase_if(offers_, [&](const offer_t& o) {
        if (now - o.at < (o.requested ? requested_expiry : offer_expiry)) return false;
        st_->release(o.piece);
        return true;
      });
      offer();
    } else if (!h_.in_handshake()) {
      start();
    }
  }

 private:
  void mark(int p) {
    if (has_[static_cast<std::size_t>(p)]) return;
    has_[static_cast<std::size_t>(p)] = true;
    ++st_->have[static_cast<std::size_t>(p)];
  }

  void start() {
    if (started_ || h_.in_handshake()) return;
    started_ = true;
    enabled_ = has_prefix(h_.pid(), superseed_node_fingerprint);
    if (enabled_) ++st_->nodes;
    offer();
  }

  void offer() {
    if (!enabled_ || h_.is_disconnecting()) return;
    const int limit = std::max(1, st_->offers_per_peer / std::max(1, st_->nodes));
    while (static_cast<int>(offers_.size()) < limit && st_->in_flight < st_->max_in_flight) {
      int p = st_->pick(has_, announced_);
      if (p < 0) return;
      // pick() prefers first copies: this is a second one. Only to a node short of other sources.
      if (!st_->first_copy(p) &&
          std::chrono::steady_clock::now() - last_peer_piece_ < duplicate_after)
        return;
      // Announced for good: the peer may request it from us whenever it likes.
      announced_[static_cast<std::size_t>(p)] = true;
      offers_.push_back(offer_t{p, std::chrono::steady_clock::now(), false});
      st_->hold(p);
      send_have(p);
    }
  }

  void send_have(int p) {
    // HAVE: length 5, id 4, piece index (big endian).
    char msg[9] = {0, 0, 0, 5, 4};
    for (int k = 0; k < 4; ++k)
      msg[5 + k] = static_cast<char>((static_cast<std::uint32_t>(p) >> (24 - 8 * k)) & 0xff);
    h_.send_buffer(msg, sizeof msg);
  }

  std::shared_ptr<superseed_state> st_;
  lt::peer_connection_handle h_;
  struct offer_t {
    int piece;
    std::chrono::steady_clock::time_point at;
    bool requested = false;  // the node asked for a block of it
  };
  static constexpr std::chrono::seconds offer_expiry{5};
  static constexpr std::chrono::seconds requested_expiry{120};
  static constexpr std::chrono::seconds duplicate_after{2};
  // When the node last reported a piece we had not offered it (one from another node); the
  // connection's start before that.
  std::chrono::steady_clock::time_point last_peer_piece_ = std::chrono::steady_clock::now();
  std::vector<bool> has_;
  std::vector<bool> announced_;  // offered to this peer once (a HAVE was sent)
  std::vector<offer_t> offers_;
  bool started_ = false;
  bool enabled_ = false;
};

class superseed_torrent final : public lt::torrent_plugin {
 public:
  explicit superseed_torrent(std::shared_ptr<superseed_state> st) : st_(std::move(st)) {}
  std::shared_ptr<lt::peer_plugin> new_connection(lt::peer_connection_handle const& pc) override {
    if (pc.type() != lt::connection_type::bittorrent) return nullptr;
    return std::make_shared<superseed_peer>(st_, pc);
  }

 private:
  std::shared_ptr<superseed_state> st_;
};

class origin_superseed final : public lt::plugin {
 public:
  origin_superseed(int offers, bool in_order, int max_in_flight)
      : offers_(offers), in_order_(in_order), max_in_flight_(max_in_flight) {}
  std::shared_ptr<lt::torrent_plugin> new_torrent(lt::torrent_handle const&,
                                                  lt::client_data_t ud) override {
    auto* tag = ud.get<superseed_tag>();
    auto pieces = reinterpret_cast<std::uintptr_t>(tag);
    if (pieces == 0 || pieces > (1u << 24)) return nullptr;
    return std::make_shared<superseed_torrent>(std::make_shared<superseed_state>(
        static_cast<int>(pieces), offers_, in_order_, max_in_flight_));
  }

 private:
  int offers_;
  bool in_order_;
  int max_in_flight_;
};

// Node side: an origin that super-seeds claims every piece in its bitfield; the node ignores that
// claim and learns what to request from the origin's HAVE offers only.
struct node_torrent_ctx {
  lt::torrent_handle th;
  block_callback on_block;
};

class node_superseed_peer final : public lt::peer_plugin {
 public:
  node_superseed_peer(std::shared_ptr<const node_torrent_ctx> ctx, lt::peer_connection_handle h)
      : ctx_(std::move(ctx)), h_(std::move(h)) {}
  bool on_extension_handshake(lt::bdecode_node const& h) override {
    if (h.type() == lt::bdecode_node::dict_t &&
        h.dict_find_int_value(superseed_handshake_key, 0) == 1)
      announced_superseeder_ = true;
    return true;  // false would detach the plugin from the connection
  }
  bool on_have_all() override { return from_superseeding_origin(); }
  bool on_bitfield(lt::bitfield const&) override { return from_superseeding_origin(); }
  bool on_piece(lt::peer_request const&, lt::span<char const> buf) override {
    if (ctx_->on_block) {
      // The peer id is known once the handshake is done, before any block arrives.
      if (origin_ < 0) origin_ = is_origin(h_.pid()) ? 1 : 0;
      ctx_->on_block(ctx_->th, origin_ == 1, static_cast<std::size_t>(buf.size()));
    }
    return false;
  }

 private:
  bool from_superseeding_origin() const {
    return announced_superseeder_ || has_prefix(h_.pid(), superseeding_origin_fingerprint);
  }
  std::shared_ptr<const node_torrent_ctx> ctx_;
  lt::peer_connection_handle h_;
  int origin_ = -1;
  bool announced_superseeder_ = false;  // its extension handshake said so (a publishing node)
};

class node_superseed_torrent final : public lt::torrent_plugin {
 public:
  explicit node_superseed_torrent(std::shared_ptr<const node_torrent_ctx> ctx)
      : ctx_(std::move(ctx)) {}
  std::shared_ptr<lt::peer_plugin> new_connection(lt::peer_connection_handle const& pc) override {
    if (pc.type() != lt::connection_type::bittorrent) return nullptr;
    return std::make_shared<node_superseed_peer>(ctx_, pc);
  }

 private:
  std::shared_ptr<const node_torrent_ctx> ctx_;
};

class node_superseed final : public lt::plugin {
 public:
  explicit node_superseed(block_callback cb) : on_block_(std::move(cb)) {}
  std::shared_ptr<lt::torrent_plugin> new_torrent(lt::torrent_handle const& th,
                                                  lt::client_data_t) override {
    return std::make_shared<node_superseed_torrent>(
        std::make_shared<node_torrent_ctx>(node_torrent_ctx{th, on_block_}));
  }

 private:
  block_callback on_block_;
};

}  // namespace

std::shared_ptr<lt::plugin> origin_superseed_plugin(int offers_per_peer, bool in_order,
                                                    int max_in_flight) {
  return std::make_shared<origin_superseed>(std::max(1, offers_per_peer), in_order,
                                            std::max(1, max_in_flight));
}

// Every torrent of a super-seeding origin must carry it: nodes ignore such an origin's bitfield
// for every torrent, so a torrent without offers would give them nothing.
lt::client_data_t superseed_userdata(int pieces) {
  return lt::client_data_t(reinterpret_cast<superseed_tag*>(static_cast<std::uintptr_t>(pieces)));
}

std::shared_ptr<lt::plugin> node_superseed_plugin(block_callback on_block) {
  return std::make_shared<node_superseed>(std::move(on_block));
}

bool serving_a_peer(const lt::torrent_handle& h) {
  if (!h.is_valid()) return false;
  std::vector<lt::peer_info> peers;
  try {
    h.get_peer_info(peers);
  } catch (const std::exception&) {
    return false;  // the torrent went away meanwhile
  }
  return std::any_of(peers.begin(), peers.end(), [](const lt::peer_info& p) {
    return !(p.flags & lt::peer_info::seed) && !is_origin(p.pid);
  });
}

bool is_origin(const lt::peer_id& pid) {
  return has_prefix(pid, origin_fingerprint) || has_prefix(pid, superseeding_origin_fingerprint);
}

std::string tracker_url(const std::string& announce, const std::string& node,
                        const std::string& zone, const std::string& rack, const std::string& role) {
  std::string u = announce;
  u += announce.find('?') == std::string::npos ? '?' : '&';
  u += "node=" + node;
  if (!zone.empty()) u += "&zone=" + zone;
  if (!rack.empty()) u += "&rack=" + rack;
  u += "&role=" + role;
  return u;
}

void trust_all_pieces(lt::add_torrent_params& p) {
  p.verified_pieces.resize(p.ti->num_pieces(), true);
  p.have_pieces.resize(p.ti->num_pieces(), true);
}

std::string hash_hex(const lt::sha1_hash& h) {
  static const char* hx = "0123456789abcdef";
  std::string out;
  for (auto c : h) {
    auto u = static_cast<unsigned char>(c);
    out += hx[u >> 4];
    out += hx[u & 15];
  }
  return out;
}

result<std::unique_ptr<session>> session::start(const settings& s) {
  std::unique_ptr<session> out(new session());
  if (s.ssl) {
    out->ssl_ = true;
    out->roots_ = s.roots;
    out->reload_interval_ = s.reload_interval;
    if (s.cert_file.empty() || s.key_file.empty())
      return fail(errc::config_error,
                  "BitTorrent between members needs tls.cert_file and tls.key_file");
    out->slots_.push_back(cert_slot{s.cert_file, s.key_file, nullptr, {}});
    for (const auto& e : s.extra_certs) {
      if (e.cert_file.empty() || e.key_file.empty())
        return fail(errc::config_error, "a second swarm certificate needs a cert and a key file");
      out->slots_.push_back(cert_slot{e.cert_file, e.key_file, nullptr, {}});
    }
    for (auto& slot : out->slots_) {
      slot.stamp = file_stamps(slot);
      auto pair = out->load_certificate(slot);
      if (!pair) return fail(pair.error().wrap("swarm certificate"));
      slot.pair = std::make_shared<const cert_pair>(std::move(*pair));
    }
  }
  try {
    auto pack = lan_settings(s);
    if (auto st = apply_overrides(pack, s.libtorrent); !st) return fail(st.error());
    lt::session_params params(std::move(pack));
    out->ses_ = std::make_unique<lt::session>(std::move(params));
  } catch (const std::exception& e) {
    return fail(errc::internal, std::string("start libtorrent session: ") + e.what());
  }
  if (s.ssl && s.require_grants) {
    auto check = grant::verifier::load(s.ca_file, s.reload_interval);
    if (!check) return fail(check.error().wrap("swarm grants"));
    out->grants_ = std::make_shared<grant_book>();
    out->grant_counters_ = std::make_shared<grant_counters>();
    out->ses_->add_extension(grants_plugin(out->grants_, std::move(*check), out->grant_counters_));
  }
  out->trace_ = log::enabled(log::level::trace);
  if (out->trace_) {
    // Connection-level alerts help debugging; they are too chatty otherwise.
    lt::settings_pack extra;
    extra.set_int(lt::settings_pack::alert_mask,
                  lan_settings(s).get_int(lt::settings_pack::alert_mask) |
                      lt::alert_category::connect | lt::alert_category::peer);
    out->ses_->apply_settings(extra);
  }
  out->pump_ = std::thread([p = out.get()] { p->pump(); });
  return out;
}

session::~session() { stop(); }

void session::stop() {
  if (stop_.exchange(true)) return;
  if (pump_.joinable()) pump_.join();
  if (ses_) {
    // Abort asynchronously, then let the proxy object's destructor wait briefly.
    auto proxy = ses_->abort();
    ses_.reset();
  }
}

std::uint16_t session::listen_port() const {
  if (!ses_) return 0;
  return ssl_ ? ses_->ssl_listen_port() : ses_->listen_port();
}

void session::on_alert(std::function<void(lt::alert*)> cb) {
  std::lock_guard lk(cb_mu_);
  cb_ = std::move(cb);
}

void session::pump() {
  std::vector<lt::alert*> alerts;
  auto next_reload = std::chrono::steady_clock::now() + reload_interval_;
  while (!stop_.load()) {
    if (ssl_ && reload_interval_.count() > 0 && std::chrono::steady_clock::now() >= next_reload) {
      next_reload = std::chrono::steady_clock::now() + reload_interval_;
      if (auto r = reload_certificate_if_changed(); !r)
        log::error("swarm certificate", log::kv("error", r.error().message));
    }
    if (!ses_->wait_for_alert(lt::milliseconds(200))) continue;
    alerts.clear();
    ses_->pop_alerts(&alerts);
    std::function<void(lt::alert*)> cb;
    {
      std::lock_guard lk(cb_mu_);
      cb = cb_;
    }
    for (auto* a : alerts) {
      if (trace_)
        log::trace("libtorrent", log::kv("type", a->what()), log::kv("message", a->message()));
      if (lt::alert_cast<lt::listen_failed_alert>(a) ||
          lt::alert_cast<lt::torrent_error_alert>(a) || lt::alert_cast<lt::file_error_alert>(a) ||
          lt::alert_cast<lt::alerts_dropped_alert>(a)) {
        log::error("libtorrent", log::kv("alert", a->what()), log::kv("message", a->message()));
      } else if (lt::alert_cast<lt::listen_succeeded_alert>(a)) {
        log::info("libtorrent listening", log::kv("message", a->message()));
      } else if (lt::alert_cast<lt::performance_alert>(a)) {
        log::debug("libtorrent performance", log::kv("message", a->message()));
      } else if (auto* nc = lt::alert_cast<lt::torrent_need_cert_alert>(a)) {
        set_certificate(nc->handle);
      }
      if (cb) {
        try {
          cb(a);
        } catch (const std::exception& e) {
          log::error("alert handler threw", log::kv("error", e.what()));
        }
      }
    }
  }
}

// Adds a torrent whose pieces are all verified on disk already (objects entered the cache
// against their sha256): not auto-managed, not paused, seed_mode with every piece verified, so
// no rehash and no lazy checks. Super-seeded (the origin sends each piece once before any
// twice); an offer a node does not take up (it skips files it already holds) expires and frees
// its slot. `name` is what errors call the torrent.
result<lt::torrent_handle> session::add_verified_seed(const std::string& torrent,
                                                      const std::string& save_path,
                                                      const std::string& name) {
  lt::error_code ec;
  auto ti =
      std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  if (ec) return fail(errc::internal, "torrent for " + name + ": " + ec.message());
  if (ssl_ != !ti->ssl_cert().empty()) {
    return fail(errc::invalid_argument,
                "torrent for " + name +
                    (ssl_ ? " has no ssl-cert, and this session speaks BitTorrent over TLS only"
                          : " is an SSL torrent, and this session has no certificate"));
  }
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = save_path;
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe |
            lt::torrent_flags::duplicate_is_error;
  p.userdata = superseed_userdata(ti->num_pieces());
  trust_all_pieces(p);
  auto h = add_torrent(std::move(p), ec);
  if (ec == lt::errors::duplicate_torrent)
    return fail(errc::already_exists, "already seeding " + name);
  if (ec) return fail(errc::internal, "add seed " + name + ": " + ec.message());
  return h;
}

lt::torrent_handle session::add_torrent(lt::add_torrent_params p, lt::error_code& ec) {
  const bool hold = ssl_ && !(p.flags & lt::torrent_flags::paused);
  if (hold) p.flags |= lt::torrent_flags::paused;
  // The torrent's root picks its certificate pair (none at hand: the primary pair).
  std::string root = p.ti ? std::string(p.ti->ssl_cert()) : std::string();
  auto h = ses_->add_torrent(std::move(p), ec);
  if (ec || !h.is_valid()) return h;
  // Both calls are posted to libtorrent's network thread in this order: the certificate is in
  // place before the torrent announces or dials anyone.
  set_certificate(h, root);
  if (hold) h.resume();
  return h;
}

result<lt::torrent_handle> session::add_seed(const object_metainfo& m, const std::string& save_path,
                                             const std::vector<std::string>& trackers) {
  return add_verified_seed(m.torrent_file(trackers), save_path, m.object.short_str());
}

void session::remove(const lt::torrent_handle& h) {
  if (h.is_valid()) ses_->remove_torrent(h);
}

result<lt::torrent_handle> session::add_pack_seed(const pack_metainfo& m,
                                                  const std::string& objects_dir,
                                                  const std::vector<std::string>& trackers) {
  return add_verified_seed(m.torrent_file(trackers), objects_dir,
                           "pack " + m.info_hash_hex().substr(0, 12));
}

}  // namespace shoal::swarm
