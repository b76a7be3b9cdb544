// swarm_manager's dataset groups (swarm.h): fetching a group (single or pack) into its partial
// directory, the alerts of group torrents, adopting the members into the cache, seeding the group
// from the cache's files, and loading held packs on demand.
#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>

#include <sys/statvfs.h>

#include <boost/asio/post.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/file.h"
#include "common/log.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

namespace fs = std::filesystem;
namespace net = boost::asio;

namespace {

// The info-hash of an alert a group may need, or "" for any other alert. Cheap type filter
// first: computing an alert's info-hash is a call into libtorrent.
std::string wanted_info_hash(lt::alert* a) {
  auto* ta = dynamic_cast<lt::torrent_alert*>(a);
  if (!ta) return {};
  int type = a->type();
  bool wanted =
      type == lt::piece_finished_alert::alert_type ||
      type == lt::torrent_finished_alert::alert_type ||
      type == lt::torrent_removed_alert::alert_type || type == lt::hash_failed_alert::alert_type ||
      type == lt::torrent_error_alert::alert_type || type == lt::file_error_alert::alert_type ||
      type == lt::add_torrent_alert::alert_type || type == lt::state_changed_alert::alert_type ||
      type == lt::cache_flushed_alert::alert_type;
  if (!wanted) return {};
  if (auto* tr = lt::alert_cast<lt::torrent_removed_alert>(a))
    return swarm::hash_hex(tr->info_hashes.v1);
  if (!ta->handle.is_valid()) return {};
  return swarm::hash_hex(ta->handle);
}

// Why this alert means a torrent's files are missing or corrupt, if it does: a torrent or file
// error, a piece failing its check, or a seed leaving seed mode.
std::optional<std::string> seed_trouble(lt::alert* a, bool is_seed) {
  if (auto* te = lt::alert_cast<lt::torrent_error_alert>(a))
    return "torrent error: " + te->error.message();
  if (auto* fe = lt::alert_cast<lt::file_error_alert>(a))
    return "file error: " + fe->error.message();
  if (lt::alert_cast<lt::hash_failed_alert>(a))
    return "a piece failed its hash check while seeding";
  if (auto* sc = lt::alert_cast<lt::state_changed_alert>(a)) {
    using ts = lt::torrent_status;
    bool was_seed = sc->prev_state == ts::seeding || sc->prev_state == ts::finished;
    bool left = sc->state == ts::checking_files || sc->state == ts::downloading;
    if (is_seed && was_seed && left) return "a seed left seed mode (a piece failed its check)";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

status swarm_manager::enable_groups(group_options o) {
  for (const auto& dir : {o.partial_dir, o.dir + "/packs"}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return shoal::fail(ec, "create " + dir + ": " + ec.message());
  }
  std::set<std::string> packs;
  std::error_code ec;
  for (auto it = fs::directory_iterator(o.dir + "/packs", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".torrent") packs.insert(it->path().stem().string());
  }
  {
    std::lock_guard lk(mu_);
    groups_ = std::move(o);
    packs_ = std::move(packs);
  }
  groups_enabled_ = true;
  return {};
}

std::string swarm_manager::member_path(const group_download& dl, const digest& d) const {
  return dl.dir_ + "/" + (dl.spec_.pack ? cache::store::pack_member_path(d) : d.hex());
}

status swarm_manager::check_space(const group_download& dl) const {
  struct statvfs sv {};
  const std::string& dir = groups_->partial_dir;
  if (::statvfs(dir.c_str(), &sv) != 0) return {};
  std::uint64_t free = static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
  std::uint64_t need = dl.total_ - std::min(dl.total_, dl.done_.load());
  // The bytes are written once into the partial directory, then renamed into the cache (same
  // filesystem): `need` is what the group still takes, plus a little for metadata.
  if (free >= need + (1u << 20)) return {};
  return shoal::fail(errc::no_space, "no space left on device for " + dl.spec_.name + ": " + dir +
                                         " has " + std::to_string(free >> 20) +
                                         " MiB free, the group needs " +
                                         std::to_string((need >> 20) + 1) + " MiB more");
}

result<std::shared_ptr<group_download>> swarm_manager::fetch_group(group_spec spec) {
  if (stop_.load()) return shoal::fail(errc::cancelled, "peerd is shutting down");
  if (!groups_enabled_.load())
    return shoal::fail(errc::unavailable, "datasets are not enabled on this node");
  note_grant(spec.grant);
  auto dl = prepare_group(std::move(spec));
  if (!dl) return dl;
  const std::string& ih = (*dl)->ih_;
  {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(ih); it != jobs_.end()) {
      if (it->second->type() == transfer::kind::group)
        return std::static_pointer_cast<group_download>(it->second);
      return shoal::fail(errc::busy, "torrent of " + (*dl)->spec_.name + " is already loaded");
    }
    if ((*dl)->present_bytes_ == (*dl)->total_) {
      (*dl)->st_ = transfer::state::complete;
    } else {
      jobs_[ih] = *dl;
    }
  }
  if ((*dl)->st_ == transfer::state::complete) {
    seed_group((*dl)->spec_, ih);
    return dl;
  }
  if (auto s = add_group_torrent(*dl); !s) {
    fail(*dl, s.error());
    return shoal::fail(s.error());
  }
  log::info("dataset group download started", log::kv("group", (*dl)->spec_.name),
            log::kv("info_hash", ih), log::kv("objects", (*dl)->spec_.objects.size()),
            log::kv("bytes", (*dl)->total_), log::kv("present", (*dl)->present_bytes_));
  return dl;
}

// The group's job, not yet registered: its torrent, directory, and the members already cached.
result<std::shared_ptr<group_download>> swarm_manager::prepare_group(group_spec spec) {
  std::string why;
  auto ti = parse_torrent(spec.torrent, &why);
  if (!ti) return shoal::fail(errc::protocol_error, "metainfo of " + spec.name + ": " + why);
  if (static_cast<std::size_t>(ti->num_files()) != spec.objects.size() || spec.objects.empty()) {
    return shoal::fail(errc::protocol_error,
                       "metainfo of " + spec.name + " does not list the group's objects");
  }
  auto dl = std::make_shared<group_download>();
  dl->ih_ = swarm::hash_hex(ti->info_hashes().v1);
  dl->ti_ = ti;
  dl->dir_ = groups_->partial_dir + "/" + dl->ih_;
  for (const auto& [d, size] : spec.objects) {
    dl->total_ += size;
    if (d_.store.contains(d)) dl->present_bytes_ += size;
  }
  dl->done_ = dl->present_bytes_;
  dl->started_ = dl->last_progress_ = steady::now();
  dl->spec_ = std::move(spec);
  return dl;
}

// Adds a registered group's torrent, downloading into its partial directory (whose files
// libtorrent checks first: an interrupted download resumes).
status swarm_manager::add_group_torrent(const std::shared_ptr<group_download>& dl) {
  std::error_code ec;
  fs::create_directories(dl->dir_, ec);
  if (ec) return shoal::fail(errc::io_error, "create " + dl->dir_ + ": " + ec.message());
  // libtorrent writes through memory maps: on a full disk it sees SIGBUS ("Bad address"), not
  // ENOSPC. Check the room first, and name the problem.
  if (auto s = check_space(*dl); !s) return s;
  std::vector<lt::download_priority_t> prio(dl->spec_.objects.size(), lt::default_priority);
  for (std::size_t i = 0; i < dl->spec_.objects.size(); ++i) {
    if (d_.store.contains(dl->spec_.objects[i].first)) prio[i] = lt::dont_download;
  }
  lt::add_torrent_params p;
  p.ti = std::const_pointer_cast<lt::torrent_info>(dl->ti_);
  p.save_path = dl->dir_;
  p.flags = lt::torrent_flags::update_subscribe | lt::torrent_flags::override_trackers |
            lt::torrent_flags::duplicate_is_error;
  p.trackers = trackers();
  p.file_priorities = prio;
  add_seed_peers(p, dl->spec_.seeds);
  lt::error_code lec;
  auto h = ses_->add_torrent(std::move(p), lec);
  if (lec) {
    return shoal::fail(lec == lt::errors::duplicate_torrent ? errc::busy : errc::internal,
                       "add torrent of " + dl->spec_.name + ": " + lec.message());
  }
  std::lock_guard lk(dl->mu_);
  dl->h_ = h;
  return {};
}

// The alerts of group torrents (downloads and seeds, packs loaded on demand); true when the alert
// was a group's.
bool swarm_manager::on_group_alert(lt::alert* a) {
  if (!groups_enabled_.load()) return false;
  std::string ih = wanted_info_hash(a);
  if (ih.empty()) return false;
  std::shared_ptr<group_download> dl = group_by_hash(ih);
  bool is_seed = false, is_pack = false;
  {
    std::lock_guard lk(mu_);
    auto it = seeds_.find(ih);
    is_seed = it != seeds_.end() && it->second.type == transfer::kind::group;
    is_pack = packs_.count(ih) > 0;
  }
  if (auto* at = lt::alert_cast<lt::add_torrent_alert>(a)) {
    if (dl || is_seed) return true;
    if (!is_pack || at->error) return false;
    // A pack loaded on demand (prepare_pack_on_demand).
    unloaded evicted;
    {
      std::lock_guard lk(mu_);
      seed_entry e;
      e.type = transfer::kind::group;
      e.h = at->handle;
      e.lazy = true;
      put_seed_locked(ih, std::move(e), evicted);
    }
    unload(evicted);
    log::info("loaded a dataset pack on demand", log::kv("info_hash", ih));
    return true;
  }
  if (!dl && !is_seed) return false;
  if (lt::alert_cast<lt::piece_finished_alert>(a)) {
    if (dl) {
      std::lock_guard lk(dl->mu_);
      dl->last_progress_ = steady::now();
    }
    return true;
  }
  if (auto* tf = lt::alert_cast<lt::torrent_finished_alert>(a)) {
    if (!dl) return true;
    {
      std::lock_guard lk(dl->mu_);
      if (dl->finishing_ || dl->fallback_ || dl->st_ != transfer::state::running) return true;
      dl->finishing_ = true;
    }
    // Every wanted piece verified: flush its writes (a piece passes its hash from libtorrent's
    // store buffer, maybe before it is in the file), drop the torrent, then adopt its files
    // (torrent_removed; that alert comes at once, not after the pending writes).
    tf->handle.flush_cache();
    return true;
  }
  if (lt::alert_cast<lt::cache_flushed_alert>(a)) {
    if (!dl) return true;
    // Two come (libtorrent flushes by itself when a torrent finishes): the first removes it.
    bool go;
    {
      std::lock_guard lk(dl->mu_);
      go =
          dl->finishing_ && !dl->removing_ && !dl->fallback_ && dl->st_ == transfer::state::running;
      if (go) dl->removing_ = true;
    }
    if (go) ses_->raw().remove_torrent(static_cast<const lt::torrent_alert*>(a)->handle);
    return true;
  }
  if (lt::alert_cast<lt::torrent_removed_alert>(a)) {
    if (!dl) return true;
    bool go;
    {
      std::lock_guard lk(dl->mu_);
      go = dl->finishing_ && dl->st_ == transfer::state::running;
    }
    if (go) post_step(dl, [this, dl] { finish_group(dl); });
    return true;
  }
  if (auto* hf = lt::alert_cast<lt::hash_failed_alert>(a)) {
    counters_.hash_failures.fetch_add(1);
    if (dl) {
      {
        std::lock_guard lk(dl->mu_);
        dl->hash_failed_ = true;  // blocks no longer count as progress (watch())
      }
      log::warn("rejected a dataset piece that failed its hash check",
                log::kv("group", dl->spec_.name),
                log::kv("piece", static_cast<int>(hf->piece_index)));
      return true;
    }
  }
  auto trouble = seed_trouble(a, is_seed);
  if (!trouble) return true;
  if (dl) {
    auto room = check_space(*dl);
    fail(dl, room ? error{errc::io_error, *trouble}
                  : error{room.error().code, room.error().message + " (" + *trouble + ")"});
    return true;
  }
  on_group_seed_trouble(ih, *trouble);
  return true;
}

// A group seed whose files are missing or corrupt: stop serving it. The cache's scrubber and the
// next download decide what becomes of the objects.
void swarm_manager::on_group_seed_trouble(const std::string& ih, const std::string& why) {
  unloaded u;
  {
    std::lock_guard lk(mu_);
    auto it = seeds_.find(ih);
    if (it == seeds_.end() || it->second.type != transfer::kind::group) return;
    erase_seed_locked(it, &u);
  }
  log::error("unloading a dataset seed", log::kv("info_hash", ih), log::kv("reason", why));
  unload(u);
}

bool swarm_manager::prepare_pack_on_demand(const std::string& ih, lt::add_torrent_params& p) {
  if (!groups_enabled_.load()) return false;
  {
    std::lock_guard lk(mu_);
    if (!packs_.count(ih) || jobs_.count(ih) || seeds_.count(ih)) return false;
  }
  auto t = read_file(groups_->dir + "/packs/" + ih + ".torrent");
  if (!t) return false;
  auto ti = parse_torrent(*t);
  if (!ti) return false;
  const auto& files = ti->files();
  for (auto i : files.file_range()) {
    auto name = files.file_name(i);
    auto d = digest::parse("sha256:" + std::string(name));
    if (!d || !d_.store.contains(*d)) return false;
  }
  p.ti = ti;
  p.save_path = d_.store.pack_dir();
  // Seed mode without trusted pieces: each piece is hashed before its first upload.
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe |
            lt::torrent_flags::override_trackers;
  p.trackers = trackers();
  return true;
}

// Loads a complete group as a verified seed from the cache's files (a pack from the objects
// directory, a single from its shard).
void swarm_manager::seed_group(const group_spec& spec, const std::string& ih) {
  if (stop_.load()) return;
  auto ti = parse_torrent(spec.torrent);
  if (!ti) return;
  unloaded evicted;
  {
    std::lock_guard lk(mu_);
    if (auto it = seeds_.find(ih); it != seeds_.end()) {
      it->second.last_used = steady::now();
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
    seed_entry e;
    e.type = transfer::kind::group;  // handle set once added
    put_seed_locked(ih, std::move(e), evicted);
  }
  unload(evicted);
  evicted = {};
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = spec.pack ? d_.store.pack_dir() : d_.store.shard_dir(spec.objects.front().first);
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe |
            lt::torrent_flags::override_trackers | lt::torrent_flags::duplicate_is_error;
  p.trackers = trackers();
  swarm::trust_all_pieces(p);
  if (spec.superseed && cfg_.superseed_published)
    p.userdata = swarm::superseed_userdata(ti->num_pieces());
  lt::error_code ec;
  auto h = ses_->add_torrent(std::move(p), ec);
  {
    std::lock_guard lk(mu_);
    auto it = seeds_.find(ih);
    if (ec) {
      // Already loaded elsewhere (an on-demand seed of the same object): fine.
      if (it != seeds_.end() && !it->second.h.is_valid()) erase_seed_locked(it, nullptr);
    } else if (it != seeds_.end()) {
      it->second.h = h;
    } else {
      seed_entry e;  // evicted while being added: back in, most recently used
      e.type = transfer::kind::group;
      e.h = h;
      put_seed_locked(ih, std::move(e), evicted);
    }
  }
  if (ec && ec != lt::errors::duplicate_torrent) {
    log::warn("cannot seed a dataset group", log::kv("group", spec.name),
              log::kv("error", ec.message()));
  }
  unload(evicted);
}

void swarm_manager::finish_group(const std::shared_ptr<group_download>& dl) {
  // Every adoption hashes the member and syncs it and an index row: a pack of thousands of small
  // files is adopted by several threads, so the disk and RocksDB batch the syncs.
  const auto& objs = dl->spec_.objects;
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::optional<error> first;
  auto worker = [&] {
    for (std::size_t k = next.fetch_add(1); k < objs.size(); k = next.fetch_add(1)) {
      const auto& [d, size] = objs[k];
      if (d_.store.contains(d)) continue;
      std::string path = member_path(*dl, d);
      auto s = d_.store.adopt_file(path, d, cache::object_kind::dataset_file);
      if (s || s.error().is(errc::already_exists)) continue;
      if (s.error().is(errc::busy)) {
        // The same bytes arrive through another group: wait for them.
        for (int i = 0; i < 200 && !d_.store.contains(d); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (d_.store.contains(d)) continue;
      }
      if (s.error().is(errc::digest_mismatch)) {
        std::error_code ec;
        fs::remove(path, ec);
      }
      std::lock_guard lk(mu);
      if (!first) first = s.error().wrap(dl->spec_.name);
      next = objs.size();
    }
  };
  std::size_t n = std::min<std::size_t>(8, std::max<std::size_t>(1, objs.size() / 64));
  std::vector<std::thread> ts;
  for (std::size_t i = 1; i < n; ++i) ts.emplace_back(worker);
  worker();
  for (auto& t : ts) t.join();
  if (first) return fail(dl, *first);
  std::error_code ec;
  fs::remove_all(dl->dir_, ec);
  complete_group(dl);
}

void swarm_manager::complete_group(const std::shared_ptr<group_download>& dl) {
  const auto& spec = dl->spec_;
  if (spec.pack) {
    auto s = write_atomic(groups_->dir + "/packs/" + dl->ih_ + ".torrent", spec.torrent);
    if (!s)
      log::warn("cannot keep a pack's torrent", log::kv("pack", dl->ih_),
                log::kv("error", s.error().message));
    std::lock_guard lk(mu_);
    if (s) packs_.insert(dl->ih_);
  } else {
    (void)d_.state.put(spec.objects.front().first, dl->ih_, spec.torrent);
  }
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(dl->ih_);
    if (it != jobs_.end() && it->second == dl) jobs_.erase(it);
  }
  seed_group(spec, dl->ih_);
  {
    std::lock_guard lk(dl->mu_);
    dl->st_ = transfer::state::complete;
    dl->done_ = dl->total_;
  }
  dl->cv_.notify_all();
  log::info("dataset group downloaded", log::kv("group", spec.name), log::kv("bytes", dl->total_),
            log::kv("from_peers", dl->from_peers.load()),
            log::kv("from_origin", dl->from_origin.load()),
            log::kv("from_http", dl->from_http.load()));
}

}  // namespace shoal::peerd
