#include "state_db.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

namespace shoal::proxy {

result<std::unique_ptr<state_db>> state_db::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(ec, "create " + dir + ": " + ec.message());
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = 256;
  o.keep_log_file_num = 2;
  rocksdb::DB* db = nullptr;
  auto st = rocksdb::DB::Open(o, dir, &db);
  if (!st.ok()) return fail(errc::io_error, "open state index " + dir + ": " + st.ToString());
  return std::unique_ptr<state_db>(new state_db(db));
}

state_db::~state_db() { delete db_; }

std::optional<std::string> state_db::get(const std::string& key) const {
  std::string v;
  auto st = db_->Get(rocksdb::ReadOptions(), key, &v);
  if (!st.ok()) return std::nullopt;
  return v;
}

status state_db::put(const std::string& key, const std::string& value) {
  rocksdb::WriteOptions wo;
  auto st = db_->Put(wo, key, value);
  if (!st.ok()) return fail(errc::io_error, "state index write: " + st.ToString());
  return {};
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
  nlohmann::json j = {{"v", 1}, {"digest", e.dig.str()}, {"mt", e.media_type}, {"at", e.fetched_ms}, {"pub", e.is_public}};
  return put("t/" + key, j.dump());
}

std::optional<std::string> state_db::get_media_type(const digest& d) const { return get("m/" + d.hex()); }
status state_db::put_media_type(const digest& d, const std::string& mt) { return put("m/" + d.hex(), mt); }

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
  return put("v/" + d.hex(), j.dump());
}

std::optional<std::string> state_db::get_metainfo(const digest& d) const { return get("i/" + d.hex()); }
status state_db::put_metainfo(const digest& d, const std::string& info) { return put("i/" + d.hex(), info); }

status state_db::forget(const digest& d) {
  rocksdb::WriteBatch b;
  b.Delete("m/" + d.hex());
  b.Delete("v/" + d.hex());
  b.Delete("i/" + d.hex());
  auto st = db_->Write(rocksdb::WriteOptions(), &b);
  if (!st.ok()) return fail(errc::io_error, "state index delete: " + st.ToString());
  return {};
}

}  // namespace shoal::proxy
