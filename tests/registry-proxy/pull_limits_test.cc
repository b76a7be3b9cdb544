// The pull path's bounds (docs/security-review.md, findings 11, 21, 22): the fetch queue's lanes,
// round robin and caps; the credential gate's buckets and concurrency; the LRU that bounds the
// credential-keyed caches; which token realms are followed.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "registry-proxy/credential_gate.h"
#include "registry-proxy/fetch_queue.h"
#include "registry-proxy/lru.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {
namespace {

using namespace std::chrono_literals;

TEST(FetchQueue, LanesPerUpstreamAndRoundRobinAmongClients) {
  fetch_queue<int> q(100, 10);
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(q.push("slow", "flooder", i), fetch_queue<int>::pushed::queued);
  ASSERT_EQ(q.push("slow", "node", 100), fetch_queue<int>::pushed::queued);
  ASSERT_EQ(q.push("fast", "node", 200), fetch_queue<int>::pushed::queued);
  EXPECT_EQ(q.pop("fast"), 200) << "another upstream's lane is not behind the flood";
  EXPECT_FALSE(q.pop("fast"));
  EXPECT_EQ(q.pop("slow"), 0);
  EXPECT_EQ(q.pop("slow"), 100) << "the node's turn comes after one of the flooder's";
  EXPECT_EQ(q.pop("slow"), 1);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_TRUE(q.remove(3));
  EXPECT_FALSE(q.remove(3));
  EXPECT_EQ(q.pop("slow"), 2);
  EXPECT_EQ(q.pop("slow"), 4);
  EXPECT_FALSE(q.pop("slow"));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.queued_by("flooder"), 0u);
}

TEST(FetchQueue, BoundedPerClientAndInTotal) {
  fetch_queue<int> q(5, 3);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(q.push("u", "a", i), fetch_queue<int>::pushed::queued);
  EXPECT_EQ(q.push("v", "a", 9), fetch_queue<int>::pushed::client_full);
  EXPECT_EQ(q.push("u", "b", 10), fetch_queue<int>::pushed::queued);
  EXPECT_EQ(q.push("u", "c", 11), fetch_queue<int>::pushed::queued);
  EXPECT_EQ(q.push("u", "d", 12), fetch_queue<int>::pushed::full);
  EXPECT_EQ(q.queued_by("a"), 3u);
  auto all = q.drain();
  EXPECT_EQ(all.size(), 5u);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.push("u", "a", 1), fetch_queue<int>::pushed::queued);
}

TEST(CredentialGate, BucketsPerClientAndGlobal) {
  credential_gate_limits l;
  l.per_client_rate = 1;
  l.per_client_burst = 3;
  l.global_rate = 1;
  l.global_burst = 5;
  l.max_concurrent = 100;
  credential_gate g(l);
  auto t0 = credential_gate::clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(g.admit("10.0.0.1", "h" + std::to_string(i), t0));
  auto over = g.admit("10.0.0.1", "h9", t0);
  ASSERT_FALSE(over);
  EXPECT_TRUE(over.error().is(errc::busy));
  EXPECT_NE(over.error().message.find("this client"), std::string::npos);
  // Another client has its own bucket, until the global one runs dry.
  EXPECT_TRUE(g.admit("10.0.0.2", "x1", t0));
  EXPECT_TRUE(g.admit("10.0.0.2", "x2", t0));
  auto global = g.admit("10.0.0.3", "y1", t0);
  ASSERT_FALSE(global);
  EXPECT_NE(global.error().message.find("all clients"), std::string::npos);
  // Tokens come back with time.
  EXPECT_TRUE(g.admit("10.0.0.1", "h10", t0 + 2s));
  EXPECT_EQ(g.refused(), 2u);
  // An accepted credential passes freely.
  g.note_accepted("good", t0);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(g.admit("10.0.0.1", "good", t0 + 2s));
}

TEST(CredentialGate, ConcurrencyBounded) {
  credential_gate_limits l;
  l.max_concurrent = 2;
  credential_gate g(l);
  {
    auto a = g.admit("c", "1");
    auto b = g.admit("c", "2");
    ASSERT_TRUE(a);
    ASSERT_TRUE(b);
    auto c = g.admit("c", "3");
    ASSERT_FALSE(c);
    EXPECT_NE(c.error().message.find("running"), std::string::npos);
  }
  EXPECT_TRUE(g.admit("c", "4")) << "slots come back when the passes are dropped";
}

TEST(LruMap, BoundedLeastRecentlyUsedGoesFirst) {
  lru_map<int> m(3);
  m.put("a", 1);
  m.put("b", 2);
  m.put("c", 3);
  ASSERT_TRUE(m.find("a"));
  m.put("d", 4);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_FALSE(m.find("b"));
  EXPECT_EQ(*m.find("a"), 1);
  for (int i = 0; i < 1000; ++i) m.put("k" + std::to_string(i), i);
  EXPECT_EQ(m.size(), 3u);
  m.erase("k999");
  EXPECT_EQ(m.size(), 2u);
}

TEST(TokenRealm, OnlyTheUpstreamsHostOrConfiguredOnes) {
  upstream_config up;
  up.url = "https://registry.example.com:5000";
  EXPECT_FALSE(realm_refusal(up, "https://registry.example.com/token"));
  EXPECT_FALSE(realm_refusal(up, "https://REGISTRY.example.com:8443/token?x=1"));
  EXPECT_TRUE(realm_refusal(up, "http://registry.example.com/token")) << "https upstream";
  EXPECT_TRUE(realm_refusal(up, "https://attacker.example/token"));
  EXPECT_TRUE(realm_refusal(up, "https://registry.example.com@attacker.example/token"));
  EXPECT_TRUE(realm_refusal(up, "ftp://registry.example.com/token"));
  EXPECT_TRUE(realm_refusal(up, "registry.example.com/token"));
  up.token_realm_hosts = {"auth.example.com"};
  EXPECT_FALSE(realm_refusal(up, "https://auth.example.com/token"));
  upstream_config hub;
  hub.url = "https://registry-1.docker.io";
  hub.docker_hub = true;
  EXPECT_FALSE(realm_refusal(hub, "https://auth.docker.io/token"));
  upstream_config plain;
  plain.url = "http://127.0.0.1:5000";
  EXPECT_FALSE(realm_refusal(plain, "http://127.0.0.1:5001/token"));
  EXPECT_TRUE(realm_refusal(plain, "http://127.0.0.2:5001/token"));
  auto why = realm_refusal(plain, std::string("http://\xff\"evil/") + std::string(500, 'a'));
  ASSERT_TRUE(why);
  EXPECT_LT(why->size(), 320u);
  EXPECT_EQ(why->find('\xff'), std::string::npos);
}

}  // namespace
}  // namespace shoal::proxy
