#include "datasets.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/file.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/sha256.h"
#include "seeder.h"

namespace shoal::proxy {

namespace fs = std::filesystem;
namespace net = boost::asio;
using nlohmann::json;
using steady = std::chrono::steady_clock;

namespace {

http::response json_answer(unsigned status, const json& j) { return http::response::json(status, j.dump()); }

http::response json_error(unsigned status, const std::string& message) { return origin::plain_error(status, message); }

unsigned status_for(const error& e) {
  if (e.is(errc::not_found)) return 404;
  if (e.is(errc::invalid_argument)) return 400;
  if (e.is(errc::digest_mismatch)) return 409;
  if (e.is(errc::unauthorized)) return 502;
  if (e.is(errc::timeout)) return 504;
  if (e.is(errc::no_space)) return 507;
  return 502;
}

result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(errc::not_found, "cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Reads a cache object's bytes for build_pack().
result<std::size_t> read_object(cache::store& store, const digest& d, std::uint64_t off, char* buf, std::size_t n) {
  unique_fd fd(::open(store.object_path(d).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno(errno, "open " + store.object_path(d));
  ssize_t r;
  do {
    r = ::pread(fd.get(), buf, n, static_cast<off_t>(off));
  } while (r < 0 && errno == EINTR);
  if (r < 0) return fail_errno(errno, "read " + store.object_path(d));
  return static_cast<std::size_t>(r);
}

}  // namespace

// One declared dataset. Immutable identity (ref, declaration); state behind `mu`.
struct dataset_service::record {
  std::string ref;
  dataset::declaration decl;
  std::string decl_json;

  mutable std::mutex mu;
  std::string state = "resolving";  // resolving | ready | failed
  std::optional<digest> manifest_digest;
  std::string error;
  std::uint64_t files = 0, bytes = 0, groups = 0;
  double resolve_seconds = 0;
  std::shared_ptr<const dataset::manifest> manifest;
  std::shared_ptr<const std::unordered_map<digest, std::uint32_t>> by_digest;  // digest → a file index
  std::shared_ptr<const dataset_origin> origin;
  bool running = false;

  std::atomic<std::uint64_t> files_total{0}, files_done{0}, bytes_total{0}, bytes_done{0};
  std::atomic<std::uint64_t> origin_bytes{0}, resumed_bytes{0};
  steady::time_point started = steady::now();
};

// The single flight of "make group G of a dataset ready to download" (fetches again what was
// evicted), with the requests waiting for it.
struct dataset_service::group_job {
  std::mutex mu;
  bool done = false;
  unsigned status = 200;
  std::string torrent, info_hash, kind, message;
  std::uint64_t bytes = 0;
  std::atomic<std::uint64_t> bytes_done{0};
  std::vector<std::function<void()>> waiters;
};

dataset_service::dataset_service(dataset_service_options o, net::io_context& io, cache::store& store, state_db& st,
                                 http::client& http, seeder* sd, dataset_metrics m)
    : opts_(std::move(o)), io_(io), store_(store), st_(st), http_(http), seeder_(sd), m_(m),
      pool_(static_cast<std::size_t>(std::max(1, opts_.parallel_fetches))) {}

dataset_service::~dataset_service() { stop(); }

status dataset_service::start() {
  for (const auto& d : {opts_.dir + "/datasets", opts_.dir + "/manifests", opts_.dir + "/packs", opts_.staging_dir}) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) return fail(ec, "create " + d + ": " + ec.message());
  }
  // The staging directory must be on the cache's filesystem: adopt_file renames.
  if (auto s = store_.check_same_filesystem(opts_.staging_dir); !s) return fail(s.error().wrap("datasets.staging_dir"));
  std::error_code ec;
  std::vector<std::shared_ptr<record>> resume;
  for (auto it = fs::directory_iterator(opts_.dir + "/datasets", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().extension() != ".json") continue;
    auto text = read_file(it->path().string());
    if (!text) continue;
    auto j = json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("declaration")) {
      log::warn("ignoring an unreadable dataset record", log::kv("file", it->path().string()));
      continue;
    }
    auto decl = dataset::parse_declaration(j["declaration"].dump());
    if (!decl) {
      log::warn("ignoring a dataset record", log::kv("file", it->path().string()), log::kv("error", decl.error().message));
      continue;
    }
    auto r = std::make_shared<record>();
    r->decl = *decl;
    r->decl_json = dataset::to_json(*decl);
    r->ref = decl->name + "@" + decl->version;
    r->state = j.value("state", "resolving");
    r->error = j.value("error", "");
    r->files = j.value("files", std::uint64_t{0});
    r->bytes = j.value("bytes", std::uint64_t{0});
    r->groups = j.value("groups", std::uint64_t{0});
    r->resolve_seconds = j.value("resolve_seconds", 0.0);
    if (auto md = digest::parse(j.value("manifest", "")); md) r->manifest_digest = *md;
    if (r->state == "ready" && !r->manifest_digest) r->state = "resolving";
    if (r->state == "resolving") resume.push_back(r);
    std::lock_guard lk(mu_);
    records_[r->ref] = r;
  }
  for (auto& r : resume) {
    log::info("resuming the resolution of a dataset", log::kv("dataset", r->ref));
    start_resolution(r);
  }
  log::info("datasets loaded", log::kv("dir", opts_.dir), log::kv("datasets", records_.size()));
  return {};
}

void dataset_service::stop() {
  stop_.store(true);
  if (stopped_.exchange(true)) return;
  std::vector<std::thread> ts;
  {
    std::lock_guard lk(mu_);
    ts.swap(resolvers_);
  }
  for (auto& t : ts) {
    if (t.joinable()) t.join();
  }
  pool_.join();
}

std::size_t dataset_service::resolving() const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& [k, r] : records_) {
    std::lock_guard rl(r->mu);
    n += r->running ? 1 : 0;
  }
  return n;
}

