#include "scheduler/tracker.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "common/bencode.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace std::chrono_literals;

using testing::pct;

struct fake_clock {
  tracker::clock::time_point t{std::chrono::seconds(1000)};
  tracker::clock::time_point operator()() const { return t; }
};

class TrackerTest : public ::testing::Test {
 protected:
  TrackerTest() : trk_(opts(), [this] { return clock_.t; }) {}
  static tracker_options opts() {
    tracker_options o;
    o.peer_timeout = 60s;
    return o;
  }

  http::request make(const std::string& ip, std::uint16_t port, std::uint64_t left,
                     const std::string& extra, char hash_byte = 'A') {
    http::request r;
    std::string ih(20, hash_byte), pid(20, static_cast<char>('a' + port % 26));
    r.query = "node=n" + std::to_string(port) + "&" + extra + (extra.empty() ? "" : "&") +
              "info_hash=" + pct(ih) + "&peer_id=" + pct(pid) + "&port=" + std::to_string(port) +
              "&uploaded=0&downloaded=0&left=" + std::to_string(left) + "&compact=1";
    r.remote = http::tcp::endpoint(http::net::ip::make_address(ip), 40000);
    return r;
  }

  // Returns the compact peers as "ip:port" strings in handout order.
  std::vector<std::string> peers_of(const http::response& resp) {
    std::vector<std::string> out;
    EXPECT_EQ(resp.status, 200u);
    auto body = std::get<std::string>(resp.body);
    auto v = bencode::decode(body);
    EXPECT_TRUE(v) << body;
    if (!v) return out;
    const auto* p = v->find("peers");
    EXPECT_TRUE(p && p->is_string());
    const auto& s = p->as_string();
    for (std::size_t i = 0; i + 6 <= s.size(); i += 6) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, s.data() + i, buf, sizeof buf);
      unsigned port =
          (static_cast<unsigned char>(s[i + 4]) << 8) | static_cast<unsigned char>(s[i + 5]);
      out.push_back(std::string(buf) + ":" + std::to_string(port));
    }
    return out;
  }

  fake_clock clock_;
  tracker trk_;
};

TEST_F(TrackerTest, SeedsFirstThenRackThenZoneNeverSelf) {
  (void)peers_of(trk_.handle(make("10.0.0.1", 6001, 0, "zone=z1&rack=r1&role=origin")));
  (void)peers_of(trk_.handle(make("10.0.0.2", 6002, 500, "zone=z2&rack=r9")));
  (void)peers_of(trk_.handle(make("10.0.0.3", 6003, 500, "zone=z1&rack=r2")));
  (void)peers_of(trk_.handle(make("10.0.0.4", 6004, 500, "zone=z1&rack=r1")));
  (void)peers_of(trk_.handle(make("10.0.0.5", 6005, 0, "zone=z2&rack=r9")));
  auto got = peers_of(trk_.handle(make("10.0.0.6", 6006, 1000, "zone=z1&rack=r1")));
  ASSERT_EQ(got.size(), 5u);
  // Origin and the other seed first (origin ranks with seeds; it is in rack r1 so it leads).
  EXPECT_EQ(got[0], "10.0.0.1:6001");
  EXPECT_EQ(got[1], "10.0.0.5:6005");
  EXPECT_EQ(got[2], "10.0.0.4:6004");  // same rack
  EXPECT_EQ(got[3], "10.0.0.3:6003");  // same zone
  EXPECT_EQ(got[4], "10.0.0.2:6002");  // elsewhere
  for (const auto& g : got) EXPECT_NE(g, "10.0.0.6:6006");
}

TEST_F(TrackerTest, OriginAlwaysIncludedEvenWithSmallNumwant) {
  for (int i = 0; i < 10; ++i) {
    (void)trk_.handle(
        make("10.0.1." + std::to_string(i + 1), static_cast<std::uint16_t>(7000 + i), 0, ""));
  }
  (void)trk_.handle(make("10.0.2.1", 6881, 0, "role=origin"));
  auto got = peers_of(trk_.handle(make("10.0.3.1", 6999, 10, "numwant=2")));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(std::find(got.begin(), got.end(), "10.0.2.1:6881"), got.end());
}

