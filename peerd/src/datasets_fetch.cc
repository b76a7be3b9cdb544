// The dataset manager's fetching (datasets.h): every pack group through the swarm, pins, and the
// read-only view of clones (or copies) of the cache's objects.
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/statvfs.h>

#include "proxy_link.h"
#include "common/fd.h"
#include "common/sha256.h"
#include "datasets_internal.h"

namespace shoal::peerd {

using namespace datasets_detail;

namespace {

// Runs fn(i) for i in [0, n) on up to 8 threads. Pins are synced index writes: done from several
// threads, RocksDB commits them in groups instead of one sync each.
void parallel_for(std::size_t n, const std::function<bool(std::size_t)>& fn) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  auto worker = [&] {
    for (std::size_t i = next.fetch_add(1); i < n && !stop.load(); i = next.fetch_add(1)) {
      if (!fn(i)) stop = true;
    }
  };
  std::size_t threads = std::min<std::size_t>(8, std::max<std::size_t>(1, n / 256));
  std::vector<std::thread> ts;
  for (std::size_t t = 1; t < threads; ++t) ts.emplace_back(worker);
  worker();
  for (auto& t : ts) t.join();
}

// Makes dst a view of cache object `id` (of `size` bytes, at `src`) that no write through it
// can turn into a change of the object (security review F19; root in a pod ignores 0444):
// - a clone (FICLONE: shared extents, copy on write) where the filesystem can (XFS, btrfs);
// - else a hard link to the object's inode, sealed immutable (cache::store::link_sealed), where
//   the filesystem and peerd can seal (ext4 as root) and no other view links the object yet;
// - else a copy.
// `can_clone` and `can_seal` are cleared at the first refusal so that later files skip the try.
dataset_manager::view_file make_view_file(cache::store& store, const digest& id,
                                          const std::string& src, const std::string& dst,
                                          std::uint64_t size, bool& can_clone, bool& can_seal,
                                          status& st) {
  using how = dataset_manager::view_file;
  st = {};
  if (!can_clone && can_seal) {
    auto s = store.link_sealed(id, dst);
    if (s) return how::sealed;
    if (s.error().code != make_error_code(errc::busy)) {
      can_seal = false;
      log::info("dataset views: cannot seal links here; copying",
                log::kv("error", s.error().message));
    }
  }
  unique_fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) {
    st = fail_errno(errno, "open " + src);
    return how::copied;
  }
  unique_fd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  if (!out) {
    st = fail_errno(errno, "create " + dst);
    return how::copied;
  }
  if (can_clone) {
    if (::ioctl(out.get(), FICLONE, in.get()) == 0) return how::cloned;
    can_clone = false;
    if (can_seal) {
      // The filesystem cannot clone: a sealed link instead of this empty file.
      out.reset();
      ::unlink(dst.c_str());
      return make_view_file(store, id, src, dst, size, can_clone, can_seal, st);
    }
  }
  st = copy_bytes(in.get(), out.get(), size, dst);
  return how::copied;
}

// Fails with errc::no_space when copying `bytes` into `dir` would leave less than a twentieth of
// its filesystem free (the cache, RocksDB and pulls share it).
status check_room(const std::string& dir, std::uint64_t bytes) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return {};  // the copy reports what went wrong
  auto avail = static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
  auto reserve = static_cast<std::uint64_t>(v.f_blocks) * v.f_frsize / 20;
  if (avail >= bytes + reserve) return {};
  return fail(errc::no_space, "the view needs " + std::to_string(bytes) + " bytes of copies (" +
                                  dir + " cannot clone files) but only " + std::to_string(avail) +
                                  " are free (5% kept in reserve)");
}

