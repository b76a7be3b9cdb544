// cache_bench: measures the cache against baselines taken in the same run.
//
//   ingest     stream a 1 GiB object through begin_write/write/commit (hash, fdatasync, rename,
//              index row) and compare with `openssl dgst -sha256` hashing the committed file.
//              Run on a tmpfs (the software pipeline: what the cache adds to hashing) and on the
//              bench directory's disk (compared with a raw write+fdatasync of the same size).
//   metadata   1,000,000 tiny indexed objects: start-up reconciliation time, and contains/stat
//              operations per second on one thread.
//
// Prints a table; --json FILE writes the numbers. CPU is (user+sys)/wall of the measured span.

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "codec.h"
#include "common/log.h"
#include "common/sha256.h"
#include "index.h"
#include "layout.h"

extern char** environ;

namespace shoal::cache::bench {
namespace {

using steady = std::chrono::steady_clock;

double cpu_seconds(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

// Wall and CPU (user+sys of this process, all threads) of a span.
struct span_meter {
  steady::time_point t0 = steady::now();
  rusage r0 = [] {
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    return r;
  }();
  double wall = 0, cpu = 0;
  void stop() {
    rusage r1{};
    getrusage(RUSAGE_SELF, &r1);
    wall = std::chrono::duration<double>(steady::now() - t0).count();
    cpu = cpu_seconds(r1) - cpu_seconds(r0);
  }
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cache_bench: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T must(result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().to_string());
  return std::move(*r);
}

void must_ok(const status& s, const char* what) {
  if (!s) die(std::string(what) + ": " + s.error().to_string());
}

double resident_mib() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

struct ingest_result {
  double mib_s = 0, cpu = 0;
  std::string path;
  digest id;
};

// Streams `total` bytes (a 64 MiB random pattern repeated, 1 MiB per write) into a new store at
// `root`, as a registry-proxy worker would, and commits.
ingest_result ingest(const std::string& root, std::uint64_t total, const std::string& pattern) {
  // The digest is needed up front (it is in the URL); compute it outside the measured span.
  sha256_hasher h;
  for (std::uint64_t off = 0; off < total; off += pattern.size()) {
    h.update(
        std::string_view(pattern).substr(0, std::min<std::uint64_t>(pattern.size(), total - off)));
  }
  digest id = h.finish();
  options o;
  o.root = root;
  o.quota_bytes = 1ull << 40;
  o.scrub_bytes_per_sec = 0;
  auto s = must(store::open(o), "open ingest store");
  constexpr std::size_t chunk = 1 << 20;
  span_meter m;
  auto t = must(s->begin_write(id, total, object_kind::blob), "begin_write");
  if (t.role != write_role::writer) die("ingest: object unexpectedly present");
  for (std::uint64_t off = 0; off < total; off += chunk) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, total - off));
    must_ok(t.writer->write(std::string_view(pattern).substr(off % pattern.size(), n)), "write");
  }
  must(t.writer->commit(), "commit");
  m.stop();
  ingest_result r;
  r.mib_s = static_cast<double>(total) / (1 << 20) / m.wall;
  r.cpu = m.cpu / m.wall;
  r.path = s->object_path(id);
  r.id = id;
  return r;
}

struct spawn_result {
  double wall = 0, cpu = 0;
  std::string out;
};

spawn_result run(std::vector<std::string> argv) {
  int p[2];
  if (pipe(p) != 0) die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  auto t0 = steady::now();
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ) != 0) {
    die("cannot run " + argv[0]);
  }
  close(p[1]);
  spawn_result r;
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;)
    r.out.append(buf, static_cast<std::size_t>(n));
  close(p[0]);
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  r.wall = std::chrono::duration<double>(steady::now() - t0).count();
  r.cpu = cpu_seconds(ru) / r.wall;
  posix_spawn_file_actions_destroy(&fa);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die(argv[0] + " failed");
  return r;
}

// Raw baseline for the disk: write the same bytes to a plain file and fdatasync.
double raw_write_mib_s(const std::string& path, std::uint64_t total, const std::string& pattern) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open " + path);
  auto t0 = steady::now();
  constexpr std::size_t chunk = 1 << 20;
  for (std::uint64_t off = 0; off < total; off += chunk) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, total - off));
    if (write(fd, pattern.data() + off % pattern.size(), n) != static_cast<ssize_t>(n))
      die("write");
  }
  if (fdatasync(fd) != 0) die("fdatasync");
  double wall = std::chrono::duration<double>(steady::now() - t0).count();
  close(fd);
  unlink(path.c_str());
  return static_cast<double>(total) / (1 << 20) / wall;
}

