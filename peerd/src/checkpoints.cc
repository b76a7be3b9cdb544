// Publishing checkpoints (checkpoints.h): listing and ingesting the files, seeding the groups,
// registering with the scheduler, lifecycle and records.
#include "checkpoints.h"
#include "scheduler_link.h"
#include "checkpoints_internal.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/file.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/sha256.h"
#include "common/text.h"
#include "common/thread_name.h"
#include "swarm/metainfo.h"

namespace shoal::peerd {

namespace fs = std::filesystem;
using nlohmann::json;
using steady = std::chrono::steady_clock;

namespace {

constexpr std::size_t buffer_bytes = 1u << 20;

bool same_file_state(const struct stat& a, const struct stat& b) {
  return a.st_size == b.st_size && a.st_ino == b.st_ino && a.st_mtim.tv_sec == b.st_mtim.tv_sec &&
         a.st_mtim.tv_nsec == b.st_mtim.tv_nsec && a.st_ctim.tv_sec == b.st_ctim.tv_sec &&
         a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

struct ingested {
  digest id;
  std::string torrent;  // a single group's torrent (large files), else empty
  bool stored = false;  // new in the cache
};

// Reads `src` once: clones or copies it into `staging` while hashing it (sha256, and the piece
// hashes of a file large enough to be its own group), then lets the cache adopt it.
result<ingested> ingest_file(cache::store& store, const std::string& src, const std::string& rel,
                             const std::string& staging, const std::vector<std::string>& trackers,
                             std::atomic<std::uint64_t>& read_counter) {
  unique_fd in(::open(src.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!in) return fail_errno(errno, "open " + quote_excerpt(rel));
  struct stat before {};
  if (::fstat(in.get(), &before) != 0) return fail_errno(errno, "stat " + quote_excerpt(rel));
  if (!S_ISREG(before.st_mode))
    return fail(errc::invalid_argument, quote_excerpt(rel) + " is not a regular file");
  auto size = static_cast<std::uint64_t>(before.st_size);
  const bool single = size >= dataset::grouping_policy{}.small_file_max;
  unique_fd out(::open(staging.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!out) return fail_errno(errno, "create " + staging);
  auto cleanup = [&] { ::unlink(staging.c_str()); };
  const bool cloned = ::ioctl(out.get(), FICLONE, in.get()) == 0;
  sha256_hasher h;
  std::optional<metainfo_builder> pieces;
  if (single) pieces.emplace(size, false);
  std::vector<char> buf(buffer_bytes);
  std::uint64_t left = size;
  while (left > 0) {
    ssize_t n = ::read(in.get(), buf.data(), std::min<std::uint64_t>(buf.size(), left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      cleanup();
      if (n == 0)
        return fail(errc::size_mismatch,
                    quote_excerpt(rel) + " changed while it was being published (it shrank)");
      return fail_errno(errno, "read " + quote_excerpt(rel));
    }
    h.update(buf.data(), static_cast<std::size_t>(n));
    if (pieces) pieces->update(buf.data(), static_cast<std::size_t>(n));
    if (!cloned) {
      if (auto s = write_all(out.get(), std::string_view(buf.data(), static_cast<std::size_t>(n)),
                             staging);
          !s) {
        cleanup();
        return fail(s.error());
      }
    }
    left -= static_cast<std::uint64_t>(n);
    read_counter.fetch_add(static_cast<std::uint64_t>(n));
  }
  struct stat after {};
  if (::fstat(in.get(), &after) != 0 || !same_file_state(before, after)) {
    cleanup();
    return fail(errc::size_mismatch,
                quote_excerpt(rel) +
                    " changed while it was being published: a checkpoint must be complete "
                    "before it is published");
  }
  out.reset();
  ingested r;
  r.id = h.finish();
  if (pieces) {
    auto m = pieces->finish(r.id);
    if (!m) {
      cleanup();
      return fail(m.error().wrap(rel));
    }
    r.torrent = m->torrent_file(trackers);
  }
  if (store.contains(r.id)) {
    cleanup();
    return r;
  }
  auto a = store.adopt_staged(staging, r.id, cache::object_kind::dataset_file);
  if (!a) return fail(a.error().wrap("cache " + quote_excerpt(rel)));
  r.stored = *a == cache::adopt_outcome::adopted;
  return r;
}

}  // namespace

group_spec group_spec_of(const std::string& key, const dataset::manifest& m, std::uint32_t g,
                         std::string torrent) {
  group_spec spec;
  spec.pack = m.groups[g].type == dataset::group::kind::pack;
  spec.objects = dataset::group_objects(m, m.groups[g]);
  spec.torrent = std::move(torrent);
  spec.name = key + " group " + std::to_string(g);
  spec.superseed = true;  // the writer is the only holder: one copy out, peers share the rest
  return spec;
}

checkpoint_publisher::checkpoint_publisher(deps d, options o) : d_(d), opts_(std::move(o)) {
  published_ = &d_.metrics
                    .counter("shoal_peerd_checkpoints_published_total",
                             "Checkpoints published from this node and registered.")
                    .with({});
  failed_ = &d_.metrics
                 .counter("shoal_peerd_checkpoint_publish_failures_total",
                          "Checkpoint publishes that failed (the record says why).")
                 .with({});
  bytes_read_ = &d_.metrics
                     .counter("shoal_peerd_checkpoint_publish_read_bytes_total",
                              "Bytes of checkpoint files read (hashed) by publishes.")
                     .with({});
  bytes_stored_ = &d_.metrics
                       .counter("shoal_peerd_checkpoint_publish_stored_bytes_total",
                                "Bytes of checkpoint files new to the cache (not stored before).")
                       .with({});
}

checkpoint_publisher::~checkpoint_publisher() {
  request_stop();
  std::vector<std::thread> ts;
  {
    std::lock_guard lk(mu_);
    ts.swap(threads_);
  }
  for (auto& t : ts) {
    if (t.joinable()) t.join();
  }
}

void checkpoint_publisher::request_stop() { stop_.store(true); }

result<std::string> checkpoint_publisher::publish(publish_request r) {
  if (!checkpoint::valid_job(r.job))
    return fail(errc::invalid_argument, "job " + quote_excerpt(r.job) +
                                            " is not a valid name ([a-z0-9][a-z0-9._-]{0,127})");
  if (r.step > checkpoint::max_step) return fail(errc::invalid_argument, "step is too large");
  if (stop_.load()) return fail(errc::cancelled, "peerd is stopping");
  // The directory must lie under publish_root once every link is resolved.
  std::error_code ec;
  fs::path root = fs::weakly_canonical(opts_.publish_root, ec);
  fs::path want = fs::path(r.dir).is_absolute() ? fs::path(r.dir) : root / r.dir;
  fs::path dir = fs::weakly_canonical(want, ec);
  auto rel = dir.lexically_relative(root).string();
  if (ec || rel.empty() || rel == "." || rel.starts_with(".."))
    return fail(errc::unauthorized, "dir " + quote_excerpt(r.dir) +
                                        " is not a directory under checkpoints.publish_root (" +
                                        root.string() + ")");
  if (!fs::is_directory(dir, ec))
    return fail(errc::not_found, "dir " + quote_excerpt(r.dir) + " is not a directory");
  auto key = checkpoint::key(r.job, r.step);
  std::lock_guard lk(mu_);
  std::shared_ptr<pub> previous;
  if (auto it = pubs_.find(key); it != pubs_.end()) {
    std::lock_guard pl(it->second->mu);
    if (it->second->running) return key;
    // Published again: read again. The same files are the same manifest (the scheduler answers
    // as before); other files are refused, and what was registered stands.
    if (it->second->held()) previous = it->second->previous ? it->second->previous : it->second;
  }
  auto p = std::make_shared<pub>();
  p->previous = std::move(previous);
  p->key = key;
  p->job = r.job;
  p->step = r.step;
  p->dir = dir.string();
  p->ranks = std::move(r.ranks);
  p->running = true;
  pubs_[key] = p;
  threads_.emplace_back([this, p] {
    name_this_thread("ckpt-publish");
    run(p);
  });
  return key;
}

void checkpoint_publisher::run(const std::shared_ptr<pub>& p) {
  auto s = run_steps(p);
  std::vector<std::pair<digest, std::uint64_t>> unpin;
  {
    std::lock_guard lk(p->mu);
    p->running = false;
    p->publish_s = std::chrono::duration<double>(steady::now() - p->started).count();
    if (!s) {
      p->error = s.error().message;
      unpin.swap(p->pinned);
      p->state = "failed";
      if (p->previous) {
        std::lock_guard ol(p->previous->mu);
        p->state = "refused";
        p->manifest = p->previous->manifest;
        p->objects = p->previous->objects;
        p->groups = p->previous->groups;
      }
    } else {
      p->state = "registered";
      // The same files again: the registered record's pins are these already.
      if (p->previous) {
        unpin = p->pinned;
        p->previous.reset();
      }
    }
  }
  // A failed attempt, or a repeat, gives its own pins back.
  for (const auto& [d, size] : unpin) (void)d_.store.unpin(d, "checkpoint:" + p->key);
  persist(*p);
  if (!s) {
    failed_->inc();
    log::warn("checkpoint publish failed", log::kv("checkpoint", p->key),
              log::kv("error", s.error().message));
    return;
  }
  published_->inc();
  log::info("checkpoint published", log::kv("checkpoint", p->key), log::kv("files", p->files),
            log::kv("bytes", p->bytes), log::kv("stored_bytes", p->bytes_stored.load()),
            log::kv("read_s", p->read_s), log::kv("publish_s", p->publish_s));
  keep_newest(p->job);
}

status checkpoint_publisher::run_steps(const std::shared_ptr<pub>& p) {
  auto files = list_files(*p);
  if (!files) return fail(files.error());
  {
    std::lock_guard lk(p->mu);
    p->state = "reading";
  }
  std::map<digest, std::string> torrents;  // single groups' torrents, by object
  if (auto s = ingest(*p, *files, torrents); !s) return s;
  auto m = checkpoint::build_manifest(p->job, p->step, d_.cfg.node.name, std::move(*files));
  if (!m) return fail(m.error());
  auto text = dataset::canonical_json(*m);
  auto md = sha256_of(text);
  auto objects = dataset::manifest_objects(*m);
  if (p->previous) {
    std::optional<digest> before;
    {
      std::lock_guard lk(p->previous->mu);
      before = p->previous->manifest;
    }
    if (before && *before != md)
      return fail(errc::already_exists,
                  p->key + " is already published with manifest " + before->str() +
                      "; these files make " + md.str() +
                      " (files changed under the same step?): publish them as a new step");
  }
  for (const auto& [d, size] : objects) {
    if (auto s = d_.store.pin(d, "checkpoint:" + p->key); !s)
      return fail(s.error().wrap("pin " + d.str()));
    std::lock_guard lk(p->mu);
    p->pinned.emplace_back(d, size);
  }
  {
    std::lock_guard lk(p->mu);
    p->state = "seeding";
    p->manifest = md;
    p->objects = objects;
    p->groups = m->groups.size();
  }
  auto reg = seed(*p, *m, torrents);
  if (!reg) return fail(reg.error());
  reg->manifest = std::move(text);
  if (auto s = write_atomic(opts_.dir + "/published/" + p->key + ".reg", checkpoint::encode(*reg));
      !s)
    return s;
  {
    std::lock_guard lk(p->mu);
    p->state = "registering";
  }
  return register_with_scheduler(*p, *reg);
}

result<std::vector<dataset::file_entry>> checkpoint_publisher::list_files(pub& p) {
  std::vector<dataset::file_entry> out;
  std::error_code ec;
  fs::path base(p.dir);
  for (auto it = fs::recursive_directory_iterator(base, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    auto st = it->symlink_status(ec);
    if (ec) break;
    std::string rel = it->path().lexically_relative(base).string();
    if (fs::is_directory(st)) continue;
    if (fs::is_symlink(st))
      return fail(
          errc::invalid_argument,
          quote_excerpt(rel) + " is a symbolic link: a checkpoint holds regular files only");
    if (!fs::is_regular_file(st))
      return fail(errc::invalid_argument, quote_excerpt(rel) + " is not a regular file");
    if (auto s = dataset::check_path(rel); !s) return fail(s.error());
    if (out.size() >= opts_.max_files)
      return fail(errc::too_large, "more than " + std::to_string(opts_.max_files) + " files");
    dataset::file_entry f;
    f.path = rel;
    f.size = fs::file_size(it->path(), ec);
    if (auto r = p.ranks.find(rel); r != p.ranks.end()) {
      f.ranks = r->second;
    } else if (auto k = checkpoint::rank_of(rel)) {
      f.ranks = {*k};
    }
    out.push_back(std::move(f));
  }
  if (ec) return fail(ec, "list " + p.dir + ": " + ec.message());
  if (out.empty()) return fail(errc::not_found, "no files under " + quote_excerpt(p.dir));
  std::uint64_t bytes = 0;
  for (const auto& f : out) bytes += f.size;
  std::lock_guard lk(p.mu);
  p.files = out.size();
  p.bytes = bytes;
  return out;
}

status checkpoint_publisher::ingest(pub& p, std::vector<dataset::file_entry>& files,
                                    std::map<digest, std::string>& torrents) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::optional<error> first;
  auto trackers = std::vector<std::string>{};
  auto worker = [&](int w) {
    for (std::size_t i = next.fetch_add(1); i < files.size(); i = next.fetch_add(1)) {
      if (stop_.load()) {
        std::lock_guard lk(mu);
        if (!first) first = error{errc::cancelled, "peerd is stopping"};
        return;
      }
      auto& f = files[i];
      std::string staging = d_.store.staging_dir() + "/checkpoint-" + std::to_string(::getpid()) +
                            "-" + std::to_string(w) + "-" + std::to_string(i);
      auto r = ingest_file(d_.store, (fs::path(p.dir) / f.path).string(), f.path, staging, trackers,
                           p.bytes_read);
      if (!r) {
        std::lock_guard lk(mu);
        if (!first) first = r.error();
        next = files.size();
        return;
      }
      f.id = r->id;
      if (r->stored) p.bytes_stored.fetch_add(f.size);
      p.files_done.fetch_add(1);
      std::lock_guard lk(mu);
      if (!r->torrent.empty()) torrents[r->id] = std::move(r->torrent);
    }
  };
  std::vector<std::thread> ts;
  int n = std::max(1, std::min<int>(opts_.hash_threads, static_cast<int>(files.size())));
  for (int w = 1; w < n; ++w) ts.emplace_back(worker, w);
  worker(0);
  for (auto& t : ts) t.join();
  bytes_read_->inc(static_cast<double>(p.bytes_read.load()));
  bytes_stored_->inc(static_cast<double>(p.bytes_stored.load()));
  {
    std::lock_guard lk(p.mu);
    p.read_s = std::chrono::duration<double>(steady::now() - p.started).count();
  }
  if (first) return fail(*first);
  return {};
}

result<checkpoint::registration> checkpoint_publisher::seed(
    pub& p, const dataset::manifest& m, std::map<digest, std::string>& torrents) {
  checkpoint::registration reg;
  for (std::uint32_t g = 0; g < m.groups.size(); ++g) {
    auto spec = group_spec_of(p.key, m, g, {});
    std::string ih;
    if (spec.pack) {
      auto pm = build_pack(
          spec.objects,
          [&](const digest& d, std::uint64_t off, char* buf, std::size_t n) -> result<std::size_t> {
            unique_fd fd(::open(d_.store.object_path(d).c_str(), O_RDONLY | O_CLOEXEC));
            if (!fd) return fail_errno(errno, "open " + d.str());
            ssize_t got = ::pread(fd.get(), buf, n, static_cast<off_t>(off));
            if (got < 0) return fail_errno(errno, "read " + d.str());
            return static_cast<std::size_t>(got);
          });
      if (!pm) return fail(pm.error().wrap(spec.name));
      spec.torrent = pm->torrent_file({});
      ih = pm->info_hash_hex();
    } else {
      const auto& id = spec.objects.front().first;
      auto it = torrents.find(id);
      if (it == torrents.end()) {
        // Large enough to be single but ingested before (not read this time): hash it again.
        auto om = metainfo_for_file(d_.store.object_path(id), id);
        if (!om) return fail(om.error().wrap(spec.name));
        spec.torrent = om->torrent_file({});
      } else {
        spec.torrent = it->second;
      }
      auto om = object_metainfo::parse(spec.torrent, id);
      if (!om) return fail(om.error().wrap(spec.name));
      ih = om->info_hash_hex();
    }
    reg.groups.push_back({ih, spec.torrent});
    auto dl = d_.fetch.fetch_group(std::move(spec));
    if (!dl) return fail(dl.error().wrap(p.key + " group " + std::to_string(g)));
    auto st = (*dl)->wait_for(std::chrono::seconds(60));
    if (st != transfer::state::complete)
      return fail((*dl)->failure().value_or(
          error{errc::timeout, p.key + " group " + std::to_string(g) + " did not start seeding"}));
  }
  return reg;
}

status checkpoint_publisher::register_with_scheduler(pub& p, const checkpoint::registration& reg) {
  if (d_.scheduler == nullptr)
    return fail(errc::config_error, "upstream.scheduler is not set: nowhere to register");
  std::string body = checkpoint::encode(reg);
  for (int attempt = 1;; ++attempt) {
    // The same registration again is a repeat the scheduler answers like the first: each call
    // fails over between replicas (scheduler_link.h), and these attempts ride out a moment
    // when none answers.
    auto r = d_.scheduler->request("POST", std::string(checkpoint::paths::scheduler));
    r.headers.emplace_back("Content-Type", "application/json");
    r.body = body;
    auto f = d_.scheduler->call(std::move(r), 1u << 20);
    if (f && (f->status == 200 || f->status == 201)) return {};
    std::string why = f ? origin::error_message_of(f->body) : f.error().message;
    if (f && f->status >= 400 && f->status < 500 && f->status != 429)
      return fail(f->status == 409 ? errc::already_exists : errc::unauthorized,
                  "the scheduler refused " + p.key + ": " +
                      (why.empty() ? "HTTP " + std::to_string(f->status) : why));
    if (attempt >= 5 || stop_.load())
      return fail(errc::unavailable, "cannot register " + p.key + " with the scheduler: " + why);
    std::this_thread::sleep_for(std::chrono::milliseconds(500 * attempt));
  }
}

void checkpoint_publisher::register_again() {
  {
    std::lock_guard lk(register_mu_);
    if (stop_.load()) return;
    register_pending_ = true;
    if (registering_) return;  // the running thread makes one more pass
    registering_ = true;
  }
  std::lock_guard lk(mu_);
  threads_.emplace_back([this] {
    name_this_thread("ckpt-register");
    for (;;) {
      {
        std::lock_guard rl(register_mu_);
        if (!register_pending_ || stop_.load()) {
          registering_ = false;
          return;
        }
        register_pending_ = false;
      }
      register_pass();
    }
  });
}

void checkpoint_publisher::register_pass() {
  std::vector<std::shared_ptr<pub>> held;
  {
    std::lock_guard lk(mu_);
    for (const auto& [k, p] : pubs_) {
      std::lock_guard pl(p->mu);
      if (p->held() && !p->running) held.push_back(p);
    }
  }
  // Newest step first: a restorer asking for J@latest meanwhile gets the newest, not step 1.
  std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) {
    return a->job != b->job ? a->job < b->job : a->step > b->step;
  });
  std::size_t ok = 0;
  for (const auto& p : held) {
    if (stop_.load()) break;
    auto text = read_file(opts_.dir + "/published/" + p->key + ".reg");
    auto reg = text ? checkpoint::decode_registration(*text)
                    : result<checkpoint::decoded_registration>(
                          fail(errc::not_found, "no registration file"));
    auto s = reg ? register_with_scheduler(*p, reg->reg) : status(fail(reg.error()));
    if (s) {
      ++ok;
    } else {
      log::warn("cannot register a published checkpoint again", log::kv("checkpoint", p->key),
                log::kv("error", s.error().message));
    }
  }
  if (!held.empty())
    log::info("published checkpoints registered again with the scheduler",
              log::kv("registered", ok), log::kv("held", held.size()));
}

status checkpoint_publisher::unpin(const std::string& key) {
  std::shared_ptr<pub> p;
  {
    std::lock_guard lk(mu_);
    if (auto it = pubs_.find(key); it != pubs_.end()) p = it->second;
  }
  if (!p) return fail(errc::not_found, "checkpoint " + key + " was not published from this node");
  std::vector<std::pair<digest, std::uint64_t>> objs;
  {
    std::lock_guard pl(p->mu);
    if (p->running) return fail(errc::busy, "a publish of " + key + " is running");
    if (!p->held()) return {};
    objs.swap(p->objects);
    p->state = "unpinned";
  }
  for (const auto& [d, size] : objs) (void)d_.store.unpin(d, "checkpoint:" + p->key);
  persist(*p);
  log::info("published checkpoint unpinned here", log::kv("checkpoint", key));
  return {};
}

void checkpoint_publisher::keep_newest(const std::string& job) {
  std::vector<std::shared_ptr<pub>> mine;
  {
    std::lock_guard lk(mu_);
    for (const auto& [k, p] : pubs_) {
      std::lock_guard pl(p->mu);
      if (p->job == job && p->held()) mine.push_back(p);
    }
  }
  std::sort(mine.begin(), mine.end(),
            [](const auto& a, const auto& b) { return a->step > b->step; });
  for (std::size_t i = opts_.keep_last; opts_.keep_last > 0 && i < mine.size(); ++i) {
    auto& p = mine[i];
    std::vector<std::pair<digest, std::uint64_t>> objs;
    {
      std::lock_guard pl(p->mu);
      objs.swap(p->objects);
      p->state = "unpinned";
    }
    for (const auto& [d, size] : objs) (void)d_.store.unpin(d, "checkpoint:" + p->key);
    persist(*p);
    log::info("checkpoint unpinned here: older than the newest steps kept",
              log::kv("checkpoint", p->key), log::kv("keep_last", opts_.keep_last));
  }
}

}  // namespace shoal::peerd
