// peerd's dataset manager (datasets.h): lifecycle, persisted jobs, the prefetch steps, presence.
#include "proxy_link.h"
#include "datasets_internal.h"
#include "scheduler_link.h"

#include "common/thread_name.h"
#include "common/json_text.h"

namespace shoal::peerd {

using namespace datasets_detail;

dataset_manager::dataset_manager(deps d, options o) : d_(d), opts_(std::move(o)) {}

dataset_manager::~dataset_manager() {
  request_stop();
  std::vector<std::thread> ts;
  {
    std::lock_guard lk(mu_);
    ts.swap(threads_);
  }
  for (auto& t : ts) {
    if (t.joinable()) t.join();
  }
  if (expiry_thread_.joinable()) expiry_thread_.join();
  // Tasks posted to the app's pool capture `this`: wait for them (they are short).
  std::unique_lock lk(posted_mu_);
  posted_cv_.wait_for(lk, std::chrono::seconds(60), [&] { return posted_ == 0; });
}

void dataset_manager::post(std::function<void()> fn) {
  {
    std::lock_guard lk(posted_mu_);
    ++posted_;
  }
  net::post(d_.pool, [this, fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      log::error("dataset task failed", log::kv("error", e.what()));
    }
    std::lock_guard lk(posted_mu_);
    --posted_;
    posted_cv_.notify_all();
  });
}

void dataset_manager::request_stop() {
  stop_.store(true);
  {
    std::lock_guard el(expiry_mu_);
    expiry_cv_.notify_all();
  }
  std::lock_guard lk(mu_);
  for (auto& [r, j] : jobs_) {
    j->cancel = true;
    j->cv.notify_all();
  }
}

std::string dataset_manager::proxy(const std::string& path) const {
  return proxy_url(d_.proxy, d_.cfg.upstream, path);
}

http::client_request dataset_manager::small_request(std::string url) const {
  http::client_request r;
  r.url = std::move(url);
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.request_timeout.get());
  r.max_retries = 1;
  return r;
}

result<http::full_response> dataset_manager::upstream_call(http::client_request r,
                                                           std::size_t max_body) {
  if (!opts_.checkpoints)
    return proxy_call(d_.proxy, d_.cfg.upstream, d_.http, std::move(r), max_body);
  auto attempt = [&](http::client_request q) {
    return origin::call(d_.http, std::move(q), max_body);
  };
  if (d_.scheduler == nullptr)
    return fail(errc::config_error, "upstream.scheduler is not set: no checkpoint catalog");
  return d_.scheduler->run(std::move(r), attempt);
}

void dataset_manager::adopt_manifest(job& j, std::shared_ptr<const dataset::manifest> full) {
  j.full = full;
  j.group_ids.clear();
  if (j.ranks.empty()) {
    j.manifest = std::move(full);
    j.objects = dataset::manifest_objects(*j.manifest);
    return;
  }
  // Checkpoint groups hold files of one rank set each (checkpoint::build_manifest), so a group is
  // taken whole or not at all.
  auto take = checkpoint::files_for_ranks(*full, j.ranks);
  std::vector<std::int64_t> new_index(full->files.size(), -1);
  auto m = std::make_shared<dataset::manifest>();
  m->schema = full->schema;
  m->name = full->name;
  m->version = full->version;
  m->origin = full->origin;
  for (auto i : take) {
    new_index[i] = static_cast<std::int64_t>(m->files.size());
    m->files.push_back(full->files[i]);
  }
  for (std::uint32_t g = 0; g < full->groups.size(); ++g) {
    const auto& gr = full->groups[g];
    if (gr.files.empty() || new_index[gr.files.front()] < 0) continue;
    dataset::group ng = gr;
    ng.files.clear();
    for (auto i : gr.files) {
      if (new_index[i] >= 0) ng.files.push_back(static_cast<std::uint32_t>(new_index[i]));
    }
    m->groups.push_back(std::move(ng));
    j.group_ids.push_back(g);
  }
  j.manifest = std::move(m);
  j.objects = dataset::manifest_objects(*j.manifest);
}