// Runs `op` on every object of `m` (on up to 8 threads); the first error, wrapped with `what`
// and the object. `keep_going`: the rest still run after an error.
status pin_each(const dataset::manifest& m, const std::string& what, bool keep_going,
                const std::function<status(const digest&)>& op) {
  auto objs = dataset::manifest_objects(m);
  std::mutex mu;
  std::optional<error> first;
  parallel_for(objs.size(), [&](std::size_t i) {
    auto s = op(objs[i].first);
    if (s) return true;
    std::lock_guard lk(mu);
    if (!first) first = s.error().wrap(what + " " + objs[i].first.str());
    return keep_going;
  });
  if (first) return fail(*first);
  return {};
}

}  // namespace

status dataset_manager::pin_all(const dataset::manifest& m, const std::string& owner,
                                std::optional<cache::time_point> until) {
  return pin_each(m, "pin for " + owner + ":", false,
                  [&](const digest& d) { return d_.store.pin(d, owner, until); });
}

void dataset_manager::unpin_all(const dataset::manifest& m, const std::string& owner) {
  (void)pin_each(m, "unpin", true, [&](const digest& d) {
    (void)d_.store.unpin(d, owner);
    return status{};
  });
}

status dataset_manager::renew_pins(const dataset::manifest& m, const std::string& owner,
                                   cache::time_point until) {
  // renew_pin, not unpin then pin: the objects stay protected while the expiry moves, and an
  // expired pin comes back with one count either way. Every object is renewed even after an
  // error: each one renewed is protected longer.
  return pin_each(m, "renew the pin for " + owner + " of", true,
                  [&](const digest& d) { return d_.store.renew_pin(d, owner, until); });
}

result<group_spec> dataset_manager::group_metainfo(const std::shared_ptr<job>& j,
                                                   const dataset::manifest& m, std::uint32_t g) {
  const auto& gr = m.groups[g];
  auto objs = dataset::group_objects(m, gr);
  auto wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.metainfo_wait.get());
  auto deadline = steady::now() + opts_.resolve_wait;
  int errors = 0;
  while (true) {
    if (j->cancel.load() || stop_.load())
      return fail(errc::cancelled, "prefetch of " + j->ref + " cancelled");
    if (steady::now() > deadline)
      return fail(errc::timeout, "registry-proxy did not prepare group " + std::to_string(g));
    http::client_request r;
    // A checkpoint's group, by its number in the published manifest.
    std::uint32_t published = j->group_ids.empty() ? g : j->group_ids[g];
    r.url = opts_.checkpoints ? checkpoint::group_target(j->ref, published)
                              : origin::dataset_metainfo_target(j->ref, g, wait);
    r.timeouts.connect = std::chrono::duration_cast<std::chrono::milliseconds>(
        d_.cfg.upstream.connect_timeout.get());
    r.timeouts.stall = wait + std::chrono::seconds(5);
    r.max_retries = 0;
    auto f = upstream_call(std::move(r), 256u << 20);
    if (!f && origin::is_version_mismatch(f.error())) {
      return fail(f.error().wrap(j->ref + " group " + std::to_string(g)));
    }
    if (f && f->status == 200) {
      auto a = origin::decode_metainfo(*f);
      if (!a) return fail(a.error().wrap(j->ref + " group " + std::to_string(g)));
      group_spec spec;
      spec.pack = gr.type == dataset::group::kind::pack;
      if (spec.pack) {
        auto pm = pack_metainfo::parse(a->torrent, objs);
        if (!pm) return fail(pm.error().wrap(j->ref + " group " + std::to_string(g)));
      } else {
        auto om = object_metainfo::parse(a->torrent, objs.front().first);
        if (!om) return fail(om.error().wrap(j->ref + " group " + std::to_string(g)));
      }
      spec.torrent = std::move(a->torrent);
      spec.objects = std::move(objs);
      if (!a->seed.empty()) spec.seeds.push_back(a->seed);
      // A checkpoint has no origin to fall back to: its holders are its only source.
      if (!opts_.checkpoints) {
        spec.fallback_base = proxy(origin::dataset_objects_base(j->ref));
        if (d_.proxy != nullptr) {
          spec.fallback_endpoints = d_.proxy->endpoints();
          spec.fallback_path = origin::dataset_objects_base(j->ref);
        }
      }
      spec.grant = std::move(a->grant);
      spec.name = j->ref + " group " + std::to_string(g);
      return spec;
    }
    if (f && f->status == 202) continue;  // registry-proxy is fetching it again from the origin
    std::string why = f ? origin::error_message_of(f->body) : "";
    if (f && (f->status == 404 || f->status == 409 || f->status == 400)) {
      return fail(f->status == 409 ? errc::digest_mismatch : errc::not_found,
                  j->ref + " group " + std::to_string(g) + ": " +
                      (why.empty() ? "HTTP " + std::to_string(f->status) : why));
    }
    if (++errors > 5) {
      return fail(errc::unavailable,
                  j->ref + " group " + std::to_string(g) + " metainfo: " +
                      (f ? "HTTP " + std::to_string(f->status) + " " + why : f.error().message));
    }
    std::unique_lock lk(j->mu);
    j->cv.wait_for(lk, std::chrono::milliseconds(500 * errors),
                   [&] { return j->cancel.load() || stop_.load(); });
  }
}