TEST_F(TrackerTest, LoadSpreadsAcrossEqualPeers) {
  for (int i = 0; i < 4; ++i) {
    (void)trk_.handle(
        make("10.0.1." + std::to_string(i + 1), static_cast<std::uint16_t>(7000 + i), 0, ""));
  }
  std::map<std::string, int> firsts;
  for (int i = 0; i < 8; ++i) {
    auto got = peers_of(trk_.handle(make("10.0.5." + std::to_string(i + 1),
                                         static_cast<std::uint16_t>(8000 + i), 10, "numwant=1")));
    ASSERT_EQ(got.size(), 1u);
    firsts[got[0]]++;
  }
  EXPECT_EQ(firsts.size(), 4u);  // every seed got handed out
  for (auto& [k, n] : firsts) EXPECT_EQ(n, 2) << k;
}

TEST_F(TrackerTest, CompactAnswersSplitIpv4AndIpv6AndTheLongFormListsBoth) {
  (void)trk_.handle(make("fd00::1", 6001, 0, ""));
  (void)trk_.handle(make("10.0.0.2", 6002, 0, ""));
  auto resp = trk_.handle(make("10.0.0.3", 6003, 100, ""));
  ASSERT_EQ(resp.status, 200u);
  auto v = bencode::decode(std::get<std::string>(resp.body));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->find("complete")->as_int(), 2);
  EXPECT_EQ(v->find("incomplete")->as_int(), 1);
  ASSERT_TRUE(v->find("peers") && v->find("peers")->is_string());
  EXPECT_EQ(v->find("peers")->as_string(), std::string("\x0a\x00\x00\x02\x17\x72", 6));
  ASSERT_TRUE(v->find("peers6") && v->find("peers6")->is_string());
  std::string want6(16, '\0');
  want6[0] = '\xfd';
  want6[15] = '\x01';
  want6 += std::string("\x17\x71", 2);
  EXPECT_EQ(v->find("peers6")->as_string(), want6);
  // Without compact=1: a list of {ip, port} dicts, IPv6 included, and no peers6.
  auto req = make("10.0.0.4", 6004, 100, "");
  req.query.replace(req.query.find("compact=1"), 9, "compact=0");
  v = bencode::decode(std::get<std::string>(trk_.handle(req).body));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->find("peers6"), nullptr);
  ASSERT_TRUE(v->find("peers") && v->find("peers")->is_list());
  std::set<std::string> got;
  for (const auto& p : v->find("peers")->as_list())
    got.insert(p.find("ip")->as_string() + ":" + std::to_string(p.find("port")->as_int()));
  EXPECT_EQ(got, (std::set<std::string>{"fd00::1:6001", "10.0.0.2:6002", "10.0.0.3:6003"}));
}

TEST_F(TrackerTest, StoppedAndExpiredPeersLeave) {
  (void)trk_.handle(make("10.0.0.1", 6001, 0, ""));
  (void)trk_.handle(make("10.0.0.2", 6002, 0, ""));
  (void)trk_.handle(make("10.0.0.1", 6001, 0, "event=stopped"));
  auto got = peers_of(trk_.handle(make("10.0.0.3", 6003, 5, "")));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "10.0.0.2:6002");
  clock_.t += 61s;
  trk_.expire();
  got = peers_of(trk_.handle(make("10.0.0.4", 6004, 5, "")));
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(trk_.stats().peers, 1u);  // only the last announcer
}

TEST_F(TrackerTest, SwarmsAreSeparateByInfoHash) {
  (void)trk_.handle(make("10.0.0.1", 6001, 0, "", 'A'));
  auto got = peers_of(trk_.handle(make("10.0.0.2", 6002, 5, "", 'B')));
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(trk_.stats().swarms, 2u);
}

