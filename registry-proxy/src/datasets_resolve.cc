// The dataset service's resolution of a declaration into a content-addressed manifest: list
// the origin, fetch and hash every file into the cache, group small files into packs (datasets.h).
#include "datasets_internal.h"

#include "common/thread_name.h"

namespace shoal::proxy {

using namespace datasets_detail;

// ---- resolution

bool dataset_service::start_resolution(const std::shared_ptr<record>& r) {
  {
    std::lock_guard rl(r->mu);
    if (r->running) return true;
  }
  {
    std::lock_guard lk(mu_);
    if (stop_.load()) return false;
    if (queue_.size() >= opts_.max_queued) return false;
    {
      std::lock_guard rl(r->mu);
      r->running = true;
      r->queued = true;
      r->state = "resolving";
      r->started = steady::now();
    }
    queue_.push_back(r);
  }
  queue_cv_.notify_one();
  return true;
}

void dataset_service::start_resolvers() {
  std::lock_guard lk(mu_);
  for (int i = 0; i < std::max(1, opts_.max_resolving); ++i) {
    resolvers_.emplace_back([this] {
      name_this_thread("dataset-resolve");
      resolver_loop();
    });
  }
}

// One of the `max_resolving` resolver threads: takes queued records in arrival order. Nothing a
// resolution does may end the thread: whatever escapes is logged and the record is failed (and
// saved so), so a restart does not replay it.
void dataset_service::resolver_loop() {
  for (;;) {
    std::shared_ptr<record> r;
    {
      std::unique_lock lk(mu_);
      queue_cv_.wait(lk, [this] { return stop_.load() || !queue_.empty(); });
      if (stop_.load()) return;
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    {
      std::lock_guard rl(r->mu);
      r->queued = false;
      r->started = steady::now();
    }
    std::optional<std::string> why;
    try {
      resolve(r);
    } catch (const std::exception& e) {
      why = std::string("internal error: ") + e.what();
    } catch (...) {
      why = "internal error: unknown exception";
    }
    if (why) {
      log::error("dataset resolution threw", log::kv("dataset", r->ref),
                 log::kv("error", utf8_safe(*why)));
      try {
        resolve_failed(r, error{errc::internal, *why});
      } catch (...) {
        log::error("cannot record a dataset's failure", log::kv("dataset", r->ref));
      }
    }
    std::lock_guard rl(r->mu);
    r->running = false;
  }
}

// A record found resolving at start: registry-proxy stopped (or died) during its resolution.
// After kMaxInterrupted such starts in a row it is failed instead, so that an input that kills
// the process cannot do it at every start.
void dataset_service::resume_resolution(const std::shared_ptr<record>& r) {
  constexpr int kMaxInterrupted = 3;
  int n;
  {
    std::lock_guard rl(r->mu);
    n = ++r->interrupted;
  }
  if (n > kMaxInterrupted) {
    return resolve_failed(
        r,
        error{errc::internal, "the resolution was interrupted " + std::to_string(kMaxInterrupted) +
                                  " times (registry-proxy stopped during it); declare the "
                                  "dataset again to retry"});
  }
  if (auto s = persist(*r); !s)
    log::warn("cannot save a dataset record", log::kv("error", s.error().message));
  log::info("resuming the resolution of a dataset", log::kv("dataset", r->ref),
            log::kv("interrupted", n));
  if (!start_resolution(r)) resolve_failed(r, error{errc::unavailable, "resolver queue full"});
}

void dataset_service::mark_ready(record& r, const digest& md, const dataset::manifest& m,
                                 std::optional<double> resolve_seconds) {
  std::lock_guard rl(r.mu);
  r.state = "ready";
  r.error.clear();
  r.interrupted = 0;
  r.manifest_digest = md;
  r.files = m.files.size();
  r.bytes = m.total_bytes();
  r.groups = m.groups.size();
  if (resolve_seconds) r.resolve_seconds = *resolve_seconds;
  r.manifest.reset();
  r.by_digest.reset();
}

bool dataset_service::adopt_elsewhere(const std::shared_ptr<record>& r) {
  auto got = opts_.ready_elsewhere(r->ref, stop_);
  if (!got) return false;
  const auto& [md, text] = *got;
  auto m = dataset::parse_manifest(text, md);
  auto refuse = [&](const std::string& why) {
    log::warn("not taking another member's version of a dataset; resolving it",
              log::kv("dataset", r->ref), log::kv("manifest", md.str()), log::kv("error", why));
    return false;
  };
  if (!m) return refuse(m.error().message);
  if (m->name != r->decl.name || m->version != r->decl.version || m->origin != r->decl.origin.url)
    return refuse("its manifest is of another declaration");
  if (!has_manifest(md)) {
    if (auto s = write_atomic(manifest_path(md), dataset::canonical_json(*m)); !s)
      return refuse(s.error().message);
  }
  // Its groups' metainfo is made when first asked, as for a copy (the origin may no longer
  // have this version's bytes; the member that resolved it holds them).
  mark_ready(*r, md, *m, std::nullopt);
  if (auto s = persist(*r); !s)
    log::warn("cannot save a dataset record", log::kv("error", s.error().message));
  log::info(
      "dataset taken from another ring member's resolution (this replica's was "
      "interrupted)",
      log::kv("dataset", r->ref), log::kv("manifest", md.str()));
  return true;
}

void dataset_service::resolve(const std::shared_ptr<record>& r) {
  bool resumed;
  {
    std::lock_guard rl(r->mu);
    resumed = r->interrupted > 0;
  }
  if (resumed && opts_.ready_elsewhere && adopt_elsewhere(r)) return;
  auto og = origin_of(r);
  if (!og) return resolve_failed(r, og.error());
  std::shared_ptr<const dataset_origin> origin = *og;
  auto t0 = steady::now();
  r->files_done = 0;
  r->bytes_done = 0;
  auto listing = origin->list(stop_);
  if (!listing) return resolve_failed(r, listing.error().wrap("resolve " + r->ref));
  std::uint64_t total = 0;
  for (const auto& o : *listing) total += o.size;
  r->files_total = listing->size();
  r->bytes_total = total;
  log::info("dataset listed", log::kv("dataset", r->ref), log::kv("files", listing->size()),
            log::kv("bytes", total));

  std::vector<dataset::file_entry> files(listing->size());
  auto fetched = fetch_listed(r, *origin, *listing, files);
  if (stop_.load()) return;  // resumed at the next start (the record still says resolving)
  if (!fetched) return resolve_failed(r, fetched.error());
  auto m = dataset::build_manifest(r->decl.name, r->decl.version, r->decl.origin.url,
                                   std::move(files), opts_.policy);
  if (!m) return resolve_failed(r, m.error().wrap("manifest of " + r->ref));
  std::string canon = dataset::canonical_json(*m);
  digest md = sha256_of(canon);
  if (auto s = write_atomic(manifest_path(md), canon); !s) {
    return resolve_failed(r, s.error());
  }
  auto secs = std::chrono::duration<double>(steady::now() - t0).count();
  if (auto g = prepare_groups(r, *m); !g)
    return resolve_failed(r, g.error().wrap("metainfo of " + r->ref));
  mark_ready(*r, md, *m, secs);
  if (auto s = persist(*r); !s)
    log::warn("cannot save a dataset record", log::kv("error", s.error().message));
  if (m_.resolved) m_.resolved->inc();
  log::info("dataset resolved", log::kv("dataset", r->ref), log::kv("manifest", md.str()),
            log::kv("files", m->files.size()), log::kv("bytes", m->total_bytes()),
            log::kv("groups", m->groups.size()), log::kv("seconds", secs),
            log::kv("files_per_second", secs > 0 ? m->files.size() / secs : 0.0));
}

void dataset_service::resolve_failed(const std::shared_ptr<record>& r, const error& e) {
  {
    std::lock_guard rl(r->mu);
    r->state = "failed";
    r->error = utf8_safe(e.message, 4096);
    r->interrupted = 0;
  }
  if (m_.resolve_failures) m_.resolve_failures->inc();
  log::warn("dataset resolution failed", log::kv("dataset", r->ref),
            log::kv("error", utf8_safe(e.message, 4096)));
  if (auto s = persist(*r); !s)
    log::warn("cannot save a dataset record", log::kv("error", s.error().message));
}

status dataset_service::fetch_listed(const std::shared_ptr<record>& r, const dataset_origin& origin,
                                     const std::vector<origin_object>& listing,
                                     std::vector<dataset::file_entry>& files) {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t pending = listing.size();
  std::optional<error> first;
  std::atomic<bool> abort{false};
  auto until = cache::clock::now() + opts_.resolve_pin;
  const std::string owner = "dataset:" + r->ref;
  for (std::size_t i = 0; i < listing.size(); ++i) {
    net::post(pool_, [&, i] {
      const auto& o = listing[i];
      auto s = guarded([&] { return fetch_one(r, origin, o, files[i], until, owner, abort); });
      r->files_done.fetch_add(1);
      std::lock_guard lk(mu);
      if (!s && !first) {
        first = s.error();
        abort = true;
      }
      if (--pending == 0) cv.notify_all();
    });
  }
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return pending == 0; });
  if (first) return fail(*first);
  return {};
}