std::shared_ptr<dataset_service::record> dataset_service::find(const std::string& ref) const {
  std::lock_guard lk(mu_);
  auto it = records_.find(ref);
  return it == records_.end() ? nullptr : it->second;
}

status dataset_service::persist(const record& r) const {
  json j;
  {
    std::lock_guard lk(r.mu);
    j = {{"schema", 1},
         {"dataset", r.ref},
         {"declaration", json::parse(r.decl_json)},
         {"state", r.state},
         {"manifest", r.manifest_digest ? r.manifest_digest->str() : ""},
         {"error", r.error},
         {"files", r.files},
         {"bytes", r.bytes},
         {"groups", r.groups},
         {"resolve_seconds", r.resolve_seconds}};
  }
  return write_atomic(opts_.dir + "/datasets/" + r.ref + ".json", j.dump(2));
}

// ---- HTTP

bool dataset_service::handle(http::request& req, const http::responder& resp) {
  static constexpr std::string_view base = origin::paths::datasets;
  static constexpr std::string_view meta = origin::paths::dataset_metainfo;
  std::string_view path = req.path;
  if (path == base || path == std::string(base) + "/") {
    if (req.method == http::verb::post) {
      declare(req, resp);
    } else if (req.method == http::verb::get || req.method == http::verb::head) {
      list(resp);
    } else {
      auto r = json_error(405, "GET lists datasets, POST declares one");
      r.headers.set("Allow", "GET, POST");
      resp.send(std::move(r));
    }
    return true;
  }
  bool is_meta = path.rfind(meta, 0) == 0;
  if (!is_meta && path.rfind(std::string(base) + "/", 0) != 0) return false;
  if (req.method != http::verb::get && req.method != http::verb::head) {
    resp.send(json_error(405, "only GET"));
    return true;
  }
  std::string_view rest = path.substr(is_meta ? meta.size() : base.size() + 1);
  auto slash = rest.find('/');
  std::string ref(rest.substr(0, slash));
  std::string_view tail = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (auto p = dataset::parse_ref(ref); !p) {
    resp.send(json_error(400, p.error().message));
    return true;
  }
  if (is_meta) {
    constexpr auto max_wait = std::chrono::milliseconds(20000);
    auto wait = std::min(max_wait, origin::lenient_wait(req).value_or(max_wait));
    serve_metainfo(ref, tail, wait, resp);
  } else if (tail.empty()) {
    status_of(ref, resp);
  } else if (tail == "manifest") {
    serve_manifest(ref, resp);
  } else if (tail.rfind("objects/", 0) == 0) {
    serve_object(ref, tail.substr(8), resp);
  } else {
    resp.send(json_error(404, "no such dataset endpoint"));
  }
  return true;
}