status dataset_manager::start() {
  for (const auto& dir : {opts_.views_dir, opts_.dir + "/records", opts_.dir + "/manifests"}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return fail(ec, "create " + dir + ": " + ec.message());
  }
  if (auto s = d_.store.check_same_filesystem(opts_.views_dir); !s) {
    return fail(s.error().wrap("datasets.views_dir (views are clones of the cache's objects)"));
  }
  std::error_code ec;
  std::vector<std::string> resume;
  for (auto it = fs::directory_iterator(opts_.dir + "/records", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() != ".json") continue;
    auto text = read_file(it->path().string());
    auto j = text ? json::parse(*text, nullptr, false) : json();
    if (!j.is_object()) continue;
    auto r = std::make_shared<job>();
    r->ref = j.value("dataset", "");
    if (!dataset::parse_ref(r->ref)) continue;
    r->state = j.value("state", "failed");
    r->error = j.value("error", "");
    r->view = j.value("view", false);
    r->view_pinned = j.value("view_pinned", false);
    // Records written before views expired have none: the TTL starts now, and the view's pins
    // (taken without an expiry, which a new expiry cannot shorten) are taken again below.
    bool unbounded = !j.contains("expires");
    r->expires =
        unbounded
            ? cache::clock::now() + opts_.pin_ttl
            : cache::time_point(std::chrono::milliseconds(j.value("expires", std::int64_t{0})));
    r->files = j.value("files", std::uint64_t{0});
    r->total = j.value("bytes", std::uint64_t{0});
    r->groups = j.value("groups", std::uint64_t{0});
    r->seconds = j.value("seconds", 0.0);
    r->from_peers = j.value("from_peers", std::uint64_t{0});
    r->from_origin = j.value("from_origin", std::uint64_t{0});
    r->from_http = j.value("from_http", std::uint64_t{0});
    r->local_bytes = j.value("local_bytes", std::uint64_t{0});
    if (auto rk = j.find("ranks"); rk != j.end() && rk->is_array()) {
      for (const auto& v : *rk) {
        if (v.is_number_unsigned() && v.get<std::uint64_t>() < dataset::max_rank)
          r->ranks.push_back(v.get<std::uint32_t>());
      }
    }
    if (auto md = digest::parse(j.value("manifest", "")); md) {
      r->manifest_digest = *md;
      if (auto m = load_manifest(*md)) adopt_manifest(*r, *m);
    }
    if (r->state == "ready") {
      r->done_bytes = r->total;
      r->groups_done = r->groups;
    }
    if (unbounded && r->view_pinned && r->manifest) {
      if (auto s = renew_pins(*r->manifest, "view:" + r->ref, *r->expires); !s) {
        log::warn("cannot give a dataset view's pins an expiry", log::kv("dataset", r->ref),
                  log::kv("error", s.error().message));
      }
      persist(*r);
    }
    bool was_running = r->state != "ready" && r->state != "failed";
    if (was_running) r->state = "queued";
    {
      std::lock_guard lk(mu_);
      jobs_[r->ref] = r;
    }
    if (was_running) resume.push_back(r->ref);
  }
  for (const auto& ref : resume) {
    log::info(opts_.checkpoints ? "resuming an interrupted checkpoint restore"
                                : "resuming an interrupted dataset prefetch",
              log::kv("ref", ref));
    std::vector<std::uint32_t> ranks;
    {
      std::lock_guard lk(mu_);
      ranks = jobs_[ref]->ranks;
    }
    (void)start_prefetch(ref, "", std::nullopt, ranks);
  }
  expiry_thread_ = std::thread([this] {
    name_this_thread("dataset-expiry");
    expiry_loop();
  });
  return {};
}

result<std::shared_ptr<const dataset::manifest>> dataset_manager::load_manifest(const digest& d) {
  auto text = read_file(opts_.dir + "/manifests/" + d.hex() + ".json");
  if (!text) return fail(errc::not_found, "no local manifest " + d.str());
  auto m =
      opts_.checkpoints ? checkpoint::parse_manifest(*text, d) : dataset::parse_manifest(*text, d);
  if (!m) return fail(m.error());
  return std::make_shared<const dataset::manifest>(std::move(*m));
}

