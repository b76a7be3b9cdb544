// Publishing checkpoints (checkpoints.h): records, restart, presence and the publish API.
#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoints.h"
#include "checkpoints_internal.h"
#include "common/file.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/text.h"
#include "common/json_text.h"

namespace shoal::peerd {

namespace fs = std::filesystem;
using nlohmann::json;

nlohmann::json checkpoint_publisher::record_json(const pub& p, bool with_objects) const {
  std::lock_guard lk(p.mu);
  double secs =
      p.running
          ? std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count()
          : p.publish_s;
  std::uint64_t read = p.bytes_read.load();
  double rate = secs > 0.05 ? static_cast<double>(read) / secs : 0.0;
  json out = {{"checkpoint", p.key},
              {"job", p.job},
              {"step", p.step},
              {"dir", p.dir},
              {"state", p.state},
              {"error", p.error},
              {"manifest", p.manifest ? json(p.manifest->str()) : json()},
              {"files", p.files},
              {"files_done", p.files_done.load()},
              {"bytes", p.bytes},
              {"bytes_read", read},
              {"bytes_stored", p.bytes_stored.load()},
              {"groups", p.groups},
              {"rate", rate},
              {"eta_seconds", p.running && rate > 0 && read < p.bytes
                                  ? json(static_cast<double>(p.bytes - read) / rate)
                                  : json()},
              {"read_seconds", p.read_s},
              {"seconds", secs}};
  if (with_objects) {
    json objs = json::array();
    for (const auto& [d, size] : p.objects) objs.push_back({d.str(), size});
    out["objects"] = std::move(objs);
  }
  return out;
}

std::optional<std::string> checkpoint_publisher::status_json(const std::string& key) const {
  std::shared_ptr<pub> p;
  {
    std::lock_guard lk(mu_);
    if (auto it = pubs_.find(key); it != pubs_.end()) p = it->second;
  }
  if (!p) return std::nullopt;
  return json_text(record_json(*p, false));
}

void checkpoint_publisher::persist(const pub& p) const {
  if (auto s = write_atomic(opts_.dir + "/published/" + p.key + ".json",
                            json_text(record_json(p, true)));
      !s) {
    log::warn("cannot save a checkpoint record", log::kv("checkpoint", p.key),
              log::kv("error", s.error().message));
  }
}

status checkpoint_publisher::start() {
  std::error_code ec;
  for (const auto& d : {opts_.dir + "/published", opts_.publish_root}) {
    fs::create_directories(d, ec);
    if (ec) return fail(ec, "create " + d + ": " + ec.message());
  }
  std::vector<std::pair<std::shared_ptr<pub>, checkpoint::registration>> reseed;
  for (auto it = fs::directory_iterator(opts_.dir + "/published", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() != ".json") continue;
    auto text = read_file(it->path().string());
    auto j = text ? json::parse(*text, nullptr, false) : json();
    if (!j.is_object()) continue;
    auto p = std::make_shared<pub>();
    p->key = j.value("checkpoint", "");
    auto r = checkpoint::parse_ref(p->key, false);
    if (!r) continue;
    p->job = r->job;
    p->step = *r->step;
    p->dir = j.value("dir", "");
    p->state = j.value("state", "failed");
    p->error = j.value("error", "");
    if (!p->held() && p->state != "unpinned" && p->state != "failed") {
      p->state = "failed";
      p->error = "interrupted by a peerd restart; publish it again";
    }
    p->files = j.value("files", std::uint64_t{0});
    p->bytes = j.value("bytes", std::uint64_t{0});
    p->groups = j.value("groups", std::uint64_t{0});
    p->bytes_read = j.value("bytes_read", std::uint64_t{0});
    p->bytes_stored = j.value("bytes_stored", std::uint64_t{0});
    p->files_done = j.value("files_done", std::uint64_t{0});
    p->read_s = j.value("read_seconds", 0.0);
    p->publish_s = j.value("seconds", 0.0);
    if (auto md = digest::parse(j.value("manifest", "")); md) p->manifest = *md;
    if (auto o = j.find("objects"); o != j.end() && o->is_array()) {
      for (const auto& e : *o) {
        if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number_unsigned())
          continue;
        if (auto d = digest::parse(e[0].get<std::string>()))
          p->objects.emplace_back(*d, e[1].get<std::uint64_t>());
      }
    }
    if (p->held()) {
      auto reg_text = read_file(opts_.dir + "/published/" + p->key + ".reg");
      auto reg =
          reg_text
              ? checkpoint::decode_registration(*reg_text)
              : result<checkpoint::decoded_registration>(fail(errc::not_found, "no registration"));
      if (reg) reseed.emplace_back(p, std::move(reg->reg));
    }
    std::lock_guard lk(mu_);
    pubs_[p->key] = p;
  }
  // Published groups are seeded again (complete: fetch_group adds them as seeds at once).
  for (auto& [p, reg] : reseed) {
    auto m = checkpoint::parse_manifest(reg.manifest);
    if (!m || m->groups.size() != reg.groups.size()) continue;
    for (std::uint32_t g = 0; g < m->groups.size(); ++g) {
      auto spec = group_spec_of(p->key, *m, g, reg.groups[g].torrent);
      bool held = std::all_of(spec.objects.begin(), spec.objects.end(),
                              [&](const auto& o) { return d_.store.contains(o.first); });
      if (!held) continue;  // evicted since (older steps are not pinned)
      if (auto dl = d_.fetch.fetch_group(std::move(spec)); !dl) {
        log::warn("cannot seed a published checkpoint group again", log::kv("checkpoint", p->key),
                  log::kv("group", g), log::kv("error", dl.error().message));
      }
    }
  }
  return {};
}