namespace {

json status_json(const dataset_service_options&, const std::string& ref, const std::string& state,
                 const std::optional<digest>& md, const std::string& err, std::uint64_t files, std::uint64_t bytes,
                 std::uint64_t groups, double secs) {
  json j = {{"dataset", ref},
            {"state", state},
            {"manifest", md ? json(md->str()) : json()},
            {"error", err},
            {"files", files},
            {"bytes", bytes},
            {"groups", groups},
            {"resolve_seconds", secs},
            {"files_per_second", secs > 0 ? static_cast<double>(files) / secs : 0.0}};
  return j;
}

}  // namespace

void dataset_service::declare(const http::request& req, const http::responder& resp) {
  auto decl = dataset::parse_declaration(req.body);
  if (!decl) return resp.send(json_error(400, decl.error().message));
  std::string ref = decl->name + "@" + decl->version;
  std::string dj = dataset::to_json(*decl);
  std::shared_ptr<record> r;
  bool fresh = false, restart = false;
  {
    std::lock_guard lk(mu_);
    auto it = records_.find(ref);
    if (it != records_.end()) {
      r = it->second;
      if (r->decl_json != dj) {
        return resp.send(json_error(409, "dataset " + ref +
                                             " is already declared with another origin or other globs: a version "
                                             "pins its bytes for good; declare a new version"));
      }
      std::lock_guard rl(r->mu);
      if (r->state == "failed" && !r->running) {
        r->state = "resolving";
        r->error.clear();
        restart = true;
      }
    } else {
      r = std::make_shared<record>();
      r->ref = ref;
      r->decl = *decl;
      r->decl_json = dj;
      fresh = true;
    }
  }
  if (fresh) {
    // Refuse what can never resolve (bad credentials reference) before remembering it.
    auto o = dataset_origin::make(*decl, http_, opts_.origin);
    if (!o) return resp.send(json_error(400, o.error().message));
    {
      std::lock_guard rl(r->mu);
      r->origin = std::shared_ptr<const dataset_origin>(std::move(*o));
    }
    {
      std::lock_guard lk(mu_);
      auto [it, inserted] = records_.emplace(ref, r);
      if (!inserted) {
        // A concurrent declaration of the same version won; answer as a repeat.
        r = it->second;
        fresh = false;
      }
    }
    if (fresh) {
      if (auto s = persist(*r); !s) log::warn("cannot save a dataset record", log::kv("error", s.error().message));
      log::info("dataset declared", log::kv("dataset", ref), log::kv("origin", decl->origin.url));
    }
  }
  if (fresh || restart) start_resolution(r);
  return status_of(ref, resp);
}

void dataset_service::list(const http::responder& resp) {
  std::vector<std::shared_ptr<record>> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [k, r] : records_) all.push_back(r);
  }
  json out = json::array();
  for (auto& r : all) {
    std::lock_guard rl(r->mu);
    out.push_back(status_json(opts_, r->ref, r->state, r->manifest_digest, r->error, r->files, r->bytes, r->groups,
                              r->resolve_seconds));
  }
  resp.send(json_answer(200, out));
}

void dataset_service::status_of(const std::string& ref, const http::responder& resp) {
  auto r = find(ref);
  if (!r) return resp.send(json_error(404, "unknown dataset " + ref));
  json j;
  bool ready;
  {
    std::lock_guard rl(r->mu);
    j = status_json(opts_, r->ref, r->state, r->manifest_digest, r->error, r->files, r->bytes, r->groups,
                    r->resolve_seconds);
    j["origin"] = r->decl.origin.url;
    ready = r->state == "ready";
  }
  double secs = std::chrono::duration<double>(steady::now() - r->started).count();
  j["progress"] = {{"files_done", r->files_done.load()},     {"files_total", r->files_total.load()},
                   {"bytes_done", r->bytes_done.load()},     {"bytes_total", r->bytes_total.load()},
                   {"origin_bytes", r->origin_bytes.load()}, {"resumed_bytes", r->resumed_bytes.load()},
                   {"seconds", secs}};
  std::string state = j["state"];
  resp.send(json_answer(ready ? 200 : state == "failed" ? 409 : 202, j));
}

