// ENOSPC from a real, small, size-limited filesystem (a tmpfs mounted for the test): the store
// evicts and retries once, and otherwise fails with errc::no_space leaving nothing partial.
// The quota is set far above the filesystem so that the kernel, not our accounting, says no.

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;

constexpr std::size_t mib = 1 << 20;

// A tmpfs of `size_mib` mounted on a fresh temp directory; unmounted on destruction.
class small_fs {
 public:
  explicit small_fs(int size_mib) {
    std::string opts = "size=" + std::to_string(size_mib) + "m,mode=0755";
    if (::mount("shoal-cache-test", dir_.path().c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      why_ = std::string("mount tmpfs: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~small_fs() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  [[nodiscard]] bool mounted() const { return mounted_; }
  [[nodiscard]] const std::string& why() const { return why_; }
  [[nodiscard]] std::string path() const { return dir_.path(); }

 private:
  temp_dir dir_;
  bool mounted_ = false;
  std::string why_;
};

// Fills the filesystem with a foreign file until the kernel refuses; returns its path.
std::string fill_up(const std::string& dir) {
  std::string path = dir + "/ballast";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return path;
  std::string chunk(64 << 10, 'b');
  while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size()) {
  }
  std::fclose(f);
  // Smaller pieces for the last partial chunk.
  f = std::fopen((path + "2").c_str(), "wb");
  if (f) {
    while (std::fwrite(chunk.data(), 1, 512, f) == 512) {
    }
    std::fclose(f);
  }
  return path;
}

struct CacheNoSpace : ::testing::Test {
  void SetUp() override {
    fs = std::make_unique<small_fs>(24);
    if (!fs->mounted()) {
      GTEST_SKIP() << "cannot mount a tmpfs for the ENOSPC test (" << fs->why()
                   << "); needs root or CAP_SYS_ADMIN";
    }
    options o = test_options(fs->path() + "/cache", 1ull << 40);
    s = open_store(o);
    ASSERT_TRUE(s);
    sub = s->on_event([this](const event& e) { events.push_back(e); });
    for (int i = 0; i < 8; ++i) {
      contents.push_back(random_bytes(mib, 900 + static_cast<std::uint64_t>(i)));
      auto r = put(*s, contents.back());
      ASSERT_TRUE(r) << r.error().to_string();
    }
    events.clear();
    ballast = fill_up(fs->path());
  }
  int evicted(evict_reason why) const {
    int n = 0;
    for (const auto& e : events) n += e.type == event_type::evicted && e.reason == why;
    return n;
  }

  std::unique_ptr<small_fs> fs;
  std::unique_ptr<store> s;
  subscription sub;
  std::vector<event> events;
  std::vector<std::string> contents;
  std::string ballast;
};

TEST_F(CacheNoSpace, KnownSizeEvictsAndRetries) {
  std::string big = random_bytes(2 * mib, 1);
  auto t = s->begin_write(sha256_of(big), big.size(), object_kind::blob);
  ASSERT_TRUE(t) << t.error().to_string();
  ASSERT_TRUE(t->writer->write(big));
  auto r = t->writer->commit();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(read_all(*s, sha256_of(big)), big);
  EXPECT_GE(evicted(evict_reason::no_space), 2);
  // The oldest went first.
  EXPECT_FALSE(s->contains(sha256_of(contents[0])));
  EXPECT_TRUE(s->contains(sha256_of(contents[7])));
}

TEST_F(CacheNoSpace, UnknownSizeEvictsAndRetries) {
  std::string big = random_bytes(2 * mib, 2);
  auto t = s->begin_write(sha256_of(big), std::nullopt, object_kind::blob);
  ASSERT_TRUE(t) << t.error().to_string();
  for (std::size_t off = 0; off < big.size(); off += 256 << 10) {
    auto w = t->writer->write(std::string_view(big).substr(off, 256 << 10));
    ASSERT_TRUE(w) << w.error().to_string();
  }
  auto r = t->writer->commit();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(read_all(*s, sha256_of(big)), big);
  EXPECT_GE(evicted(evict_reason::no_space), 1);
}

TEST_F(CacheNoSpace, NothingEvictableFailsClearlyAndLeavesNothing) {
  for (const auto& c : contents) ASSERT_TRUE(s->pin(sha256_of(c), "job"));
  std::string big = random_bytes(2 * mib, 3);
  digest id = sha256_of(big);
  // Known size: refused up front by fallocate.
  auto t = s->begin_write(id, big.size(), object_kind::blob);
  ASSERT_FALSE(t);
  EXPECT_TRUE(t.error().is(errc::no_space)) << t.error().to_string();
  EXPECT_NE(t.error().message.find("even after evicting"), std::string::npos)
      << t.error().to_string();
  // Unknown size: refused while streaming.
  auto t2 = s->begin_write(id, std::nullopt, object_kind::blob);
  ASSERT_TRUE(t2);
  status w;
  for (std::size_t off = 0; off < big.size() && w; off += 256 << 10) {
    w = t2->writer->write(std::string_view(big).substr(off, 256 << 10));
  }
  ASSERT_FALSE(w);
  EXPECT_TRUE(w.error().is(errc::no_space)) << w.error().to_string();
  EXPECT_EQ(t2->inflight->state(), write_state::failed);
  EXPECT_FALSE(s->contains(id));
  EXPECT_TRUE(list_dir(fs->path() + "/cache/tmp").empty());
  EXPECT_EQ(evicted(evict_reason::no_space), 0);
  EXPECT_GE(s->get_stats().no_space_errors, 2u);
  for (const auto& c : contents) EXPECT_EQ(read_all(*s, sha256_of(c)), c);

  // Once space returns, the store works again (the index accepted writes throughout).
  ASSERT_EQ(::unlink(ballast.c_str()), 0);
  ::unlink((ballast + "2").c_str());
  auto ok = put(*s, big);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(read_all(*s, id), big);
  s.reset();
  s = open_store(test_options(fs->path() + "/cache", 1ull << 40));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->contains(id));
  EXPECT_EQ(s->last_reconcile().rows_dropped, 0u);
}

}  // namespace
}  // namespace shoal::cache
