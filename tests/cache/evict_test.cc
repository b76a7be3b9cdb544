// Capacity: LRU eviction between the watermarks, idle TTL, pins (counted, with expiry), in-flight
// protection, explicit removal, the hard capacity limit and the background thread.

#include <algorithm>
#include <set>
#include <thread>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;
using namespace std::chrono_literals;

constexpr std::size_t obj = 100;

std::string content(int i) { return random_bytes(obj, 5000 + static_cast<std::uint64_t>(i)); }
digest id_of(int i) { return sha256_of(content(i)); }

// quota 1000: high watermark 850, low 700.
struct CacheEvict : ::testing::Test {
  temp_dir dir;
  std::shared_ptr<fake_clock> clk = std::make_shared<fake_clock>();
  std::unique_ptr<store> s;
  std::vector<event> events;
  subscription sub;

  void open(std::chrono::seconds ttl = 0s) {
    options o = test_options(dir.path(), 1000, clk);
    o.idle_ttl = ttl;
    s = open_store(o);
    ASSERT_TRUE(s);
    sub = s->on_event([this](const event& e) {
      if (e.type != event_type::committed) events.push_back(e);
    });
  }
  // Commits objects [from, to), one clock second apart, so their LRU order is known.
  void fill(int from, int to) {
    for (int i = from; i < to; ++i) {
      clk->advance(1s);
      auto r = put(*s, content(i));
      ASSERT_TRUE(r) << r.error().to_string();
    }
  }
  std::set<int> present(int n) {
    std::set<int> out;
    for (int i = 0; i < n; ++i) {
      if (s->contains(id_of(i))) out.insert(i);
    }
    return out;
  }
};

TEST_F(CacheEvict, BelowTheHighWatermarkNothingIsEvicted) {
  open();
  fill(0, 8);  // 800 <= 850
  s->run_maintenance();
  EXPECT_EQ(present(8).size(), 8u);
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(s->get_stats().evictions, 0u);
}

TEST_F(CacheEvict, LeastRecentlyUsedGoFirstDownToTheLowWatermark) {
  open();
  fill(0, 8);
  // Touch 0 and 1 so that 2 and 3 become the least recently used.
  clk->advance(1s);
  ASSERT_TRUE(s->open_read(id_of(0)));
  ASSERT_TRUE(s->open_read(id_of(1)));
  fill(8, 9);  // 900 > 850
  s->run_maintenance();
  // Down to <= 700: two objects go, the two least recently used.
  EXPECT_EQ(present(9), (std::set<int>{0, 1, 4, 5, 6, 7, 8}));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, event_type::evicted);
  EXPECT_EQ(events[0].id, id_of(2));
  EXPECT_EQ(events[0].reason, evict_reason::watermark);
  EXPECT_EQ(events[1].id, id_of(3));
  EXPECT_EQ(s->usage_bytes(), 700u);
  auto st = s->get_stats();
  EXPECT_EQ(st.evictions, 2u);
  EXPECT_EQ(st.evicted_bytes, 200u);
  EXPECT_EQ(object_files(dir.path()).size(), 7u);
  // An evicted object is a miss; a reader holding it open keeps reading.
  EXPECT_FALSE(s->open_read(id_of(2)));
}

TEST_F(CacheEvict, OpenReaderSurvivesEviction) {
  open();
  fill(0, 3);
  auto r = s->open_read(id_of(0));
  ASSERT_TRUE(r);
  EXPECT_EQ(s->evict_to(0), 300u);
  EXPECT_FALSE(s->contains(id_of(0)));
  EXPECT_EQ(*r->read_all(), content(0));
  EXPECT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].reason, evict_reason::requested);
}