void dataset_service::serve_manifest(const std::string& ref, const http::responder& resp) {
  auto r = find(ref);
  if (!r) return resp.send(json_error(404, "unknown dataset " + ref));
  std::optional<digest> md;
  std::string state;
  {
    std::lock_guard rl(r->mu);
    md = r->manifest_digest;
    state = r->state;
  }
  if (state != "ready" || !md) {
    auto a = json_error(state == "failed" ? 409 : 404, "dataset " + ref + " is " + state + " (no manifest yet)");
    if (state == "resolving") a.headers.set("Retry-After", "1");
    return resp.send(std::move(a));
  }
  std::string path = opts_.dir + "/manifests/" + md->hex() + ".json";
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return resp.send(json_error(500, "manifest of " + ref + " is missing"));
  http::response out;
  out.status = 200;
  out.headers.set("Content-Type", "application/json");
  out.headers.set(std::string(origin::headers::manifest_digest), md->str());
  out.rangeable = true;
  out.body = http::file_body{std::make_shared<unique_fd>(std::move(fd)), 0, static_cast<std::uint64_t>(st.st_size)};
  resp.send(std::move(out));
}

result<std::shared_ptr<const dataset::manifest>> dataset_service::manifest_of(const std::shared_ptr<record>& r) {
  std::optional<digest> md;
  {
    std::lock_guard rl(r->mu);
    if (r->manifest) return r->manifest;
    if (r->state != "ready" || !r->manifest_digest) {
      return fail(r->state == "failed" ? errc::unavailable : errc::not_found,
                  "dataset " + r->ref + " is " + r->state + (r->error.empty() ? "" : ": " + r->error));
    }
    md = r->manifest_digest;
  }
  auto text = read_file(opts_.dir + "/manifests/" + md->hex() + ".json");
  if (!text) return fail(text.error());
  auto m = dataset::parse_manifest(*text, *md);
  if (!m) return fail(m.error().wrap("manifest of " + r->ref));
  auto mp = std::make_shared<const dataset::manifest>(std::move(*m));
  auto idx = std::make_shared<std::unordered_map<digest, std::uint32_t>>();
  for (std::uint32_t i = 0; i < mp->files.size(); ++i) idx->emplace(mp->files[i].id, i);
  std::lock_guard rl(r->mu);
  r->manifest = mp;
  r->by_digest = idx;
  return mp;
}

void dataset_service::serve_object(const std::string& ref, std::string_view dig, const http::responder& resp) {
  auto d = digest::parse(dig);
  if (!d) return resp.send(json_error(400, d.error().message));
  auto r = find(ref);
  if (!r) return resp.send(json_error(404, "unknown dataset " + ref));
  net::post(pool_, [this, r, id = *d, resp] {
    auto m = manifest_of(r);
    if (!m) return resp.send(json_error(status_for(m.error()), m.error().message));
    std::shared_ptr<const std::unordered_map<digest, std::uint32_t>> idx;
    {
      std::lock_guard rl(r->mu);
      idx = r->by_digest;
    }
    auto it = idx->find(id);
    if (it == idx->end()) return resp.send(json_error(404, id.str() + " is not part of " + r->ref));
    const auto& f = (*m)->files[it->second];
    if (!store_.contains(id) && f.size > 0) {
      auto origin = origin_of(r);
      if (!origin) return resp.send(json_error(502, origin.error().message));
      auto rep = fetch_object(**origin, origin_object{f.path, f.size, "refetch:" + id.hex()}, id, nullptr);
      if (!rep) return resp.send(json_error(status_for(rep.error()), rep.error().message));
    }
    auto rd = store_.open_read(id);
    if (!rd) return resp.send(json_error(404, id.str() + " is not in the cache"));
    http::response out;
    out.status = 200;
    out.headers.set("Content-Type", "application/octet-stream");
    out.headers.set("Docker-Content-Digest", id.str());
    out.rangeable = true;
    std::uint64_t size = rd->size();
    out.body = http::file_body{std::make_shared<unique_fd>(rd->release()), 0, size};
    resp.send(std::move(out));
  });
}

result<std::shared_ptr<const dataset_origin>> dataset_service::origin_of(const std::shared_ptr<record>& r) {
  {
    std::lock_guard rl(r->mu);
    if (r->origin) return r->origin;
  }
  // Records loaded at start have no origin client yet (credentials are read when needed).
  auto o = dataset_origin::make(r->decl, http_, opts_.origin);
  if (!o) return fail(o.error().wrap("origin of " + r->ref));
  std::lock_guard rl(r->mu);
  if (!r->origin) r->origin = std::shared_ptr<const dataset_origin>(std::move(*o));
  return r->origin;
}