void dataset_manager::persist(const job& j) {
  json r;
  {
    std::lock_guard lk(j.mu);
    std::string st = j.state == "ready" || j.state == "failed" ? j.state : "prefetching";
    r = {{"schema", 1},
         {"dataset", j.ref},
         {"state", st},
         {"error", j.error},
         {"manifest", j.manifest_digest ? j.manifest_digest->str() : ""},
         {"view", j.view},
         {"view_pinned", j.view_pinned},
         {"expires", j.expires ? json(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          j.expires->time_since_epoch())
                                          .count())
                               : json()},
         {"files", j.files},
         {"bytes", j.total},
         {"groups", j.groups},
         {"seconds", j.seconds},
         {"from_peers", j.from_peers.load()},
         {"from_origin", j.from_origin.load()},
         {"from_http", j.from_http.load()},
         {"local_bytes", j.local_bytes.load()}};
    if (!j.ranks.empty()) r["ranks"] = j.ranks;
  }
  if (auto s = write_atomic(opts_.dir + "/records/" + j.ref + ".json", json_text(r, 2)); !s) {
    log::warn("cannot save a dataset record", log::kv("dataset", j.ref),
              log::kv("error", s.error().message));
  }
}

result<std::shared_ptr<dataset_manager::job>> dataset_manager::start_prefetch(
    const std::string& ref, const std::string& pin_owner, std::optional<cache::time_point> until,
    const std::vector<std::uint32_t>& ranks) {
  std::shared_ptr<job> j;
  bool spawn = false;
  std::shared_ptr<const dataset::manifest> pin_now, repin;
  // Every pin expires: an order's own expiry is bounded, and the view lasts pin_ttl from now or
  // as long as the order's pin, whichever is later (a repeated prefetch or prewarm renews it).
  auto bounded = bounded_expiry(until);
  if (!pin_owner.empty()) until = bounded;
  auto view_until = cache::clock::now() + opts_.pin_ttl;
  if (!pin_owner.empty()) view_until = std::max(view_until, bounded);
  bool extended = false;
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(ref);
    if (it == jobs_.end()) {
      j = std::make_shared<job>();
      j->ref = ref;
      j->ranks = ranks;
      jobs_[ref] = j;
    } else {
      j = it->second;
      // Restored whole here already (a standby's prewarm): that view holds every rank's files.
      if (j->ranks != ranks && !j->ranks.empty()) {
        auto list = [](const std::vector<std::uint32_t>& v) {
          std::string out;
          for (auto r : v) out += (out.empty() ? "" : ",") + std::to_string(r);
          return out.empty() ? std::string("all") : out;
        };
        return fail(errc::already_exists, ref + " is here with ranks " + list(j->ranks) + ", not " +
                                              list(ranks) + ": remove it first");
      }
    }
    std::lock_guard jl(j->mu);
    extended = !j->expires || view_until > *j->expires;
    repin = extend_locked(*j, view_until);
    if (!pin_owner.empty()) {
      if (j->state == "ready" && j->manifest) {
        pin_now = j->manifest;
      } else {
        j->pending_pins.emplace_back(pin_owner, until);
      }
    }
    if (!j->running && j->state != "ready" && !stop_.load()) {
      j->running = true;
      j->cancel = false;
      j->state = "queued";
      j->error.clear();
      j->started = steady::now();
      spawn = true;
      threads_.emplace_back([this, j] {
        name_this_thread("dataset-fetch");
        run(j);
      });
    }
  }
  (void)spawn;
  if (extended) {
    // Blocking index writes: off the caller's thread (an HTTP handler may be calling).
    post([this, j, repin, view_until] {
      if (repin) {
        if (auto s = renew_pins(*repin, "view:" + j->ref, view_until); !s) {
          log::warn("cannot renew a dataset view's pins", log::kv("dataset", j->ref),
                    log::kv("error", s.error().message));
        }
      }
      persist(*j);
    });
  }
  if (pin_now) {
    if (auto s = pin_all(*pin_now, pin_owner, until); !s) {
      log::warn("dataset pin failed", log::kv("dataset", ref), log::kv("error", s.error().message));
    }
  }
  return j;
}

