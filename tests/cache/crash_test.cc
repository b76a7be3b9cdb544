// Crash safety: a child process writes, commits, adopts, aborts and removes objects in a loop
// (some with wrong digests) and is killed with SIGKILL at random moments, including during
// open/reconcile. After every kill the parent reopens the store and checks that the index and
// the files agree, that every readable object verifies, that nothing half-written is visible,
// and that every commit the child saw succeed (and did not remove afterwards) survived.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;
using namespace std::chrono_literals;

options crash_options(const std::string& root) {
  options o = test_options(root, 1ull << 30);
  o.maintenance_interval = 5ms;
  o.access_flush_interval = 5ms;
  return o;
}

void report(int fd, char what, const digest& id) {
  std::string line = std::string(1, what) + " " + id.hex() + "\n";
  // One write(2) per line: a kill can cut the last line short, never interleave two.
  (void)!::write(fd, line.data(), line.size());
}

// The child: never returns (it is killed, or _exits on an unexpected failure to open).
[[noreturn]] void child_loop(const std::string& root, int out, std::uint64_t seed) {
  auto s = store::open(crash_options(root));
  if (!s) ::_exit(3);
  (*s)->start_background();
  std::mt19937_64 rng(seed);
  std::vector<digest> mine;
  std::string staging = root + "/staging";
  ::mkdir(staging.c_str(), 0755);
  for (std::uint64_t n = 0;; ++n) {
    std::size_t size = rng() % (48 << 10);
    std::string content = random_bytes(size, seed * 1000003 + n);
    digest id = sha256_of(content);
    unsigned action = static_cast<unsigned>(rng() % 100);
    if (action < 60 || action >= 95) {
      // A normal write in random-sized chunks; sometimes without a known size.
      bool bad = action >= 95;  // claims a digest its bytes do not have
      digest claim = bad ? sha256_of(content + "!") : id;
      if (bad) report(out, 'B', claim);
      std::optional<std::uint64_t> expected;
      if (rng() % 2) expected = size;
      auto t = (*s)->begin_write(claim, expected, object_kind::blob);
      if (!t || t->role != write_role::writer) continue;
      bool ok = true;
      for (std::size_t off = 0; off < size && ok;) {
        std::size_t len = std::min<std::size_t>(size - off, 1 + rng() % 40000);
        ok = t->writer->write(std::string_view(content).substr(off, len)).has_value();
        off += len;
      }
      if (ok && t->writer->commit() && !bad) {
        report(out, 'C', id);
        mine.push_back(id);
      }
    } else if (action < 70) {
      // Abandon a write half way.
      auto t = (*s)->begin_write(id, size, object_kind::blob);
      if (t && t->role == write_role::writer) {
        (void)t->writer->write(std::string_view(content).substr(0, size / 2));
      }
    } else if (action < 80) {
      // Adopt a file written elsewhere on the same filesystem (peerd/libtorrent).
      std::string path = staging + "/" + std::to_string(n);
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) continue;
      (void)!::write(fd, content.data(), content.size());
      ::close(fd);
      if ((*s)->adopt_file(path, id, object_kind::dataset_file)) {
        report(out, 'C', id);
        mine.push_back(id);
      }
      ::unlink(path.c_str());
    } else if (action < 88) {
      if (mine.empty()) continue;
      std::size_t i = rng() % mine.size();
      report(out, 'R', mine[i]);  // before: a kill after the unlink must not count as a loss
      (void)(*s)->remove(mine[i]);
      mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      if (mine.empty()) continue;
      auto r = (*s)->open_read(mine[rng() % mine.size()]);
      if (r) (void)r->read_all();
      (void)(*s)->pin(mine[rng() % mine.size()], "child", time_point{} + 1h);
    }
  }
}

struct child_log {
  std::set<digest> committed;  // reported committed and not reported removed since
  std::set<digest> bad;        // claims whose bytes never matched
};

void parse(const std::string& text, child_log& log) {
  std::size_t pos = 0;
  while (true) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // a torn last line: ignore
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.size() != 66) continue;
    auto id = digest::from_hex(line.substr(2));
    if (!id) continue;
    if (line[0] == 'C') log.committed.insert(*id);
    if (line[0] == 'R') log.committed.erase(*id);
    if (line[0] == 'B') log.bad.insert(*id);
  }
}

TEST(CacheCrash, KillNineAtRandomPointsLeavesAConsistentStore) {
  temp_dir dir;
  std::string root = dir.path() + "/cache";
  const std::uint64_t seed =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  child_log log;
  const auto start = std::chrono::steady_clock::now();
  int iterations = 0;
  std::uint64_t max_objects = 0, debris_fixed = 0;
  // At least 30 kills; more while there is time (15 s), at most 80.
  while (iterations < 30 || (std::chrono::steady_clock::now() - start < 15s && iterations < 80)) {
    ++iterations;
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(p[0]);
      child_loop(root, p[1], seed + static_cast<std::uint64_t>(iterations));
    }
    ::close(p[1]);
    // Random kill time: early ones land in open/reconcile, later ones mid-write or mid-commit.
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 250'000));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited on its own with " << WEXITSTATUS(status);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;)
      text.append(buf, static_cast<std::size_t>(n));
    ::close(p[0]);
    parse(text, log);

    auto s = open_store(crash_options(root));
    ASSERT_TRUE(s) << "iteration " << iterations;
    const auto& rep = s->last_reconcile();
    debris_fixed +=
        rep.temp_files_removed + rep.rows_dropped + rep.orphans_adopted + rep.orphans_removed;
    EXPECT_EQ(rep.bad_rows_dropped, 0u);
    // 1. Every indexed object is a complete, verified, read-only file.
    std::set<std::string> indexed;
    for (const auto& info : s->list()) {
      std::string data = read_all(*s, info.id);
      ASSERT_EQ(data.size(), info.size) << info.id.str() << " iteration " << iterations;
      ASSERT_EQ(sha256_of(data), info.id) << "iteration " << iterations;
      struct stat st {};
      ASSERT_EQ(::stat(s->object_path(info.id).c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0444u);
      indexed.insert(info.id.hex().substr(0, 2) + "/" + info.id.hex());
    }
    // 2. No unindexed file in objects/, nothing in tmp/.
    auto files = object_files(root);
    EXPECT_EQ(std::set<std::string>(files.begin(), files.end()), indexed)
        << "iteration " << iterations;
    EXPECT_TRUE(list_dir(root + "/tmp").empty());
    // 3. Commits the child saw succeed survived; wrong-digest writes never became visible.
    for (const digest& d : log.committed) {
      EXPECT_TRUE(s->contains(d)) << d.str() << " lost, iteration " << iterations;
    }
    for (const digest& d : log.bad) EXPECT_FALSE(s->contains(d)) << d.str();
    max_objects = std::max<std::uint64_t>(max_objects, indexed.size());
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GE(iterations, 30);
  // The test must have exercised something: objects were committed across kills.
  EXPECT_GT(max_objects, 0u);
  std::printf("crash test: %d kills, %zu commits reported, up to %llu objects, %llu debris fixed\n",
              iterations, log.committed.size(), static_cast<unsigned long long>(max_objects),
              static_cast<unsigned long long>(debris_fixed));
}

}  // namespace
}  // namespace shoal::cache
