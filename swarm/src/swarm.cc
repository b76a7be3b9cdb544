#include "swarm/swarm.h"

#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/error_code.hpp>
#include <libtorrent/ip_filter.hpp>
#include <libtorrent/peer_info.hpp>
#include <libtorrent/settings_pack.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/thread_name.h"
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
  // The configured port or none: libtorrent would otherwise try the next ten ports and then one
  // the kernel picks, and the node would listen where no firewall rule, hostPort or
  // NetworkPolicy expects it. session::start fails instead, naming the port.
  p.set_int(sp::max_retry_port_bind, 0);
  p.set_bool(sp::listen_system_port_fallback, false);
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

std::vector<lt::torrent_handle> serving_peers(lt::session& ses) {
  std::vector<lt::torrent_status> st;
  try {
    // The predicate runs on the network thread and keeps only torrents with a non-seed peer
    // connected (registry-proxy super-seeding counts as one: the peer lists tell it apart).
    st = ses.get_torrent_status(
        [](const lt::torrent_status& s) { return s.num_peers > s.num_seeds; }, {});
  } catch (const std::exception&) {
    return {};  // the session is going away
  }
  std::vector<lt::torrent_handle> out;
  for (const auto& s : st) {
    if (serving_a_peer(s.handle)) out.push_back(s.handle);
  }
  std::sort(out.begin(), out.end());
  return out;
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

namespace {

// The port of a listen_interfaces value's first entry ("host:port[s],..."; "[v6]:port");
// nullopt when it does not parse (libtorrent then reports it).
std::optional<std::uint16_t> first_listen_port(std::string_view listen) {
  auto entry = listen.substr(0, listen.find(','));
  if (entry.ends_with('s')) entry.remove_suffix(1);
  auto colon = entry.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto digits = entry.substr(colon + 1);
  unsigned v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc{} || ptr != digits.data() + digits.size() || v > 65535)
    return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

// Logs an alert the way the pump does for the ones it does not hand on.
void log_alert(lt::alert* a, bool trace) {
  if (trace) log::trace("libtorrent", log::kv("type", a->what()), log::kv("message", a->message()));
  if (lt::alert_cast<lt::listen_failed_alert>(a) || lt::alert_cast<lt::torrent_error_alert>(a) ||
      lt::alert_cast<lt::file_error_alert>(a) || lt::alert_cast<lt::alerts_dropped_alert>(a)) {
    log::error("libtorrent", log::kv("alert", a->what()), log::kv("message", a->message()));
  } else if (lt::alert_cast<lt::listen_succeeded_alert>(a)) {
    log::info("libtorrent listening", log::kv("message", a->message()));
  } else if (lt::alert_cast<lt::performance_alert>(a)) {
    log::debug("libtorrent performance", log::kv("message", a->message()));
  }
}

// libtorrent 2.0.8 puts a peer on a private, link-local or loopback address into its "local" peer
// class instead of the "global" one (session_impl::init_peer_class_filter), and the session's
// upload_rate_limit and download_rate_limit cap the global class: on a cluster's 10/8 network no
// rate limit held. Such peers go into both classes: the global class's limits hold for them and
// the local class keeps what it gives (no unchoke slots taken, 150 % of the connection limit).
void cap_local_peers(lt::session& ses) {
  const auto global = 1u << static_cast<std::uint32_t>(lt::session::global_peer_class_id);
  const auto both = global | (1u << static_cast<std::uint32_t>(lt::session::local_peer_class_id));
  lt::ip_filter f;
  f.add_rule(lt::make_address("0.0.0.0"), lt::make_address("255.255.255.255"), global);
  f.add_rule(lt::make_address("::"), lt::make_address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
             global);
  for (auto [first, last] : {std::pair{"10.0.0.0", "10.255.255.255"},
                             {"172.16.0.0", "172.31.255.255"},
                             {"192.168.0.0", "192.168.255.255"},
                             {"169.254.0.0", "169.254.255.255"},
                             {"127.0.0.0", "127.255.255.255"},
                             {"fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
                             {"fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
                             {"::1", "::1"}})
    f.add_rule(lt::make_address(first), lt::make_address(last), both);
  ses.set_peer_class_filter(f);
}

}  // namespace

namespace {

// A new thread starts with its creator's name: the session's network thread, and the disk threads
// that one starts later, are named "libtorrent" (libtorrent has no hook on its threads to name
// them apart). The caller's name is restored, whatever the constructor does.
std::unique_ptr<lt::session> new_session(lt::session_params params) {
  struct restore_name {
    std::string name = name_of_this_thread();
    ~restore_name() {
      if (!name.empty()) name_this_thread(name);
    }
  } caller;
  name_this_thread("libtorrent");
  return std::make_unique<lt::session>(std::move(params));
}

}  // namespace

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
  bool exact_port = true;
  try {
    auto pack = lan_settings(s);
    if (auto st = apply_overrides(pack, s.libtorrent); !st) return fail(st.error());
    exact_port = pack.get_int(lt::settings_pack::max_retry_port_bind) == 0 &&
                 !pack.get_bool(lt::settings_pack::listen_system_port_fallback);
    lt::session_params params(std::move(pack));
    out->ses_ = new_session(std::move(params));
    cap_local_peers(*out->ses_);
  } catch (const std::exception& e) {
    return fail(errc::internal, std::string("start libtorrent session: ") + e.what());
  }
  out->trace_ = log::enabled(log::level::trace);
  {
    // A port taken by another process fails the start with its cause rather than leave the node
    // without a listener, or on a port nobody expects (lan_settings). listen_port() waits for the
    // network thread, which has opened the listen sockets by then.
    const auto want = first_listen_port(s.listen);
    const std::uint16_t got = out->listen_port();
    std::string why;
    bool bad = got == 0;
    if (!bad && exact_port && want && *want != 0 && got != *want) {
      bad = true;
      why = "listening on port " + std::to_string(got) + " instead of " + std::to_string(*want);
    }
    if (bad) {
      // The cause is in a listen_failed alert, posted a moment later.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      std::vector<lt::alert*> alerts;
      std::string cause;
      while (cause.empty() && std::chrono::steady_clock::now() < until &&
             out->ses_->wait_for_alert(lt::milliseconds(200))) {
        alerts.clear();
        out->ses_->pop_alerts(&alerts);
        for (auto* a : alerts) {
          log_alert(a, out->trace_);
          if (auto* f = lt::alert_cast<lt::listen_failed_alert>(a);
              f && cause.empty() &&
              (f->socket_type == lt::socket_type_t::tcp ||
               f->socket_type == lt::socket_type_t::tcp_ssl))
            cause = f->message();
        }
      }
      if (!cause.empty()) why = why.empty() ? cause : why + " (" + cause + ")";
      out->stop();
      return fail(errc::io_error,
                  "BitTorrent listen " + s.listen + ": " + (why.empty() ? "no socket" : why));
    }
  }
  if (s.ssl && s.require_grants) {
    auto check = grant::verifier::load(s.ca_file, s.reload_interval);
    if (!check) return fail(check.error().wrap("swarm grants"));
    out->grants_ = std::make_shared<grant_book>();
    out->grant_counters_ = std::make_shared<grant_counters>();
    out->ses_->add_extension(grants_plugin(out->grants_, std::move(*check), out->grant_counters_));
  }
  if (out->trace_) {
    // Connection-level alerts help debugging; they are too chatty otherwise.
    lt::settings_pack extra;
    extra.set_int(lt::settings_pack::alert_mask,
                  lan_settings(s).get_int(lt::settings_pack::alert_mask) |
                      lt::alert_category::connect | lt::alert_category::peer);
    out->ses_->apply_settings(extra);
  }
  out->pump_ = std::thread([p = out.get()] {
    name_this_thread("lt-alerts");
    p->pump();
  });
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
      log_alert(a, trace_);
      if (auto* nc = lt::alert_cast<lt::torrent_need_cert_alert>(a)) set_certificate(nc->handle);
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
