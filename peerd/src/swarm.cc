// swarm_manager's core (swarm.h): the jobs' common state, object downloads and their readers,
// the engine's start and stop, and the one failure path of every job.
#include "peerd/swarm.h"

#include <fcntl.h>
#include <unistd.h>

#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/extensions.hpp>
#include <libtorrent/session_stats.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <filesystem>

#include "common/fd.h"
#include "common/grant.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/thread_name.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

// Loads the torrent of a seed this node holds when a peer asks for it (unloaded seeds).
struct on_demand_plugin final : lt::plugin {
  explicit on_demand_plugin(swarm_manager* m) : mgr(m) {}
  bool on_unknown_torrent(lt::info_hash_t const& ih, lt::peer_connection_handle const&,
                          lt::add_torrent_params& p) override {
    return mgr->prepare_on_demand(ih.v1, p);
  }
  swarm_manager* mgr;
};

}  // namespace

std::shared_ptr<lt::torrent_info> parse_torrent(std::string_view torrent, std::string* why) {
  lt::error_code ec;
  auto ti =
      std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  if (ec) {
    if (why) *why = ec.message();
    return nullptr;
  }
  // BitTorrent between members: every torrent this node downloads or seeds is rooted at one of
  // its swarm roots (the CAs of tls.ca_file it holds a swarm certificate from), byte for byte;
  // with TLS off, none is rooted at all. Each caller has already checked its metainfo
  // (object_metainfo/pack_metainfo::parse), this is the last word before libtorrent sees a
  // torrent, whatever path it came by (the state database, packs on disk, registry-proxy's
  // answers).
  auto roots = metainfo_roots();
  auto ssl_cert = ti->ssl_cert();
  bool ours = roots.empty() ? ssl_cert.empty()
                            : !ssl_cert.empty() &&
                                  std::find(roots.begin(), roots.end(), ssl_cert) != roots.end();
  if (!ours) {
    if (why) {
      *why = roots.empty() ? "an SSL torrent (ssl-cert), but tls is off"
             : ssl_cert.empty()
                 ? "not rooted at the cluster CA (no ssl-cert)"
                 : "rooted at another CA (its ssl-cert is not a CA of tls.ca_file this node "
                   "holds a swarm certificate from)";
    }
    log::warn("refused a torrent", log::kv("info_hash", swarm::hash_hex(ti->info_hashes().v1)),
              log::kv("reason", roots.empty() ? "ssl torrent without tls" : "not our CA"));
    return nullptr;
  }
  return ti;
}

// ---------------------------------------------------------------------------------------------
// download

transfer::state transfer::current() const {
  std::lock_guard lk(mu_);
  return st_;
}

std::optional<error> transfer::failure() const {
  std::lock_guard lk(mu_);
  return err_;
}

transfer::state transfer::wait(std::chrono::steady_clock::duration timeout) const {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [this] { return st_ != state::running; });
  return st_;
}

std::uint32_t download::pieces_done() const {
  std::lock_guard lk(mu_);
  return done_;
}

void download::when_settled(std::function<void(shoal::status)> cb) {
  std::unique_lock lk(mu_);
  if (st_ == state::running) {
    settled_.push_back(std::move(cb));
    return;
  }
  shoal::status s;
  if (st_ == state::failed) s = shoal::fail(*err_);
  lk.unlock();
  cb(s);
}

std::string download::complete_path() const {
  std::lock_guard lk(mu_);
  return st_ == state::complete ? object_path_ : std::string();
}

// ---------------------------------------------------------------------------------------------
// swarm_manager