status dataset_service::fetch_one(const std::shared_ptr<record>& r, const dataset_origin& origin,
                                  const origin_object& o, dataset::file_entry& file,
                                  cache::time_point until, const std::string& owner,
                                  const std::atomic<bool>& abort) {
  if (stop_.load()) return fail(errc::cancelled, "registry-proxy is stopping");
  if (abort.load()) return {};  // another file failed: the resolution reports that one
  if (o.size == 0) {
    file = dataset::file_entry{o.path, 0, sha256_of(std::string_view())};
    return {};
  }
  auto rep =
      fetch_object(origin, o, std::nullopt, [&](std::uint64_t n) { r->bytes_done.fetch_add(n); });
  if (!rep) return fail(rep.error());
  file = dataset::file_entry{o.path, o.size, rep->id};
  r->origin_bytes.fetch_add(rep->origin_bytes);
  r->resumed_bytes.fetch_add(rep->resumed_bytes);
  r->bytes_done.fetch_add(rep->resumed_bytes);
  if (auto p = store_.pin(rep->id, owner, until); !p) return fail(p.error().wrap("pin " + o.path));
  return {};
}

status dataset_service::prepare_groups(const std::shared_ptr<record>& r,
                                       const dataset::manifest& m) {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t pending = m.groups.size();
  std::optional<error> first;
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    net::post(pool_, [&, g] {
      group_job job;
      auto t = guarded([&]() -> status {
        auto torrent = prepare_group(r, m, static_cast<std::uint32_t>(g), job);
        if (!torrent) return fail(torrent.error());
        return {};
      });
      std::lock_guard lk(mu);
      if (!t && !first) first = t.error();
      if (--pending == 0) cv.notify_all();
    });
  }
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return pending == 0; });
  if (first) return fail(*first);
  return {};
}

result<fetch_report> dataset_service::fetch_object(
    const dataset_origin& origin, const origin_object& o, const std::optional<digest>& expected,
    const std::function<void(std::uint64_t)>& progress) {
  std::string key = staging_name(origin.declaration().origin.url, o);
  std::shared_future<result<fetch_report>> fut;
  std::promise<result<fetch_report>> mine;
  bool leader = false;
  {
    std::lock_guard lk(flight_mu_);
    auto it = flights_.find(key);
    if (it != flights_.end()) {
      fut = it->second;
    } else {
      fut = mine.get_future().share();
      flights_.emplace(key, fut);
      leader = true;
    }
  }
  if (!leader) return fut.get();
  auto rep = origin.fetch(o, store_, opts_.staging_dir, expected, progress, stop_, &budget_);
  if (rep) {
    if (m_.origin_gets) m_.origin_gets->inc(static_cast<std::uint64_t>(rep->requests));
    if (m_.origin_bytes) m_.origin_bytes->inc(rep->origin_bytes);
  }
  mine.set_value(rep);
  std::lock_guard lk(flight_mu_);
  flights_.erase(key);
  return rep;
}

}  // namespace shoal::proxy