TEST_F(TrackerTest, MalformedAnnouncesGetFailureReason) {
  auto base = make("10.0.0.1", 6001, 0, "");
  std::vector<std::string> bad_queries = {
      "",
      "info_hash=short&peer_id=" + pct(std::string(20, 'p')) + "&port=1",
      "info_hash=" + pct(std::string(20, 'h')) + "&peer_id=" + pct(std::string(20, 'p')) +
          "&port=0",
      "info_hash=" + pct(std::string(20, 'h')) + "&peer_id=" + pct(std::string(20, 'p')) +
          "&port=70000",
      "info_hash=" + pct(std::string(20, 'h')) + "&peer_id=" + pct(std::string(20, 'p')) +
          "&port=1&left=-5",
      "info_hash=" + pct(std::string(20, 'h')) + "&peer_id=" + pct(std::string(20, 'p')) +
          "&port=1&event=explode",
      "info_hash=" + pct(std::string(20, 'h')) + "&peer_id=" + pct(std::string(20, 'p')) +
          "&port=1&node=a%20b",
      "info_hash=%ZZ&peer_id=" + pct(std::string(20, 'p')) + "&port=1",
      "info_hash=" + pct(std::string(21, 'h')) + "&peer_id=" + pct(std::string(20, 'p')) +
          "&port=1",
  };
  for (const auto& q : bad_queries) {
    auto r = base;
    r.query = q;
    auto resp = trk_.handle(r);
    EXPECT_EQ(resp.status, 400u) << q;
    auto v = bencode::decode(std::get<std::string>(resp.body));
    ASSERT_TRUE(v) << q;
    ASSERT_TRUE(v->find("failure reason")) << q;
  }
  EXPECT_EQ(trk_.stats().bad_announces, bad_queries.size());
}

TEST_F(TrackerTest, HeartbeatHoldersFollowDeltasAndStayAliveWhileTheNodeHeartbeats) {
  std::array<std::uint8_t, 20> a{}, b{};
  a.fill('A');
  b.fill('B');
  trk_.set_holdings("n1", "10.0.0.1", 6001, "z1", "r1", {a, b}, true);
  EXPECT_EQ(trk_.nodes_in(a), std::vector<std::string>{"n1"});
  // Heartbeats with empty deltas keep the holder alive past peer_timeout (60 s here).
  for (int i = 0; i < 10; ++i) {
    clock_.t += 10s;
    trk_.set_holdings("n1", "10.0.0.1", 6001, "z1", "r1", {}, false);
  }
  trk_.expire();
  EXPECT_EQ(trk_.nodes_in(a), std::vector<std::string>{"n1"});
  // A delta removing b drops only b.
  trk_.remove_holdings("10.0.0.1", 6001, {b});
  EXPECT_TRUE(trk_.nodes_in(b).empty());
  EXPECT_EQ(trk_.nodes_in(a), std::vector<std::string>{"n1"});
  // A stopped announce for a still-held object keeps the node a holder.
  auto stop = make("10.0.0.1", 6001, 0, "event=stopped", 'A');
  (void)trk_.handle(stop);
  EXPECT_EQ(trk_.nodes_in(a).size(), 1u);
  // The node dropped by the index leaves every swarm.
  trk_.drop_holder("10.0.0.1", 6001);
  EXPECT_TRUE(trk_.nodes_in(a).empty());
  // Silent for longer than peer_timeout: the holder expires.
  trk_.set_holdings("n2", "10.0.0.2", 6002, "z1", "r1", {a}, true);
  clock_.t += 61s;
  trk_.expire();
  EXPECT_TRUE(trk_.nodes_in(a).empty());
}

TEST_F(TrackerTest, RandomQueriesNeverCrash) {
  std::mt19937_64 rng(4);
  const std::string alpha = "info_hashpeer_idport=&%0123456789ABCDEFleftevent";
  for (int i = 0; i < 20000; ++i) {
    http::request r;
    for (std::size_t j = 0, n = rng() % 120; j < n; ++j) r.query += alpha[rng() % alpha.size()];
    r.remote = http::tcp::endpoint(http::net::ip::make_address("10.1.2.3"), 1);
    auto resp = trk_.handle(r);
    EXPECT_TRUE(resp.status == 200 || resp.status == 400);
  }
}