std::vector<heartbeat::dataset_presence> checkpoint_publisher::presence() {
  std::vector<std::shared_ptr<pub>> all;
  {
    std::lock_guard lk(mu_);
    for (const auto& [k, p] : pubs_) all.push_back(p);
  }
  std::vector<heartbeat::dataset_presence> out;
  for (const auto& p : all) {
    heartbeat::dataset_presence d;
    std::vector<std::pair<digest, std::uint64_t>> objs;
    {
      std::lock_guard lk(p->mu);
      if (!p->held()) continue;
      d.dataset = p->key;
      objs = p->objects;
    }
    for (const auto& [id, size] : objs) {
      d.total += size;
      if (d_.store.contains(id)) d.bytes += size;
    }
    d.view = false;
    out.push_back(std::move(d));
    if (out.size() >= heartbeat::max_datasets) break;
  }
  return out;
}

bool checkpoint_publisher::handle(const http::request& req, const http::responder& resp) {
  auto error = [&](unsigned st, const std::string& msg) {
    resp.send(origin::plain_error(st, msg));
  };
  std::string_view path = req.path;
  if (path == checkpoint::paths::node_publish) {
    if (req.method != http::verb::post) {
      error(405, "POST {\"job\": J, \"step\": N, \"dir\": D}");
      return true;
    }
    auto j = json::parse(req.body, nullptr, false);
    if (!j.is_object() || !j.contains("job") || !j["job"].is_string() || !j.contains("step") ||
        !j["step"].is_number_unsigned() || !j.contains("dir") || !j["dir"].is_string()) {
      error(400, "publish needs {\"job\": string, \"step\": number, \"dir\": string}");
      return true;
    }
    publish_request r{j["job"].get<std::string>(),
                      j["step"].get<std::uint64_t>(),
                      j["dir"].get<std::string>(),
                      {}};
    if (auto rk = j.find("ranks"); rk != j.end()) {
      if (!rk->is_object() || rk->size() > 1'000'000) {
        error(400, "ranks must be an object {\"path\": [rank, ...]}");
        return true;
      }
      for (const auto& [file, list] : rk->items()) {
        std::string text;
        if (!list.is_array()) {
          error(400, "ranks of " + quote_excerpt(file) + " must be an array");
          return true;
        }
        for (const auto& v : list) {
          if (!v.is_number_unsigned()) {
            error(400, "ranks of " + quote_excerpt(file) + " must be numbers");
            return true;
          }
          text += (text.empty() ? "" : ",") + std::to_string(v.get<std::uint64_t>());
        }
        auto parsed = checkpoint::parse_ranks(text);
        if (!parsed) {
          error(400, parsed.error().message);
          return true;
        }
        r.ranks[file] = std::move(*parsed);
      }
    }
    auto key = publish(std::move(r));
    if (!key) {
      const auto& e = key.error();
      error(e.is(errc::invalid_argument) ? 400
            : e.is(errc::unauthorized)   ? 403
            : e.is(errc::not_found)      ? 404
                                         : 503,
            e.message);
      return true;
    }
    resp.send(http::response::json(202, status_json(*key).value_or("{}")));
    return true;
  }
  if (!origin::has_prefix(path, checkpoint::paths::node_published)) return false;
  if (req.method != http::verb::get && req.method != http::verb::head) {
    error(405, "GET shows publishes; POST .../publish starts one");
    return true;
  }
  if (path.size() <= checkpoint::paths::node_published.size() + 1) {
    std::vector<std::string> keys;
    {
      std::lock_guard lk(mu_);
      for (const auto& [k, p] : pubs_) keys.push_back(k);
    }
    std::string body = "[";
    for (std::size_t i = 0; i < keys.size(); ++i)
      body += (i ? "," : "") + status_json(keys[i]).value_or("{}");
    resp.send(http::response::json(200, body + "]"));
    return true;
  }
  std::string key(path.substr(checkpoint::paths::node_published.size() + 1));
  if (auto r = checkpoint::parse_ref(key, false); !r) {
    error(400, r.error().message);
    return true;
  }
  auto st = status_json(key);
  if (!st) {
    error(404, "checkpoint " + key + " was not published from this node");
    return true;
  }
  resp.send(http::response::json(200, *st));
  return true;
}

}  // namespace shoal::peerd
