#include "index.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <stdio.h>

#include <chrono>

#include "common/log.h"

namespace shoal::cache::detail {
namespace {

error to_error(const rocksdb::Status& s, std::string_view what) {
  errc c = s.IsNoSpace() ? errc::no_space : errc::io_error;
  return error{c, std::string(what) + ": " + s.ToString()};
}

rocksdb::Slice slice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

rocksdb::Options db_options() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = -1;
  // The index is small (tens of bytes per object); keep memtables modest so a small filesystem
  // (and the ENOSPC test) is not dominated by preallocated WAL or memtable flushes.
  o.write_buffer_size = 16 << 20;
  o.allow_fallocate = false;
  o.keep_log_file_num = 2;
  o.max_log_file_size = 1 << 20;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  o.avoid_unnecessary_blocking_io = true;
  return o;
}

}  // namespace

struct index::batch::impl {
  rocksdb::WriteBatch wb;
};

index::batch::batch() : impl_(std::make_unique<impl>()) {}
index::batch::~batch() = default;
index::batch::batch(batch&&) noexcept = default;
index::batch& index::batch::operator=(batch&&) noexcept = default;
void index::batch::put(std::string_view key, std::string_view value) {
  // WriteBatch::Put only fails on oversized batches (> 4 GiB), which we never build.
  (void)impl_->wb.Put(slice(key), slice(value));
}
void index::batch::del(std::string_view key) { (void)impl_->wb.Delete(slice(key)); }
std::size_t index::batch::count() const noexcept {
  return static_cast<std::size_t>(impl_->wb.Count());
}
void index::batch::clear() { impl_->wb.Clear(); }

struct index::impl {
  std::unique_ptr<rocksdb::DB> db;
};

result<std::unique_ptr<index>> index::open(const std::string& dir, const open_options& opts) {
  std::unique_ptr<index> idx(new index());
  idx->impl_ = std::make_unique<impl>();
  rocksdb::Options o = db_options();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  try {
    s = rocksdb::DB::Open(o, dir, &raw);
    if (s.IsCorruption() && opts.recover_corruption) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
      std::string aside = dir + ".corrupt." + std::to_string(ms);
      log::error("cache index is corrupt; moving it aside and rebuilding from the files",
                 log::kv("index", dir), log::kv("moved_to", aside),
                 log::kv("status", s.ToString()));
      if (::rename(dir.c_str(), aside.c_str()) != 0) {
        return fail_errno(errno, "rename corrupt index " + dir + " to " + aside);
      }
      idx->recovered_ = true;
      s = rocksdb::DB::Open(o, dir, &raw);
    }
  } catch (const std::exception& e) {
    return fail(errc::io_error, "open index " + dir + ": " + e.what());
  }
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return fail(errc::busy, "open index " + dir + ": already opened by another process (" +
                                  s.ToString() + ")");
    }
    return std::unexpected(to_error(s, "open index " + dir));
  }
  idx->impl_->db.reset(raw);
  // A fresh database gets the schema record; an existing one must carry a version we know.
  std::string ver;
  s = idx->impl_->db->Get(rocksdb::ReadOptions(), slice(schema_key), &ver);
  if (s.IsNotFound()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = idx->impl_->db->Put(wo, slice(schema_key), slice(schema_version));
    if (!s.ok()) return std::unexpected(to_error(s, "write index schema"));
  } else if (!s.ok()) {
    return std::unexpected(to_error(s, "read index schema"));
  } else if (ver != schema_version) {
    return fail(errc::config_error, "index " + dir + " has schema version \"" + ver +
                                        "\"; this build understands \"" +
                                        std::string(schema_version) + "\"");
  }
  return idx;
}

index::~index() {
  if (impl_ && impl_->db) {
    rocksdb::Status s = impl_->db->Close();
    if (!s.ok()) log::warn("closing cache index failed", log::kv("status", s.ToString()));
  }
}

status index::put(std::string_view key, std::string_view value, bool sync) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = impl_->db->Put(wo, slice(key), slice(value));
  if (!s.ok()) return std::unexpected(to_error(s, "index put"));
  return {};
}

status index::write(batch& b, bool sync) {
  if (b.count() == 0) return {};
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = impl_->db->Write(wo, &b.impl_->wb);
  if (!s.ok()) return std::unexpected(to_error(s, "index write"));
  return {};
}

status index::scan(
    const std::function<void(std::string_view key, std::string_view value)>& fn) const {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 2 << 20;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key();
    rocksdb::Slice v = it->value();
    fn(std::string_view(k.data(), k.size()), std::string_view(v.data(), v.size()));
  }
  if (!it->status().ok()) return std::unexpected(to_error(it->status(), "index scan"));
  return {};
}

status index::resume() {
  rocksdb::Status s = impl_->db->Resume();
  if (!s.ok()) return std::unexpected(to_error(s, "index resume"));
  return {};
}

status index::flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  rocksdb::Status s = impl_->db->Flush(fo);
  if (!s.ok()) return std::unexpected(to_error(s, "index flush"));
  return {};
}

std::uint64_t index::estimate_keys() const {
  std::uint64_t n = 0;
  if (!impl_->db->GetIntProperty("rocksdb.estimate-num-keys", &n)) return 0;
  return n;
}

}  // namespace shoal::cache::detail