status dataset_manager::fetch_groups(const std::shared_ptr<job>& j, const dataset::manifest& m) {
  std::atomic<std::uint32_t> next{0};
  std::mutex mu;
  std::optional<error> first;
  std::atomic<bool> abort{false};
  // Groups already complete here count as local bytes.
  std::vector<bool> complete(m.groups.size(), false);
  std::uint64_t local = 0;
  for (std::uint32_t g = 0; g < m.groups.size(); ++g) {
    bool all = true;
    for (auto i : m.groups[g].files) all = all && d_.store.contains(m.files[i].id);
    if (all) {
      complete[g] = true;
      local += m.groups[g].bytes;
    }
  }
  j->local_bytes = local;
  j->done_bytes = local;
  j->groups_done = static_cast<std::uint64_t>(std::count(complete.begin(), complete.end(), true));
  auto worker = [&] {
    while (!abort.load()) {
      std::uint32_t g = next.fetch_add(1);
      if (g >= m.groups.size()) return;
      if (complete[g]) continue;
      std::optional<error> err;
      for (int attempt = 0; attempt < 3; ++attempt) {
        if (j->cancel.load() || stop_.load()) {
          err = error{errc::cancelled, "prefetch of " + j->ref + " cancelled"};
          break;
        }
        auto spec = group_metainfo(j, m, g);
        if (!spec) {
          err = spec.error();
          if (spec.error().is(errc::digest_mismatch) || spec.error().is(errc::not_found)) break;
          continue;
        }
        auto dl = d_.fetch.fetch_group(std::move(*spec));
        if (!dl) {
          err = dl.error();
          continue;
        }
        {
          std::lock_guard lk(j->mu);
          j->active.push_back(*dl);
        }
        auto st = group_download::state::running;
        while (st == group_download::state::running && !j->cancel.load() && !stop_.load()) {
          st = (*dl)->wait_for(std::chrono::milliseconds(500));
        }
        {
          std::lock_guard lk(j->mu);
          j->active.erase(std::remove(j->active.begin(), j->active.end(), *dl), j->active.end());
          j->from_peers += (*dl)->from_peers.load();
          j->from_origin += (*dl)->from_origin.load();
          j->from_http += (*dl)->from_http.load();
          if (st == group_download::state::complete) j->done_bytes += m.groups[g].bytes;
        }
        if (st == group_download::state::complete) {
          err.reset();
          j->groups_done.fetch_add(1);
          break;
        }
        err = (*dl)->failure().value_or(
            error{errc::cancelled, "prefetch of " + j->ref + " cancelled"});
        if (st == group_download::state::running) break;  // cancelled
        log::warn("dataset group failed; retrying", log::kv("dataset", j->ref), log::kv("group", g),
                  log::kv("attempt", attempt + 1), log::kv("error", err->message));
      }
      if (err) {
        std::lock_guard lk(mu);
        if (!first) first = *err;
        abort = true;
      }
    }
  };
  std::vector<std::thread> ts;
  int n = std::max(1, std::min<int>(opts_.parallel_groups, static_cast<int>(m.groups.size())));
  for (int i = 0; i < n; ++i) ts.emplace_back(worker);
  for (auto& t : ts) t.join();
  if (first) return fail(*first);
  return {};
}

