// Start-up reconciliation: make the directory and the index agree before anything is served.
//
//   tmp/*                         removed (writes that never committed)
//   index row, file ok            kept
//   index row, file missing/size  row dropped (the file, if any, is then treated as an orphan)
//   file without row              orphan: re-hashed and indexed if its content matches its name
//                                 (adopt_orphans), else removed
//   file with a malformed name    removed (not a 64-hex digest of its shard, or not a file)
//   undecodable index record      dropped
//   label of a missing object     dropped
//
// Runs inside core::open before any other thread can see the core, so the table needs no lock;
// the shard scan is split over `reconcile_threads`, each owning a disjoint set of shards (and so
// a disjoint set of digests and table entries).

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/sha256.h"
#include "core.h"

namespace shoal::cache::detail {
namespace {

// Iterates a directory given an fd on it (the fd stays owned by the caller).
template <class F>
status for_each_dirent(int dirfd, const std::string& path, F&& fn) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail_errno(errno, "open directory " + path);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int err = errno;
    close_quietly(fd);
    return fail_errno(err, "fdopendir " + path);
  }
  for (;;) {
    errno = 0;
    dirent* de = ::readdir(d);
    if (!de) {
      int err = errno;
      ::closedir(d);
      if (err != 0) return fail_errno(err, "readdir " + path);
      return {};
    }
    std::string_view name = de->d_name;
    if (name == "." || name == "..") continue;
    unsigned char type = de->d_type;
    if (type == DT_UNKNOWN) {
      struct stat st {};
      if (::fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
    }
    fn(name, type);
  }
}

// What one scan thread did to its shards.
struct shard_result {
  std::uint64_t malformed = 0;
  std::uint64_t orphans_removed = 0;
  struct adoption {
    digest id;
    std::uint64_t size;
    object_kind kind;
  };
  std::vector<adoption> adopted;
  std::vector<std::uint8_t> shards_changed;  // need a directory fsync
};

using object_table = std::unordered_map<digest, entry, keyed_hash>;

// Step 1: removes tmp/*; every write in progress died with the previous process.
status remove_temp_files(const layout& dirs, reconcile_report& rep) {
  auto remove = [&](std::string_view name, unsigned char type) {
    std::string n(name);
    if (type == DT_DIR) {
      log::warn("cache: leaving unexpected directory in tmp/", log::kv("name", n));
      return;
    }
    if (::unlinkat(dirs.tmp_fd(), n.c_str(), 0) == 0) {
      ++rep.temp_files_removed;
    }
  };
  return for_each_dirent(dirs.tmp_fd(), dirs.tmp_dir(), remove);
}

// Whether an orphan's content matches its name; if so it is now synced and read-only.
bool verify_orphan(int sfd, const std::string& n, const digest& id, std::uint64_t size) {
  int fd = open_read_noatime(sfd, n.c_str());
  if (fd < 0) return false;
  auto h = sha256_fd(fd, 0, size);
  bool ok = h && *h == id && fdatasync_fd(fd, "fdatasync orphan").has_value() &&
            (is_sealed(fd) || ::fchmod(fd, 0444) == 0);  // sealed: linked into a view
  close_quietly(fd);
  return ok;
}

// Judges one entry of a shard directory: its row is marked seen, or it is adopted or removed.
// Returns whether the directory changed.
bool reconcile_file(int sfd, const std::string& spath, std::uint8_t shard, std::string_view name,
                    unsigned char type, object_table& table, bool adopt_orphans, shard_result& r) {
  std::string n(name);
  if (type == DT_DIR) {
    log::warn("cache: leaving unexpected directory in objects/", log::kv("path", spath + "/" + n));
    return false;
  }
  auto id = digest::from_hex(name);
  if (!id || id->bytes()[0] != shard || type != DT_REG) {
    if (unlinkat_sealed(sfd, n.c_str()) != 0) return false;
    ++r.malformed;
    return true;
  }
  struct stat fst {};
  if (::fstatat(sfd, n.c_str(), &fst, AT_SYMLINK_NOFOLLOW) != 0) return false;
  auto size = static_cast<std::uint64_t>(fst.st_size);
  auto it = table.find(*id);
  if (it != table.end() && it->second.size == size) {
    it->second.seen = true;
    return false;
  }
  // An orphan (or a file whose row disagrees on the size): the content decides.
  if (adopt_orphans && verify_orphan(sfd, n, *id, size)) {
    // A row of the wrong size still knows the kind.
    object_kind kind = it != table.end() ? it->second.kind : object_kind::blob;
    r.adopted.push_back({*id, size, kind});
    return true;
  }
  if (unlinkat_sealed(sfd, n.c_str()) != 0) return false;
  ++r.orphans_removed;
  return true;
}

// Reconciles every entry of one shard directory into `r`.
status scan_shard(const layout& dirs, std::uint8_t shard, object_table& table, bool adopt_orphans,
                  shard_result& r) {
  int sfd = dirs.shard_fd(shard);
  std::string spath = dirs.shard_path(shard);
  bool changed = false;
  auto ds = for_each_dirent(sfd, spath, [&](std::string_view name, unsigned char type) {
    if (reconcile_file(sfd, spath, shard, name, type, table, adopt_orphans, r)) changed = true;
  });
  if (!ds) return ds;
  if (changed) r.shards_changed.push_back(shard);
  return {};
}

// Step 3: scans the shard directories on up to 16 threads, thread t owning every nthreads-th shard
// (so disjoint digests and table entries); one result per thread.
result<std::vector<shard_result>> scan_shards(const layout& dirs, object_table& table,
                                              const options& opts) {
  unsigned nthreads = std::max(1u, std::min(opts.reconcile_threads, 16u));
  std::vector<shard_result> results(nthreads);
  std::vector<error> errors(nthreads);
  std::vector<char> failed(nthreads, 0);
  auto scan = [&](unsigned t) {
    for (std::size_t s = t; s < layout::shard_count; s += nthreads) {
      auto shard = static_cast<std::uint8_t>(s);
      auto ds = scan_shard(dirs, shard, table, opts.adopt_orphans, results[t]);
      if (!ds) {
        failed[t] = 1;
        errors[t] = ds.error();
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < nthreads; ++t) threads.emplace_back(scan, t);
  scan(0);
  for (auto& th : threads) th.join();
  for (unsigned t = 0; t < nthreads; ++t) {
    if (failed[t]) return std::unexpected(errors[t]);
  }
  return results;
}

// Step 4: rows whose file is missing (or of the wrong size) go, with their labels; the `seen`
// marks of the rest are cleared.
void drop_unseen_rows(object_table& table, index::batch& fixes, reconcile_report& rep) {
  for (auto it = table.begin(); it != table.end();) {
    if (it->second.seen) {
      it->second.seen = false;
      ++it;
      continue;
    }
    fixes.del(object_key(it->first));
    if (it->second.labels) {
      for (const std::string& l : *it->second.labels) fixes.del(label_key(it->first, l));
      rep.labels_dropped += it->second.labels->size();
    }
    ++rep.rows_dropped;
    it = table.erase(it);
  }
}

// Step 5: adopted orphans get fresh rows, once the directories they are in are made durable; the
// threads' counts are added to the report.
status index_adopted(const layout& dirs, const std::vector<shard_result>& results,
                     std::int64_t now_ms, object_table& table, index::batch& fixes,
                     reconcile_report& rep) {
  for (const shard_result& r : results) {
    rep.malformed_removed += r.malformed;
    rep.orphans_removed += r.orphans_removed;
    for (std::uint8_t s : r.shards_changed) {
      if (auto f = fsync_fd(dirs.shard_fd(s), "fsync " + dirs.shard_path(s)); !f) return f;
    }
    for (const auto& [id, size, kind] : r.adopted) {
      entry e;
      e.size = size;
      e.kind = kind;  // blob when the row is gone: the neutral default
      e.created_ms = e.last_access_ms = e.last_scrub_ms = now_ms;
      fixes.put(object_key(id), encode(object_row{size, e.kind, now_ms, now_ms, now_ms, 0}));
      table.insert_or_assign(id, std::move(e));
      ++rep.orphans_adopted;
    }
  }
  return {};
}

// Warns with every count when reconciliation repaired anything.
void log_repairs(const reconcile_report& rep) {
  if (rep.temp_files_removed + rep.rows_dropped + rep.bad_rows_dropped + rep.orphans_adopted +
          rep.orphans_removed + rep.malformed_removed + rep.labels_dropped ==
      0) {
    return;
  }
  log::warn("cache reconciled crash debris", log::kv("temp_removed", rep.temp_files_removed),
            log::kv("rows_dropped", rep.rows_dropped),
            log::kv("bad_rows_dropped", rep.bad_rows_dropped),
            log::kv("orphans_adopted", rep.orphans_adopted),
            log::kv("orphans_removed", rep.orphans_removed),
            log::kv("malformed_removed", rep.malformed_removed),
            log::kv("labels_dropped", rep.labels_dropped));
}

}  // namespace

status core::load_index(reconcile_report& rep, index::batch& fixes) {
  std::uint64_t estimate = index_->estimate_keys();
  if (estimate > 0) table_.reserve(static_cast<std::size_t>(estimate));
  std::vector<std::pair<digest, std::string>> labels;
  auto bad = [&](std::string_view key, const error& e) {
    log::warn("cache: dropping undecodable index record", log::kv("error", e.to_string()),
              log::kv("key_bytes", key.size()));
    fixes.del(key);
    ++rep.bad_rows_dropped;
  };
  auto st = index_->scan([&](std::string_view key, std::string_view value) {
    auto k = parse_key(key);
    if (!k) return bad(key, k.error());
    switch (k->type) {
      case record::meta:
        return;
      case record::object: {
        auto row = decode_object(value);
        if (!row) return bad(key, row.error());
        entry e;
        e.size = row->size;
        e.kind = row->kind;
        e.created_ms = row->created_ms;
        e.last_access_ms = row->last_access_ms;
        e.last_scrub_ms = row->last_scrub_ms;
        e.hits = row->hits;
        table_.emplace(k->id, std::move(e));
        ++rep.rows_loaded;
        return;
      }
      case record::pin: {
        auto row = decode_pin(value);
        if (!row) return bad(key, row.error());
        pins_[k->id].push_back(pin_rec{std::string(k->suffix), row->count, row->expiry_ms});
        return;
      }
      case record::label: {
        if (auto v = check_label_value(value); !v) return bad(key, v.error());
        labels.emplace_back(k->id, std::string(k->suffix));
        return;
      }
    }
  });
  if (!st) return st;
  // Labels sort before objects ('L' < 'O'), so they are attached once every row is loaded.
  for (auto& [id, label] : labels) {
    auto it = table_.find(id);
    if (it == table_.end()) {
      fixes.del(label_key(id, label));
      ++rep.labels_dropped;
      continue;
    }
    if (!it->second.labels) it->second.labels = std::make_unique<std::vector<std::string>>();
    it->second.labels->push_back(std::move(label));
  }
  return {};
}

status core::reconcile() {
  auto t0 = std::chrono::steady_clock::now();
  reconcile_report rep;
  // 1. tmp/, 2. the index, 3. the object files, 4. rows without their file, 5. adopted orphans'
  // rows, written with every other fix in one batch, 6. the gauges.
  if (auto st = remove_temp_files(layout_, rep); !st) return st;
  index::batch fixes;
  if (auto s = load_index(rep, fixes); !s) return s;
  auto results = scan_shards(layout_, table_, opts_);
  if (!results) return std::unexpected(results.error());
  drop_unseen_rows(table_, fixes, rep);
  std::int64_t now_ms = to_ms(now());
  if (auto s = index_adopted(layout_, *results, now_ms, table_, fixes, rep); !s) return s;
  if (auto w = index_->write(fixes, true); !w) return w;

  std::uint64_t total = 0;
  by_kind_ = {};
  for (const auto& [id, e] : table_) {
    total += e.size;
    auto k = static_cast<std::size_t>(e.kind);
    by_kind_[k].objects += 1;
    by_kind_[k].bytes += e.size;
  }
  committed_bytes_.store(total);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  reconcile_ = rep;
  log_repairs(rep);
  return {};
}

}  // namespace shoal::cache::detail
