// The dataset service's HTTP API: declare, list, status, manifest and objects (datasets.h).
#include "datasets_internal.h"
#include "common/json_text.h"

namespace shoal::proxy {

using namespace datasets_detail;

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
  std::string_view tail =
      slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (auto p = dataset::parse_ref(ref); !p) {
    resp.send(json_error(400, p.error().message));
    return true;
  }
  if (auto r = find(ref)) take_over(r);
  if (is_meta) {
    constexpr auto max_wait = std::chrono::milliseconds(20000);
    auto wait = std::min(max_wait, origin::lenient_wait(req).value_or(max_wait));
    serve_metainfo(ref, tail, wait, req.peer, resp);
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
                 const std::optional<digest>& md, const std::string& err, std::uint64_t files,
                 std::uint64_t bytes, std::uint64_t groups, double secs) {
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
        return resp.send(json_error(
            409, "dataset " + ref +
                     " is already declared with another origin or other globs: a version "
                     "pins its bytes for good; declare a new version"));
      }
      std::lock_guard rl(r->mu);
      if (r->state == "failed" && !r->running) {
        r->state = "resolving";
        r->error.clear();
        r->standby = false;  // declared here: resolved here, copied to the others
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
    auto o = dataset_origin::make(*decl, origin_http(), opts_.origin);
    if (!o) {
      // Not allowed by the configuration (origin, endpoint, bucket, credentials): 403.
      return resp.send(json_error(o.error().is(errc::unauthorized) ? 403 : 400, o.error().message));
    }
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
  }
  if (fresh) {
    if (auto s = persist(*r); !s)
      log::warn("cannot save a dataset record", log::kv("error", s.error().message));
  }
  if ((fresh || restart) && !start_resolution(r)) {
    // Nothing is kept of a refused declaration (a repeat of a failed one stays failed).
    if (fresh) {
      std::lock_guard lk(mu_);
      records_.erase(ref);
      ::unlink((opts_.dir + "/datasets/" + ref + ".json").c_str());
    } else {
      std::lock_guard rl(r->mu);
      r->state = "failed";
    }
    auto a = json_error(429, "too many datasets waiting to resolve (datasets.max_queued " +
                                 std::to_string(opts_.max_queued) + "); declare again later");
    a.headers.set("Retry-After", "10");
    return resp.send(std::move(a));
  }
  if (fresh) {
    log::info("dataset declared", log::kv("dataset", ref),
              log::kv("origin", utf8_safe(decl->origin.url, 512)));
  }
  take_over(r);  // a copy of an away owner's record, still resolving: resolved here now
  return status_of(ref, resp);
}

void dataset_service::list(const http::responder& resp) {
  resp.send(http::response::json(200, list_json()));
}

std::string dataset_service::list_json() {
  std::vector<std::shared_ptr<record>> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [k, r] : records_) all.push_back(r);
  }
  json out = json::array();
  for (auto& r : all) {
    std::lock_guard rl(r->mu);
    out.push_back(status_json(opts_, r->ref, r->state, r->manifest_digest, r->error, r->files,
                              r->bytes, r->groups, r->resolve_seconds));
  }
  return json_text(out);
}

void dataset_service::status_of(const std::string& ref, const http::responder& resp) {
  auto r = find(ref);
  if (!r) return resp.send(json_error(404, "unknown dataset " + ref));
  json j;
  bool ready;
  {
    std::lock_guard rl(r->mu);
    j = status_json(opts_, r->ref, r->state, r->manifest_digest, r->error, r->files, r->bytes,
                    r->groups, r->resolve_seconds);
    j["origin"] = r->decl.origin.url;
    if (r->state == "resolving") j["queued"] = r->queued;
    ready = r->state == "ready";
  }
  double secs = std::chrono::duration<double>(steady::now() - r->started).count();
  j["progress"] = {{"files_done", r->files_done.load()},
                   {"files_total", r->files_total.load()},
                   {"bytes_done", r->bytes_done.load()},
                   {"bytes_total", r->bytes_total.load()},
                   {"origin_bytes", r->origin_bytes.load()},
                   {"resumed_bytes", r->resumed_bytes.load()},
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
    auto a = json_error(state == "failed" ? 409 : 404,
                        "dataset " + ref + " is " + state + " (no manifest yet)");
    if (state == "resolving") a.headers.set("Retry-After", "1");
    return resp.send(std::move(a));
  }
  std::string path = manifest_path(*md);
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0)
    return resp.send(json_error(500, "manifest of " + ref + " is missing"));
  http::response out;
  out.status = 200;
  out.headers.set("Content-Type", "application/json");
  out.headers.set(std::string(origin::headers::manifest_digest), md->str());
  out.rangeable = true;
  out.body = http::file_body{std::make_shared<unique_fd>(std::move(fd)), 0,
                             static_cast<std::uint64_t>(st.st_size)};
  resp.send(std::move(out));
}

result<std::shared_ptr<const dataset::manifest>> dataset_service::manifest_of(
    const std::shared_ptr<record>& r) {
  std::optional<digest> md;
  {
    std::lock_guard rl(r->mu);
    if (r->manifest) return r->manifest;
    if (r->state != "ready" || !r->manifest_digest) {
      return fail(
          r->state == "failed" ? errc::unavailable : errc::not_found,
          "dataset " + r->ref + " is " + r->state + (r->error.empty() ? "" : ": " + r->error));
    }
    md = r->manifest_digest;
  }
  auto text = read_file(manifest_path(*md));
  if (!text) return fail(text.error());
  auto m = dataset::parse_manifest(*text, *md);
  if (!m) return fail(m.error().wrap("manifest of " + r->ref));
  auto mp = std::make_shared<const dataset::manifest>(std::move(*m));
  auto idx = std::make_shared<std::unordered_map<digest, std::uint32_t, keyed_hash>>();
  for (std::uint32_t i = 0; i < mp->files.size(); ++i) idx->emplace(mp->files[i].id, i);
  std::lock_guard rl(r->mu);
  r->manifest = mp;
  r->by_digest = idx;
  return mp;
}

void dataset_service::serve_object(const std::string& ref, std::string_view dig,
                                   const http::responder& resp) {
  auto d = digest::parse(dig);
  if (!d) return resp.send(json_error(400, d.error().message));
  auto r = find(ref);
  if (!r) return resp.send(json_error(404, "unknown dataset " + ref));
  net::post(pool_, [this, r, id = *d, resp] {
    answer_guarded(resp, [&] { answer_object(r, id, resp); });
  });
}

void dataset_service::answer_object(const std::shared_ptr<record>& r, const digest& id,
                                    const http::responder& resp) {
  auto m = manifest_of(r);
  if (!m) return resp.send(json_error(status_for(m.error()), m.error().message));
  std::shared_ptr<const std::unordered_map<digest, std::uint32_t, keyed_hash>> idx;
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
    auto rep =
        fetch_object(**origin, origin_object{f.path, f.size, "refetch:" + id.hex()}, id, nullptr);
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
}

result<std::shared_ptr<const dataset_origin>> dataset_service::origin_of(
    const std::shared_ptr<record>& r) {
  {
    std::lock_guard rl(r->mu);
    if (r->origin) return r->origin;
  }
  // Records loaded at start have no origin client yet (credentials are read when needed).
  auto o = dataset_origin::make(r->decl, origin_http(), opts_.origin);
  if (!o) return fail(o.error().wrap("origin of " + r->ref));
  std::lock_guard rl(r->mu);
  if (!r->origin) r->origin = std::shared_ptr<const dataset_origin>(std::move(*o));
  return r->origin;
}

}  // namespace shoal::proxy