status dataset_manager::prefetch_and_wait(
    const std::string& ref, const std::string& pin_owner, std::optional<cache::time_point> until,
    std::function<void(std::uint64_t, std::uint64_t)> progress) {
  if (auto p = dataset::parse_ref(ref); !p) return fail(p.error());
  auto started = start_prefetch(ref, pin_owner, until);
  if (!started) return fail(started.error());
  auto j = *started;
  for (;;) {
    std::unique_lock lk(j->mu);
    j->cv.wait_for(lk, std::chrono::seconds(1), [&] { return !j->running || stop_.load(); });
    if (progress) progress(j->bytes_done_locked(), j->total);
    if (stop_.load()) return fail(errc::cancelled, "peerd is stopping");
    if (!j->running) {
      if (j->state == "ready") return {};
      return fail(errc::unavailable, (opts_.checkpoints ? "checkpoint " : "dataset ") + ref + ": " +
                                         (j->error.empty() ? j->state : j->error));
    }
  }
}

void dataset_manager::run(const std::shared_ptr<job>& j) {
  auto s = run_steps(j);
  {
    std::lock_guard lk(j->mu);
    j->running = false;
    j->ended = steady::now();
    j->seconds = std::chrono::duration<double>(j->ended - j->started).count();
    if (!s) {
      j->state = "failed";
      j->error = s.error().message;
    }
    j->active.clear();
  }
  // The TTL runs from the end of the prefetch (a long one must not expire as it finishes).
  auto until = cache::clock::now() + opts_.pin_ttl;
  std::shared_ptr<const dataset::manifest> repin;
  {
    std::lock_guard lk(j->mu);
    repin = extend_locked(*j, until);
  }
  if (repin) {
    if (auto r = renew_pins(*repin, "view:" + j->ref, until); !r) {
      log::warn("cannot renew a dataset view's pins", log::kv("dataset", j->ref),
                log::kv("error", r.error().message));
    }
  }
  j->cv.notify_all();
  persist(*j);
  if (!s) {
    log::warn(opts_.checkpoints ? "checkpoint restore failed" : "dataset prefetch failed",
              log::kv("ref", j->ref), log::kv("error", s.error().message));
  } else {
    if (opts_.checkpoints) keep_newest(j->ref);
    log::info(opts_.checkpoints ? "checkpoint restored" : "dataset ready", log::kv("ref", j->ref),
              log::kv("files", j->files), log::kv("bytes", j->total),
              log::kv("seconds", j->seconds), log::kv("from_peers", j->from_peers.load()),
              log::kv("from_origin", j->from_origin.load()),
              log::kv("from_http", j->from_http.load()), log::kv("local", j->local_bytes.load()),
              log::kv("view", view_path(j->ref)));
  }
}

status dataset_manager::run_steps(const std::shared_ptr<job>& j) {
  auto set_state = [&](const char* st) {
    std::lock_guard lk(j->mu);
    j->state = st;
  };
  set_state("resolving");
  auto m = fetch_manifest(j);
  if (!m) return fail(m.error());
  {
    std::lock_guard lk(j->mu);
    adopt_manifest(*j, *m);
    m = j->manifest;
  }
  std::uint64_t total = 0;
  for (const auto& g : (*m)->groups) total += g.bytes;
  std::vector<std::pair<std::string, std::optional<cache::time_point>>> pins;
  bool pin_view;
  cache::time_point view_until;
  {
    std::lock_guard lk(j->mu);
    j->files = (*m)->files.size();
    j->total = total;
    j->groups = (*m)->groups.size();
    pins.swap(j->pending_pins);
    pin_view = !j->view_pinned;
    if (!j->expires) j->expires = cache::clock::now() + opts_.pin_ttl;
    view_until = *j->expires;
  }
  persist(*j);
  // Pins first: nothing fetched for this dataset may be evicted before the view exists.
  if (pin_view) {
    if (auto s = pin_all(**m, "view:" + j->ref, view_until); !s) return s;
    std::lock_guard lk(j->mu);
    j->view_pinned = true;
  }
  for (const auto& [owner, until] : pins) {
    if (auto s = pin_all(**m, owner, until); !s) return s;
  }
  set_state("fetching");
  {
    std::lock_guard lk(j->mu);
    j->fetch_started = steady::now();
  }
  if (auto s = fetch_groups(j, **m); !s) return s;
  for (const auto& f : (*m)->files) {
    if (f.size > 0 && !d_.store.contains(f.id)) {
      return fail(errc::not_found, "file " + f.path + " (" + f.id.str() +
                                       ") is not in the cache after the prefetch");
    }
  }
  set_state("materializing");
  if (auto s = materialize(j, **m); !s) return s;
  std::lock_guard lk(j->mu);
  j->state = "ready";
  j->view = true;
  return {};
}