// The tracker expires without walking every swarm (holder entries through what each node
// reported, announced peers from a queue ordered by when they fall silent). This model keeps the
// same rules the plain way (a walk over every entry, as the tracker once did) and must agree with
// it on every swarm's members and the peer and swarm counts after every step of a random mix of
// announces (also "stopped"), full and delta heartbeats, removals, dropped nodes, expiry and time.
struct tracker_model {
  using ih_t = std::array<std::uint8_t, 20>;
  struct entry {
    bool holder = false;
    tracker::clock::time_point seen;
  };
  std::chrono::seconds timeout;
  std::map<std::pair<ih_t, std::string>, entry> peers;
  std::map<std::string, std::set<ih_t>> holdings;
  std::map<std::string, tracker::clock::time_point> holder_seen;
  tracker::clock::time_point last_expire{};

  void expire(tracker::clock::time_point now) {
    for (auto it = peers.begin(); it != peers.end();) {
      auto seen = it->second.seen;
      if (it->second.holder) {
        if (auto h = holder_seen.find(it->first.second); h != holder_seen.end())
          seen = std::max(seen, h->second);
      }
      it = now - seen > timeout ? peers.erase(it) : std::next(it);
    }
    for (auto it = holder_seen.begin(); it != holder_seen.end();) {
      if (now - it->second > timeout) {
        holdings.erase(it->first);
        it = holder_seen.erase(it);
      } else {
        ++it;
      }
    }
    last_expire = now;
  }
  void announce(const ih_t& ih, const std::string& key, bool stopped,
                tracker::clock::time_point now) {
    if (now - last_expire > std::chrono::seconds(10)) expire(now);
    if (stopped) {
      auto h = holdings.find(key);
      if (h != holdings.end() && h->second.count(ih))
        peers[{ih, key}] = {true, now};
      else
        peers.erase({ih, key});
      return;
    }
    peers[{ih, key}] = {false, now};
  }
  void drop_holding(const ih_t& ih, const std::string& key) {
    auto p = peers.find({ih, key});
    if (p != peers.end() && p->second.holder) peers.erase(p);
  }
  void set_holdings(const std::string& key, const std::vector<ih_t>& ihs, bool full,
                    tracker::clock::time_point now) {
    holder_seen[key] = now;
    auto& held = holdings[key];
    std::set<ih_t> before;
    if (full) before.swap(held);
    held.insert(ihs.begin(), ihs.end());
    for (const auto& ih : ihs) peers[{ih, key}] = {true, now};
    for (const auto& ih : before) {
      if (!held.count(ih)) drop_holding(ih, key);
    }
  }
  void remove_holdings(const std::string& key, const std::vector<ih_t>& ihs) {
    for (const auto& ih : ihs) {
      if (auto h = holdings.find(key); h != holdings.end()) h->second.erase(ih);
      drop_holding(ih, key);
    }
  }
  void drop_holder(const std::string& key) {
    if (auto h = holdings.find(key); h != holdings.end()) {
      for (const auto& ih : h->second) drop_holding(ih, key);
      holdings.erase(h);
    }
    holder_seen.erase(key);
  }
  std::vector<std::string> nodes_in(const ih_t& ih) const {
    std::vector<std::string> out;
    for (const auto& [k, e] : peers) {
      if (k.first == ih) out.push_back("n-" + k.second);
    }
    return out;
  }
};

