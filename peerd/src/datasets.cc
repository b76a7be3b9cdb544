#include "datasets.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "swarm/metainfo.h"

namespace shoal::peerd {

namespace fs = std::filesystem;
namespace net = boost::asio;
using nlohmann::json;
using steady = std::chrono::steady_clock;

namespace {

// Makes a tree writable again (views are 0555) and removes it.
void remove_tree(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec)) ::chmod(it->path().c_str(), 0755);
  }
  ::chmod(path.c_str(), 0755);
  fs::remove_all(path, ec);
}

http::response json_answer(unsigned status, const std::string& body) { return http::response::json(status, body); }

http::response json_error(unsigned status, const std::string& message) { return origin::plain_error(status, message); }

}  // namespace

struct dataset_manager::job {
  std::string ref;
  mutable std::mutex mu;
  std::condition_variable cv;
  // queued | resolving | fetching | materializing | ready | failed
  std::string state = "queued";
  std::string error;
  bool running = false;
  bool view = false;         // the view is materialized
  bool view_pinned = false;  // every object carries the view's pin
  std::optional<digest> manifest_digest;
  std::shared_ptr<const dataset::manifest> manifest;
  std::vector<std::pair<digest, std::uint64_t>> objects;  // distinct, for presence
  std::vector<std::pair<std::string, std::optional<cache::time_point>>> pending_pins;
  std::vector<std::shared_ptr<group_download>> active;
  std::uint64_t files = 0, total = 0, groups = 0;
  std::atomic<std::uint64_t> groups_done{0}, done_bytes{0}, local_bytes{0};
  std::atomic<std::uint64_t> from_peers{0}, from_origin{0}, from_http{0};
  std::atomic<bool> cancel{false};
  steady::time_point started = steady::now(), fetch_started = steady::now(), ended;
  double seconds = 0;  // of the last prefetch that ended

  std::uint64_t bytes_done_locked() const {
    std::uint64_t b = done_bytes.load();
    for (const auto& dl : active) b += dl->bytes_done();
    return std::min(b, total);
  }
};

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
}

void dataset_manager::request_stop() {
  stop_.store(true);
  std::lock_guard lk(mu_);
  for (auto& [r, j] : jobs_) {
    j->cancel = true;
    j->cv.notify_all();
  }
}

std::string dataset_manager::proxy(const std::string& path) const {
  std::string base = d_.cfg.upstream.registry_proxy;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + path;
}

status dataset_manager::start() {
  for (const auto& dir : {opts_.views_dir, opts_.dir + "/records", opts_.dir + "/manifests"}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return fail(ec, "create " + dir + ": " + ec.message());
  }
  if (auto s = d_.store.check_same_filesystem(opts_.views_dir); !s) {
    return fail(s.error().wrap("datasets.views_dir (views are hard links into the cache)"));
  }
  std::error_code ec;
  std::vector<std::string> resume;
  for (auto it = fs::directory_iterator(opts_.dir + "/records", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
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
    r->files = j.value("files", std::uint64_t{0});
    r->total = j.value("bytes", std::uint64_t{0});
    r->groups = j.value("groups", std::uint64_t{0});
    r->seconds = j.value("seconds", 0.0);
    r->from_peers = j.value("from_peers", std::uint64_t{0});
    r->from_origin = j.value("from_origin", std::uint64_t{0});
    r->from_http = j.value("from_http", std::uint64_t{0});
    r->local_bytes = j.value("local_bytes", std::uint64_t{0});
    if (auto md = digest::parse(j.value("manifest", "")); md) {
      r->manifest_digest = *md;
      if (auto m = load_manifest(*md)) {
        r->manifest = *m;
        r->objects = dataset::manifest_objects(**m);
      }
    }
    if (r->state == "ready") {
      r->done_bytes = r->total;
      r->groups_done = r->groups;
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
    log::info("resuming an interrupted dataset prefetch", log::kv("dataset", ref));
    start_prefetch(ref, "", std::nullopt);
  }
  return {};
}

result<std::shared_ptr<const dataset::manifest>> dataset_manager::load_manifest(const digest& d) {
  auto text = read_file(opts_.dir + "/manifests/" + d.hex() + ".json");
  if (!text) return fail(errc::not_found, "no local manifest " + d.str());
  auto m = dataset::parse_manifest(*text, d);
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
         {"files", j.files},
         {"bytes", j.total},
         {"groups", j.groups},
         {"seconds", j.seconds},
         {"from_peers", j.from_peers.load()},
         {"from_origin", j.from_origin.load()},
         {"from_http", j.from_http.load()},
         {"local_bytes", j.local_bytes.load()}};
  }
  if (auto s = write_atomic(opts_.dir + "/records/" + j.ref + ".json", r.dump(2)); !s) {
    log::warn("cannot save a dataset record", log::kv("dataset", j.ref), log::kv("error", s.error().message));
  }
}