TEST_F(CacheEvict, PinsProtectAndAreCountedPerOwner) {
  open();
  fill(0, 5);
  ASSERT_TRUE(s->pin(id_of(0), "view:a"));
  ASSERT_TRUE(s->pin(id_of(0), "view:a"));  // count 2
  ASSERT_TRUE(s->pin(id_of(1), "job:7", clk->now() + 60s));
  ASSERT_TRUE(s->pin(id_of(9), "prefetch"));  // not present yet: protects it once it arrives
  EXPECT_TRUE(s->stat(id_of(0))->pinned);
  ASSERT_EQ(s->stat(id_of(0))->pins.size(), 1u);
  EXPECT_EQ(s->stat(id_of(0))->pins[0].count, 2u);
  EXPECT_EQ(s->stat(id_of(0))->pins[0].owner, "view:a");
  EXPECT_FALSE(s->stat(id_of(0))->pins[0].expiry);
  EXPECT_EQ(s->get_stats().pinned_objects, 3u);
  EXPECT_EQ(s->get_stats().pinned_bytes, 200u);  // 9 is not present: no bytes yet

  EXPECT_EQ(s->evict_to(0), 300u);
  EXPECT_EQ(present(10), (std::set<int>{0, 1}));
  auto rm = s->remove(id_of(0));
  ASSERT_FALSE(rm);
  EXPECT_TRUE(rm.error().is(errc::busy));
  EXPECT_NE(rm.error().message.find("view:a"), std::string::npos);

  // One unpin leaves one count.
  ASSERT_TRUE(s->unpin(id_of(0), "view:a"));
  s->evict_to(0);
  EXPECT_TRUE(s->contains(id_of(0)));
  ASSERT_TRUE(s->unpin(id_of(0), "view:a"));
  auto extra = s->unpin(id_of(0), "view:a");
  ASSERT_FALSE(extra);
  EXPECT_TRUE(extra.error().is(errc::not_found));
  EXPECT_FALSE(s->unpin(id_of(0), "nobody"));
  EXPECT_FALSE(s->pin(id_of(0), ""));  // empty owner
  s->evict_to(0);
  EXPECT_FALSE(s->contains(id_of(0)));

  // The expiring pin holds until its time, then stops protecting and is pruned.
  clk->advance(59s);
  s->evict_to(0);
  EXPECT_TRUE(s->contains(id_of(1)));
  clk->advance(2s);
  EXPECT_FALSE(s->stat(id_of(1))->pinned);
  s->evict_to(0);
  EXPECT_FALSE(s->contains(id_of(1)));
  s->run_maintenance();
  EXPECT_EQ(s->get_stats().pinned_objects, 1u);  // only the pre-pin of id 9

  // The pre-pinned object is protected as soon as it is committed.
  fill(9, 10);
  s->evict_to(0);
  EXPECT_TRUE(s->contains(id_of(9)));
  EXPECT_EQ(s->get_stats().pinned_bytes, 100u);
}

TEST_F(CacheEvict, ExpiryExtendsAndExpiredPinsRestart) {
  open();
  fill(0, 1);
  ASSERT_TRUE(s->pin(id_of(0), "o", clk->now() + 10s));
  ASSERT_TRUE(s->pin(id_of(0), "o", clk->now() + 5s));  // the later expiry wins
  EXPECT_EQ(*s->stat(id_of(0))->pins[0].expiry, clk->now() + 10s);
  clk->advance(11s);
  EXPECT_FALSE(s->stat(id_of(0))->pinned);
  // Pinning again after expiry starts a fresh count of one.
  ASSERT_TRUE(s->pin(id_of(0), "o", clk->now() + 10s));
  EXPECT_EQ(s->stat(id_of(0))->pins[0].count, 1u);
  ASSERT_TRUE(s->pin(id_of(0), "o"));  // no expiry: never expires
  EXPECT_FALSE(s->stat(id_of(0))->pins[0].expiry);
}

