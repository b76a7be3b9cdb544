// peerd's heartbeat_sender without the network: build_message()/on_reply() over a real cache,
// state index and swarm (test_util.h's swarm_node), replies made by hand.
//
// What is pinned down here:
//   - the first message is a full list of every held object with its info-hash;
//   - a delta lists what was committed, what gained an info-hash and what was removed since the
//     last acknowledged message, and nothing else;
//   - while nothing held changed, a delta lists nothing *without listing the cache* (the walk
//     count stays), and a change made between building a message and its reply is still sent
//     in the next one;
//   - a failed request or a resync brings a full list again.

#include "peerd/heartbeat_sender.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "test_util.h"

namespace shoal::peerd {
namespace {

using testing::bytes_of;
using testing::meta_of;
using node = testing::swarm_node;

class HeartbeatSender : public ::testing::Test {
 protected:
  HeartbeatSender() {
    cfg_.node.name = "node-a";
    sender_ = std::make_unique<heartbeat_sender>(heartbeat_sender::deps{
        cfg_, *n_.store, *n_.swarm, n_.http, [] { return std::uint16_t{5000}; }});
  }

  // Commits `bytes` to the cache; with `indexed`, also its torrent to the state index.
  object_metainfo add(unsigned seed, bool indexed = true) {
    auto bytes = bytes_of(4096 + seed, seed);
    auto m = meta_of(bytes);
    if (indexed) {
      n_.hold(bytes, m);
    } else {
      std::string tmp = n_.dir.path() + "/cache/in.tmp";
      std::ofstream(tmp, std::ios::binary) << bytes;
      auto st = n_.store->adopt_file(tmp, m.object, cache::object_kind::blob);
      EXPECT_TRUE(st) << st.error().message;
    }
    return m;
  }

  static result<heartbeat::reply> ok(bool resync = false) {
    heartbeat::reply r;
    r.epoch = "e1";
    r.resync = resync;
    return r;
  }

  // One round answered `r`; returns the message sent.
  heartbeat::message round(const result<heartbeat::reply>& r = ok()) {
    auto m = sender_->build_message();
    sender_->on_reply(m, r);
    return m;
  }

  static std::set<std::string> ids(const std::vector<heartbeat::held_object>& v) {
    std::set<std::string> out;
    for (const auto& o : v) out.insert(o.id.str());
    return out;
  }

  node n_{"node-a"};
  peerd_config cfg_;
  std::unique_ptr<heartbeat_sender> sender_;
};

TEST_F(HeartbeatSender, DeltasListOnlyChangesAndASteadyNodeDoesNotListItsCache) {
  auto a = add(1), b = add(2);
  auto first = round();
  ASSERT_TRUE(first.full);
  EXPECT_EQ(ids(first.objects), (std::set<std::string>{a.object.str(), b.object.str()}));
  for (const auto& o : first.objects) {
    EXPECT_EQ(o.info_hash, o.id == a.object ? a.info_hash_hex() : b.info_hash_hex());
    EXPECT_EQ(o.kind, "blob");
  }
  EXPECT_EQ(sender_->cache_walks(), 1u);

  // Nothing changed: an empty delta, and the cache was not listed.
  for (int i = 0; i < 3; ++i) {
    auto m = round();
    EXPECT_FALSE(m.full);
    EXPECT_TRUE(m.objects.empty());
    EXPECT_TRUE(m.removed.empty());
  }
  EXPECT_EQ(sender_->cache_walks(), 1u);

  // Committed without a torrent yet: listed without an info-hash; then with it, listed again.
  auto c = add(3, false);
  auto m = round();
  ASSERT_EQ(m.objects.size(), 1u);
  EXPECT_EQ(m.objects[0].id, c.object);
  EXPECT_TRUE(m.objects[0].info_hash.empty());
  auto p = n_.state->put(c.object, c.info_hash_hex(), c.torrent_file({}));
  ASSERT_TRUE(p) << p.error().message;
  m = round();
  ASSERT_EQ(m.objects.size(), 1u);
  EXPECT_EQ(m.objects[0].info_hash, c.info_hash_hex());
  EXPECT_TRUE(m.removed.empty());
  EXPECT_EQ(sender_->cache_walks(), 3u);

  // Removed from the cache: in `removed`, once.
  ASSERT_TRUE(n_.store->remove(a.object));
  m = round();
  EXPECT_TRUE(m.objects.empty());
  ASSERT_EQ(m.removed.size(), 1u);
  EXPECT_EQ(m.removed[0], a.object);
  m = round();
  EXPECT_TRUE(m.objects.empty() && m.removed.empty());
  EXPECT_EQ(sender_->cache_walks(), 4u);
}

TEST_F(HeartbeatSender, AChangeBetweenAMessageAndItsReplyGoesInTheNext) {
  add(1);
  round();
  auto m = sender_->build_message();  // nothing changed: no walk
  EXPECT_TRUE(m.objects.empty());
  auto late = add(2);  // committed while the (empty) delta is on its way
  sender_->on_reply(m, ok());
  auto next = round();
  ASSERT_EQ(next.objects.size(), 1u);
  EXPECT_EQ(next.objects[0].id, late.object);
}

TEST_F(HeartbeatSender, AFailedRequestOrAResyncBringsTheFullListAgain) {
  auto a = add(1);
  round();
  round();
  const auto walks = sender_->cache_walks();
  auto after_failure = round(fail(errc::upstream_error, "scheduler answered HTTP 503"));
  EXPECT_FALSE(after_failure.full);  // the failed one was a delta
  auto full = round();
  ASSERT_TRUE(full.full);
  EXPECT_EQ(ids(full.objects), std::set<std::string>{a.object.str()});
  EXPECT_GT(sender_->cache_walks(), walks);

  round(ok(true));  // the scheduler asks for a full list
  full = round();
  ASSERT_TRUE(full.full);
  EXPECT_EQ(ids(full.objects), std::set<std::string>{a.object.str()});
  auto m = round();
  EXPECT_FALSE(m.full);
  EXPECT_TRUE(m.objects.empty() && m.removed.empty());
}

// What a steady interval costs with and without the walk (printed, not judged: timing belongs
// to benchmarks). 2,000 objects keep the test short; the walk grows with them, the skip does not.
TEST_F(HeartbeatSender, MeasureASteadyInterval) {
  constexpr unsigned objects = 2000;
  for (unsigned i = 0; i < objects; ++i) add(100 + i, i % 2 == 0);
  auto first = round();
  ASSERT_EQ(first.objects.size(), objects);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(round().objects.empty());
  const auto skip_us =
      std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count() / 20;
  EXPECT_EQ(sender_->cache_walks(), 1u);
  round(fail(errc::timeout, "no answer"));  // from here on every message is a full list
  t0 = clock::now();
  for (int i = 0; i < 20; ++i) {
    auto m = round(fail(errc::timeout, "no answer"));
    ASSERT_TRUE(m.full);
    ASSERT_EQ(m.objects.size(), objects);
  }
  const auto walk_us =
      std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count() / 20;
  std::printf(
      "[ measure ] heartbeat of %u objects: %lld us with the cache listed, %lld us without\n",
      objects, static_cast<long long>(walk_us), static_cast<long long>(skip_us));
}

}  // namespace
}  // namespace shoal::peerd