TEST(TrackerExpiry, AgreesWithAWalkOverEveryEntryUnderRandomOperations) {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    fake_clock clock;
    tracker_options o;
    o.peer_timeout = 60s;
    tracker trk(o, [&] { return clock.t; });
    tracker_model model{o.peer_timeout, {}, {}, {}, {}};
    std::mt19937_64 rng(seed);
    std::vector<tracker_model::ih_t> hashes(8);
    for (std::size_t i = 0; i < hashes.size(); ++i) hashes[i].fill(static_cast<std::uint8_t>(i));
    const int endpoints = 6;
    auto some_hashes = [&] {
      std::vector<tracker_model::ih_t> out;
      for (const auto& h : hashes) {
        if (rng() % 3 == 0) out.push_back(h);
      }
      return out;
    };
    std::size_t erased_by_expiry = 0;
    for (int step = 0; step < 4000; ++step) {
      const int e = static_cast<int>(rng() % endpoints);
      const std::string ip = "10.0.0." + std::to_string(e + 1);
      const auto port = static_cast<std::uint16_t>(6000 + e);
      const std::string key = ip + ":" + std::to_string(port);
      const std::string node = "n-" + key;  // what nodes_in answers for this endpoint
      const auto& ih = hashes[rng() % hashes.size()];
      switch (rng() % 9) {
        case 0:
        case 1:
        case 2: {
          announce_request a;
          a.info_hash = ih;
          a.ip = ip;
          a.port = port;
          a.node = node;
          a.left = rng() % 2 ? 0 : 100;
          a.numwant = 50;
          const bool stopped = rng() % 4 == 0;
          a.event = stopped ? announce_request::event_t::stopped : announce_request::event_t::none;
          ASSERT_EQ(trk.answer(a).status, 200u);
          model.announce(ih, key, stopped, clock.t);
          break;
        }
        case 3:
        case 4: {
          const bool full = rng() % 2 == 0;
          auto ihs = some_hashes();
          trk.set_holdings(node, ip, port, "z", "r", ihs, full);
          model.set_holdings(key, ihs, full, clock.t);
          break;
        }
        case 5: {
          auto ihs = some_hashes();
          trk.remove_holdings(ip, port, ihs);
          model.remove_holdings(key, ihs);
          break;
        }
        case 6:
          if (rng() % 4 == 0) {
            trk.drop_holder(ip, port);
            model.drop_holder(key);
          }
          break;
        case 7: {
          const std::size_t before = model.peers.size();
          trk.expire();
          model.expire(clock.t);
          erased_by_expiry += before - model.peers.size();
          break;
        }
        default:
          clock.t += std::chrono::seconds(rng() % 25);
          break;
      }
      std::size_t swarms = 0;
      for (const auto& h : hashes) {
        auto got = trk.nodes_in(h);
        std::sort(got.begin(), got.end());
        auto want = model.nodes_in(h);
        ASSERT_EQ(got, want) << "seed " << seed << " step " << step << " swarm "
                             << static_cast<int>(h[0]);
        swarms += want.empty() ? 0 : 1;
      }
      ASSERT_EQ(trk.stats().peers, model.peers.size()) << "seed " << seed << " step " << step;
      ASSERT_EQ(trk.stats().swarms, swarms) << "seed " << seed << " step " << step;
    }
    // The mix must have exercised expiry, not only the other paths.
    EXPECT_GT(erased_by_expiry, 50u) << "seed " << seed;
  }
}

// Caps: swarms and peers per swarm (announces and heartbeat holdings are unauthenticated).
announce_request plain_announce(std::uint8_t swarm, const std::string& ip, std::uint16_t port) {
  announce_request a;
  a.info_hash.fill(swarm);
  a.ip = ip;
  a.port = port;
  a.left = 10;
  a.numwant = 50;
  return a;
}

std::string failure_reason(const std::string& body) {
  auto v = bencode::decode(body);
  if (!v) return "";
  const auto* f = v->find("failure reason");
  return f && f->is_string() ? f->as_string() : "";
}