TEST_F(CacheEvict, RenewPinSetsTheExpiryAndKeepsTheCount) {
  open();
  fill(0, 3);
  // A live pin of count 2: the count stays, the expiry becomes the new one, later or earlier.
  ASSERT_TRUE(s->pin(id_of(0), "o", clk->now() + 10s));
  ASSERT_TRUE(s->pin(id_of(0), "o", clk->now() + 10s));
  ASSERT_TRUE(s->renew_pin(id_of(0), "o", clk->now() + 60s));
  auto i0 = s->stat(id_of(0));
  ASSERT_EQ(i0->pins.size(), 1u);
  EXPECT_EQ(i0->pins[0].count, 2u);
  EXPECT_EQ(*i0->pins[0].expiry, clk->now() + 60s);
  ASSERT_TRUE(s->renew_pin(id_of(0), "o", clk->now() + 20s));
  EXPECT_EQ(*s->stat(id_of(0))->pins[0].expiry, clk->now() + 20s);
  ASSERT_TRUE(s->renew_pin(id_of(0), "o", std::nullopt));
  EXPECT_FALSE(s->stat(id_of(0))->pins[0].expiry);
  EXPECT_EQ(s->stat(id_of(0))->pins[0].count, 2u);
  // A never-expiring pin gets an expiry (what pin() cannot do: it keeps "never").
  ASSERT_TRUE(s->renew_pin(id_of(0), "o", clk->now() + 5s));
  EXPECT_EQ(*s->stat(id_of(0))->pins[0].expiry, clk->now() + 5s);

  // Without a pin, or with an expired one, it makes one with a count of one.
  ASSERT_TRUE(s->renew_pin(id_of(1), "o", clk->now() + 30s));
  EXPECT_EQ(s->stat(id_of(1))->pins[0].count, 1u);
  ASSERT_TRUE(s->pin(id_of(2), "o", clk->now() + 1s));
  ASSERT_TRUE(s->pin(id_of(2), "o", clk->now() + 1s));
  clk->advance(2s);
  EXPECT_FALSE(s->stat(id_of(2))->pinned);
  ASSERT_TRUE(s->renew_pin(id_of(2), "o", clk->now() + 30s));
  EXPECT_TRUE(s->stat(id_of(2))->pinned);
  EXPECT_EQ(s->stat(id_of(2))->pins[0].count, 1u);
  ASSERT_TRUE(s->unpin(id_of(2), "o"));
  EXPECT_FALSE(s->stat(id_of(2))->pinned);

  EXPECT_FALSE(s->renew_pin(id_of(0), "", clk->now() + 5s));  // empty owner

  // The renewed expiry protects, survives a reopen and then ends.
  s->evict_to(0);
  EXPECT_EQ(present(3), (std::set<int>{0, 1}));
  sub.reset();
  s.reset();
  open();
  EXPECT_EQ(*s->stat(id_of(1))->pins[0].expiry, clk->now() + 28s);
  EXPECT_EQ(s->stat(id_of(0))->pins[0].count, 2u);
  clk->advance(29s);
  s->evict_to(0);
  EXPECT_EQ(present(3), std::set<int>{});
}

TEST_F(CacheEvict, PinsSurviveReopen) {
  open();
  fill(0, 2);
  ASSERT_TRUE(s->pin(id_of(0), "view:a"));
  ASSERT_TRUE(s->pin(id_of(0), "view:a"));
  ASSERT_TRUE(s->pin(id_of(1), "job", clk->now() + 30s));
  sub.reset();
  s.reset();
  open();
  auto i0 = s->stat(id_of(0));
  ASSERT_TRUE(i0);
  ASSERT_EQ(i0->pins.size(), 1u);
  EXPECT_EQ(i0->pins[0].count, 2u);
  EXPECT_TRUE(i0->pinned);
  auto i1 = s->stat(id_of(1));
  ASSERT_EQ(i1->pins.size(), 1u);
  EXPECT_EQ(*i1->pins[0].expiry, clk->now() + 30s);
  s->evict_to(0);
  EXPECT_EQ(present(2), (std::set<int>{0, 1}));
}

TEST_F(CacheEvict, IdleObjectsGoRegardlessOfUsage) {
  open(60s);
  fill(0, 4);  // usage 400, far below the high watermark
  clk->advance(50s);
  ASSERT_TRUE(s->open_read(id_of(1)));
  ASSERT_TRUE(s->pin(id_of(2), "keep"));
  clk->advance(20s);  // 0, 2, 3 idle for more than 60 s; 1 read 20 s ago
  s->run_maintenance();
  EXPECT_EQ(present(4), (std::set<int>{1, 2}));
  ASSERT_EQ(events.size(), 2u);
  for (const auto& e : events) EXPECT_EQ(e.reason, evict_reason::idle_ttl);
  EXPECT_EQ(s->get_stats().ttl_evictions, 2u);
}