// ---- resolution

void dataset_service::start_resolution(const std::shared_ptr<record>& r) {
  {
    std::lock_guard rl(r->mu);
    if (r->running) return;
    r->running = true;
    r->state = "resolving";
    r->started = steady::now();
  }
  std::lock_guard lk(mu_);
  if (stop_.load()) return;
  resolvers_.emplace_back([this, r] {
    resolve(r);
    std::lock_guard rl(r->mu);
    r->running = false;
  });
}

void dataset_service::resolve(const std::shared_ptr<record>& r) {
  auto failed = [&](const error& e) {
    {
      std::lock_guard rl(r->mu);
      r->state = "failed";
      r->error = e.message;
    }
    if (m_.resolve_failures) m_.resolve_failures->inc();
    log::warn("dataset resolution failed", log::kv("dataset", r->ref), log::kv("error", e.message));
    (void)persist(*r);
  };
  auto og = origin_of(r);
  if (!og) return failed(og.error());
  std::shared_ptr<const dataset_origin> origin = *og;
  auto t0 = steady::now();
  r->files_done = 0;
  r->bytes_done = 0;
  auto listing = origin->list(stop_);
  if (!listing) return failed(listing.error().wrap("resolve " + r->ref));
  std::uint64_t total = 0;
  for (const auto& o : *listing) total += o.size;
  r->files_total = listing->size();
  r->bytes_total = total;
  log::info("dataset listed", log::kv("dataset", r->ref), log::kv("files", listing->size()), log::kv("bytes", total));

  std::vector<dataset::file_entry> files(listing->size());
  std::mutex mu;
  std::condition_variable cv;
  std::size_t pending = listing->size();
  std::optional<error> first;
  std::atomic<bool> abort{false};
  auto until = cache::clock::now() + opts_.resolve_pin;
  const std::string owner = "dataset:" + r->ref;
  for (std::size_t i = 0; i < listing->size(); ++i) {
    net::post(pool_, [&, i] {
      const auto& o = (*listing)[i];
      std::optional<error> err;
      if (!abort.load() && !stop_.load()) {
        if (o.size == 0) {
          files[i] = dataset::file_entry{o.path, 0, sha256_of(std::string_view())};
        } else {
          auto rep = fetch_object(*origin, o, std::nullopt, [&](std::uint64_t n) { r->bytes_done.fetch_add(n); });
          if (!rep) {
            err = rep.error();
          } else {
            files[i] = dataset::file_entry{o.path, o.size, rep->id};
            r->origin_bytes.fetch_add(rep->origin_bytes);
            r->resumed_bytes.fetch_add(rep->resumed_bytes);
            r->bytes_done.fetch_add(rep->resumed_bytes);
            if (auto p = store_.pin(rep->id, owner, until); !p) err = p.error().wrap("pin " + o.path);
          }
        }
      } else if (stop_.load()) {
        err = error{errc::cancelled, "registry-proxy is stopping"};
      }
      r->files_done.fetch_add(1);
      std::lock_guard lk(mu);
      if (err && !first) {
        first = err;
        abort = true;
      }
      if (--pending == 0) cv.notify_all();
    });
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return pending == 0; });
  }
  if (stop_.load()) return;  // resumed at the next start (the record still says resolving)
  if (first) return failed(*first);
  std::string version = r->decl.version;
  auto m = dataset::build_manifest(r->decl.name, r->decl.version, r->decl.origin.url, std::move(files), opts_.policy);
  if (!m) return failed(m.error().wrap("manifest of " + r->ref));
  std::string canon = dataset::canonical_json(*m);
  digest md = sha256_of(canon);
  if (auto s = write_atomic(opts_.dir + "/manifests/" + md.hex() + ".json", canon); !s) return failed(s.error());
  auto secs = std::chrono::duration<double>(steady::now() - t0).count();

  // The metainfo of every group now, so the first nodes do not wait for it.
  std::size_t gpending = m->groups.size();
  std::optional<error> gfirst;
  for (std::size_t g = 0; g < m->groups.size(); ++g) {
    net::post(pool_, [&, g] {
      group_job job;
      auto t = prepare_group(r, *m, static_cast<std::uint32_t>(g), job);
      std::lock_guard lk(mu);
      if (!t && !gfirst) gfirst = t.error();
      if (--gpending == 0) cv.notify_all();
    });
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return gpending == 0; });
  }
  if (gfirst) return failed(gfirst->wrap("metainfo of " + r->ref));
  {
    std::lock_guard rl(r->mu);
    r->state = "ready";
    r->error.clear();
    r->manifest_digest = md;
    r->files = m->files.size();
    r->bytes = m->total_bytes();
    r->groups = m->groups.size();
    r->resolve_seconds = secs;
    r->manifest.reset();
    r->by_digest.reset();
  }
  if (auto s = persist(*r); !s) log::warn("cannot save a dataset record", log::kv("error", s.error().message));
  if (m_.resolved) m_.resolved->inc();
  log::info("dataset resolved", log::kv("dataset", r->ref), log::kv("manifest", md.str()),
            log::kv("files", m->files.size()), log::kv("bytes", m->total_bytes()), log::kv("groups", m->groups.size()),
            log::kv("seconds", secs), log::kv("files_per_second", secs > 0 ? m->files.size() / secs : 0.0));
}

