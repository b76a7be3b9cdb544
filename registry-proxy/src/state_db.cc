// registry-proxy's records on the shared side index (see state_db.h).
#include "registry-proxy/state_db.h"
#include "common/json_text.h"

#include <algorithm>
#include <mutex>

#include <nlohmann/json.hpp>

namespace shoal::proxy {

result<std::unique_ptr<state_db>> state_db::open(const std::string& dir) {
  auto db = cache::state_db::open(
      dir, cache::state_db_options{.label = "state index", .max_open_files = 256});
  if (!db) return fail(db.error());
  return std::unique_ptr<state_db>(new state_db(std::move(*db)));
}

std::optional<std::string> state_db::get(const std::string& key) const {
  // An unreadable row is treated as absent (the object is resolved or hashed again).
  auto v = db_->get(key);
  if (!v) return std::nullopt;
  return std::move(*v);
}

status state_db::put(const std::string& key, const std::string& value) {
  return db_->put(key, value);
}

std::optional<tag_entry> state_db::get_tag(const std::string& key) const {
  auto v = get("t/" + key);
  if (!v) return std::nullopt;
  auto j = nlohmann::json::parse(*v, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("v", 0) != 1) return std::nullopt;
  auto d = digest::parse(j.value("digest", ""));
  if (!d) return std::nullopt;
  tag_entry e;
  e.dig = *d;
  e.media_type = j.value("mt", "");
  e.fetched_ms = j.value("at", std::int64_t{0});
  e.is_public = j.value("pub", false);
  return e;
}

status state_db::put_tag(const std::string& key, const tag_entry& e) {
  nlohmann::json j = {{"v", 1},
                      {"digest", e.dig.str()},
                      {"mt", e.media_type},
                      {"at", e.fetched_ms},
                      {"pub", e.is_public}};
  return put("t/" + key, json_text(j));
}

result<std::size_t> state_db::sweep_tags(std::int64_t older_than_ms) {
  std::vector<std::string> old;
  auto st = db_->scan("t/", [&](std::string_view key, std::string_view value) {
    auto j = nlohmann::json::parse(value, nullptr, false);
    // Rows that are not JSON are never read back either: they go too. A row of another version
    // (a newer release's) is not ours to judge.
    bool junk = j.is_discarded() || !j.is_object();
    if (junk || (j.value("v", 0) == 1 && j.value("at", std::int64_t{0}) < older_than_ms))
      old.emplace_back(key);
  });
  if (!st) return fail(st.error().wrap("sweep tag rows"));
  cache::state_db::batch b;
  for (const auto& k : old) b.remove(k);
  if (!b.empty()) {
    if (auto w = db_->write(b); !w) return fail(w.error().wrap("sweep tag rows"));
  }
  return old.size();
}

std::optional<std::string> state_db::get_media_type(const digest& d) const {
  return get("m/" + d.hex());
}
status state_db::put_media_type(const digest& d, const std::string& mt) {
  return put("m/" + d.hex(), mt);
}

std::optional<visibility> state_db::get_visibility(const digest& d) const {
  auto v = get("v/" + d.hex());
  if (!v) return std::nullopt;
  auto j = nlohmann::json::parse(*v, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  visibility out;
  out.is_public = j.value("pub", false);
  if (j.contains("repos") && j["repos"].is_array()) {
    for (const auto& r : j["repos"]) {
      if (r.is_string()) out.repos.push_back(r.get<std::string>());
    }
  }
  return out;
}

status state_db::add_visibility(const digest& d, bool is_public, const std::string& repo) {
  std::lock_guard lk(mu_);
  visibility v = get_visibility(d).value_or(visibility{});
  v.is_public = v.is_public || is_public;
  if (!repo.empty() && std::find(v.repos.begin(), v.repos.end(), repo) == v.repos.end()) {
    // Bounded: an object referenced by thousands of private repositories keeps the latest 256.
    if (v.repos.size() >= 256) v.repos.erase(v.repos.begin());
    v.repos.push_back(repo);
  }
  nlohmann::json j = {{"pub", v.is_public}, {"repos", v.repos}};
  return put("v/" + d.hex(), json_text(j));
}

std::optional<std::string> state_db::get_metainfo(const digest& d) const {
  return get("i/" + d.hex());
}
status state_db::put_metainfo(const digest& d, const std::string& info) {
  return put("i/" + d.hex(), info);
}

status state_db::forget(const digest& d) {
  cache::state_db::batch b;
  b.remove("m/" + d.hex());
  b.remove("v/" + d.hex());
  b.remove("i/" + d.hex());
  return db_->write(b);
}

}  // namespace shoal::proxy
