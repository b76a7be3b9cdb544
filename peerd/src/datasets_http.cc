// The node's dataset API (datasets.h): list, status, prefetch and remove.
#include "datasets_internal.h"
#include "common/json_text.h"

namespace shoal::peerd {

using namespace datasets_detail;

std::string dataset_manager::status_json(const job& j) const {
  std::lock_guard lk(j.mu);
  std::uint64_t done = j.bytes_done_locked();
  std::uint64_t from_peers = j.from_peers.load(), from_origin = j.from_origin.load(),
                from_http = j.from_http.load();
  for (const auto& dl : j.active) {
    from_peers += dl->from_peers.load();
    from_origin += dl->from_origin.load();
    from_http += dl->from_http.load();
  }
  bool live = j.running;
  double secs = live ? std::chrono::duration<double>(steady::now() - j.started).count() : j.seconds;
  double fetch_secs =
      live ? std::chrono::duration<double>(steady::now() - j.fetch_started).count() : j.seconds;
  std::uint64_t moved = done > j.local_bytes.load() ? done - j.local_bytes.load() : 0;
  double rate = fetch_secs > 0.05 ? static_cast<double>(moved) / fetch_secs : 0.0;
  json out = {
      {opts_.checkpoints ? "checkpoint" : "dataset", j.ref},
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
      {"eta_seconds",
       rate > 0 && done < j.total ? json(static_cast<double>(j.total - done) / rate) : json()},
      {"seconds", secs},
      {"ranks", j.ranks},
      {"view", j.view ? json(view_path(j.ref)) : json()},
      {"expires", j.expires ? json(std::chrono::duration_cast<std::chrono::seconds>(
                                       j.expires->time_since_epoch())
                                       .count())
                            : json()},
      {"expires_in_seconds",
       j.expires ? json(std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(
                                                      *j.expires - cache::clock::now())
                                                      .count()))
                 : json()}};
  return json_text(out);
}

