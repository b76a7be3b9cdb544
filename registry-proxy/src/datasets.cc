// registry-proxy's dataset service: lifecycle, records, and the pack groups nodes download
// (datasets.h). The HTTP API is in datasets_http.cc, resolution in datasets_resolve.cc.
#include <algorithm>

#include "datasets_internal.h"
#include "common/json_text.h"

namespace shoal::proxy {

using namespace datasets_detail;

dataset_service::dataset_service(dataset_service_options o, net::io_context& io,
                                 cache::store& store, state_db& st, http::client& http, seeder* sd,
                                 dataset_metrics m)
    : opts_(std::move(o)),
      io_(io),
      store_(store),
      st_(st),
      http_(http),
      seeder_(sd),
      m_(m),
      budget_(store, opts_.staging_dir, 64u << 20),
      pool_(static_cast<std::size_t>(std::max(1, opts_.parallel_fetches)), "dataset-fetch") {
  if (opts_.origin.allowed) {
    http::client_options co;
    co.policy = dataset_connect_policy(opts_.origin.allowed);
    origin_http_ = std::make_unique<http::client>(std::move(co));
  }
}

dataset_service::~dataset_service() { stop(); }

status dataset_service::start() {
  for (const auto& d : {opts_.dir + "/datasets", opts_.dir + "/manifests", opts_.dir + "/packs",
                        opts_.staging_dir}) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) return fail(ec, "create " + d + ": " + ec.message());
  }
  // The staging directory must be on the cache's filesystem: adopt_file renames.
  if (auto s = store_.check_same_filesystem(opts_.staging_dir); !s)
    return fail(s.error().wrap("datasets.staging_dir"));
  std::error_code ec;
  std::vector<std::shared_ptr<record>> resume;
  std::vector<std::shared_ptr<record>> own;
  for (auto it = fs::directory_iterator(opts_.dir + "/datasets", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() != ".json") continue;
    auto text = read_file(it->path().string());
    if (!text) continue;
    auto r = record_of(*text);
    if (!r) {
      log::warn("ignoring a dataset record", log::kv("file", it->path().string()),
                log::kv("error", r.error().message));
      continue;
    }
    // A standby copy still resolving is resolved only when asked for here (take_over).
    if (!(*r)->standby) {
      own.push_back(*r);
      if ((*r)->state == "resolving") resume.push_back(*r);
    }
    std::lock_guard lk(mu_);
    records_[(*r)->ref] = *r;
  }
  sweep_staging(resume.empty());
  start_resolvers();
  for (auto& r : resume) resume_resolution(r);
  // The other ring members get this replica's records again (one may have missed a copy).
  if (opts_.on_record) {
    for (auto& r : own) opts_.on_record(r->ref, record_json(*r));
  }
  log::info("datasets loaded", log::kv("dir", opts_.dir), log::kv("datasets", records_.size()));
  return {};
}

result<std::shared_ptr<dataset_service::record>> dataset_service::record_of(std::string_view text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("declaration"))
    return fail(errc::invalid_argument, "not a dataset record");
  auto decl = dataset::parse_declaration(json_text(j["declaration"]));
  if (!decl) return fail(decl.error());
  auto r = std::make_shared<record>();
  r->decl = *decl;
  r->decl_json = dataset::to_json(*decl);
  r->ref = decl->name + "@" + decl->version;
  auto str = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : std::uint64_t{0};
  };
  r->state = str("state");
  if (r->state != "ready" && r->state != "failed") r->state = "resolving";
  r->error = str("error");
  r->files = num("files");
  r->bytes = num("bytes");
  r->groups = num("groups");
  if (auto it = j.find("resolve_seconds"); it != j.end() && it->is_number())
    r->resolve_seconds = it->get<double>();
  if (auto md = digest::parse(str("manifest")); md) r->manifest_digest = *md;
  if (r->state == "ready" && !r->manifest_digest) r->state = "resolving";
  if (auto it = j.find("interrupted"); it != j.end() && it->is_number_integer())
    r->interrupted = static_cast<int>(std::clamp<std::int64_t>(it->get<std::int64_t>(), 0, 1000));
  if (auto it = j.find("standby"); it != j.end() && it->is_boolean()) r->standby = it->get<bool>();
  return r;
}