result<std::shared_ptr<const dataset::manifest>> dataset_manager::fetch_manifest(
    const std::shared_ptr<job>& j) {
  auto deadline = steady::now() + opts_.resolve_wait;
  std::optional<digest> md;
  int errors = 0;
  if (opts_.checkpoints) {
    auto d = checkpoint_digest(j);
    if (!d) return fail(d.error());
    md = *d;
  }
  while (!md) {
    if (j->cancel.load() || stop_.load())
      return fail(errc::cancelled, "prefetch of " + j->ref + " cancelled");
    if (steady::now() > deadline) {
      return fail(errc::timeout, "registry-proxy did not resolve " + j->ref + " within " +
                                     std::to_string(opts_.resolve_wait.count() / 1000) + "s");
    }
    auto f = upstream_call(small_request(origin::dataset_target(j->ref)), 1u << 20);
    if (!f && origin::is_version_mismatch(f.error())) return fail(f.error());
    auto body = f ? json::parse(f->body, nullptr, false) : json();
    std::string why = f ? origin::error_message_of(f->body) : "";
    if (f && f->status == 200 && body.is_object()) {
      auto d = digest::parse(json_string(body, "manifest"));
      if (!d)
        return fail(errc::protocol_error, "registry-proxy gave no manifest digest for " + j->ref);
      md = *d;
      break;
    }
    if (f && f->status == 404)
      return fail(errc::not_found,
                  "registry-proxy: unknown dataset " + j->ref + " (declare it first)");
    if (f && f->status == 409) {
      return fail(errc::unavailable, "registry-proxy could not resolve " + j->ref + ": " +
                                         (why.empty() ? std::string("failed") : why));
    }
    if (!f || f->status != 202) {
      if (++errors > 30) {
        return fail(errc::unavailable,
                    "registry-proxy: " +
                        (f ? "HTTP " + std::to_string(f->status) + " " + why : f.error().message));
      }
    }
    std::unique_lock lk(j->mu);
    j->cv.wait_for(lk, std::chrono::seconds(1), [&] { return j->cancel.load() || stop_.load(); });
  }
  {
    std::lock_guard lk(j->mu);
    if (j->manifest && j->manifest_digest == md) return j->full ? j->full : j->manifest;
    j->manifest_digest = md;
  }
  if (auto m = load_manifest(*md)) return m;
  http::client_request r;
  r.url = opts_.checkpoints ? checkpoint::manifest_target(j->ref)
                            : origin::dataset_manifest_target(j->ref);
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
  r.timeouts.stall = std::chrono::seconds(60);
  r.max_retries = 2;
  auto f = upstream_call(std::move(r), opts_.max_manifest);
  if (!f) return fail(f.error().wrap("manifest of " + j->ref));
  if (f->status != 200)
    return fail(errc::upstream_error,
                "manifest of " + j->ref + ": HTTP " + std::to_string(f->status));
  auto m = opts_.checkpoints ? checkpoint::parse_manifest(f->body, *md)
                             : dataset::parse_manifest(f->body, *md);
  if (!m)
    return fail(m.error().wrap("manifest of " + j->ref + " from " +
                               (opts_.checkpoints ? "the scheduler" : "registry-proxy")));
  if (m->name + "@" + m->version != j->ref)
    return fail(errc::protocol_error, "manifest names another dataset than " + j->ref);
  if (auto s = write_atomic(opts_.dir + "/manifests/" + md->hex() + ".json", f->body); !s)
    return fail(s.error());
  return std::make_shared<const dataset::manifest>(std::move(*m));
}