result<std::unique_ptr<swarm_manager>> swarm_manager::start(const swarm_config& cfg,
                                                            const node_config& node,
                                                            bases_fn scheduler_bases, deps d,
                                                            const tls::tls_config& tls) {
  if (tls.enabled && metainfo_root().empty()) {
    return shoal::fail(errc::config_error,
                       "swarm: tls is on but no metainfo root is set (swarm::enable_members_only)");
  }
  for (const auto& url : scheduler_bases ? scheduler_bases() : std::vector<std::string>{}) {
    if (tls.enabled && !url.starts_with("https://")) {
      log::warn(
          "tls is on but a scheduler URL is not https: SSL torrents will announce to it in "
          "plain HTTP, which a TLS scheduler refuses",
          log::kv("scheduler", url));
    }
  }
  std::unique_ptr<swarm_manager> m(new swarm_manager(cfg, node, std::move(scheduler_bases), d));
  swarm::settings ss;
  swarm::apply_tls(ss, tls);
  ss.listen = cfg.listen;
  ss.connections_limit = cfg.connections_limit;
  ss.upload_rate_limit = cfg.upload_rate_limit.bytes();
  ss.download_rate_limit = cfg.download_rate_limit.bytes();
  ss.libtorrent = cfg.libtorrent;
  // Understands a super-seeding origin (it says so with this prefix; see swarm.h).
  ss.peer_fingerprint = std::string(swarm::superseed_node_fingerprint);
  ss.close_redundant_connections = false;
  ss.require_grants = cfg.require_grants;
  auto ses = swarm::session::start(ss);
  if (!ses) return shoal::fail(ses.error());
  m->ses_ = std::move(*ses);
  m->ses_->raw().add_extension(std::make_shared<on_demand_plugin>(m.get()));
  // libtorrent 2.0.8 refuses every incoming connection, before the handshake that would reach
  // on_unknown_torrent, while the session holds no torrent (session_impl::incoming_connection:
  // "rejected, there are no torrents"). Once every seed is unloaded a holder could then never
  // serve again, so a sentinel torrent of one byte stays loaded: no trackers, no peers, upload
  // mode, its file never exists.
  {
    metainfo_builder b(1);
    b.update("", 1);
    auto sm = b.finish(sha256_of(std::string_view("", 1)));
    auto st = sm ? sm->torrent_file({}) : std::string();
    std::string why;
    lt::add_torrent_params p;
    p.ti = parse_torrent(st, &why);
    p.save_path = cfg.partial_dir + "/.sentinel";
    p.flags = lt::torrent_flags::upload_mode;
    lt::error_code ec;
    if (p.ti && sm) (void)m->ses_->add_torrent(std::move(p), ec);
    if (ec) why = ec.message();
    if (!why.empty() || !sm)
      log::warn("no sentinel torrent: holders cannot serve unloaded seeds", log::kv("error", why));
  }
  // Every received block is attributed to its source (registry-proxy or a peer) and counts as
  // progress, from a plugin callback on the network thread: libtorrent's per-block alerts cost
  // peerd a tenth of its CPU at 100 Mbit/s (docs/p2p.md).
  auto* mgr = m.get();
  swarm::block_callback on_block;
  if (cfg.count_sources) {
    on_block = [mgr](const lt::torrent_handle& th, bool origin, std::size_t n) {
      mgr->on_block(th, origin, n);
    };
  }
  m->ses_->raw().add_extension(swarm::node_superseed_plugin(std::move(on_block)));
  // Super seeding of the groups this node is the first holder of (group_spec::superseed): only
  // torrents added with swarm::superseed_userdata() are affected.
  if (cfg.superseed_published)
    m->ses_->raw().add_extension(
        swarm::origin_superseed_plugin(cfg.superseed_offers, true, cfg.superseed_max_in_flight));
  auto* self = m.get();
  m->ses_->on_alert([self](lt::alert* a) { self->on_alert(a); });
  m->monitor_ = std::thread([self] {
    name_this_thread("swarm-monitor");
    self->monitor();
  });
  log::info("swarm started", log::kv("listen", cfg.listen), log::kv("port", m->ses_->listen_port()),
            log::kv("members_only", tls.enabled ? "true (SSL torrents, cluster CA)" : "false"));
  return m;
}

swarm_manager::~swarm_manager() { stop(); }

void swarm_manager::stop() {
  if (stop_.exchange(true)) return;
  mon_cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  std::vector<std::shared_ptr<transfer>> jobs;
  {
    std::lock_guard lk(mu_);
    for (auto& [ih, job] : jobs_) jobs.push_back(job);
  }
  for (auto& job : jobs) fail(job, error{errc::cancelled, "peerd is shutting down"});
  if (ses_) ses_->stop();
}

