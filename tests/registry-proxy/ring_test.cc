// Unit tests of the replica ring (registry-proxy/ring.h): config validation, the rendezvous owner
// (deterministic, spread evenly, self when alone), the move of only a dead member's digests to
// the next member in each digest's order, and the selection a forwarded request makes at the
// owner (ns = the upstream's name, the repository as the upstream knows it) being the original.

#include <gtest/gtest.h>

#include <map>

#include "registry-proxy/ring.h"
#include "registry-proxy/upstream.h"
#include "common/sha256.h"

namespace shoal::proxy {
namespace {

const std::vector<std::string> kMembers = {"http://10.0.0.1:5050", "http://10.0.0.2:5050",
                                           "http://10.0.0.3:5050"};

std::unique_ptr<ring> make(http::client& c, const std::string& self,
                           std::vector<std::string> members = kMembers) {
  ring_config rc;
  rc.members = std::move(members);
  rc.self = self;
  auto r = ring::create(rc, c);
  EXPECT_TRUE(r) << r.error().message;
  return r ? std::move(*r) : nullptr;
}

std::string key(int i) { return sha256_of("blob " + std::to_string(i)).str(); }

TEST(Ring, ConfigErrorsNameTheProblem) {
  http::client c;
  ring_config rc;
  rc.members = kMembers;
  rc.self = "http://10.0.0.9:5050";
  auto r = ring::create(rc, c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("must be one of ring.members"), std::string::npos);
  rc.self = kMembers[0];
  rc.members.push_back(kMembers[1]);
  r = ring::create(rc, c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("twice"), std::string::npos);
  rc.members = {kMembers[0], "http://10.0.0.2:5050/v2"};
  r = ring::create(rc, c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not a base URL"), std::string::npos);
  rc.members = {kMembers[0], "ftp://10.0.0.2"};
  EXPECT_FALSE(ring::create(rc, c));
}

TEST(Ring, EveryReplicaComputesTheSameOwnerAndTheWorkIsSpread) {
  http::client c;
  auto a = make(c, kMembers[0]);
  auto b = make(c, kMembers[1]);
  auto d = make(c, kMembers[2]);
  std::map<std::string, int> owned;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    auto o = a->owner(key(i));
    EXPECT_EQ(o, b->owner(key(i)));
    EXPECT_EQ(o, d->owner(key(i)));
    owned[o]++;
  }
  ASSERT_EQ(owned.size(), 3u);
  for (auto& [m, k] : owned) {
    EXPECT_GT(k, n / 3 - n / 10) << m;
    EXPECT_LT(k, n / 3 + n / 10) << m;
  }
}

TEST(Ring, ADeadMemberMovesOnlyItsDigestsAndAllSurvivorsAgreeWhere) {
  http::client c;
  auto a = make(c, kMembers[0]);
  auto b = make(c, kMembers[1]);
  std::vector<std::string> before;
  for (int i = 0; i < 1000; ++i) before.push_back(a->owner(key(i)));
  a->mark_down(kMembers[2], "test");
  b->mark_down(kMembers[2], "test");
  EXPECT_EQ(a->up_count(), 2u);
  int moved = 0;
  for (int i = 0; i < 1000; ++i) {
    auto o = a->owner(key(i));
    EXPECT_EQ(o, b->owner(key(i)));
    EXPECT_NE(o, kMembers[2]);
    if (before[static_cast<std::size_t>(i)] != kMembers[2]) {
      EXPECT_EQ(o, before[static_cast<std::size_t>(i)]) << "a live member's digest moved";
    } else {
      ++moved;
      // The next in the digest's own order: the higher score of the two survivors.
      auto s0 = ring::score(kMembers[0], key(i)), s1 = ring::score(kMembers[1], key(i));
      EXPECT_EQ(o, s0 > s1 ? kMembers[0] : kMembers[1]);
    }
  }
  EXPECT_GT(moved, 200);
  // A member never marks itself down, and with every other member down it owns everything.
  a->mark_down(kMembers[0], "test");
  a->mark_down(kMembers[1], "test");
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a->owner(key(i)), kMembers[0]);
}

TEST(Ring, AnnouncedMembersJoinAndLeaveBesideTheConfiguredOnes) {
  http::client c;
  ring_config rc;
  rc.self = kMembers[0];
  rc.schedulers = {"http://10.0.0.100:7070"};
  auto r = ring::create(rc, c);
  ASSERT_TRUE(r) << r.error().message;
  auto& a = **r;
  EXPECT_EQ(a.members().size(), 1u);  // itself
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.owner(key(i)), kMembers[0]);
  // The scheduler lists all three (itself included, a bad URL and a duplicate ignored).
  a.set_announced({kMembers[0], kMembers[1], kMembers[2], "http://x:1/path", kMembers[1]});
  EXPECT_EQ(a.members().size(), 3u);
  EXPECT_TRUE(a.is_member(kMembers[2]));
  auto full = make(c, kMembers[0]);  // the same ring, configured
  for (int i = 0; i < 500; ++i) EXPECT_EQ(a.owner(key(i)), full->owner(key(i)));
  // A member no longer listed leaves: its digests move as a dead member's do.
  a.set_announced({kMembers[0], kMembers[1]});
  EXPECT_FALSE(a.is_member(kMembers[2]));
  full->mark_down(kMembers[2], "test");
  for (int i = 0; i < 500; ++i) EXPECT_EQ(a.owner(key(i)), full->owner(key(i)));
  // Configured members stay whatever the scheduler says.
  auto b = make(c, kMembers[1], {kMembers[0], kMembers[1]});
  b->set_announced({});
  EXPECT_EQ(b->members().size(), 2u);
  // Bounded: at most 64 announced members.
  std::vector<std::string> many;
  for (int i = 0; i < 100; ++i) many.push_back("http://10.1.0." + std::to_string(i) + ":5050");
  a.set_announced(many);
  EXPECT_EQ(a.members().size(), 65u);
  // Config errors: no members and no schedulers; a scheduler URL that is not a base URL.
  ring_config none;
  none.self = kMembers[0];
  EXPECT_FALSE(ring::create(none, c));
  rc.schedulers = {"http://10.0.0.100:7070/v1"};
  EXPECT_FALSE(ring::create(rc, c));
  rc.schedulers = {"http://10.0.0.100:7070"};
  rc.self = "not a url";
  EXPECT_FALSE(ring::create(rc, c));
}