// Deletes everything under dir, unlinking the 256 shard directories in parallel.
void remove_tree(const std::string& dir, unsigned threads) {
  std::string shards = dir + "/objects/sha256";
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (unsigned s = t; s < 256; s += threads) {
        std::string sp = shards + "/" + detail::shard_name(static_cast<std::uint8_t>(s));
        int dfd = open(sp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) continue;
        DIR* d = fdopendir(dfd);
        std::vector<std::string> names;
        while (dirent* de = readdir(d)) {
          if (de->d_name[0] != '.') names.emplace_back(de->d_name);
        }
        for (const auto& n : names) unlinkat(dirfd(d), n.c_str(), 0);
        closedir(d);
      }
    });
  }
  for (auto& t : ts) t.join();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

struct meta_result {
  double setup_s = 0, reconcile_s = 0, reconcile_cpu = 0, stat_ops_s = 0, stat_cpu = 0;
  double open_ops_s = 0;
  double memory_mib = 0;  // resident memory added by opening the store (table + RocksDB)
  std::uint64_t objects = 0;
};

// Builds `n` tiny objects (files + index rows) directly, as a long-running cache would have
// accumulated them, then measures start-up and the lookup path.
meta_result metadata(const std::string& root, std::uint64_t n, unsigned threads) {
  meta_result res;
  res.objects = n;
  auto t0 = steady::now();
  // The layout (and an empty index) come from the store itself.
  {
    options o;
    o.root = root;
    o.quota_bytes = 1ull << 40;
    o.scrub_bytes_per_sec = 0;
    must(store::open(o), "create metadata store");
  }
  std::vector<digest> ids(n);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      int shard_fds[256];
      std::string base = root + "/objects/sha256/";
      for (int s = 0; s < 256; ++s) {
        shard_fds[s] = open((base + detail::shard_name(static_cast<std::uint8_t>(s))).c_str(),
                            O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      }
      for (std::uint64_t i = t; i < n; i += threads) {
        char seed[16];
        std::memcpy(seed, "shoal-bench", 8);
        std::memcpy(seed + 8, &i, 8);
        digest id = sha256_of(std::string_view(seed, sizeof seed));
        ids[i] = id;
        std::string hex = id.hex();
        int fd = openat(shard_fds[id.bytes()[0]], hex.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
        if (fd < 0) die("create " + hex + ": " + std::strerror(errno));
        // A sparse placeholder of the indexed size: start-up checks presence and size, never
        // content (that is the scrub's job), so this measures start-up exactly while costing
        // no data blocks (1M real 16-byte files would take 4 GiB of blocks or tmpfs pages).
        if (ftruncate(fd, 16) != 0) die("ftruncate " + hex);
        close(fd);
      }
      for (int fd : shard_fds) close(fd);
    });
  }
  for (auto& t : ts) t.join();
  {
    // Rows in batches of 50,000, not synced, then flushed to SST files as a store that has been
    // running for a while would have them.
    auto idx = must(detail::index::open(root + "/index", {}), "open index");
    detail::index::batch b;
    std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    std::mt19937_64 rng(7);
    for (std::uint64_t i = 0; i < n; ++i) {
      // Spread access times so the table looks like a real cache's.
      std::int64_t la = now_ms - static_cast<std::int64_t>(rng() % 86'400'000);
      b.put(detail::object_key(ids[i]),
            detail::encode(detail::object_row{16, object_kind::dataset_file, la, la, la, i % 7}));
      if (b.count() == 50'000) {
        must_ok(idx->write(b, false), "index write");
        b.clear();
      }
    }
    must_ok(idx->write(b, false), "index write");
    must_ok(idx->flush(), "index flush");
  }
  res.setup_s = std::chrono::duration<double>(steady::now() - t0).count();

  options o;
  o.root = root;
  o.quota_bytes = 1ull << 40;
  o.scrub_bytes_per_sec = 0;
  o.reconcile_threads = threads;
  double rss0 = resident_mib();
  span_meter m;
  auto s = must(store::open(o), "open 1M store");
  m.stop();
  res.memory_mib = resident_mib() - rss0;
  res.reconcile_s = m.wall;
  res.reconcile_cpu = m.cpu / m.wall;
  const auto& rep = s->last_reconcile();
  if (rep.rows_loaded != n || rep.rows_dropped != 0 || rep.orphans_adopted != 0) {
    die("reconcile of the bench store found debris: rows " + std::to_string(rep.rows_loaded) +
        " dropped " + std::to_string(rep.rows_dropped));
  }

  // contains/stat on one thread, random order, all present.
  std::mt19937_64 rng(11);
  std::vector<std::uint32_t> order(2'000'000);
  for (auto& x : order) x = static_cast<std::uint32_t>(rng() % n);
  std::uint64_t found = 0;
  span_meter sm;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const digest& id = ids[order[i]];
    if (i & 1) {
      found += s->stat(id).has_value();
    } else {
      found += s->contains(id);
    }
  }
  sm.stop();
  if (found != order.size()) die("lookups missed objects");
  res.stat_ops_s = static_cast<double>(order.size()) / sm.wall;
  res.stat_cpu = sm.cpu / sm.wall;

  // open_read (one openat + bookkeeping) for reference.
  span_meter om;
  const std::size_t opens = 200'000;
  for (std::size_t i = 0; i < opens; ++i) {
    if (!s->open_read(ids[order[i]])) die("open_read failed");
  }
  om.stop();
  res.open_ops_s = static_cast<double>(opens) / om.wall;
  return res;
}