std::string dataset_manager::status_json(const job& j) const {
  std::lock_guard lk(j.mu);
  std::uint64_t done = j.bytes_done_locked();
  std::uint64_t from_peers = j.from_peers.load(), from_origin = j.from_origin.load(), from_http = j.from_http.load();
  for (const auto& dl : j.active) {
    from_peers += dl->from_peers.load();
    from_origin += dl->from_origin.load();
    from_http += dl->from_http.load();
  }
  bool live = j.running;
  double secs = live ? std::chrono::duration<double>(steady::now() - j.started).count() : j.seconds;
  double fetch_secs = live ? std::chrono::duration<double>(steady::now() - j.fetch_started).count() : j.seconds;
  std::uint64_t moved = done > j.local_bytes.load() ? done - j.local_bytes.load() : 0;
  double rate = fetch_secs > 0.05 ? static_cast<double>(moved) / fetch_secs : 0.0;
  json out = {{"dataset", j.ref},
              {"state", j.state},
              {"error", j.error},
              {"manifest", j.manifest_digest ? json(j.manifest_digest->str()) : json()},
              {"files", j.files},
              {"bytes", j.total},
              {"bytes_done", done},
              {"groups", j.groups},
              {"groups_done", j.groups_done.load()},
              {"from_peers", from_peers},
              {"from_origin", from_origin},
              {"from_http", from_http},
              {"local_bytes", j.local_bytes.load()},
              {"rate", rate},
              {"eta_seconds", rate > 0 && done < j.total ? json(static_cast<double>(j.total - done) / rate) : json()},
              {"seconds", secs},
              {"view", j.view ? json(view_path(j.ref)) : json()}};
  return out.dump();
}

bool dataset_manager::handle(const http::request& req, const http::responder& resp) {
  static constexpr std::string_view base = origin::paths::datasets;
  std::string_view path = req.path;
  if (!origin::has_prefix(path, base)) return false;
  if (path == base || path == std::string(base) + "/") {
    if (req.method != http::verb::get && req.method != http::verb::head) {
      resp.send(json_error(405, "GET lists the datasets of this node"));
      return true;
    }
    std::vector<std::shared_ptr<job>> all;
    {
      std::lock_guard lk(mu_);
      for (auto& [r, j] : jobs_) all.push_back(j);
    }
    std::string body = "[";
    for (std::size_t i = 0; i < all.size(); ++i) body += (i ? "," : "") + status_json(*all[i]);
    resp.send(json_answer(200, body + "]"));
    return true;
  }
  std::string_view rest = path.substr(base.size() + 1);
  if (path == origin::paths::dataset_prefetch) {
    if (req.method != http::verb::post) {
      resp.send(json_error(405, "POST {\"dataset\": \"name@version\"}"));
      return true;
    }
    auto j = json::parse(req.body, nullptr, false);
    std::string ref = j.is_object() && j.contains("dataset") && j["dataset"].is_string() ? j["dataset"].get<std::string>() : "";
    if (auto p = dataset::parse_ref(ref); !p) {
      resp.send(json_error(400, p.error().message));
      return true;
    }
    if (stop_.load()) {
      resp.send(json_error(503, "peerd is stopping"));
      return true;
    }
    auto jb = start_prefetch(ref, "", std::nullopt);
    std::string st;
    {
      std::lock_guard lk(jb->mu);
      st = jb->state;
    }
    resp.send(json_answer(st == "ready" ? 200 : 202, status_json(*jb)));
    return true;
  }
  std::string ref(rest);
  if (auto p = dataset::parse_ref(ref); !p) {
    resp.send(json_error(400, p.error().message));
    return true;
  }
  if (req.method == http::verb::delete_) {
    net::post(d_.pool, [this, ref, resp] { remove(ref, resp); });
    return true;
  }
  if (req.method != http::verb::get && req.method != http::verb::head) {
    resp.send(json_error(405, "GET shows a dataset, DELETE removes its view"));
    return true;
  }
  std::shared_ptr<job> jb;
  {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(ref); it != jobs_.end()) jb = it->second;
  }
  if (!jb) {
    resp.send(json_error(404, "dataset " + ref + " is not on this node"));
    return true;
  }
  resp.send(json_answer(200, status_json(*jb)));
  return true;
}

