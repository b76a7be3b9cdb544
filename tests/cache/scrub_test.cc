// Scrub: rehashing committed objects, quarantining mismatches, dropping vanished files, order
// (least recently verified first), throttling and the background thread.

#include <fcntl.h>
#include <sys/stat.h>

#include <thread>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;
using namespace std::chrono_literals;

// Flips one byte of a committed (read-only) object behind the store's back: bit rot.
void corrupt(const std::string& path, std::size_t offset) {
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c = static_cast<char>(c ^ 0x5a);
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
  ::chmod(path.c_str(), 0444);
}

TEST(CacheScrub, CorruptObjectsAreQuarantinedAndReported) {
  temp_dir dir;
  auto clk = std::make_shared<fake_clock>();
  auto s = open_store(test_options(dir.path(), 1ull << 30, clk));
  std::vector<std::string> c;
  for (int i = 0; i < 4; ++i) {
    c.push_back(random_bytes(20'000, 40 + static_cast<std::uint64_t>(i)));
    ASSERT_TRUE(put(*s, c.back()));
  }
  std::vector<event> events;
  auto sub = s->on_event([&](const event& e) { events.push_back(e); });
  corrupt(s->object_path(sha256_of(c[1])), 12345);
  ASSERT_EQ(::unlink(s->object_path(sha256_of(c[2])).c_str()), 0);

  clk->advance(1s);
  scrub_report rep = s->scrub_once();
  EXPECT_EQ(rep.objects, 2u);
  EXPECT_EQ(rep.mismatches, 1u);
  EXPECT_EQ(rep.missing, 1u);
  EXPECT_EQ(rep.errors, 0u);
  EXPECT_EQ(rep.bytes, 3u * 20'000);
  EXPECT_FALSE(s->contains(sha256_of(c[1])));
  EXPECT_FALSE(s->contains(sha256_of(c[2])));
  EXPECT_TRUE(s->contains(sha256_of(c[0])));
  EXPECT_EQ(s->stat(sha256_of(c[0]))->last_scrub, clk->now());

  // The corrupt bytes are kept for inspection, out of the object tree.
  auto q = list_dir(dir.path() + "/quarantine");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].substr(0, 64), sha256_of(c[1]).hex());
  EXPECT_NE(::access(s->object_path(sha256_of(c[1])).c_str(), F_OK), 0);

  ASSERT_EQ(events.size(), 2u);
  bool saw_quarantine = false, saw_removed = false;
  for (const auto& e : events) {
    if (e.type == event_type::quarantined && e.id == sha256_of(c[1])) saw_quarantine = true;
    if (e.type == event_type::removed && e.id == sha256_of(c[2])) saw_removed = true;
  }
  EXPECT_TRUE(saw_quarantine);
  EXPECT_TRUE(saw_removed);
  auto st = s->get_stats();
  EXPECT_EQ(st.scrub_mismatches, 1u);
  EXPECT_EQ(st.scrub_missing, 1u);
  EXPECT_EQ(st.scrubbed_objects, 2u);
  EXPECT_EQ(st.objects, 2u);
  EXPECT_EQ(st.bytes, 40'000u);

  // The index agrees after a restart.
  s.reset();
  s = open_store(test_options(dir.path(), 1ull << 30, clk));
  EXPECT_EQ(s->list().size(), 2u);
  EXPECT_EQ(s->last_reconcile().rows_dropped, 0u);
}

TEST(CacheScrub, LeastRecentlyVerifiedFirstWithinTheByteBudget) {
  temp_dir dir;
  auto clk = std::make_shared<fake_clock>();
  auto s = open_store(test_options(dir.path(), 1ull << 30, clk));
  std::vector<digest> ids;
  for (int i = 0; i < 3; ++i) {
    clk->advance(1s);
    std::string c = random_bytes(1000, 60 + static_cast<std::uint64_t>(i));
    ASSERT_TRUE(put(*s, c));
    ids.push_back(sha256_of(c));
  }
  clk->advance(1s);
  auto before = [&](int i) { return s->stat(ids[static_cast<std::size_t>(i)])->last_scrub; };
  auto t0 = before(0), t1 = before(1), t2 = before(2);
  scrub_report r = s->scrub_once(1000);  // budget: one object
  EXPECT_EQ(r.objects, 1u);
  EXPECT_GT(before(0), t0);  // the oldest verified went first
  EXPECT_EQ(before(1), t1);
  EXPECT_EQ(before(2), t2);
  clk->advance(1s);
  r = s->scrub_once(1000);
  EXPECT_EQ(r.objects, 1u);
  EXPECT_GT(before(1), t1);
  EXPECT_EQ(before(2), t2);
  // Scrubbing is not reading: no hits, no access time change.
  EXPECT_EQ(s->get_stats().hits, 0u);
  EXPECT_EQ(s->stat(ids[0])->hit_count, 0u);
}

TEST(CacheScrub, ThrottleBoundsTheRate) {
  temp_dir dir;
  options o = test_options(dir.path());
  o.scrub_bytes_per_sec = 4 << 20;  // 4 MiB/s
  auto s = open_store(o);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(put(*s, random_bytes(512 << 10, 70 + static_cast<std::uint64_t>(i))));
  auto start = std::chrono::steady_clock::now();
  scrub_report r = s->scrub_once(UINT64_MAX, true);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.objects, 4u);
  // 2 MiB at 4 MiB/s: at least ~0.5 s (allow for the first chunk being free).
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 5s);
  // Unthrottled it is much faster.
  start = std::chrono::steady_clock::now();
  r = s->scrub_once(UINT64_MAX, false);
  EXPECT_EQ(r.objects, 4u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 400ms);
}

// stop() during a throttled pause ends the pass at once; the object it was reading counts for
// nothing (neither verified nor its bytes), and a pass after stop() does not start.
TEST(CacheScrub, StopInterruptsAThrottledPass) {
  temp_dir dir;
  options o = test_options(dir.path());
  o.scrub_bytes_per_sec = 1 << 20;  // 1 MiB/s: the first 1 MiB chunk is followed by a ~1 s pause
  auto s = open_store(o);
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(put(*s, random_bytes(2 << 20, 90 + static_cast<std::uint64_t>(i))));
  scrub_report r;
  auto start = std::chrono::steady_clock::now();
  std::thread pass([&] { r = s->scrub_once(UINT64_MAX, true); });
  std::this_thread::sleep_for(300ms);
  s->stop();
  pass.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // the whole pass would take 4 s
  EXPECT_EQ(r.objects, 0u);
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(s->get_stats().scrubbed_bytes, 0u);
  scrub_report after = s->scrub_once(UINT64_MAX, false);
  EXPECT_EQ(after.objects, 0u);
  EXPECT_EQ(after.bytes, 0u);
}

TEST(CacheScrub, BackgroundThreadFindsCorruption) {
  temp_dir dir;
  auto clk = std::make_shared<fake_clock>();
  options o = test_options(dir.path(), 1ull << 30, clk);
  o.scrub_bytes_per_sec = 256 << 20;
  o.scrub_interval = 1s;
  auto s = open_store(o);
  std::string c = random_bytes(100'000, 80);
  ASSERT_TRUE(put(*s, c));
  corrupt(s->object_path(sha256_of(c)), 5);
  clk->advance(5s);  // older than scrub_interval: due
  s->start_background();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (s->contains(sha256_of(c)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(s->contains(sha256_of(c)));
  EXPECT_EQ(s->get_stats().scrub_mismatches, 1u);
  s->stop();  // returns promptly although the scrub thread may be sleeping
}

}  // namespace
}  // namespace shoal::cache
