// write_atomic (common/file.h): the new content replaces the old in one step, both the file and
// its directory entry are synced (file first, rename, then directory), and every failure is an
// error naming the step and the path, with no temporary file left behind.

#include "common/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace shoal {
namespace {

namespace fs = std::filesystem;

class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/shoal-file-test-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// What the injected sync saw: the kind of each synced fd and whether the target already held the
// new content at that moment.
struct sync_log {
  std::string target, content;
  std::vector<std::string> calls;  // "file:old" / "dir:new" ...
  int fail_call = -1;              // index of the call that fails with EIO
};
sync_log* current = nullptr;

int recording_sync(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -1;
  std::string kind = S_ISDIR(st.st_mode) ? "dir" : S_ISREG(st.st_mode) ? "file" : "other";
  std::string state = slurp(current->target) == current->content ? "new" : "old";
  current->calls.push_back(kind + ":" + state);
  if (static_cast<int>(current->calls.size()) - 1 == current->fail_call) {
    errno = EIO;
    return -1;
  }
  return ::fsync(fd);
}

// A file just written counts as changed within the settle time; a stamp whose times are an hour
// old does not (a rename sets ctime, so either time counts), nor does a missing file.
TEST(FileStamp, ChangedWithinLooksAtMtimeAndCtime) {
  temp_dir d;
  const std::string p = d.path() + "/f";
  ASSERT_TRUE(write_atomic(p, "x"));
  std::array<file_stamp, 2> fresh{stamp_of(p), stamp_of(d.path() + "/missing")};
  EXPECT_TRUE(changed_within(fresh, std::chrono::seconds(5)));
  file_stamp old = fresh[0];
  const std::int64_t hour_ago = old.mtime_ns - std::int64_t{3600} * 1'000'000'000;
  old.mtime_ns = old.ctime_ns = hour_ago;
  std::array<file_stamp, 2> aged{old, fresh[1]};
  EXPECT_FALSE(changed_within(aged, std::chrono::seconds(5)));
  aged[0].ctime_ns = fresh[0].ctime_ns;  // a rename just now
  EXPECT_TRUE(changed_within(aged, std::chrono::seconds(5)));
}

TEST(WriteAtomic, CreatesAndReplaces) {
  temp_dir t;
  std::string p = t.path() + "/record.json";
  ASSERT_TRUE(write_atomic(p, "first"));
  EXPECT_EQ(slurp(p), "first");
  ASSERT_TRUE(write_atomic(p, std::string(1 << 20, 'x')));
  EXPECT_EQ(slurp(p), std::string(1 << 20, 'x'));
  ASSERT_TRUE(write_atomic(p, ""));
  EXPECT_EQ(fs::file_size(p), 0u);
  EXPECT_EQ(names_in(t.path()), std::vector<std::string>{"record.json"});
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~static_cast<unsigned>(::umask(::umask(0))));
}

// Durability: the file is synced before the rename (the target still holds the old content), the
// directory after it (the target holds the new content); nothing else is synced.
TEST(WriteAtomic, SyncsTheFileThenTheDirectory) {
  temp_dir t;
  sync_log log{t.path() + "/m.json", "new content", {}, -1};
  current = &log;
  ASSERT_TRUE(write_atomic(log.target, "old content"));
  ASSERT_TRUE(write_atomic_for_test(log.target, log.content, recording_sync));
  EXPECT_EQ(log.calls, (std::vector<std::string>{"file:old", "dir:new"}));
  EXPECT_EQ(slurp(log.target), "new content");
  current = nullptr;
}

TEST(WriteAtomic, AFailedFileSyncKeepsTheOldContentAndNoTemp) {
  temp_dir t;
  sync_log log{t.path() + "/m.json", "new content", {}, 0};
  current = &log;
  ASSERT_TRUE(write_atomic(log.target, "old content"));
  auto s = write_atomic_for_test(log.target, log.content, recording_sync);
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().is(errc::io_error));
  EXPECT_EQ(s.error().message.rfind("fsync " + log.target + ".tmp.", 0), 0u) << s.error().message;
  EXPECT_NE(s.error().message.find("Input/output error"), std::string::npos) << s.error().message;
  EXPECT_EQ(slurp(log.target), "old content");
  EXPECT_EQ(names_in(t.path()), std::vector<std::string>{"m.json"});
  current = nullptr;
}

TEST(WriteAtomic, AFailedDirectorySyncIsReported) {
  temp_dir t;
  sync_log log{t.path() + "/m.json", "new content", {}, 1};
  current = &log;
  auto s = write_atomic_for_test(log.target, log.content, recording_sync);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "fsync directory " + t.path() + ": Input/output error");
  EXPECT_EQ(names_in(t.path()), std::vector<std::string>{"m.json"});
  current = nullptr;
}

TEST(WriteAtomic, AMissingDirectoryFailsWithItsName) {
  temp_dir t;
  std::string dir = t.path() + "/no/such/dir";
  auto s = write_atomic(dir + "/x.json", "data");
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().is(errc::not_found));
  EXPECT_EQ(s.error().message.rfind("open directory " + dir + ":", 0), 0u) << s.error().message;
  EXPECT_TRUE(names_in(t.path()).empty());
}

TEST(WriteAtomic, ADirectoryThatIsAFileFails) {
  temp_dir t;
  std::string f = t.path() + "/plain";
  ASSERT_TRUE(write_atomic(f, "x"));
  auto s = write_atomic(f + "/x.json", "data");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("open directory " + f), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("Not a directory"), std::string::npos) << s.error().message;
}

// The rename fails (the target is a non-empty directory): the temp file is removed again.
TEST(WriteAtomic, AFailedRenameLeavesNoTemp) {
  temp_dir t;
  std::string target = t.path() + "/taken";
  fs::create_directories(target + "/inside");
  auto s = write_atomic(target, "data");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message.rfind("rename " + target + ".tmp.", 0), 0u) << s.error().message;
  EXPECT_EQ(names_in(t.path()), std::vector<std::string>{"taken"});
}

// A crashed process may leave its temp file behind, and a restarted daemon may get the same pid
// (PID 1 in a container): the stale name is overwritten, never a reason to fail.
TEST(WriteAtomic, TempFilesLeftByACrashedProcessWithTheSamePidAreOverwritten) {
  temp_dir t;
  std::string p = t.path() + "/r.json";
  constexpr int stale = 200;  // more than the writes this test process made before
  for (int k = 0; k < stale; ++k) {
    std::ofstream(p + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(k))
        << "stale stale stale";
  }
  auto s = write_atomic(p, "fresh");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(slurp(p), "fresh");
  EXPECT_EQ(names_in(t.path()).size(),
            static_cast<std::size_t>(stale));  // one stale name became r.json
}

TEST(WriteAtomic, NotAFilePathIsInvalid) {
  EXPECT_TRUE(write_atomic("", "x").error().is(errc::invalid_argument));
  EXPECT_TRUE(write_atomic("/tmp/", "x").error().is(errc::invalid_argument));
}

// A relative path writes beside it in the working directory.
TEST(WriteAtomic, RelativePath) {
  temp_dir t;
  auto cwd = fs::current_path();
  fs::current_path(t.path());
  auto s = write_atomic("rel.json", "r");
  fs::current_path(cwd);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(slurp(t.path() + "/rel.json"), "r");
}

}  // namespace
}  // namespace shoal