std::shared_ptr<dataset_manager::job> dataset_manager::start_prefetch(const std::string& ref,
                                                                      const std::string& pin_owner,
                                                                      std::optional<cache::time_point> until) {
  std::shared_ptr<job> j;
  bool spawn = false;
  std::shared_ptr<const dataset::manifest> pin_now;
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(ref);
    if (it == jobs_.end()) {
      j = std::make_shared<job>();
      j->ref = ref;
      jobs_[ref] = j;
    } else {
      j = it->second;
    }
    std::lock_guard jl(j->mu);
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
      threads_.emplace_back([this, j] { run(j); });
    }
  }
  (void)spawn;
  if (pin_now) {
    if (auto s = pin_all(*pin_now, pin_owner, until); !s) {
      log::warn("dataset pin failed", log::kv("dataset", ref), log::kv("error", s.error().message));
    }
  }
  return j;
}

status dataset_manager::prefetch_and_wait(const std::string& ref, const std::string& pin_owner,
                                          std::optional<cache::time_point> until,
                                          std::function<void(std::uint64_t, std::uint64_t)> progress) {
  if (auto p = dataset::parse_ref(ref); !p) return fail(p.error());
  auto j = start_prefetch(ref, pin_owner, until);
  for (;;) {
    std::unique_lock lk(j->mu);
    j->cv.wait_for(lk, std::chrono::seconds(1), [&] { return !j->running || stop_.load(); });
    if (progress) progress(j->bytes_done_locked(), j->total);
    if (stop_.load()) return fail(errc::cancelled, "peerd is stopping");
    if (!j->running) {
      if (j->state == "ready") return {};
      return fail(errc::unavailable, "dataset " + ref + ": " + (j->error.empty() ? j->state : j->error));
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
  j->cv.notify_all();
  persist(*j);
  if (!s) {
    log::warn("dataset prefetch failed", log::kv("dataset", j->ref), log::kv("error", s.error().message));
  } else {
    log::info("dataset ready", log::kv("dataset", j->ref), log::kv("files", j->files), log::kv("bytes", j->total),
              log::kv("seconds", j->seconds), log::kv("from_peers", j->from_peers.load()),
              log::kv("from_origin", j->from_origin.load()), log::kv("from_http", j->from_http.load()),
              log::kv("local", j->local_bytes.load()), log::kv("view", view_path(j->ref)));
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
  std::uint64_t total = 0;
  for (const auto& g : (*m)->groups) total += g.bytes;
  std::vector<std::pair<std::string, std::optional<cache::time_point>>> pins;
  bool pin_view;
  {
    std::lock_guard lk(j->mu);
    j->manifest = *m;
    j->objects = dataset::manifest_objects(**m);
    j->files = (*m)->files.size();
    j->total = total;
    j->groups = (*m)->groups.size();
    pins.swap(j->pending_pins);
    pin_view = !j->view_pinned;
  }
  persist(*j);
  // Pins first: nothing fetched for this dataset may be evicted before the view exists.
  if (pin_view) {
    if (auto s = pin_all(**m, "view:" + j->ref, std::nullopt); !s) return s;
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
      return fail(errc::not_found, "file " + f.path + " (" + f.id.str() + ") is not in the cache after the prefetch");
    }
  }
  set_state("materializing");
  if (auto s = materialize(j, **m); !s) return s;
  std::lock_guard lk(j->mu);
  j->state = "ready";
  j->view = true;
  return {};
}

result<std::shared_ptr<const dataset::manifest>> dataset_manager::fetch_manifest(const std::shared_ptr<job>& j) {
  auto deadline = steady::now() + opts_.resolve_wait;
  std::optional<digest> md;
  int errors = 0;
  while (!md) {
    if (j->cancel.load() || stop_.load()) return fail(errc::cancelled, "prefetch of " + j->ref + " cancelled");
    if (steady::now() > deadline) {
      return fail(errc::timeout, "registry-proxy did not resolve " + j->ref + " within " +
                                     std::to_string(opts_.resolve_wait.count() / 1000) + "s");
    }
    http::client_request r;
    r.url = proxy(origin::dataset_target(j->ref));
    r.timeouts.connect = std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
    r.timeouts.stall = std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.request_timeout.get());
    r.max_retries = 1;
    auto f = origin::call(d_.http, std::move(r), 1u << 20);
    if (!f && origin::is_version_mismatch(f.error())) return fail(f.error());
    auto body = f ? json::parse(f->body, nullptr, false) : json();
    std::string why = f ? origin::error_message_of(f->body) : "";
    if (f && f->status == 200 && body.is_object()) {
      auto d = digest::parse(body.value("manifest", ""));
      if (!d) return fail(errc::protocol_error, "registry-proxy gave no manifest digest for " + j->ref);
      md = *d;
      break;
    }
    if (f && f->status == 404) return fail(errc::not_found, "registry-proxy: unknown dataset " + j->ref + " (declare it first)");
    if (f && f->status == 409) {
      return fail(errc::unavailable, "registry-proxy could not resolve " + j->ref + ": " +
                                         (why.empty() ? std::string("failed") : why));
    }
    if (!f || f->status != 202) {
      if (++errors > 30) {
        return fail(errc::unavailable, "registry-proxy: " + (f ? "HTTP " + std::to_string(f->status) + " " + why
                                                               : f.error().message));
      }
    }
    std::unique_lock lk(j->mu);
    j->cv.wait_for(lk, std::chrono::seconds(1), [&] { return j->cancel.load() || stop_.load(); });
  }
  {
    std::lock_guard lk(j->mu);
    if (j->manifest && j->manifest_digest == md) return j->manifest;
    j->manifest_digest = md;
  }
  if (auto m = load_manifest(*md)) return m;
  http::client_request r;
  r.url = proxy(origin::dataset_manifest_target(j->ref));
  r.timeouts.connect = std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
  r.timeouts.stall = std::chrono::seconds(60);
  r.max_retries = 2;
  auto f = origin::call(d_.http, std::move(r), opts_.max_manifest);
  if (!f) return fail(f.error().wrap("manifest of " + j->ref));
  if (f->status != 200) return fail(errc::upstream_error, "manifest of " + j->ref + ": HTTP " + std::to_string(f->status));
  auto m = dataset::parse_manifest(f->body, *md);
  if (!m) return fail(m.error().wrap("manifest of " + j->ref + " from registry-proxy"));
  if (m->name + "@" + m->version != j->ref) return fail(errc::protocol_error, "manifest names another dataset than " + j->ref);
  if (auto s = write_atomic(opts_.dir + "/manifests/" + md->hex() + ".json", f->body); !s) return fail(s.error());
  return std::make_shared<const dataset::manifest>(std::move(*m));
}

namespace {

// Runs fn(i) for i in [0, n) on up to 8 threads. Pins are synced index writes: done from several
// threads, RocksDB commits them in groups instead of one sync each.
void parallel_for(std::size_t n, const std::function<bool(std::size_t)>& fn) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  auto worker = [&] {
    for (std::size_t i = next.fetch_add(1); i < n && !stop.load(); i = next.fetch_add(1)) {
      if (!fn(i)) stop = true;
    }
  };
  std::size_t threads = std::min<std::size_t>(8, std::max<std::size_t>(1, n / 256));
  std::vector<std::thread> ts;
  for (std::size_t t = 1; t < threads; ++t) ts.emplace_back(worker);
  worker();
  for (auto& t : ts) t.join();
}

}  // namespace