void dataset_service::sweep_staging(bool all) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  std::size_t removed = 0;
  for (auto it = fs::directory_iterator(opts_.staging_dir, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() != ".part") continue;
    std::error_code e2;
    auto t = fs::last_write_time(it->path(), e2);
    if (!all && !e2 && now - t < kStagingKeep) continue;
    if (fs::remove(it->path(), e2)) ++removed;
  }
  if (removed > 0) {
    log::info("removed staging files left by an earlier run", log::kv("files", removed),
              log::kv("dir", opts_.staging_dir));
  }
}

void dataset_service::stop() {
  stop_.store(true);
  if (stopped_.exchange(true)) return;
  std::vector<std::thread> ts;
  {
    std::lock_guard lk(mu_);
    ts.swap(resolvers_);
  }
  queue_cv_.notify_all();
  for (auto& t : ts) {
    if (t.joinable()) t.join();
  }
  pool_.join();
  if (origin_http_) origin_http_->stop();
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

std::string dataset_service::record_json(const record& r) const {
  json j;
  {
    std::lock_guard lk(r.mu);
    j = {{"schema", 1},
         {"dataset", r.ref},
         {"declaration", json::parse(r.decl_json)},
         {"state", r.state},
         {"manifest", r.manifest_digest ? r.manifest_digest->str() : ""},
         {"error", utf8_safe(r.error, 4096)},
         {"interrupted", r.interrupted},
         {"files", r.files},
         {"bytes", r.bytes},
         {"groups", r.groups},
         {"resolve_seconds", r.resolve_seconds}};
    if (r.standby) j["standby"] = true;
  }
  return json_text(j, 2);
}

std::vector<std::pair<std::string, std::string>> dataset_service::own_records() const {
  std::vector<std::shared_ptr<record>> all;
  {
    std::lock_guard lk(mu_);
    for (const auto& [ref, r] : records_) all.push_back(r);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : all) {
    bool standby;
    {
      std::lock_guard lk(r->mu);
      standby = r->standby;
    }
    if (!standby) out.emplace_back(r->ref, record_json(*r));
  }
  return out;
}

status dataset_service::persist(const record& r) const {
  auto text = record_json(r);
  if (auto s = write_atomic(opts_.dir + "/datasets/" + r.ref + ".json", text); !s) return s;
  bool standby;
  {
    std::lock_guard lk(r.mu);
    standby = r.standby;
  }
  if (!standby && opts_.on_record) opts_.on_record(r.ref, text);
  return {};
}

std::string dataset_service::manifest_path(const digest& md) const {
  return opts_.dir + "/manifests/" + md.hex() + ".json";
}

bool dataset_service::has_manifest(const digest& md) const {
  std::error_code ec;
  return fs::exists(manifest_path(md), ec);
}

result<std::string> dataset_service::accept_copy(const std::string& ref,
                                                 std::string_view record_text,
                                                 std::string_view manifest_text) {
  auto got = record_of(record_text);
  if (!got) return fail(errc::invalid_argument, "dataset copy: " + got.error().message);
  auto c = *got;
  if (c->ref != ref)
    return fail(errc::invalid_argument, "dataset copy of " + c->ref + " sent for " + ref);
  c->standby = true;
  c->interrupted = 0;
  if (c->state == "ready") {
    // The manifest is content-addressed: a copy whose bytes are not the digest is refused.
    if (!has_manifest(*c->manifest_digest)) {
      auto m = dataset::parse_manifest(manifest_text, *c->manifest_digest);
      if (!m)
        return fail(errc::invalid_argument, "dataset copy of " + ref + ": " + m.error().message);
      if (auto s = write_atomic(manifest_path(*c->manifest_digest), std::string(manifest_text)); !s)
        return fail(s.error());
    }
  }
  std::shared_ptr<record> cur;
  {
    std::lock_guard lk(mu_);
    auto it = records_.find(ref);
    if (it != records_.end()) cur = it->second;
  }
  if (cur) {
    std::lock_guard rl(cur->mu);
    if (!cur->standby) return std::string("own record kept");
    if (cur->decl_json != c->decl_json)
      return fail(errc::invalid_argument,
                  "dataset copy of " + ref + " has another declaration than the one held here");
    if (cur->state == "ready" && c->state != "ready") return std::string("unchanged");
    if (cur->state == c->state && cur->manifest_digest == c->manifest_digest &&
        cur->error == c->error)
      return std::string("unchanged");
    if (cur->running) return std::string("resolving here");
    cur->state = c->state;
    cur->manifest_digest = c->manifest_digest;
    cur->error = c->error;
    cur->files = c->files;
    cur->bytes = c->bytes;
    cur->groups = c->groups;
    cur->resolve_seconds = c->resolve_seconds;
    cur->manifest.reset();
    cur->by_digest.reset();
  } else {
    std::lock_guard lk(mu_);
    auto [it, inserted] = records_.emplace(ref, c);
    if (!inserted) return std::string("unchanged");  // declared here meanwhile
    cur = c;
  }
  if (auto s = persist(*cur); !s) return fail(s.error());
  log::info("dataset copy kept", log::kv("dataset", ref), log::kv("state", c->state));
  return std::string("kept");
}

void dataset_service::take_over(const std::shared_ptr<record>& r) {
  {
    std::lock_guard rl(r->mu);
    if (!r->standby || r->state != "resolving" || r->running) return;
    r->standby = false;
  }
  log::info("resolving a dataset whose owner is away (from its copy)", log::kv("dataset", r->ref));
  if (auto s = persist(*r); !s)
    log::warn("cannot save a dataset record", log::kv("error", s.error().message));
  if (!start_resolution(r)) resolve_failed(r, error{errc::unavailable, "resolver queue full"});
}

// ---- groups

result<std::string> dataset_service::prepare_group(const std::shared_ptr<record>& r,
                                                   const dataset::manifest& m, std::uint32_t g,
                                                   group_job& job) {
  if (g >= m.groups.size())
    return fail(errc::not_found, r->ref + " has no group " + std::to_string(g));
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
        std::string msg = "origin changed under version " + r->decl.version + " of " +
                          r->decl.name + ": " + rep.error().message + "; declare a new version";
        {
          std::lock_guard rl(r->mu);
          r->error = msg;
        }
        log::error("dataset origin changed under a version", log::kv("dataset", r->ref),
                   log::kv("error", msg));
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

void dataset_service::serve_metainfo(const std::string& ref, std::string_view group,
                                     std::chrono::milliseconds wait,
                                     const tls::peer_identity& caller,
                                     const http::responder& resp) {
  std::uint32_t g = 0;
  if (group.empty() || group.size() > 9 ||
      group.find_first_not_of("0123456789") != std::string_view::npos) {
    return resp.send(json_error(400, "dataset metainfo is " +
                                         std::string(origin::paths::dataset_metainfo) +
                                         "<name>@<version>/<group index>"));
  }
  g = static_cast<std::uint32_t>(std::stoul(std::string(group)));
  auto r = find(ref);
  if (!r) return resp.send(json_error(404, "unknown dataset " + ref));
  net::post(pool_, [this, r, g, wait, caller, resp] {
    answer_guarded(resp, [&] { answer_metainfo(r, g, wait, caller, resp); });
  });
}

void dataset_service::answer_metainfo(const std::shared_ptr<record>& r, std::uint32_t g,
                                      std::chrono::milliseconds wait,
                                      const tls::peer_identity& caller,
                                      const http::responder& resp) {
  auto m = manifest_of(r);
  if (!m) {
    auto a = json_error(m.error().is(errc::not_found) ? 404 : 409, m.error().message);
    return resp.send(std::move(a));
  }
  if (g >= (*m)->groups.size())
    return resp.send(json_error(404, r->ref + " has no group " + std::to_string(g)));
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
  auto final_answer = [this, job, answered, caller, resp] {
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
    if (opts_.grant_for) a.grant = opts_.grant_for(caller, a.info_hash);
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
}

}  // namespace shoal::proxy
