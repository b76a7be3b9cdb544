#include "group_swarm.h"

#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>

#include <sys/statvfs.h>

#include <boost/asio/post.hpp>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "common/file.h"
#include "common/log.h"

namespace shoal::peerd {

namespace fs = std::filesystem;
namespace net = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

std::shared_ptr<lt::torrent_info> parse_torrent(const std::string& t, std::string& why) {
  lt::error_code ec;
  auto ti = std::make_shared<lt::torrent_info>(t.data(), static_cast<int>(t.size()), ec);
  if (ec) {
    why = ec.message();
    return nullptr;
  }
  return ti;
}

void add_peers(lt::add_torrent_params& p, const std::vector<std::string>& seeds) {
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

}  // namespace

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

group_download::state group_download::current() const {
  std::lock_guard lk(mu_);
  return st_;
}

std::optional<error> group_download::failure() const {
  std::lock_guard lk(mu_);
  return err_;
}

group_download::state group_download::wait_for(std::chrono::milliseconds d) const {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, d, [this] { return st_ != state::running; });
  return st_;
}

result<std::unique_ptr<group_swarm>> group_swarm::start(deps d, options o) {
  std::unique_ptr<group_swarm> g(new group_swarm(d, std::move(o)));
  for (const auto& dir : {g->opts_.partial_dir, g->opts_.dir + "/packs"}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return shoal::fail(ec, "create " + dir + ": " + ec.message());
  }
  std::error_code ec;
  for (auto it = fs::directory_iterator(g->opts_.dir + "/packs", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".torrent") g->packs_.insert(it->path().stem().string());
  }
  auto* self = g.get();
  d.swarm.set_extension(
      swarm_manager::extension{[self](lt::alert* a) { return self->on_alert(a); },
                               [self](const lt::sha1_hash& ih, lt::add_torrent_params& p) {
                                 return self->on_unknown(ih, p);
                               },
                               [self](const lt::torrent_handle& th, bool origin, std::size_t n) {
                                 return self->on_block(th, origin, n);
                               }});
  g->monitor_ = std::thread([self] { self->monitor(); });
  return g;
}

group_swarm::~group_swarm() { stop(); }

void group_swarm::stop() {
  if (stop_.exchange(true)) return;
  mon_cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  std::vector<std::shared_ptr<group_download>> dls;
  {
    std::lock_guard lk(mu_);
    for (auto& [ih, dl] : downloads_) dls.push_back(dl);
  }
  for (auto& dl : dls) fail(dl, error{errc::cancelled, "peerd is shutting down"});
}

std::string group_swarm::member_path(const group_download& dl, const digest& d) const {
  return dl.dir_ + "/" + (dl.spec_.pack ? cache::store::pack_member_path(d) : d.hex());
}

status group_swarm::check_space(const group_download& dl) const {
  struct statvfs sv {};
  if (::statvfs(opts_.partial_dir.c_str(), &sv) != 0) return {};
  std::uint64_t free = static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
  std::uint64_t need = dl.total_ - std::min(dl.total_, dl.done_.load());
  // The bytes are written once into the partial directory, then renamed into the cache (same
  // filesystem): `need` is what the group still takes, plus a little for metadata.
  if (free >= need + (1u << 20)) return {};
  return shoal::fail(errc::no_space, "no space left on device for " + dl.spec_.name + ": " +
                                         opts_.partial_dir + " has " + std::to_string(free >> 20) +
                                         " MiB free, the group needs " +
                                         std::to_string((need >> 20) + 1) + " MiB more");
}

std::size_t group_swarm::active() const {
  std::lock_guard lk(mu_);
  return downloads_.size();
}

std::size_t group_swarm::loaded() const {
  std::lock_guard lk(mu_);
  return seeds_.size();
}