bool dataset_manager::handle(const http::request& req, const http::responder& resp) {
  const std::string_view base =
      opts_.checkpoints ? checkpoint::paths::node : origin::paths::datasets;
  const char* what = opts_.checkpoints ? "checkpoint" : "dataset";
  std::string_view path = req.path;
  if (!origin::has_prefix(path, base)) return false;
  if (path == base || path == std::string(base) + "/") {
    if (req.method != http::verb::get && req.method != http::verb::head) {
      resp.send(json_error(405, std::string("GET lists the ") + what + "s of this node"));
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
  if (path ==
      (opts_.checkpoints ? checkpoint::paths::node_restore : origin::paths::dataset_prefetch)) {
    handle_start(req, resp);
    return true;
  }
  static constexpr std::string_view renew_suffix = "/renew";
  if (rest.ends_with(renew_suffix)) {
    handle_renew(std::string(rest.substr(0, rest.size() - renew_suffix.size())), req, resp);
    return true;
  }
  std::string ref(rest);
  if (auto p = dataset::parse_ref(ref); !p) {
    resp.send(json_error(400, p.error().message));
    return true;
  }
  if (req.method == http::verb::delete_) {
    post([this, ref, resp] { remove(ref, resp); });
    return true;
  }
  if (req.method != http::verb::get && req.method != http::verb::head) {
    resp.send(json_error(405, std::string("GET shows a ") + what + ", DELETE removes its view"));
    return true;
  }
  std::shared_ptr<job> jb;
  {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(ref); it != jobs_.end()) jb = it->second;
  }
  if (!jb) {
    resp.send(json_error(404, std::string(what) + " " + ref + " is not on this node"));
    return true;
  }
  resp.send(json_answer(200, status_json(*jb)));
  return true;
}

// POST .../datasets/prefetch {"dataset": "name@version"}, or for checkpoints POST
// .../checkpoints/restore {"checkpoint": "J[@N|@latest]"[, "ranks": [0, 3] or "0,3"]}.
void dataset_manager::handle_start(const http::request& req, const http::responder& resp) {
  const char* key = opts_.checkpoints ? "checkpoint" : "dataset";
  if (req.method != http::verb::post) {
    resp.send(json_error(405, opts_.checkpoints
                                  ? "POST {\"checkpoint\": \"job@step\", \"ranks\": [..]}"
                                  : "POST {\"dataset\": \"name@version\"}"));
    return;
  }
  auto j = json::parse(req.body, nullptr, false);
  std::string ref =
      j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
  std::vector<std::uint32_t> ranks;
  if (opts_.checkpoints) {
    auto p = checkpoint::parse_ref(ref);
    if (!p) return resp.send(json_error(400, p.error().message));
    if (j.is_object() && j.contains("ranks")) {
      const auto& r = j["ranks"];
      std::string list;
      if (r.is_string()) {
        list = r.get<std::string>();
      } else if (r.is_array() && r.size() <= dataset::max_file_ranks) {
        for (const auto& v : r) {
          if (!v.is_number_unsigned()) return resp.send(json_error(400, "ranks must be numbers"));
          list += (list.empty() ? "" : ",") + std::to_string(v.get<std::uint64_t>());
        }
      } else {
        return resp.send(json_error(400, "ranks must be an array of numbers or \"0,3\""));
      }
      auto parsed = checkpoint::parse_ranks(list);
      if (!parsed) return resp.send(json_error(400, parsed.error().message));
      ranks = std::move(*parsed);
    }
  } else if (auto p = dataset::parse_ref(ref); !p) {
    return resp.send(json_error(400, p.error().message));
  }
  if (stop_.load()) return resp.send(json_error(503, "peerd is stopping"));
  // "latest" asks the scheduler (blocking): on the worker pool.
  post([this, ref, ranks, resp] {
    std::string concrete = ref;
    if (opts_.checkpoints) {
      auto r = resolve_latest(ref);
      if (!r) {
        return resp.send(json_error(r.error().is(errc::not_found) ? 404 : 502, r.error().message));
      }
      concrete = *r;
    }
    auto jb = start_prefetch(concrete, "", std::nullopt, ranks);
    if (!jb) return resp.send(json_error(409, jb.error().message));
    std::string st;
    {
      std::lock_guard lk((*jb)->mu);
      st = (*jb)->state;
    }
    resp.send(json_answer(st == "ready" ? 200 : 202, status_json(**jb)));
  });
}

// POST .../datasets/<ref>/renew [{"ttl_seconds": N}]: the view and its pins last N more seconds
// (datasets.pin_ttl when absent; at most datasets.pin_ttl_max).
void dataset_manager::handle_renew(const std::string& ref, const http::request& req,
                                   const http::responder& resp) {
  if (req.method != http::verb::post) {
    resp.send(json_error(405, "POST renews the view and pins of a dataset"));
    return;
  }
  if (auto p = dataset::parse_ref(ref); !p) {
    resp.send(json_error(400, p.error().message));
    return;
  }
  std::optional<std::chrono::seconds> ttl;
  if (!req.body.empty()) {
    auto b = json::parse(req.body, nullptr, false);
    if (!b.is_object()) {
      resp.send(json_error(400, "the body must be a JSON object: {\"ttl_seconds\": N}"));
      return;
    }
    if (auto it = b.find("ttl_seconds"); it != b.end()) {
      auto max = static_cast<std::uint64_t>(opts_.pin_ttl_max.count());
      if (!it->is_number_unsigned() || it->get<std::uint64_t>() < 1 ||
          it->get<std::uint64_t>() > max) {
        resp.send(json_error(400, "ttl_seconds must be an integer from 1 to " +
                                      std::to_string(max) + " (datasets.pin_ttl_max)"));
        return;
      }
      ttl = std::chrono::seconds(it->get<std::uint64_t>());
    }
  }
  post([this, ref, ttl, resp] {
    auto r = renew(ref, ttl);
    if (!r) {
      resp.send(json_error(r.error().is(errc::not_found) ? 404 : 500, r.error().message));
      return;
    }
    std::shared_ptr<job> j;
    {
      std::lock_guard lk(mu_);
      if (auto it = jobs_.find(ref); it != jobs_.end()) j = it->second;
    }
    if (!j) return resp.send(json_error(404, "dataset " + ref + " is not on this node"));
    resp.send(json_answer(200, status_json(*j)));
  });
}

void dataset_manager::remove(const std::string& ref, const http::responder& resp) {
  auto r = drop(ref);
  if (!r) {
    unsigned code = r.error().is(errc::not_found) ? 404 : r.error().is(errc::busy) ? 503 : 500;
    return resp.send(json_error(code, r.error().message));
  }
  std::size_t unpinned = *r;
  log::info("dataset view removed", log::kv("dataset", ref), log::kv("unpinned", unpinned));
  resp.send(json_answer(
      200, json_text(json{{"dataset", ref}, {"removed", true}, {"unpinned", unpinned}})));
}

}  // namespace shoal::peerd
