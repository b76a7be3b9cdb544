// peerd's torrent records on the shared side index (see state_db.h).
#include "peerd/state_db.h"

namespace shoal::peerd {

result<std::unique_ptr<state_db>> state_db::open(const std::string& dir) {
  auto db = cache::state_db::open(
      dir, cache::state_db_options{.label = "peerd state", .max_open_files = 128});
  if (!db) return fail(db.error());
  std::unique_ptr<state_db> s(new state_db(std::move(*db)));
  auto st = s->db_->scan("h/", [&s](std::string_view key, std::string_view value) {
    auto d = digest::from_hex(value);
    std::string h(key.substr(2));
    if (d && h.size() == 40) {
      s->by_hash_[h] = *d;
      s->hash_of_[*d] = h;
    }
  });
  if (!st) return fail(st.error());
  return s;
}

status state_db::put(const digest& d, const std::string& info_hash_hex,
                     const std::string& torrent) {
  std::lock_guard lk(mu_);
  cache::state_db::batch b;
  b.put("t/" + d.hex(), torrent);
  b.put("h/" + info_hash_hex, d.hex());
  // An object whose torrent changed (a new piece-size rule) must not stay reachable, or be
  // forgotten incompletely, through its old info-hash.
  auto old = hash_of_.find(d);
  bool replaced = old != hash_of_.end() && old->second != info_hash_hex;
  if (replaced) b.remove("h/" + old->second);
  if (auto st = db_->write(b); !st) return st;
  if (replaced) by_hash_.erase(old->second);
  by_hash_[info_hash_hex] = d;
  hash_of_[d] = info_hash_hex;
  generation_.fetch_add(1, std::memory_order_release);
  return {};
}

std::optional<std::string> state_db::torrent(const digest& d) const {
  // An unreadable row is treated as absent: the caller regenerates the torrent.
  auto v = db_->get("t/" + d.hex());
  if (!v) return std::nullopt;
  return std::move(*v);
}

std::optional<digest> state_db::by_info_hash(const std::string& h) const {
  std::lock_guard lk(mu_);
  auto it = by_hash_.find(h);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> state_db::info_hash(const digest& d) const {
  std::lock_guard lk(mu_);
  auto it = hash_of_.find(d);
  if (it == hash_of_.end()) return std::nullopt;
  return it->second;
}

status state_db::forget(const digest& d) {
  std::string h;
  {
    std::lock_guard lk(mu_);
    auto it = hash_of_.find(d);
    if (it != hash_of_.end()) {
      h = it->second;
      by_hash_.erase(h);
      hash_of_.erase(it);
      generation_.fetch_add(1, std::memory_order_release);
    }
  }
  cache::state_db::batch b;
  b.remove("t/" + d.hex());
  if (!h.empty()) b.remove("h/" + h);
  return db_->write(b);
}

std::vector<std::pair<digest, std::string>> state_db::all() const {
  std::lock_guard lk(mu_);
  std::vector<std::pair<digest, std::string>> out;
  out.reserve(hash_of_.size());
  for (const auto& [d, h] : hash_of_) out.emplace_back(d, h);
  return out;
}

}  // namespace shoal::peerd