status dataset_manager::pin_all(const dataset::manifest& m, const std::string& owner,
                                std::optional<cache::time_point> until) {
  auto objs = dataset::manifest_objects(m);
  std::mutex mu;
  std::optional<error> first;
  parallel_for(objs.size(), [&](std::size_t i) {
    auto s = d_.store.pin(objs[i].first, owner, until);
    if (s) return true;
    std::lock_guard lk(mu);
    if (!first) first = s.error().wrap("pin " + objs[i].first.str() + " for " + owner);
    return false;
  });
  if (first) return fail(*first);
  return {};
}

void dataset_manager::unpin_all(const dataset::manifest& m, const std::string& owner) {
  auto objs = dataset::manifest_objects(m);
  parallel_for(objs.size(), [&](std::size_t i) {
    (void)d_.store.unpin(objs[i].first, owner);
    return true;
  });
}

result<group_spec> dataset_manager::group_metainfo(const std::shared_ptr<job>& j, const dataset::manifest& m,
                                                   std::uint32_t g) {
  const auto& gr = m.groups[g];
  auto objs = dataset::group_objects(m, gr);
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.metainfo_wait.get());
  auto deadline = steady::now() + opts_.resolve_wait;
  int errors = 0;
  while (true) {
    if (j->cancel.load() || stop_.load()) return fail(errc::cancelled, "prefetch of " + j->ref + " cancelled");
    if (steady::now() > deadline) return fail(errc::timeout, "registry-proxy did not prepare group " + std::to_string(g));
    http::client_request r;
    r.url = proxy(origin::dataset_metainfo_target(j->ref, g, wait));
    r.timeouts.connect = std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
    r.timeouts.stall = wait + std::chrono::seconds(5);
    r.max_retries = 0;
    auto f = origin::call(d_.http, std::move(r), 256u << 20);
    if (!f && origin::is_version_mismatch(f.error())) {
      return fail(f.error().wrap(j->ref + " group " + std::to_string(g)));
    }
    if (f && f->status == 200) {
      auto a = origin::decode_metainfo(*f);
      if (!a) return fail(a.error().wrap(j->ref + " group " + std::to_string(g)));
      group_spec spec;
      spec.pack = gr.type == dataset::group::kind::pack;
      if (spec.pack) {
        auto pm = pack_metainfo::parse(a->torrent, objs);
        if (!pm) return fail(pm.error().wrap(j->ref + " group " + std::to_string(g)));
      } else {
        auto om = object_metainfo::parse(a->torrent, objs.front().first);
        if (!om) return fail(om.error().wrap(j->ref + " group " + std::to_string(g)));
      }
      spec.torrent = std::move(a->torrent);
      spec.objects = std::move(objs);
      if (!a->seed.empty()) spec.seeds.push_back(a->seed);
      spec.fallback_base = proxy(origin::dataset_objects_base(j->ref));
      spec.name = j->ref + " group " + std::to_string(g);
      return spec;
    }
    if (f && f->status == 202) continue;  // registry-proxy is fetching it again from the origin
    std::string why = f ? origin::error_message_of(f->body) : "";
    if (f && (f->status == 404 || f->status == 409 || f->status == 400)) {
      return fail(f->status == 409 ? errc::digest_mismatch : errc::not_found,
                  j->ref + " group " + std::to_string(g) + ": " + (why.empty() ? "HTTP " + std::to_string(f->status) : why));
    }
    if (++errors > 5) {
      return fail(errc::unavailable, j->ref + " group " + std::to_string(g) + " metainfo: " +
                                         (f ? "HTTP " + std::to_string(f->status) + " " + why : f.error().message));
    }
    std::unique_lock lk(j->mu);
    j->cv.wait_for(lk, std::chrono::milliseconds(500 * errors), [&] { return j->cancel.load() || stop_.load(); });
  }
}