result<std::shared_ptr<group_download>> group_swarm::fetch(group_spec spec) {
  if (stop_.load()) return shoal::fail(errc::cancelled, "peerd is shutting down");
  std::string why;
  auto ti = parse_torrent(spec.torrent, why);
  if (!ti) return shoal::fail(errc::protocol_error, "metainfo of " + spec.name + ": " + why);
  if (static_cast<std::size_t>(ti->num_files()) != spec.objects.size() || spec.objects.empty()) {
    return shoal::fail(errc::protocol_error,
                       "metainfo of " + spec.name + " does not list the group's objects");
  }
  std::string ih = swarm::hash_hex(ti->info_hashes().v1);
  auto dl = std::make_shared<group_download>();
  dl->ih_ = ih;
  dl->ti_ = ti;
  dl->dir_ = opts_.partial_dir + "/" + ih;
  std::vector<lt::download_priority_t> prio(spec.objects.size(), lt::default_priority);
  for (std::size_t i = 0; i < spec.objects.size(); ++i) {
    const auto& [d, size] = spec.objects[i];
    dl->total_ += size;
    if (d_.store.contains(d)) {
      dl->present_bytes_ += size;
      prio[i] = lt::dont_download;
    }
  }
  dl->done_ = dl->present_bytes_;
  dl->last_progress_ = steady::now();
  dl->spec_ = std::move(spec);
  {
    std::lock_guard lk(mu_);
    if (auto it = downloads_.find(ih); it != downloads_.end()) return it->second;
    if (dl->present_bytes_ == dl->total_) {
      dl->st_ = group_download::state::complete;
    } else {
      downloads_[ih] = dl;
    }
  }
  if (dl->st_ == group_download::state::complete) {
    seed(dl->spec_, ih, true);
    return dl;
  }
  std::error_code ec;
  fs::create_directories(dl->dir_, ec);
  if (ec) {
    fail(dl, error{errc::io_error, "create " + dl->dir_ + ": " + ec.message()});
    return shoal::fail(*dl->failure());
  }
  // libtorrent writes through memory maps: on a full disk it sees SIGBUS ("Bad address"), not
  // ENOSPC. Check the room first, and name the problem.
  if (auto s = check_space(*dl); !s) {
    fail(dl, s.error());
    return shoal::fail(s.error());
  }
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = dl->dir_;
  p.flags = lt::torrent_flags::update_subscribe | lt::torrent_flags::override_trackers |
            lt::torrent_flags::duplicate_is_error;
  p.trackers = d_.swarm.tracker_urls();
  p.file_priorities = prio;
  add_peers(p, dl->spec_.seeds);
  lt::error_code lec;
  auto h = d_.swarm.session_for_extension().add_torrent(std::move(p), lec);
  if (lec) {
    fail(dl, error{lec == lt::errors::duplicate_torrent ? errc::busy : errc::internal,
                   "add torrent of " + dl->spec_.name + ": " + lec.message()});
    return shoal::fail(*dl->failure());
  }
  {
    std::lock_guard lk(dl->mu_);
    dl->h_ = h;
  }
  log::info("dataset group download started", log::kv("group", dl->spec_.name),
            log::kv("info_hash", ih), log::kv("objects", dl->spec_.objects.size()),
            log::kv("bytes", dl->total_), log::kv("present", dl->present_bytes_));
  return dl;
}

bool group_swarm::on_block(const lt::torrent_handle& th, bool origin, std::size_t n) {
  // Network thread: blocks are attributed per download (the swarm manager counts the totals).
  std::lock_guard lk(mu_);
  for (auto& [ih, dl] : downloads_) {
    std::lock_guard dlk(dl->mu_);
    if (dl->h_ == th) {
      (origin ? dl->from_origin : dl->from_peers).fetch_add(n);
      return true;
    }
  }
  for (auto& [ih, seed] : seeds_) {
    if (seed.h == th) return true;
  }
  return false;
}