std::string swarm_manager::endpoint() const {
  std::string host = cfg_.announce_ip;
  if (host.empty()) host = cfg_.listen.substr(0, cfg_.listen.rfind(':'));
  return host + ":" + std::to_string(listen_port());
}

// One tracker per scheduler replica, all in tier 0 (add_torrent_params::tracker_tiers stays
// empty: every tracker is tier 0), the replica that last answered first. The replicas share
// one peer store, so libtorrent announces to the first only (announce_to_all_trackers is off,
// swarm/src/swarm.cc) and, when it fails, moves it to the back of the tier and announces to the
// next at once.
std::vector<std::string> swarm_manager::trackers() const {
  if (!scheduler_) return {};
  std::vector<std::string> out;
  for (const auto& base : scheduler_()) {
    std::string t =
        swarm::tracker_url(base + "/announce", node_.name, node_.zone, node_.rack, "peer");
    if (!cfg_.announce_ip.empty()) t += "&ip=" + cfg_.announce_ip;
    out.push_back(std::move(t));
  }
  return out;
}

void swarm_manager::add_seed_peers(lt::add_torrent_params& p,
                                   const std::vector<std::string>& seeds) {
  for (const auto& s : seeds) {
    auto colon = s.rfind(':');
    if (colon == std::string::npos) continue;
    boost::system::error_code aec;
    auto addr = lt::make_address(s.substr(0, colon), aec);
    if (aec) continue;
    try {
      p.peers.emplace_back(addr, static_cast<std::uint16_t>(std::stoi(s.substr(colon + 1))));
    } catch (...) {
    }
  }
}

void swarm_manager::note_grant(const std::string& grant) {
  if (grant.empty() || !ses_->grants_required()) return;
  auto c = shoal::grant::peek(grant);
  if (!c) {
    log::warn("grant from registry-proxy does not parse; peers will refuse this node pieces",
              log::kv("error", c.error().message));
    return;
  }
  lt::sha1_hash ih;
  std::copy(c->swarm.begin(), c->swarm.end(), reinterpret_cast<std::uint8_t*>(ih.data()));
  ses_->set_grant(ih, grant, c->expires);
  log::debug("grant kept", log::kv("swarm", swarm::hash_hex(ih)), log::kv("node", c->node));
}

std::shared_ptr<download> swarm_manager::find(const digest& d) const {
  std::lock_guard lk(mu_);
  auto it = downloads_.find(d);
  return it == downloads_.end() ? nullptr : it->second;
}

std::shared_ptr<download> swarm_manager::by_alert(const lt::torrent_alert* a) const {
  // Every object's torrent is named by its digest's hex: the name travels with the alert, while
  // torrent_handle::info_hashes() is a blocking round trip to the network thread (measured: the
  // per-block alerts then cost peerd a fifth of its CPU).
  auto d = digest::from_hex(a->torrent_name());
  if (!d) return nullptr;
  return find(*d);
}

std::shared_ptr<download> swarm_manager::by_hash(const std::string& ih) const {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(ih);
  if (it == jobs_.end() || it->second->type() == transfer::kind::group) return nullptr;
  return std::static_pointer_cast<download>(it->second);
}

std::shared_ptr<group_download> swarm_manager::group_by_hash(const std::string& ih) const {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(ih);
  if (it == jobs_.end() || it->second->type() != transfer::kind::group) return nullptr;
  return std::static_pointer_cast<group_download>(it->second);
}

std::size_t swarm_manager::active_downloads() const {
  std::lock_guard lk(mu_);
  return downloads_.size();
}

std::size_t swarm_manager::loaded_torrents() const {
  std::lock_guard lk(mu_);
  std::size_t n = downloads_.size();
  for (const auto& [ih, s] : seeds_) n += s.type != transfer::kind::group;
  return n;
}

std::size_t swarm_manager::active_groups() const {
  std::lock_guard lk(mu_);
  return jobs_.size() - downloads_.size();
}

std::size_t swarm_manager::loaded_groups() const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& [ih, s] : seeds_) n += s.type == transfer::kind::group;
  return n;
}

