#pragma once
// Helpers shared by the cache tests: temp directories, deterministic content, a fake clock and
// one-call put/read wrappers. Header-only because every *_test.cc is its own executable.

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/store.h"
#include "common/sha256.h"

namespace shoal::cache::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/shoal-cache-test-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (!p) std::abort();
    path_ = p;
  }
  ~temp_dir() {
    std::error_code ec;
    // Sealed (immutable) files refuse their unlink: lift the seals first (seal_test).
    for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
      int flags = 0;
      if (fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_IMMUTABLE_FL)) {
        flags &= ~FS_IMMUTABLE_FL;
        ::ioctl(fd, FS_IOC_SETFLAGS, &flags);
      }
      if (fd >= 0) ::close(fd);
    }
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t v = rng();
    for (std::size_t j = 0; j < 8 && i + j < n; ++j) s[i + j] = static_cast<char>(v >> (8 * j));
  }
  return s;
}

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A settable clock for pins, idle TTL and scrub ages.
struct fake_clock {
  std::atomic<std::int64_t> ms{1'700'000'000'000};
  time_point now() const {
    return time_point(
        std::chrono::duration_cast<clock::duration>(std::chrono::milliseconds(ms.load())));
  }
  void advance(std::chrono::milliseconds d) { ms += d.count(); }
};

inline options test_options(const std::string& root, std::uint64_t quota = 1ull << 30) {
  options o;
  o.root = root;
  o.quota_bytes = quota;
  o.scrub_bytes_per_sec = 0;  // no background scrub unless a test wants it
  return o;
}

inline options test_options(const std::string& root, std::uint64_t quota,
                            const std::shared_ptr<fake_clock>& clk) {
  options o = test_options(root, quota);
  o.clock = [clk] { return clk->now(); };
  return o;
}

inline std::unique_ptr<store> open_store(const options& o) {
  auto s = store::open(o);
  EXPECT_TRUE(s.has_value()) << s.error().to_string();
  return s ? std::move(*s) : nullptr;
}

// Writes and commits `content` in one go.
inline result<object_info> put(store& s, std::string_view content,
                               object_kind kind = object_kind::blob) {
  digest id = sha256_of(content);
  auto t = s.begin_write(id, content.size(), kind);
  if (!t) return std::unexpected(t.error());
  if (t->role != write_role::writer) return fail(errc::already_exists, "not the writer");
  if (auto st = t->writer->write(content); !st) return std::unexpected(st.error());
  return t->writer->commit();
}

inline std::string read_all(store& s, const digest& id) {
  auto r = s.open_read(id);
  if (!r) return "<" + r.error().to_string() + ">";
  auto data = r->read_all();
  return data ? *data : "<" + data.error().to_string() + ">";
}

// Names of the entries of a directory (without . and ..).
inline std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) return out;
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// Every file under objects/sha256/*/ as "<hh>/<name>".
inline std::vector<std::string> object_files(const std::string& root) {
  std::vector<std::string> out;
  std::string base = root + "/objects/sha256";
  for (const auto& shard : list_dir(base)) {
    for (const auto& f : list_dir(base + "/" + shard)) out.push_back(shard + "/" + f);
  }
  return out;
}

inline void write_file(const std::string& path, std::string_view content, mode_t mode = 0644) {
  ::unlink(path.c_str());
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(content.data(), 1, content.size(), f), content.size());
  std::fclose(f);
  ::chmod(path.c_str(), mode);
}

}  // namespace shoal::cache::testing