// The info-hash of an alert this engine handles, or "" for any other alert. Cheap type filter
// first: computing an alert's info-hash is a call into libtorrent.
std::string group_swarm::wanted_info_hash(lt::alert* a) {
  auto* ta = dynamic_cast<lt::torrent_alert*>(a);
  if (!ta) return {};
  int type = a->type();
  bool wanted =
      type == lt::piece_finished_alert::alert_type ||
      type == lt::torrent_finished_alert::alert_type ||
      type == lt::torrent_removed_alert::alert_type || type == lt::hash_failed_alert::alert_type ||
      type == lt::torrent_error_alert::alert_type || type == lt::file_error_alert::alert_type ||
      type == lt::add_torrent_alert::alert_type || type == lt::state_changed_alert::alert_type;
  if (!wanted) return {};
  if (auto* tr = lt::alert_cast<lt::torrent_removed_alert>(a))
    return swarm::hash_hex(tr->info_hashes.v1);
  if (!ta->handle.is_valid()) return {};
  return swarm::hash_hex(ta->handle);
}

// Why this alert means a torrent's files are missing or corrupt, if it does: a torrent or file
// error, a piece failing its check, or a seed leaving seed mode.
std::optional<std::string> group_swarm::seed_trouble(lt::alert* a, bool is_seed) {
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

bool group_swarm::on_alert(lt::alert* a) {
  std::string ih = wanted_info_hash(a);
  if (ih.empty()) return false;
  std::shared_ptr<group_download> dl;
  bool is_seed = false, is_pack = false;
  {
    std::lock_guard lk(mu_);
    if (auto it = downloads_.find(ih); it != downloads_.end()) dl = it->second;
    is_seed = seeds_.count(ih) > 0;
    is_pack = packs_.count(ih) > 0;
  }
  if (auto* at = lt::alert_cast<lt::add_torrent_alert>(a)) {
    if (dl || is_seed) return true;
    if (!is_pack || at->error) return false;
    // A pack loaded on demand (on_unknown).
    std::lock_guard lk(mu_);
    seeds_[ih] = seed_entry{at->handle, steady::now()};
    log::info("loaded a dataset pack on demand", log::kv("info_hash", ih));
    return true;
  }
  if (!dl && !is_seed) return false;
  auto& counters = d_.swarm.counters_mut();
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
      if (dl->finishing_ || dl->fallback_ || dl->st_ != group_download::state::running) return true;
      dl->finishing_ = true;
    }
    // Every wanted piece verified: drop the torrent, then adopt its files (torrent_removed).
    d_.swarm.session_for_extension().remove_torrent(tf->handle);
    return true;
  }
  if (lt::alert_cast<lt::torrent_removed_alert>(a)) {
    if (!dl) return true;
    bool go;
    {
      std::lock_guard lk(dl->mu_);
      go = dl->finishing_ && dl->st_ == group_download::state::running;
    }
    if (go) net::post(d_.pool, [this, dl] { finish(dl); });
    return true;
  }
  if (auto* hf = lt::alert_cast<lt::hash_failed_alert>(a)) {
    counters.hash_failures.fetch_add(1);
    if (dl) {
      log::warn("rejected a dataset piece that failed its hash check",
                log::kv("group", dl->spec_.name),
                log::kv("piece", static_cast<int>(hf->piece_index)));
      return true;
    }
  }
  auto trouble = seed_trouble(a, is_seed);
  if (!trouble) return true;
  const std::string& why = *trouble;
  if (dl) {
    auto room = check_space(*dl);
    fail(dl, room ? error{errc::io_error, why}
                  : error{room.error().code, room.error().message + " (" + why + ")"});
    return true;
  }
  // A seed whose files are missing or corrupt: stop serving it. The cache's scrubber and the next
  // download decide what becomes of the objects.
  lt::torrent_handle h;
  {
    std::lock_guard lk(mu_);
    auto it = seeds_.find(ih);
    if (it == seeds_.end()) return true;
    h = it->second.h;
    seeds_.erase(it);
  }
  log::error("unloading a dataset seed", log::kv("info_hash", ih), log::kv("reason", why));
  if (h.is_valid()) d_.swarm.session_for_extension().remove_torrent(h);
  return true;
}