TEST(TrackerCaps, SwarmsBeyondMaxSwarmsAreRefused) {
  tracker_options o;
  o.max_swarms = 2;
  tracker trk(o);
  EXPECT_EQ(trk.answer(plain_announce(1, "10.0.0.1", 1)).status, 200u);
  EXPECT_EQ(trk.answer(plain_announce(2, "10.0.0.1", 1)).status, 200u);
  auto a = trk.answer(plain_announce(3, "10.0.0.1", 1));
  EXPECT_EQ(a.status, 429u);
  EXPECT_NE(failure_reason(a.body).find("tracker.max_swarms"), std::string::npos) << a.body;
  // Known swarms still take new peers; a stopped announce for a new swarm leaves nothing.
  EXPECT_EQ(trk.answer(plain_announce(1, "10.0.0.2", 2)).status, 200u);
  auto stop = plain_announce(4, "10.0.0.1", 1);
  stop.event = announce_request::event_t::stopped;
  EXPECT_EQ(trk.answer(stop).status, 200u);
  EXPECT_EQ(trk.stats().swarms, 2u);
  EXPECT_EQ(trk.stats().refused_announces, 1u);
  // Heartbeat holdings beyond the cap are counted, not recorded.
  std::array<std::uint8_t, 20> h1{}, h5{};
  h1.fill(1);
  h5.fill(5);
  EXPECT_EQ(trk.set_holdings("n9", "10.0.0.9", 9, "", "", {h1, h5}, true), 1u);
  EXPECT_EQ(trk.nodes_in(h1).size(), 3u);
  EXPECT_TRUE(trk.nodes_in(h5).empty());
  EXPECT_EQ(trk.stats().swarms, 2u);
  EXPECT_EQ(trk.stats().skipped_holdings, 1u);
}

TEST(TrackerCaps, PeersBeyondMaxPeersPerSwarmAreRefusedKnownOnesStillHeard) {
  tracker_options o;
  o.max_peers_per_swarm = 2;
  o.trust_announced_ip = true;
  tracker trk(o);
  EXPECT_EQ(trk.answer(plain_announce(1, "10.0.0.1", 1)).status, 200u);
  EXPECT_EQ(trk.answer(plain_announce(1, "10.0.0.1", 2)).status, 200u);
  auto a = trk.answer(plain_announce(1, "10.0.0.1", 3));
  EXPECT_EQ(a.status, 429u);
  EXPECT_NE(failure_reason(a.body).find("tracker.max_peers_per_swarm"), std::string::npos);
  EXPECT_EQ(trk.answer(plain_announce(1, "10.0.0.1", 2)).status, 200u);  // known: heard
  EXPECT_EQ(trk.stats().peers, 2u);
  // Through the HTTP face: 429 with a bencoded failure reason.
  http::request r;
  r.query = "info_hash=" + pct(std::string(20, '\x01')) + "&peer_id=" + pct(std::string(20, 'p')) +
            "&port=4&left=1";
  r.remote = http::tcp::endpoint(http::net::ip::make_address("10.0.0.7"), 1);
  auto resp = trk.handle(r);
  EXPECT_EQ(resp.status, 429u);
  EXPECT_NE(failure_reason(std::get<std::string>(resp.body)).find("swarm full"), std::string::npos);
}

// Info-hashes sharing their first 8 bytes (what an attacker announces to pile every swarm into
// one bucket of a first-bytes hash), or spread out.
std::vector<announce_request> many_swarms(std::size_t n, bool colliding) {
  std::mt19937_64 rng(7);
  std::vector<announce_request> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto a = plain_announce(0, "10.0.0.1", 6881);
    for (auto& b : a.info_hash) b = colliding ? 0x5a : static_cast<std::uint8_t>(rng());
    for (std::size_t k = 0; k < 4; ++k)
      a.info_hash[19 - k] = static_cast<std::uint8_t>(i >> (8 * k));
    out.push_back(a);
  }
  return out;
}

