#include "state_db.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <filesystem>

namespace shoal::peerd {

result<std::unique_ptr<state_db>> state_db::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(ec, "create " + dir + ": " + ec.message());
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = 128;
  o.keep_log_file_num = 2;
  rocksdb::DB* db = nullptr;
  auto st = rocksdb::DB::Open(o, dir, &db);
  if (!st.ok()) return fail(errc::io_error, "open peerd state " + dir + ": " + st.ToString());
  std::unique_ptr<state_db> s(new state_db(db));
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("h/"); it->Valid() && it->key().starts_with("h/"); it->Next()) {
    auto d = digest::from_hex(it->value().ToStringView());
    std::string h(it->key().ToStringView().substr(2));
    if (d && h.size() == 40) {
      s->by_hash_[h] = *d;
      s->hash_of_[*d] = h;
    }
  }
  return s;
}

state_db::~state_db() { delete db_; }

status state_db::put(const digest& d, const std::string& info_hash_hex, const std::string& torrent) {
  std::lock_guard lk(mu_);
  rocksdb::WriteBatch b;
  b.Put("t/" + d.hex(), torrent);
  b.Put("h/" + info_hash_hex, d.hex());
  // An object whose torrent changed (a new piece-size rule) must not stay reachable, or be
  // forgotten incompletely, through its old info-hash.
  auto old = hash_of_.find(d);
  if (old != hash_of_.end() && old->second != info_hash_hex) b.Delete("h/" + old->second);
  auto st = db_->Write(rocksdb::WriteOptions(), &b);
  if (!st.ok()) return fail(errc::io_error, "peerd state write: " + st.ToString());
  if (old != hash_of_.end() && old->second != info_hash_hex) by_hash_.erase(old->second);
  by_hash_[info_hash_hex] = d;
  hash_of_[d] = info_hash_hex;
  return {};
}

std::optional<std::string> state_db::torrent(const digest& d) const {
  std::string v;
  if (!db_->Get(rocksdb::ReadOptions(), "t/" + d.hex(), &v).ok()) return std::nullopt;
  return v;
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
    }
  }
  rocksdb::WriteBatch b;
  b.Delete("t/" + d.hex());
  if (!h.empty()) b.Delete("h/" + h);
  auto st = db_->Write(rocksdb::WriteOptions(), &b);
  if (!st.ok()) return fail(errc::io_error, "peerd state delete: " + st.ToString());
  return {};
}

std::vector<std::pair<digest, std::string>> state_db::all() const {
  std::lock_guard lk(mu_);
  std::vector<std::pair<digest, std::string>> out;
  out.reserve(hash_of_.size());
  for (const auto& [d, h] : hash_of_) out.emplace_back(d, h);
  return out;
}

}  // namespace shoal::peerd