bool group_swarm::on_unknown(const lt::sha1_hash& h, lt::add_torrent_params& p) {
  if (stop_.load()) return false;
  std::string ih = swarm::hash_hex(h);
  {
    std::lock_guard lk(mu_);
    if (!packs_.count(ih) || downloads_.count(ih) || seeds_.count(ih)) return false;
  }
  auto t = read_file(opts_.dir + "/packs/" + ih + ".torrent");
  if (!t) return false;
  std::string why;
  auto ti = parse_torrent(*t, why);
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
  p.trackers = d_.swarm.tracker_urls();
  return true;
}

void group_swarm::seed(const group_spec& spec, const std::string& ih, bool verified) {
  if (stop_.load()) return;
  std::string why;
  auto ti = parse_torrent(spec.torrent, why);
  if (!ti) return;
  std::vector<lt::torrent_handle> drop;
  {
    std::lock_guard lk(mu_);
    if (auto it = seeds_.find(ih); it != seeds_.end()) {
      it->second.last_used = steady::now();
      return;
    }
    seeds_[ih] = seed_entry{lt::torrent_handle{}, steady::now()};
  }
  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = spec.pack ? d_.store.pack_dir() : d_.store.shard_dir(spec.objects.front().first);
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe |
            lt::torrent_flags::override_trackers | lt::torrent_flags::duplicate_is_error;
  p.trackers = d_.swarm.tracker_urls();
  if (verified) {
    p.verified_pieces.resize(ti->num_pieces(), true);
    p.have_pieces.resize(ti->num_pieces(), true);
  }
  lt::error_code ec;
  auto h = d_.swarm.session_for_extension().add_torrent(std::move(p), ec);
  std::lock_guard lk(mu_);
  if (ec) {
    // Already loaded elsewhere (swarm_manager's on-demand seed of the same object): fine.
    seeds_.erase(ih);
    if (ec != lt::errors::duplicate_torrent) {
      log::warn("cannot seed a dataset group", log::kv("group", spec.name),
                log::kv("error", ec.message()));
    }
    return;
  }
  seeds_[ih].h = h;
  while (seeds_.size() > opts_.max_loaded) {
    auto oldest = seeds_.begin();
    for (auto it = seeds_.begin(); it != seeds_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    drop.push_back(oldest->second.h);
    seeds_.erase(oldest);
  }
  for (auto& x : drop) {
    if (x.is_valid()) d_.swarm.session_for_extension().remove_torrent(x);
  }
}

void group_swarm::finish(const std::shared_ptr<group_download>& dl) {
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
  complete(dl);
}

void group_swarm::complete(const std::shared_ptr<group_download>& dl) {
  const auto& spec = dl->spec_;
  if (spec.pack) {
    auto s = write_atomic(opts_.dir + "/packs/" + dl->ih_ + ".torrent", spec.torrent);
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
    downloads_.erase(dl->ih_);
  }
  seed(spec, dl->ih_, true);
  {
    std::lock_guard lk(dl->mu_);
    dl->st_ = group_download::state::complete;
    dl->done_ = dl->total_;
  }
  dl->cv_.notify_all();
  log::info("dataset group downloaded", log::kv("group", spec.name), log::kv("bytes", dl->total_),
            log::kv("from_peers", dl->from_peers.load()),
            log::kv("from_origin", dl->from_origin.load()),
            log::kv("from_http", dl->from_http.load()));
}

void group_swarm::fail(const std::shared_ptr<group_download>& dl, error e) {
  lt::torrent_handle h;
  {
    std::lock_guard lk(dl->mu_);
    if (dl->st_ != group_download::state::running) return;
    dl->st_ = group_download::state::failed;
    dl->err_ = e;
    if (!dl->finishing_) h = dl->h_;
  }
  dl->cv_.notify_all();
  {
    std::lock_guard lk(mu_);
    auto it = downloads_.find(dl->ih_);
    if (it != downloads_.end() && it->second == dl) downloads_.erase(it);
  }
  // The partial files stay: the next attempt resumes from them.
  if (h.is_valid() && !stop_.load()) d_.swarm.session_for_extension().remove_torrent(h);
  log::warn("dataset group download failed", log::kv("group", dl->spec_.name),
            log::kv("error", e.message));
}

void group_swarm::http_fallback(const std::shared_ptr<group_download>& dl) {
  auto& counters = d_.swarm.counters_mut();
  counters.fallbacks.fetch_add(1);
  // Members whose file is already whole in the partial directory are adopted (the cache verifies
  // them); the rest come over HTTP, each straight into the cache.
  std::vector<std::pair<digest, std::uint64_t>> missing;
  for (const auto& [d, size] : dl->spec_.objects) {
    if (d_.store.contains(d)) continue;
    std::error_code ec;
    auto path = member_path(*dl, d);
    if (fs::file_size(path, ec) == size && !ec) {
      if (auto s = d_.store.adopt_file(path, d, cache::object_kind::dataset_file);
          s || s.error().is(errc::already_exists)) {
        continue;
      }
    }
    missing.emplace_back(d, size);
  }
  log::info("dataset group stalled; fetching its objects from registry-proxy over HTTP",
            log::kv("group", dl->spec_.name), log::kv("objects", missing.size()));
  std::optional<error> first;
  // Batches of `http_parallel` transfers; each object streams into its cache writer.
  for (std::size_t at = 0; at < missing.size() && !first && !stop_.load();
       at += opts_.http_parallel) {
    struct transfer {
      digest id;
      std::shared_ptr<cache::object_writer> writer;
      std::shared_ptr<int> status = std::make_shared<int>(0);
      std::future<result<http::completion>> done;
    };
    std::vector<transfer> batch;
    for (std::size_t k = at; k < std::min(missing.size(), at + opts_.http_parallel); ++k) {
      const auto& [d, size] = missing[k];
      auto t = d_.store.begin_write(d, size, cache::object_kind::dataset_file);
      if (!t) {
        first = t.error().wrap("HTTP fallback for " + dl->spec_.name);
        break;
      }
      if (t->role != cache::write_role::writer) continue;  // present, or someone else writes it
      transfer x;
      x.id = d;
      x.writer = std::shared_ptr<cache::object_writer>(std::move(t->writer));
      auto prom = std::make_shared<std::promise<result<http::completion>>>();
      x.done = prom->get_future();
      http::client_request r;
      r.url = dl->spec_.fallback_base + d.str();
      r.timeouts.connect = std::chrono::milliseconds(2000);
      r.timeouts.stall = opts_.stall_timeout * 2;
      r.max_retries = 2;
      r.resume = true;
      http::callbacks cb;
      cb.on_response = [st = x.status](const http::response_head& h) {
        *st = h.status;
        return h.status == 200;
      };
      cb.on_data = [w = x.writer, dl, &counters](std::string_view chunk) {
        if (!w->write(chunk)) return false;
        dl->from_http.fetch_add(chunk.size());
        counters.from_http.fetch_add(chunk.size());
        std::lock_guard lk(dl->mu_);
        dl->last_progress_ = steady::now();
        return true;
      };
      cb.on_complete = [prom](result<http::completion> res) { prom->set_value(std::move(res)); };
      d_.http.submit(std::move(r), std::move(cb));
      batch.push_back(std::move(x));
    }
    for (auto& x : batch) {
      auto res = x.done.get();
      std::optional<error> e;
      if (!res) {
        e = res.error();
      } else if (*x.status != 200) {
        e = error{errc::upstream_error, "registry-proxy answered HTTP " +
                                            std::to_string(*x.status) + " for " + x.id.str()};
      } else if (auto c = x.writer->commit(); !c) {
        e = c.error();
      }
      if (e) {
        x.writer->abort(e->message);
        if (!first) first = e->wrap("HTTP fallback for " + dl->spec_.name);
      }
    }
  }
  if (first) return fail(dl, *first);
  for (const auto& [d, size] : dl->spec_.objects) {
    // Members written by someone else meanwhile: give them a moment.
    for (int i = 0; i < 200 && !d_.store.contains(d); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!d_.store.contains(d))
      return fail(dl, error{errc::not_found, d.str() + " did not arrive for " + dl->spec_.name});
  }
  std::error_code ec;
  fs::remove_all(dl->dir_, ec);
  complete(dl);
}

void group_swarm::monitor() {
  auto next_sweep = steady::now();
  std::unique_lock lk(mon_mu_);
  while (!stop_.load()) {
    mon_cv_.wait_for(lk, std::chrono::milliseconds(250));
    if (stop_.load()) break;
    lk.unlock();
    auto now = steady::now();
    std::vector<std::shared_ptr<group_download>> dls;
    {
      std::lock_guard g(mu_);
      for (auto& [ih, dl] : downloads_) dls.push_back(dl);
    }
    for (auto& dl : dls) {
      lt::torrent_handle h;
      steady::time_point last;
      bool busy;
      {
        std::lock_guard g(dl->mu_);
        h = dl->h_;
        last = dl->last_progress_;
        busy = dl->finishing_ || dl->fallback_;
      }
      if (!busy && h.is_valid()) {
        auto st = h.status(lt::torrent_handle::query_accurate_download_counters);
        auto done = dl->present_bytes_ +
                    static_cast<std::uint64_t>(std::max<std::int64_t>(0, st.total_wanted_done));
        dl->done_ = std::min(done, dl->total_);
      } else if (dl->fallback_) {
        dl->done_ = std::min(dl->total_, dl->present_bytes_ + dl->from_http.load() +
                                             dl->from_peers.load() + dl->from_origin.load());
      }
      if (busy && !dl->fallback_) continue;
      if (now - last > opts_.fallback_deadline) {
        fail(dl, error{errc::timeout,
                       "no data for " + dl->spec_.name + " from the swarm or registry-proxy for " +
                           std::to_string(opts_.fallback_deadline.count() / 1000) + "s"});
      } else if (!busy && now - last > opts_.stall_timeout && !dl->spec_.fallback_base.empty()) {
        {
          std::lock_guard g(dl->mu_);
          dl->fallback_ = true;
          dl->last_progress_ = now;
          dl->h_ = lt::torrent_handle{};
        }
        if (h.is_valid()) d_.swarm.session_for_extension().remove_torrent(h);
        net::post(d_.pool, [this, dl] { http_fallback(dl); });
      }
    }
    if (now >= next_sweep) {
      next_sweep = now + std::chrono::seconds(5);
      std::vector<std::pair<std::string, lt::torrent_handle>> snap;
      {
        std::lock_guard g(mu_);
        for (auto& [ih, s] : seeds_) snap.emplace_back(ih, s.h);
      }
      std::vector<lt::torrent_handle> drop;
      for (auto& [ih, h] : snap) {
        bool serving = swarm::serving_a_peer(h);
        std::lock_guard g(mu_);
        auto it = seeds_.find(ih);
        if (it == seeds_.end()) continue;
        if (serving) it->second.last_used = now;
        if (now - it->second.last_used > opts_.seed_idle_unload && it->second.h.is_valid()) {
          drop.push_back(it->second.h);
          seeds_.erase(it);
        }
      }
      for (auto& h : drop) d_.swarm.session_for_extension().remove_torrent(h);
    }
    lk.lock();
  }
}

}  // namespace shoal::peerd