status dataset_manager::materialize(const std::shared_ptr<job>& j, const dataset::manifest& m) {
  std::string final_path = view_path(j->ref);
  std::string tmp = opts_.views_dir + "/." + j->ref + ".building";
  remove_view(tmp, &m);
  // A view left by a run that died before it was recorded ready is nobody's: it goes first, so
  // that its sealed links do not make this one copy.
  remove_view(final_path, &m);
  if (::mkdir(tmp.c_str(), 0755) != 0) return fail_errno(errno, "mkdir " + tmp);
  std::set<std::string> dirs;
  std::uint64_t left = 0;
  for (const auto& f : m.files) left += f.size;
  bool checked_room = false;
  bool can_clone = true, can_seal = true;
  for (const auto& f : m.files) {
    // Parent directories (paths were checked by parse_manifest: relative, no "..").
    for (std::size_t slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1)) {
      std::string dir = f.path.substr(0, slash);
      if (dirs.insert(dir).second) {
        std::string p = tmp + "/" + dir;
        if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST)
          return fail_errno(errno, "mkdir " + p);
      }
    }
    std::string dst = tmp + "/" + f.path;
    if (f.size == 0) {
      int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
      if (fd < 0) return fail_errno(errno, "create " + dst);
      ::close(fd);
      continue;
    }
    status st;
    auto how = make_view_file(d_.store, f.id, d_.store.object_path(f.id), dst, f.size, can_clone,
                              can_seal, st);
    if (!st) {
      remove_view(tmp, &m);
      return st;
    }
    view_files_[static_cast<int>(how)].fetch_add(1);
    left -= f.size;
    if (how == view_file::copied && !checked_room) {
      // The filesystem copies: the rest of the view needs room of its own.
      checked_room = true;
      if (auto s = check_room(tmp, left); !s) {
        remove_view(tmp, &m);
        return s;
      }
    }
  }
  // One flush for the whole view before it appears (copies are written through the page cache).
  if (unique_fd d(::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d) ::syncfs(d.get());
  // Read-only directories, deepest first.
  std::vector<std::string> order(dirs.begin(), dirs.end());
  std::sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
  });
  for (const auto& d : order) ::chmod((tmp + "/" + d).c_str(), 0555);
  ::chmod(tmp.c_str(), 0555);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    return fail_errno(errno, "rename " + tmp + " to " + final_path);
  return {};
}

void dataset_manager::remove_view(const std::string& path, const dataset::manifest* m) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::size_t unsealed = 0;
  auto unseal = [&](const std::string& file, const digest& id) {
    if (auto s = d_.store.unlink_sealed(file, id); !s) {
      log::warn("dataset view: cannot remove a sealed file", log::kv("file", file),
                log::kv("error", s.error().message));
      return;
    }
    ++unsealed;
  };
  if (m) {
    for (const auto& f : m->files) {
      if (f.size > 0) unseal(path + "/" + f.path, f.id);
    }
  }
  // What the manifest does not name (a view built from another one): a file that refuses its
  // unlink may be sealed, and its content names its object.
  std::vector<std::string> refused;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && ::unlink(it->path().c_str()) != 0 && errno == EPERM)
      refused.push_back(it->path().string());
  }
  for (const auto& file : refused) {
    unique_fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) continue;
    if (auto h = sha256_fd(fd.get(), 0, static_cast<std::uint64_t>(st.st_size))) unseal(file, *h);
  }
  remove_tree(path);
  // The cache's objects that got inodes of their own, and the unlinks, made durable at once.
  if (unsealed > 0) {
    if (unique_fd d(::open(opts_.views_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d)
      ::syncfs(d.get());
  }
}

}  // namespace shoal::peerd