TEST_F(CacheEvict, InFlightObjectsAreNeverEvicted) {
  open();
  fill(0, 3);
  std::string big = random_bytes(400, 77);
  auto t = s->begin_write(sha256_of(big), big.size(), object_kind::blob);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->writer->write(std::string_view(big).substr(0, 200)));
  EXPECT_EQ(s->usage_bytes(), 700u);  // 300 committed + 400 reserved
  auto rm = s->remove(sha256_of(big));
  ASSERT_FALSE(rm);
  EXPECT_TRUE(rm.error().is(errc::busy));
  s->evict_to(0);
  EXPECT_EQ(s->usage_bytes(), 400u);
  ASSERT_TRUE(t->writer->write(std::string_view(big).substr(200)));
  ASSERT_TRUE(t->writer->commit());
  EXPECT_EQ(s->usage_bytes(), 400u);
  EXPECT_EQ(read_all(*s, sha256_of(big)), big);
}

TEST_F(CacheEvict, RemoveDeletesFileAndRow) {
  open();
  fill(0, 2);
  auto r = s->remove(sha256_of("absent"));
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::not_found));
  ASSERT_TRUE(s->remove(id_of(0)));
  EXPECT_FALSE(s->contains(id_of(0)));
  EXPECT_EQ(object_files(dir.path()).size(), 1u);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, event_type::removed);
  EXPECT_EQ(s->get_stats().removals, 1u);
  sub.reset();
  s.reset();
  open();
  EXPECT_EQ(present(2), (std::set<int>{1}));
  EXPECT_EQ(s->last_reconcile().rows_dropped, 0u);  // the row went with the file
  // It can be written again.
  ASSERT_TRUE(put(*s, content(0)));
  EXPECT_EQ(read_all(*s, id_of(0)), content(0));
}

TEST_F(CacheEvict, AWriteThatDoesNotFitEvictsFirstOrFailsClearly) {
  open();
  fill(0, 8);  // 800
  std::string big = random_bytes(500, 78);
  // Known size: room is made before any byte is written (LRU first).
  auto t = s->begin_write(sha256_of(big), big.size(), object_kind::blob);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_LE(s->usage_bytes(), 1000u);
  EXPECT_FALSE(s->contains(id_of(0)));
  ASSERT_TRUE(t->writer->write(big));
  ASSERT_TRUE(t->writer->commit());

  // Everything pinned: a write that cannot fit fails with no_space and leaves nothing behind.
  for (int i = 0; i < 8; ++i) {
    if (s->contains(id_of(i))) {
      ASSERT_TRUE(s->pin(id_of(i), "all"));
    }
  }
  ASSERT_TRUE(s->pin(sha256_of(big), "all"));
  std::string other = random_bytes(600, 79);
  auto t2 = s->begin_write(sha256_of(other), other.size(), object_kind::blob);
  ASSERT_FALSE(t2);
  EXPECT_TRUE(t2.error().is(errc::no_space)) << t2.error().to_string();
  EXPECT_NE(t2.error().message.find("capacity 1000"), std::string::npos);
  // Unknown size: fails when the stream outgrows the room.
  auto t3 = s->begin_write(sha256_of(other), std::nullopt, object_kind::blob);
  ASSERT_TRUE(t3);
  auto w = t3->writer->write(other);
  ASSERT_FALSE(w);
  EXPECT_TRUE(w.error().is(errc::no_space)) << w.error().to_string();
  EXPECT_EQ(t3->inflight->state(), write_state::failed);
  EXPECT_FALSE(s->contains(sha256_of(other)));
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());
  EXPECT_GE(s->get_stats().no_space_errors, 2u);
  EXPECT_EQ(s->get_stats().inflight_bytes, 0u);
}