status dataset_manager::fetch_groups(const std::shared_ptr<job>& j, const dataset::manifest& m) {
  std::atomic<std::uint32_t> next{0};
  std::mutex mu;
  std::optional<error> first;
  std::atomic<bool> abort{false};
  // Groups already complete here count as local bytes.
  std::vector<bool> complete(m.groups.size(), false);
  std::uint64_t local = 0;
  for (std::uint32_t g = 0; g < m.groups.size(); ++g) {
    bool all = true;
    for (auto i : m.groups[g].files) all = all && d_.store.contains(m.files[i].id);
    if (all) {
      complete[g] = true;
      local += m.groups[g].bytes;
    }
  }
  j->local_bytes = local;
  j->done_bytes = local;
  j->groups_done = static_cast<std::uint64_t>(std::count(complete.begin(), complete.end(), true));
  auto worker = [&] {
    while (!abort.load()) {
      std::uint32_t g = next.fetch_add(1);
      if (g >= m.groups.size()) return;
      if (complete[g]) continue;
      std::optional<error> err;
      for (int attempt = 0; attempt < 3; ++attempt) {
        if (j->cancel.load() || stop_.load()) {
          err = error{errc::cancelled, "prefetch of " + j->ref + " cancelled"};
          break;
        }
        auto spec = group_metainfo(j, m, g);
        if (!spec) {
          err = spec.error();
          if (spec.error().is(errc::digest_mismatch) || spec.error().is(errc::not_found)) break;
          continue;
        }
        auto dl = d_.groups.fetch(std::move(*spec));
        if (!dl) {
          err = dl.error();
          continue;
        }
        {
          std::lock_guard lk(j->mu);
          j->active.push_back(*dl);
        }
        auto st = group_download::state::running;
        while (st == group_download::state::running && !j->cancel.load() && !stop_.load()) {
          st = (*dl)->wait_for(std::chrono::milliseconds(500));
        }
        {
          std::lock_guard lk(j->mu);
          j->active.erase(std::remove(j->active.begin(), j->active.end(), *dl), j->active.end());
          j->from_peers += (*dl)->from_peers.load();
          j->from_origin += (*dl)->from_origin.load();
          j->from_http += (*dl)->from_http.load();
          if (st == group_download::state::complete) j->done_bytes += m.groups[g].bytes;
        }
        if (st == group_download::state::complete) {
          err.reset();
          j->groups_done.fetch_add(1);
          break;
        }
        err = (*dl)->failure().value_or(error{errc::cancelled, "prefetch of " + j->ref + " cancelled"});
        if (st == group_download::state::running) break;  // cancelled
        log::warn("dataset group failed; retrying", log::kv("dataset", j->ref), log::kv("group", g),
                  log::kv("attempt", attempt + 1), log::kv("error", err->message));
      }
      if (err) {
        std::lock_guard lk(mu);
        if (!first) first = *err;
        abort = true;
      }
    }
  };
  std::vector<std::thread> ts;
  int n = std::max(1, std::min<int>(opts_.parallel_groups, static_cast<int>(m.groups.size())));
  for (int i = 0; i < n; ++i) ts.emplace_back(worker);
  for (auto& t : ts) t.join();
  if (first) return fail(*first);
  return {};
}

