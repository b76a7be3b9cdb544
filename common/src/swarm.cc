#include "common/swarm.h"

#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/error_code.hpp>
#include <libtorrent/settings_pack.hpp>
#include <libtorrent/torrent_info.hpp>

#include "common/log.h"

namespace shoal::swarm {

lt::settings_pack lan_settings(const settings& s) {
  using sp = lt::settings_pack;
  sp p;
  p.set_str(sp::listen_interfaces, s.listen);
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
  p.set_int(sp::upload_rate_limit, static_cast<int>(std::min<std::uint64_t>(s.upload_rate_limit, INT32_MAX)));
  p.set_int(sp::download_rate_limit, static_cast<int>(std::min<std::uint64_t>(s.download_rate_limit, INT32_MAX)));
  p.set_int(sp::alert_mask, lt::alert_category::error | lt::alert_category::status | lt::alert_category::storage |
                                lt::alert_category::tracker | lt::alert_category::performance_warning |
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
  p.set_int(sp::file_pool_size, 500);
  p.set_int(sp::allowed_fast_set_size, 0);
  p.set_bool(sp::close_redundant_connections, true);
  p.set_bool(sp::no_atime_storage, true);
  p.set_bool(sp::strict_end_game_mode, true);
  // A loopback tracker needs an /announce path; we use one. Local peers are allowed.
  p.set_bool(sp::ssrf_mitigation, false);
  p.set_bool(sp::announce_to_all_trackers, true);
  p.set_bool(sp::announce_to_all_tiers, true);
  return p;
}

std::string tracker_url(const std::string& announce, const std::string& node, const std::string& zone,
                        const std::string& rack, const std::string& role) {
  std::string u = announce;
  u += announce.find('?') == std::string::npos ? '?' : '&';
  u += "node=" + node;
  if (!zone.empty()) u += "&zone=" + zone;
  if (!rack.empty()) u += "&rack=" + rack;
  u += "&role=" + role;
  return u;
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
  try {
    lt::session_params params(lan_settings(s));
    out->ses_ = std::make_unique<lt::session>(std::move(params));
  } catch (const std::exception& e) {
    return fail(errc::internal, std::string("start libtorrent session: ") + e.what());
  }
  out->trace_ = log::enabled(log::level::trace);
  if (out->trace_) {
    // Connection-level alerts help debugging; they are too chatty otherwise.
    lt::settings_pack extra;
    extra.set_int(lt::settings_pack::alert_mask, lan_settings(s).get_int(lt::settings_pack::alert_mask) |
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
  return ses_->listen_port();
}

void session::on_alert(std::function<void(lt::alert*)> cb) {
  std::lock_guard lk(cb_mu_);
  cb_ = std::move(cb);
}

void session::pump() {
  std::vector<lt::alert*> alerts;
  while (!stop_.load()) {
    if (!ses_->wait_for_alert(lt::milliseconds(200))) continue;
    alerts.clear();
    ses_->pop_alerts(&alerts);
    std::function<void(lt::alert*)> cb;
    {
      std::lock_guard lk(cb_mu_);
      cb = cb_;
    }
    for (auto* a : alerts) {
      if (trace_) log::trace("libtorrent", log::kv("type", a->what()), log::kv("message", a->message()));
      if (lt::alert_cast<lt::listen_failed_alert>(a) || lt::alert_cast<lt::torrent_error_alert>(a) ||
          lt::alert_cast<lt::file_error_alert>(a) || lt::alert_cast<lt::alerts_dropped_alert>(a)) {
        log::error("libtorrent", log::kv("alert", a->what()), log::kv("message", a->message()));
      } else if (lt::alert_cast<lt::listen_succeeded_alert>(a)) {
        log::info("libtorrent listening", log::kv("message", a->message()));
      } else if (lt::alert_cast<lt::performance_alert>(a)) {
        log::debug("libtorrent performance", log::kv("message", a->message()));
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

result<lt::torrent_handle> session::add_seed(const object_metainfo& m, const std::string& save_path,
                                             const std::vector<std::string>& trackers) {
  std::string t = m.torrent_file(trackers);
  lt::error_code ec;
  auto ti = std::make_shared<lt::torrent_info>(t.data(), static_cast<int>(t.size()), ec);
  if (ec) return fail(errc::internal, "torrent for " + m.object.short_str() + ": " + ec.message());
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = save_path;
  // Not auto-managed, not paused; seed_mode with every piece verified: no rehash, no lazy checks.
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe | lt::torrent_flags::duplicate_is_error;
  p.verified_pieces.resize(ti->num_pieces(), true);
  p.have_pieces.resize(ti->num_pieces(), true);
  auto h = ses_->add_torrent(std::move(p), ec);
  if (ec == lt::errors::duplicate_torrent) return fail(errc::already_exists, "already seeding " + m.object.short_str());
  if (ec) return fail(errc::internal, "add seed " + m.object.short_str() + ": " + ec.message());
  return h;
}

void session::remove(const lt::torrent_handle& h) {
  if (h.is_valid()) ses_->remove_torrent(h);
}

result<lt::torrent_handle> session::add_pack_seed(const pack_metainfo& m, const std::string& objects_dir,
                                                  const std::vector<std::string>& trackers) {
  std::string t = m.torrent_file(trackers);
  std::string name = "pack " + m.info_hash_hex().substr(0, 12);
  lt::error_code ec;
  auto ti = std::make_shared<lt::torrent_info>(t.data(), static_cast<int>(t.size()), ec);
  if (ec) return fail(errc::internal, "torrent for " + name + ": " + ec.message());
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = objects_dir;
  // As add_seed(): not auto-managed, not paused, every piece verified (the members were
  // verified against their sha256 when they entered the cache).
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe | lt::torrent_flags::duplicate_is_error;
  p.verified_pieces.resize(ti->num_pieces(), true);
  p.have_pieces.resize(ti->num_pieces(), true);
  auto h = ses_->add_torrent(std::move(p), ec);
  if (ec == lt::errors::duplicate_torrent) return fail(errc::already_exists, "already seeding " + name);
  if (ec) return fail(errc::internal, "add seed " + name + ": " + ec.message());
  return h;
}

}  // namespace shoal::swarm