result<checkpoint::record> dataset_manager::scheduler_record(const std::string& ref, int retries) {
  if (d_.scheduler == nullptr)
    return fail(errc::config_error, "upstream.scheduler is not set: no checkpoint catalog");
  // A GET: it goes to the replica that last answered and fails over to the others.
  auto q = d_.scheduler->request("GET", std::string(checkpoint::paths::scheduler) + "/" + ref);
  q.max_retries = retries;
  auto f = d_.scheduler->call(std::move(q), 64u << 20);
  if (!f) return fail(errc::unavailable, f.error().message);
  if (f->status != 200) {
    std::string why = origin::error_message_of(f->body);
    if (why.empty()) why = "HTTP " + std::to_string(f->status);
    auto code = f->status == 404                       ? errc::not_found
                : f->status == 400 || f->status == 403 ? errc::unauthorized
                                                       : errc::unavailable;
    return fail(code, why);
  }
  return checkpoint::decode_record(f->body);
}

result<digest> dataset_manager::checkpoint_digest(const std::shared_ptr<job>& j) {
  for (int attempt = 1;; ++attempt) {
    if (j->cancel.load() || stop_.load())
      return fail(errc::cancelled, "restore of " + j->ref + " cancelled");
    auto rec = scheduler_record(j->ref, 1);
    if (rec && rec->key() != j->ref)
      return fail(errc::protocol_error,
                  "the scheduler answered for " + rec->key() + " when asked for " + j->ref);
    if (rec) return rec->manifest;
    // The scheduler unreachable or busy: a few more tries; anything else is its answer.
    if (!rec.error().is(errc::unavailable) || attempt >= 5)
      return fail(rec.error().wrap("the scheduler's record of " + j->ref));
    std::unique_lock lk(j->mu);
    j->cv.wait_for(lk, std::chrono::seconds(attempt),
                   [&] { return j->cancel.load() || stop_.load(); });
  }
}

result<std::string> dataset_manager::resolve_latest(const std::string& ref) {
  auto r = checkpoint::parse_ref(ref);
  if (!r) return fail(r.error());
  if (r->step) return checkpoint::key(r->job, *r->step);
  auto rec = scheduler_record(r->str(), 2);
  if (!rec) return fail(rec.error().wrap("the scheduler, for the latest checkpoint of " + r->job));
  if (rec->job != r->job)
    return fail(errc::protocol_error, "the scheduler answered for job " + rec->job);
  return rec->key();
}

void dataset_manager::keep_newest(const std::string& ref) {
  auto me = checkpoint::parse_ref(ref, false);
  if (!me || opts_.keep_last == 0) return;
  std::vector<std::pair<std::uint64_t, std::string>> steps;
  {
    std::lock_guard lk(mu_);
    for (const auto& [r, j] : jobs_) {
      auto p = checkpoint::parse_ref(r, false);
      if (p && p->job == me->job) steps.emplace_back(*p->step, r);
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  for (std::size_t i = opts_.keep_last; i < steps.size(); ++i) {
    auto dropped = drop(steps[i].second);
    log::info("checkpoint restore dropped: older than the newest steps kept",
              log::kv("checkpoint", steps[i].second), log::kv("keep_last", opts_.keep_last),
              log::kv("error", dropped ? "" : dropped.error().message));
  }
}

std::vector<heartbeat::dataset_presence> dataset_manager::presence() {
  std::vector<std::shared_ptr<job>> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [r, j] : jobs_) all.push_back(j);
  }
  std::vector<heartbeat::dataset_presence> out;
  for (const auto& j : all) {
    std::vector<std::pair<digest, std::uint64_t>> objs;
    heartbeat::dataset_presence p;
    {
      std::lock_guard lk(j->mu);
      if (!j->manifest) continue;
      objs = j->objects;
      p.view = j->view;
    }
    p.dataset = j->ref;
    for (const auto& [d, size] : objs) {
      p.total += size;
      if (d_.store.contains(d)) p.bytes += size;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace shoal::peerd