result<std::shared_ptr<download>> swarm_manager::fetch(const digest& d, const std::string& torrent,
                                                       const object_metainfo& m,
                                                       const std::vector<std::string>& seeds,
                                                       fallback_info fb, bool transient) {
  if (stop_.load()) return shoal::fail(errc::cancelled, "peerd is shutting down");
  std::string ih = m.info_hash_hex();
  std::string partial = cfg_.partial_dir + "/" + d.hex().substr(0, 2);
  std::error_code ec;
  std::filesystem::create_directories(partial, ec);
  if (ec) return shoal::fail(ec, "create " + partial + ": " + ec.message());
  std::shared_ptr<download> dl;
  {
    std::lock_guard lk(mu_);
    auto it = downloads_.find(d);
    if (it != downloads_.end()) return it->second;
    if (seeds_.count(ih))
      return shoal::fail(errc::already_exists, "object is already held and seeded");
    if (jobs_.count(ih))
      return shoal::fail(errc::busy, "torrent of " + d.short_str() + " is already loaded");
    dl = std::make_shared<download>(d, m, partial);
    dl->mgr_ = this;
    dl->fallback_ = std::move(fb);
    dl->started_ = dl->last_progress_ = steady::now();
    dl->torrent_ = torrent;
    if (transient) dl->kind_ = transfer::kind::chunk;
    downloads_[d] = dl;
    jobs_[ih] = dl;
  }
  std::string why;
  auto ti = parse_torrent(torrent, &why);
  if (!ti) {
    fail(dl, error{errc::protocol_error, "metainfo: " + why});
    return shoal::fail(errc::protocol_error, "metainfo for " + d.short_str() + ": " + why);
  }
  lt::error_code lec;
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = partial;
  // Neither auto-managed nor paused; our tracker URL (with this node's identity) replaces the
  // torrent's own announce list.
  p.flags = lt::torrent_flags::update_subscribe | lt::torrent_flags::override_trackers |
            lt::torrent_flags::duplicate_is_error;
  p.trackers = trackers();
  add_seed_peers(p, seeds);
  auto h = ses_->add_torrent(std::move(p), lec);
  if (lec) {
    fail(dl, error{errc::internal, "add torrent: " + lec.message()});
    return shoal::fail(errc::internal, "add torrent for " + d.short_str() + ": " + lec.message());
  }
  bool in_order = false;
  {
    std::lock_guard lk(dl->mu_);
    dl->h_ = h;
    in_order = dl->in_order_;
  }
  if (in_order) h.set_flags(lt::torrent_flags::sequential_download);
  log::info("download started", log::kv("digest", d.str()), log::kv("size", m.size),
            log::kv("pieces", m.piece_count()), log::kv("info_hash", ih));
  return dl;
}

// Every piece passed its hash and the file is in the cache's staging directory. The torrent goes
// first (libtorrent no longer touches the file), then the cache adopts it on the worker pool.
void swarm_manager::finish_object(const std::shared_ptr<download>& dl,
                                  const lt::torrent_handle& h) {
  {
    std::lock_guard lk(dl->mu_);
    if (dl->st_ != transfer::state::running || dl->finishing_) return;
    dl->finishing_ = true;
    dl->h_ = lt::torrent_handle();
  }
  // Once per download: the peers it had, reconnected to by the seed that replaces the torrent.
  std::vector<std::string> peers;
  std::vector<lt::peer_info> info;
  h.get_peer_info(info);
  for (const auto& pi : info) {
    if (!(pi.flags & lt::peer_info::connecting))
      peers.push_back(pi.ip.address().to_string() + ":" + std::to_string(pi.ip.port()));
  }
  ses_->raw().remove_torrent(h);
  // The hash step takes it from here: the rest of the object's sha256, then complete().
  {
    std::lock_guard lk(dl->mu_);
    dl->finish_peers_ = std::move(peers);
    dl->staged_path_ = staged_file(dl->id());
    dl->hash_final_ = true;
  }
  hash_more(dl);
}