TEST(Ring, RequestsToMembersCarryTheSenderAndTheRingTimeouts) {
  http::client c;
  ring_config rc;
  rc.members = kMembers;
  rc.self = kMembers[1];
  rc.stall_timeout = std::chrono::seconds(7);
  auto r = ring::create(rc, c);
  ASSERT_TRUE(r);
  auto req = (*r)->request(kMembers[2], "/v2/team/app/blobs/x");
  EXPECT_EQ(req.url, kMembers[2] + "/v2/team/app/blobs/x");
  EXPECT_EQ(req.timeouts.stall, std::chrono::seconds(7));
  EXPECT_EQ(req.redirects.max_redirects, 0);
  bool found = false;
  for (auto& [k, v] : req.headers) found |= k == ring::from_header && v == kMembers[1];
  EXPECT_TRUE(found);
}

// The owner selects by ns = the upstream's name and name = the repository as the upstream knows
// it: that must be the selection the forwarding replica made, prefixes and Docker Hub included.
TEST(Ring, TheOwnerSelectsTheSameUpstreamAndRepository) {
  auto mk = [](std::string name, std::string prefix, bool hub) {
    upstream_config c;
    c.name = std::move(name);
    c.url = "http://" + c.name;
    c.prefix = std::move(prefix);
    c.docker_hub = hub;
    return c;
  };
  auto set = upstream_set::build({mk("127.0.0.1:5000", {}, false), mk("docker.io", "hub", true),
                                  mk("second.test", "s", false)},
                                 {});
  ASSERT_TRUE(set) << set.error().message;
  struct {
    std::optional<std::string> ns;
    std::string name;
  } cases[] = {{std::nullopt, "team/app"},
               {std::nullopt, "hub/alpine"},
               {std::nullopt, "s/deep/repo/name"},
               {std::string("docker.io"), "alpine"},
               {std::string("docker.io"), "library/alpine"},
               {std::string("second.test"), "x/y"}};
  for (auto& t : cases) {
    auto first = set->select(t.ns, t.name);
    ASSERT_TRUE(first) << t.name;
    auto again = set->select(first->up->cfg.name, first->repo);
    ASSERT_TRUE(again) << t.name;
    EXPECT_EQ(again->up, first->up) << t.name;
    EXPECT_EQ(again->repo, first->repo) << t.name;
  }
}

}  // namespace
}  // namespace shoal::proxy
