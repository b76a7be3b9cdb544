// state_db: the daemons' side index on RocksDB (see cache/state_db.h).
#include "cache/state_db.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <exception>

#include "layout.h"

namespace shoal::cache {
namespace {

rocksdb::Slice slice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

std::unexpected<error> failed(const rocksdb::Status& s, std::string_view what) {
  return fail(s.IsNoSpace() ? errc::no_space : errc::io_error,
              std::string(what) + ": " + s.ToString());
}

}  // namespace

struct state_db::impl {
  std::unique_ptr<rocksdb::DB> db;
  std::string label;
};

void state_db::batch::put(std::string_view key, std::string_view value) {
  ops_.push_back(op{std::string(key), std::string(value)});
}

void state_db::batch::remove(std::string_view key) {
  ops_.push_back(op{std::string(key), std::nullopt});
}

state_db::state_db(std::unique_ptr<impl> i) : impl_(std::move(i)) {}
state_db::~state_db() = default;

result<std::unique_ptr<state_db>> state_db::open(const std::string& dir,
                                                 const state_db_options& opts) {
  std::string what = "open " + opts.label + " " + dir;
  if (auto st = detail::make_dirs(dir); !st) return fail(st.error().wrap(what));
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = opts.max_open_files;
  o.keep_log_file_num = 2;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  try {
    s = rocksdb::DB::Open(o, dir, &raw);
  } catch (const std::exception& e) {
    return fail(errc::io_error, what + ": " + e.what());
  }
  if (!s.ok()) return failed(s, what);
  auto i = std::make_unique<impl>();
  i->db.reset(raw);
  i->label = opts.label;
  return std::unique_ptr<state_db>(new state_db(std::move(i)));
}

result<std::optional<std::string>> state_db::get(std::string_view key) const {
  std::string v;
  auto s = impl_->db->Get(rocksdb::ReadOptions(), slice(key), &v);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return failed(s, impl_->label + " read");
  return std::optional<std::string>(std::move(v));
}

status state_db::put(std::string_view key, std::string_view value) {
  auto s = impl_->db->Put(rocksdb::WriteOptions(), slice(key), slice(value));
  if (!s.ok()) return failed(s, impl_->label + " write");
  return {};
}

status state_db::write(const batch& b) {
  rocksdb::WriteBatch wb;
  for (const auto& op : b.ops_) {
    // WriteBatch only fails on batches over 4 GiB, which the daemons never build.
    if (op.value) {
      (void)wb.Put(slice(op.key), slice(*op.value));
    } else {
      (void)wb.Delete(slice(op.key));
    }
  }
  auto s = impl_->db->Write(rocksdb::WriteOptions(), &wb);
  if (!s.ok()) return failed(s, impl_->label + " write");
  return {};
}

status state_db::scan(
    std::string_view prefix,
    const std::function<void(std::string_view key, std::string_view value)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(slice(prefix)); it->Valid() && it->key().starts_with(slice(prefix)); it->Next()) {
    fn(it->key().ToStringView(), it->value().ToStringView());
  }
  if (!it->status().ok()) return failed(it->status(), impl_->label + " scan");
  return {};
}

}  // namespace shoal::cache