result<fetch_report> dataset_service::fetch_object(const dataset_origin& origin, const origin_object& o,
                                                   const std::optional<digest>& expected,
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
  auto rep = origin.fetch(o, store_, opts_.staging_dir, expected, progress, stop_);
  if (rep) {
    if (m_.origin_gets) m_.origin_gets->inc(static_cast<std::uint64_t>(rep->requests));
    if (m_.origin_bytes) m_.origin_bytes->inc(rep->origin_bytes);
  }
  mine.set_value(rep);
  std::lock_guard lk(flight_mu_);
  flights_.erase(key);
  return rep;
}

// ---- groups

result<std::string> dataset_service::prepare_group(const std::shared_ptr<record>& r, const dataset::manifest& m,
                                                   std::uint32_t g, group_job& job) {
  if (g >= m.groups.size()) return fail(errc::not_found, r->ref + " has no group " + std::to_string(g));
  const auto& gr = m.groups[g];
  auto objs = dataset::group_objects(m, gr);
  job.bytes = gr.bytes;
  std::shared_ptr<const dataset_origin> origin;
  // Objects evicted since the resolution come again from the origin, and must be the same bytes.
  auto until = cache::clock::now() + opts_.resolve_pin;
  for (const auto& [d, size] : objs) {
    if (store_.contains(d)) {
      job.bytes_done.fetch_add(size);
      continue;
    }
    if (!origin) {
      auto o = origin_of(r);
      if (!o) return fail(o.error());
      origin = *o;
    }
    std::string path;
    for (auto i : gr.files) {
      if (m.files[i].id == d) {
        path = m.files[i].path;
        break;
      }
    }
    auto rep = fetch_object(*origin, origin_object{path, size, "refetch:" + d.hex()}, d,
                            [&job](std::uint64_t n) { job.bytes_done.fetch_add(n); });
    if (!rep) {
      if (rep.error().is(errc::digest_mismatch) || rep.error().is(errc::size_mismatch)) {
        if (m_.origin_changed) m_.origin_changed->inc();
        std::string msg = "origin changed under version " + r->decl.version + " of " + r->decl.name + ": " +
                          rep.error().message + "; declare a new version";
        {
          std::lock_guard rl(r->mu);
          r->error = msg;
        }
        log::error("dataset origin changed under a version", log::kv("dataset", r->ref), log::kv("error", msg));
        return fail(errc::digest_mismatch, msg);
      }
      return fail(rep.error().wrap(r->ref + " group " + std::to_string(g)));
    }
    (void)store_.pin(d, "dataset:" + r->ref, until);
  }
  if (gr.type == dataset::group::kind::single) {
    const digest& d = objs.front().first;
    std::optional<object_metainfo> om;
    if (auto t = st_.get_metainfo(d)) {
      if (auto p = object_metainfo::parse(*t, d)) om = std::move(*p);
    }
    if (!om) {
      auto b = metainfo_for_file(store_.object_path(d), d);
      if (!b) return fail(b.error().wrap(r->ref + " group " + std::to_string(g)));
      om = std::move(*b);
      (void)st_.put_metainfo(d, om->torrent_file({}));
    }
    if (seeder_) seeder_->seed(d, *om);
    job.kind = "single";
    job.info_hash = om->info_hash_hex();
    return om->torrent_file(opts_.trackers);
  }
  digest key = dataset::pack_key(objs);
  std::string tpath = opts_.dir + "/packs/" + key.hex() + ".torrent";
  std::optional<pack_metainfo> pm;
  if (auto t = read_file(tpath)) {
    if (auto p = pack_metainfo::parse(*t, objs)) pm = std::move(*p);
  }
  if (!pm) {
    auto b = build_pack(objs, [this](const digest& d, std::uint64_t off, char* buf, std::size_t n) {
      return read_object(store_, d, off, buf, n);
    });
    if (!b) return fail(b.error().wrap(r->ref + " group " + std::to_string(g)));
    pm = std::move(*b);
    if (auto s = write_atomic(tpath, pm->torrent_file({})); !s) return fail(s.error());
  }
  if (seeder_) seeder_->seed_pack(key, *pm);
  job.kind = "pack";
  job.info_hash = pm->info_hash_hex();
  return pm->torrent_file(opts_.trackers);
}