// Seconds to start `n` swarms, then to re-announce into 2,000 of them.
std::pair<double, double> announce_seconds(std::size_t n, bool colliding) {
  tracker trk(tracker_options{});
  auto reqs = many_swarms(n, colliding);
  using sclock = std::chrono::steady_clock;
  auto t0 = sclock::now();
  for (const auto& a : reqs) (void)trk.announce(a);
  auto t1 = sclock::now();
  for (std::size_t i = 0; i < 2000; ++i) (void)trk.announce(reqs[(i * 7919) % n]);
  auto t2 = sclock::now();
  EXPECT_EQ(trk.stats().swarms, n);
  return {std::chrono::duration<double>(t1 - t0).count(),
          std::chrono::duration<double>(t2 - t1).count()};
}

TEST(TrackerCaps, AnnounceLatencyStaysBoundedWith20kCollidingSwarms) {
  constexpr std::size_t n = 20'000;
  auto [spread_fill, spread_again] = announce_seconds(n, false);
  auto [collide_fill, collide_again] = announce_seconds(n, true);
  std::printf("20k swarms: spread %.3f s + %.3f s; colliding %.3f s + %.3f s\n", spread_fill,
              spread_again, collide_fill, collide_again);
  // With a keyed hash the shared prefix does not matter: within a few times the spread case
  // (plus slack for a busy machine). A first-bytes hash makes every lookup walk all 20k.
  EXPECT_LT(collide_fill, 4 * spread_fill + 0.25);
  EXPECT_LT(collide_again, 4 * spread_again + 0.05);
  EXPECT_LT(collide_again / 2000, 0.0005) << "seconds per announce";
}

// With TLS on (req.peer.tls), the certificate decides who may announce what.
TEST_F(TrackerTest, WithTlsAnAnnounceNeedsTheNodesOwnCertificate) {
  auto as = testing::verified_peer;
  auto own = make("10.0.0.1", 6001, 100, "");  // node=n6001
  own.peer = as(tls::peer_role::node, "n6001");
  EXPECT_EQ(trk_.handle(own).status, 200u);

  auto forged = make("10.0.0.2", 6002, 100, "");  // node=n6002
  forged.peer = as(tls::peer_role::node, "n6001");
  auto refused = trk_.handle(forged);
  EXPECT_EQ(refused.status, 403u);
  EXPECT_NE(std::get<std::string>(refused.body)
                .find("announce for node \"n6002\" refused: the client certificate is node/n6001"),
            std::string::npos)
      << std::get<std::string>(refused.body);

  auto anon = make("10.0.0.3", 6003, 100, "");
  anon.peer.tls = true;
  EXPECT_EQ(trk_.handle(anon).status, 403u);

  auto origin = make("10.0.0.4", 6004, 0, "role=origin");
  origin.peer = as(tls::peer_role::node, "n6004");
  EXPECT_EQ(trk_.handle(origin).status, 403u);
  origin.peer = as(tls::peer_role::registry_proxy, "rp");
  EXPECT_EQ(trk_.handle(origin).status, 200u);
  EXPECT_EQ(trk_.stats().unauthorized_announces, 3u);

  // With TLS on, ip= never moves a node elsewhere, even with trust_announced_ip.
  tracker_options o = opts();
  o.trust_announced_ip = true;
  for (bool tls : {false, true}) {
    http::request claim = make("10.0.0.5", 6005, 100, "ip=10.66.0.1", 'T');
    if (tls) claim.peer = as(tls::peer_role::node, "n6005");
    auto parsed = parse_announce(claim, "10.0.0.5", o);
    ASSERT_TRUE(parsed);
    EXPECT_EQ(parsed->ip, tls ? "10.0.0.5" : "10.66.0.1");
  }
  tracker_options untrusting = opts();
  auto parsed = parse_announce(make("10.0.0.5", 6005, 100, "ip=10.66.0.1"), "10.0.0.5", untrusting);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->ip, "10.0.0.5");

  // No node= in the URL: the certificate names the node.
  announce_request a;
  EXPECT_EQ(authorize_announce(a, as(tls::peer_role::node, "n9")), "");
  EXPECT_EQ(a.node, "n9");
}

}  // namespace
}  // namespace shoal::scheduler