void swarm_manager::complete(const std::shared_ptr<download>& dl,
                             const std::vector<std::string>& peers,
                             const cache::content_proof* proof) {
  const digest& d = dl->id();
  auto adopted = d_.store.adopt_staged(staged_file(d), d, cache::object_kind::blob, proof);
  if (!adopted) {
    // Every piece hash passed but the whole object does not verify: nothing of it is kept, and a
    // reader still waiting for the last byte gets the error instead (mirror.cc).
    if (adopted.error().is(errc::digest_mismatch)) {
      counters_.hash_failures.fetch_add(1);
      log::error("downloaded object does not verify; discarded", log::kv("digest", d.str()),
                 log::kv("info_hash", dl->info_hash()), log::kv("error", adopted.error().message));
    }
    return fail(dl, adopted.error());
  }
  if (*adopted == cache::adopt_outcome::already_present)
    log::info("object was committed meanwhile by another path; the download verified and kept it",
              log::kv("digest", d.str()));
  auto h = seed_object(dl, peers);
  {
    std::lock_guard lk(dl->mu_);
    dl->h_ = h;
  }
  if (h.is_valid()) seed_other_roots(d, dl->torrent_, true);
  std::string ih = dl->meta().info_hash_hex();
  (void)d_.state.put(d, ih, dl->torrent_);
  (void)d_.store.pin(d, "swarm", pin_expiry());
  if (!settle_complete(dl, d_.store.object_path(d), true, {})) {
    // Ended meanwhile (shutdown): the object stays committed; its seed goes.
    if (h.is_valid()) ses_->remove(h);
    return;
  }
  counters_.downloads_ok.fetch_add(1);
  auto secs = std::chrono::duration<double>(steady::now() - dl->started_).count();
  log::info("object downloaded", log::kv("digest", d.str()), log::kv("bytes", dl->meta().size),
            log::kv("seconds", secs));
}

lt::torrent_handle swarm_manager::seed_object(const std::shared_ptr<download>& dl,
                                              const std::vector<std::string>& peers) {
  if (stop_.load()) return {};
  auto ti = parse_torrent(dl->torrent_);
  if (!ti) return {};
  lt::error_code ec;
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = d_.store.shard_dir(dl->id());
  // Its pieces are the ones that just passed their hashes, and the object its sha256.
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe |
            lt::torrent_flags::override_trackers | lt::torrent_flags::duplicate_is_error;
  p.trackers = trackers();
  swarm::trust_all_pieces(p);
  add_seed_peers(p, peers);
  auto h = ses_->add_torrent(std::move(p), ec);
  if (ec) {
    // A peer asked first and the torrent was loaded on demand: it seeds already.
    if (ec != lt::errors::duplicate_torrent)
      log::warn("cannot seed a downloaded object", log::kv("digest", dl->id().str()),
                log::kv("error", ec.message()));
    return {};
  }
  return h;
}

void swarm_manager::complete_transient(const std::shared_ptr<download>& dl) {
  std::string path = dl->partial_dir_ + "/" + dl->id().hex();
  if (!settle_complete(dl, path, true, path)) return;
  counters_.downloads_ok.fetch_add(1);
  log::info(
      "object downloaded", log::kv("digest", dl->id().str()), log::kv("bytes", dl->meta().size),
      log::kv("transient", true),
      log::kv("seconds", std::chrono::duration<double>(steady::now() - dl->started_).count()));
}

bool swarm_manager::settle_complete(const std::shared_ptr<download>& dl, const std::string& path,
                                    bool only_running, std::string transient_file) {
  const digest& d = dl->id();
  std::string ih = dl->meta().info_hash_hex();
  lt::torrent_handle h;
  std::vector<std::pair<std::uint32_t, std::vector<download::piece_cb>>> pending;
  std::vector<std::function<void(shoal::status)>> settled;
  std::vector<std::function<void()>> file_waiters;
  {
    std::lock_guard lk(dl->mu_);
    if (only_running && dl->st_ != download::state::running) return false;
    dl->st_ = download::state::complete;
    dl->cv_.notify_all();
    dl->object_path_ = path;
    h = dl->h_;
    // Readers waiting for a piece, or for a read_piece answer that will no longer be routed
    // here, are served from the object's file instead.
    for (auto& [p, cbs] : dl->waiting_) pending.emplace_back(p, std::move(cbs));
    for (auto& [p, cbs] : dl->reading_) pending.emplace_back(p, std::move(cbs));
    dl->waiting_.clear();
    dl->reading_.clear();
    settled.swap(dl->settled_);
    file_waiters = dl->take_file_waiters();
  }
  unloaded evicted;
  {
    std::lock_guard lk(mu_);
    downloads_.erase(d);
    jobs_.erase(ih);
    seed_entry e;
    e.type = dl->type();
    e.id = d;
    e.h = h;
    e.transient_file = std::move(transient_file);
    put_seed_locked(ih, std::move(e), evicted);
  }
  unload(evicted);
  for (auto& [p, cbs] : pending) {
    for (auto& cb : cbs) dl->read_piece(p, std::move(cb));
  }
  for (auto& cb : file_waiters) cb();
  for (auto& cb : settled) cb({});
  return true;
}