void dataset_service::serve_metainfo(const std::string& ref, std::string_view group, std::chrono::milliseconds wait,
                                     const http::responder& resp) {
  std::uint32_t g = 0;
  if (group.empty() || group.size() > 9 || group.find_first_not_of("0123456789") != std::string_view::npos) {
    return resp.send(json_error(400, "dataset metainfo is " + std::string(origin::paths::dataset_metainfo) +
                                        "<name>@<version>/<group index>"));
  }
  g = static_cast<std::uint32_t>(std::stoul(std::string(group)));
  auto r = find(ref);
  if (!r) return resp.send(json_error(404, "unknown dataset " + ref));
  net::post(pool_, [this, r, g, wait, resp] {
    auto m = manifest_of(r);
    if (!m) {
      auto a = json_error(m.error().is(errc::not_found) ? 404 : 409, m.error().message);
      return resp.send(std::move(a));
    }
    if (g >= (*m)->groups.size()) return resp.send(json_error(404, r->ref + " has no group " + std::to_string(g)));
    std::string key = r->ref + "/" + std::to_string(g);
    std::shared_ptr<group_job> job;
    bool leader = false;
    {
      std::lock_guard lk(mu_);
      auto it = group_jobs_.find(key);
      if (it != group_jobs_.end()) {
        job = it->second;
      } else {
        job = std::make_shared<group_job>();
        group_jobs_[key] = job;
        leader = true;
      }
    }
    auto answered = std::make_shared<std::atomic<bool>>(false);
    auto timer = std::make_shared<net::steady_timer>(io_, wait);
    auto final_answer = [this, job, answered, resp] {
      // The timer is not cancelled from here (asio timers are not thread-safe): it fires later
      // and finds the request answered.
      if (answered->exchange(true)) return;
      std::lock_guard lk(job->mu);
      if (job->status != 200) {
        auto a = json_error(job->status, job->message);
        if (job->status == 503) a.headers.set("Retry-After", "1");
        return resp.send(std::move(a));
      }
      origin::metainfo_answer a;
      a.torrent = job->torrent;
      a.info_hash = job->info_hash;
      a.group_kind = job->kind;
      a.group_bytes = job->bytes;
      a.seed = opts_.seed_endpoint;
      resp.send(origin::encode(a));
    };
    {
      std::lock_guard lk(job->mu);
      if (job->done) {
        // Answered below, outside the lock.
      } else {
        job->waiters.push_back(final_answer);
      }
    }
    timer->async_wait([job, answered, resp, timer](const boost::system::error_code& ec) {
      if (ec || answered->exchange(true)) return;
      resp.send(origin::encode(origin::progress{job->bytes_done.load(), job->bytes, 0, "1"}));
    });
    if (!leader) {
      std::lock_guard lk(job->mu);
      if (!job->done) return;
    } else {
      auto t = prepare_group(r, **m, g, *job);
      std::vector<std::function<void()>> waiters;
      {
        std::lock_guard lk(job->mu);
        job->done = true;
        if (t) {
          job->torrent = std::move(*t);
        } else {
          job->status = status_for(t.error());
          job->message = t.error().message;
        }
        waiters.swap(job->waiters);
      }
      {
        std::lock_guard lk(mu_);
        group_jobs_.erase(key);
      }
      for (auto& w : waiters) w();
      return;
    }
    final_answer();
  });
}

}  // namespace shoal::proxy