bool mount_tmpfs(const std::string& dir, std::uint64_t bytes) {
  std::string opts = "size=" + std::to_string(bytes);
  return mount("shoal-cache-bench", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0;
}

}  // namespace
}  // namespace shoal::cache::bench

int main(int argc, char** argv) {
  using namespace shoal::cache::bench;
  using namespace shoal;
  std::string json_path, base;
  std::uint64_t ingest_mib = 1024, objects = 1'000'000;
  bool meta_on_disk = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--json")
      json_path = next();
    else if (a == "--dir")
      base = next();
    else if (a == "--ingest-mib")
      ingest_mib = std::stoull(next());
    else if (a == "--objects")
      objects = std::stoull(next());
    else if (a == "--meta-on-disk")
      meta_on_disk = true;
    else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: cache_bench [--json FILE] [--dir DIR] [--ingest-mib N] [--objects N] "
          "[--meta-on-disk]\n");
      return 0;
    } else {
      die("unknown argument " + a);
    }
  }
  log::init(log::format::text, log::level::warn, "cache_bench");
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = std::string(t && *t ? t : "/tmp");
  }
  std::string tmpl = base + "/shoal-cache-bench-XXXXXX";
  if (!mkdtemp(tmpl.data())) die("mkdtemp in " + base);
  const std::string work = tmpl;
  const unsigned threads = std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
  const std::uint64_t total = ingest_mib << 20;
  std::string pattern = [] {
    std::string p(64 << 20, '\0');
    std::mt19937_64 rng(42);
    for (std::size_t i = 0; i < p.size(); i += 8) {
      std::uint64_t v = rng();
      std::memcpy(p.data() + i, &v, 8);
    }
    return p;
  }();

  std::map<std::string, double> num;
  std::map<std::string, std::string> str;

  // 1. Ingest on tmpfs: the pipeline's cost, without the device in the way.
  std::string mem = work + "/tmpfs";
  std::filesystem::create_directories(mem);
  bool on_tmpfs = mount_tmpfs(mem, total + (256ull << 20));
  str["ingest_fs"] = on_tmpfs ? "tmpfs" : "disk (tmpfs mount failed: not root?)";
  {
    ingest_result best;
    double best_ssl = 0, ssl_cpu = 0;
    for (int round = 0; round < 2; ++round) {
      std::string root = mem + "/store" + std::to_string(round);
      ingest_result r = ingest(root, total, pattern);
      if (r.mib_s > best.mib_s) best = r;
      spawn_result o = run({"openssl", "dgst", "-sha256", r.path});
      if (o.out.find(r.id.hex()) == std::string::npos) die("openssl disagrees: " + o.out);
      double ssl = static_cast<double>(total) / (1 << 20) / o.wall;
      if (ssl > best_ssl) {
        best_ssl = ssl;
        ssl_cpu = o.cpu;
      }
      std::filesystem::remove_all(root);
    }
    num["ingest_mib_s"] = best.mib_s;
    num["ingest_cpu"] = best.cpu;
    num["openssl_sha256_mib_s"] = best_ssl;
    num["openssl_cpu"] = ssl_cpu;
    num["ingest_vs_openssl"] = best.mib_s / best_ssl;
  }
  if (on_tmpfs) umount2(mem.c_str(), MNT_DETACH);

  // 2. Ingest on the bench directory's disk, with the raw device baseline.
  {
    num["disk_raw_write_mib_s"] = raw_write_mib_s(work + "/raw.bin", total, pattern);
    ingest_result r = ingest(work + "/disk", total, pattern);
    num["ingest_disk_mib_s"] = r.mib_s;
    num["ingest_disk_cpu"] = r.cpu;
    num["ingest_disk_vs_raw_write"] = r.mib_s / num["disk_raw_write_mib_s"];
    std::filesystem::remove_all(work + "/disk");
  }

  // 3. One million indexed objects, on a tmpfs unless --meta-on-disk: creating and deleting a
  // million inodes on a shared disk takes minutes and measures the disk's journal, not us.
  {
    std::string meta = work + "/meta";
    std::filesystem::create_directories(meta);
    bool meta_tmpfs =
        !meta_on_disk &&
        mount("shoal-cache-bench", meta.c_str(), "tmpfs", 0,
              ("size=2g,nr_inodes=" + std::to_string(objects + 100'000)).c_str()) == 0;
    str["metadata_fs"] = meta_tmpfs ? "tmpfs" : "disk";
    meta_result m = metadata(meta + "/store", objects, threads);
    num["objects"] = static_cast<double>(m.objects);
    num["setup_s"] = m.setup_s;
    num["reconcile_s"] = m.reconcile_s;
    num["reconcile_cpu"] = m.reconcile_cpu;
    num["stat_ops_s"] = m.stat_ops_s;
    num["stat_cpu"] = m.stat_cpu;
    num["open_read_ops_s"] = m.open_ops_s;
    num["index_memory_mib"] = m.memory_mib;
    if (meta_tmpfs) {
      umount2(meta.c_str(), MNT_DETACH);
    } else {
      remove_tree(meta + "/store", threads);
    }
  }
  std::filesystem::remove_all(work);

  const bool ok_ingest = num["ingest_vs_openssl"] >= 0.8;
  const bool ok_stat = num["stat_ops_s"] >= 200'000;
  const bool ok_rec = num["reconcile_s"] <= 10;
  auto yes = [](bool b) { return b ? "ok" : "MISSED"; };
  std::printf("\n%-34s %14s %8s   %s\n", "cache benchmark", "value", "cpu", "target");
  std::printf("%-34s %14.0f %8.2f\n", ("ingest 1 GiB, MiB/s (" + str["ingest_fs"] + ")").c_str(),
              num["ingest_mib_s"], num["ingest_cpu"]);
  std::printf("%-34s %14.0f %8.2f\n", "openssl dgst -sha256, MiB/s", num["openssl_sha256_mib_s"],
              num["openssl_cpu"]);
  std::printf("%-34s %14.2f %8s   >= 0.8 %s\n", "ingest / openssl", num["ingest_vs_openssl"], "",
              yes(ok_ingest));
  std::printf("%-34s %14.0f %8.2f\n", "ingest 1 GiB on disk, MiB/s", num["ingest_disk_mib_s"],
              num["ingest_disk_cpu"]);
  std::printf("%-34s %14.0f %8s\n", "raw write+fdatasync on disk, MiB/s",
              num["disk_raw_write_mib_s"], "");
  std::printf("%-34s %14.2f\n", "ingest on disk / raw write", num["ingest_disk_vs_raw_write"]);
  std::printf("%-34s %14.0f\n", ("indexed objects (" + str["metadata_fs"] + ")").c_str(),
              num["objects"]);
  std::printf("%-34s %14.1f\n", "setup (files + rows), s", num["setup_s"]);
  std::printf("%-34s %14.2f %8.2f   <= 10 %s\n", "start-up reconcile, s", num["reconcile_s"],
              num["reconcile_cpu"], yes(ok_rec));
  std::printf("%-34s %14.0f %8.2f   >= 200000 %s\n", "contains/stat ops/s (1 thread)",
              num["stat_ops_s"], num["stat_cpu"], yes(ok_stat));
  std::printf("%-34s %14.0f\n", "open_read ops/s (1 thread)", num["open_read_ops_s"]);
  std::printf("%-34s %14.0f\n", "memory of the open store, MiB", num["index_memory_mib"]);

  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\n";
    for (const auto& [k, v] : str) f << "  \"" << k << "\": \"" << v << "\",\n";
    f << "  \"targets_met\": {\"ingest_vs_openssl\": " << (ok_ingest ? "true" : "false")
      << ", \"stat_ops_s\": " << (ok_stat ? "true" : "false")
      << ", \"reconcile_s\": " << (ok_rec ? "true" : "false") << "},\n";
    std::size_t i = 0;
    for (const auto& [k, v] : num) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4f", v);
      f << "  \"" << k << "\": " << buf << (++i < num.size() ? ",\n" : "\n");
    }
    f << "}\n";
    if (!f) die("write " + json_path);
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  return 0;
}