// A write that cannot fit even with every unpinned object gone fails before evicting anything.
// It used to empty the cache first: a layer larger than a node's cache, pulled again and again,
// wiped the node each time.
TEST_F(CacheEvict, AWriteThatCannotFitEvictsNothing) {
  open();
  fill(0, 8);  // 800
  std::string huge = random_bytes(1500, 80);
  auto t = s->begin_write(sha256_of(huge), huge.size(), object_kind::blob);
  ASSERT_FALSE(t);
  EXPECT_TRUE(t.error().is(errc::no_space)) << t.error().to_string();
  EXPECT_NE(t.error().message.find("nothing evicted"), std::string::npos) << t.error().message;
  EXPECT_EQ(present(8).size(), 8u);
  EXPECT_TRUE(events.empty());
  // It fits only if pinned bytes went: the same.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s->pin(id_of(i), "keep"));  // 400 pinned
  std::string big = random_bytes(700, 81);
  t = s->begin_write(sha256_of(big), big.size(), object_kind::blob);
  ASSERT_FALSE(t);
  EXPECT_TRUE(t.error().is(errc::no_space));
  EXPECT_EQ(present(8).size(), 8u);
  EXPECT_TRUE(events.empty());
  // One that fits once unpinned objects go evicts as before, least recently used first.
  std::string fits = random_bytes(500, 82);
  t = s->begin_write(sha256_of(fits), fits.size(), object_kind::blob);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(present(4), (std::set<int>{0, 1, 2, 3}));
  EXPECT_FALSE(events.empty());
}

TEST_F(CacheEvict, SmallWriteOfUnknownSizeEvictsNothing) {
  open();
  fill(0, 8);  // 800 of 1000
  std::string small = random_bytes(100, 80);
  auto t = s->begin_write(sha256_of(small), std::nullopt, object_kind::manifest);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->writer->write(small));
  ASSERT_TRUE(t->writer->commit());
  EXPECT_EQ(present(8).size(), 8u);  // the write's read-ahead reservation did not evict
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(s->usage_bytes(), 900u);
}

TEST_F(CacheEvict, BackgroundThreadKeepsUsageUnderTheHighWatermark) {
  options o = test_options(dir.path(), 1000, clk);
  o.maintenance_interval = 20ms;
  o.access_flush_interval = 50ms;
  s = open_store(o);
  ASSERT_TRUE(s);
  s->start_background();
  fill(0, 9);  // crosses 850; the commit wakes the maintenance thread
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (s->usage_bytes() > 700 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_LE(s->usage_bytes(), 700u);
  EXPECT_EQ(present(9), (std::set<int>{2, 3, 4, 5, 6, 7, 8}));
  // Reads are flushed to the index by the same thread.
  ASSERT_TRUE(s->open_read(id_of(8)));
  while (s->get_stats().access_flushes == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(s->get_stats().access_flushes, 1u);
  s->stop();
}

// held_generation() moves with every commit, removal and eviction (what list_held() shows) and
// with nothing else: reads, pins and labels leave it, so a steady node's heartbeat skips the walk.
TEST_F(CacheEvict, TheHeldGenerationMovesOnlyWhenTheHeldSetChanges) {
  open();
  auto g = s->held_generation();
  fill(0, 2);
  EXPECT_NE(s->held_generation(), g);
  g = s->held_generation();
  ASSERT_TRUE(s->open_read(id_of(0)));
  ASSERT_TRUE(s->pin(id_of(0), "test"));
  ASSERT_TRUE(s->add_label(id_of(1), "ns/a"));
  ASSERT_TRUE(s->unpin(id_of(0), "test"));
  s->run_maintenance();  // under the watermark: nothing evicted
  EXPECT_EQ(s->held_generation(), g);
  ASSERT_TRUE(s->remove(id_of(1)));
  EXPECT_NE(s->held_generation(), g);
  g = s->held_generation();
  fill(2, 10);  // 0 and 2..9: 900 > 850, evicted down to the low watermark below
  auto before_evict = s->held_generation();
  EXPECT_NE(before_evict, g);
  s->run_maintenance();
  EXPECT_NE(s->held_generation(), before_evict);
  EXPECT_LT(present(10).size(), 9u);
}

}  // namespace
}  // namespace shoal::cache