// The one failure path of every job: state and error, downloads_failed, waiters and readers woken
// with the error, the torrent removed (an object's partial file with it; a group's partial files
// stay for the next attempt), one log line.
void swarm_manager::fail(const std::shared_ptr<transfer>& job, error e) {
  std::vector<download::piece_cb> cbs;
  std::vector<std::function<void(shoal::status)>> settled;
  std::vector<std::function<void()>> file_waiters;
  lt::torrent_handle h;
  auto dl =
      job->type() == transfer::kind::group ? nullptr : std::static_pointer_cast<download>(job);
  auto g = dl ? nullptr : std::static_pointer_cast<group_download>(job);
  {
    std::lock_guard lk(job->mu_);
    if (job->st_ != transfer::state::running) return;
    job->st_ = transfer::state::failed;
    job->err_ = e;
    job->cv_.notify_all();
    // A finishing group's torrent is already on its way out.
    if (!g || !g->finishing_) h = job->h_;
    if (dl) {
      for (auto* m : {&dl->waiting_, &dl->reading_}) {
        for (auto& [p, v] : *m) {
          for (auto& cb : v) cbs.push_back(std::move(cb));
        }
        m->clear();
      }
      settled.swap(dl->settled_);
      file_waiters = dl->take_file_waiters();
    }
  }
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(job->ih_);
    if (it != jobs_.end() && it->second == job) jobs_.erase(it);
    if (dl) {
      auto dit = downloads_.find(dl->id());
      if (dit != downloads_.end() && dit->second == dl) downloads_.erase(dit);
    }
  }
  counters_.downloads_failed.fetch_add(1);
  if (dl) {
    if (h.is_valid() && ses_) ses_->raw().remove_torrent(h, lt::session::delete_files);
    log::warn("download failed", log::kv("digest", dl->id().str()), log::kv("error", e.message));
  } else {
    if (h.is_valid() && ses_ && !stop_.load()) ses_->raw().remove_torrent(h);
    log::warn("dataset group download failed", log::kv("group", g->spec_.name),
              log::kv("error", e.message));
  }
  for (auto& cb : cbs) cb(shoal::fail(e));
  for (auto& cb : file_waiters) cb();
  for (auto& cb : settled) cb(shoal::fail(e));
}

void swarm_manager::post_step(const std::shared_ptr<transfer>& job, std::function<void()> step) {
  net::post(d_.pool, [this, job, step = std::move(step)] {
    try {
      step();
    } catch (const std::exception& e) {
      log::error("swarm job step failed unexpectedly", log::kv("info_hash", job->info_hash()),
                 log::kv("error", e.what()));
      fail(job, error{errc::internal, std::string("unexpected: ") + e.what()});
    }
  });
}

std::vector<swarm_manager::download_status> swarm_manager::status() const {
  std::vector<std::shared_ptr<download>> dls;
  {
    std::lock_guard lk(mu_);
    for (auto& [d, dl] : downloads_) dls.push_back(dl);
  }
  std::vector<download_status> out;
  for (auto& dl : dls) {
    download_status s;
    s.id = dl->id();
    s.total = dl->meta().piece_count();
    s.done = dl->pieces_done();
    s.size = dl->meta().size;
    lt::torrent_handle h;
    {
      std::lock_guard lk(dl->mu_);
      h = dl->h_;
    }
    if (h.is_valid()) {
      auto st = h.status();
      s.peers = st.num_peers;
      s.download_rate = st.download_payload_rate;
      s.upload_rate = st.upload_payload_rate;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace shoal::peerd