status dataset_manager::materialize(const std::shared_ptr<job>& j, const dataset::manifest& m) {
  std::string final_path = view_path(j->ref);
  std::string tmp = opts_.views_dir + "/." + j->ref + ".building";
  remove_tree(tmp);
  if (::mkdir(tmp.c_str(), 0755) != 0) return fail_errno(errno, "mkdir " + tmp);
  std::set<std::string> dirs;
  for (const auto& f : m.files) {
    // Parent directories (paths were checked by parse_manifest: relative, no "..").
    for (std::size_t slash = f.path.find('/'); slash != std::string::npos; slash = f.path.find('/', slash + 1)) {
      std::string dir = f.path.substr(0, slash);
      if (dirs.insert(dir).second) {
        std::string p = tmp + "/" + dir;
        if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return fail_errno(errno, "mkdir " + p);
      }
    }
    std::string dst = tmp + "/" + f.path;
    if (f.size == 0) {
      int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
      if (fd < 0) return fail_errno(errno, "create " + dst);
      ::close(fd);
      continue;
    }
    std::string src = d_.store.object_path(f.id);
    if (::link(src.c_str(), dst.c_str()) != 0) {
      int e = errno;
      if (e == EXDEV) {
        return fail(errc::config_error, "datasets.views_dir " + opts_.views_dir +
                                            " is not on the cache's filesystem (hard link " + src + ")");
      }
      return fail_errno(e, "link " + src + " to " + dst);
    }
  }
  // Read-only directories, deepest first.
  std::vector<std::string> order(dirs.begin(), dirs.end());
  std::sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
  });
  for (const auto& d : order) ::chmod((tmp + "/" + d).c_str(), 0555);
  ::chmod(tmp.c_str(), 0555);
  remove_tree(final_path);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return fail_errno(errno, "rename " + tmp + " to " + final_path);
  return {};
}

void dataset_manager::remove(const std::string& ref, const http::responder& resp) {
  std::shared_ptr<job> j;
  {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(ref); it != jobs_.end()) j = it->second;
  }
  if (!j) return resp.send(json_error(404, "dataset " + ref + " is not on this node"));
  {
    std::unique_lock lk(j->mu);
    j->cancel = true;
    j->cv.notify_all();
    j->cv.wait_for(lk, std::chrono::seconds(30), [&] { return !j->running; });
    if (j->running) return resp.send(json_error(503, "the prefetch of " + ref + " is still stopping; retry"));
  }
  remove_tree(view_path(ref));
  std::shared_ptr<const dataset::manifest> m;
  bool pinned;
  std::size_t objects;
  {
    std::lock_guard lk(j->mu);
    m = j->manifest;
    pinned = j->view_pinned;
    objects = j->objects.size();
  }
  std::size_t unpinned = 0;
  if (m && pinned) {
    unpin_all(*m, "view:" + ref);
    unpinned = objects;
  }
  std::error_code ec;
  fs::remove(opts_.dir + "/records/" + ref + ".json", ec);
  {
    std::lock_guard lk(mu_);
    jobs_.erase(ref);
  }
  log::info("dataset view removed", log::kv("dataset", ref), log::kv("unpinned", unpinned));
  resp.send(json_answer(200, json{{"dataset", ref}, {"removed", true}, {"unpinned", unpinned}}.dump()));
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
