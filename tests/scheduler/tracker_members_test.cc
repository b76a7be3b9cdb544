// The tracker with SSL torrents (tracker_options::announced_peers_only, set when the scheduler
// runs with TLS): only peers that announced a swarm, and did not stop, are handed out; holders
// known from heartbeats alone stay in the index but would fail the TLS handshake (an SSL peer
// refuses a torrent it has not loaded), so they are not handed out.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>

#include "common/bencode.h"
#include "scheduler/tracker.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using testing::pct;

// `torrent` picks the peer id (libtorrent draws one per torrent): 0, one per port.
http::request announce(std::uint16_t port, std::uint64_t left, const std::string& extra = "",
                       char torrent = 0) {
  http::request r;
  std::string ih(20, 'A'), pid(20, torrent ? torrent : static_cast<char>('a' + port % 26));
  r.query = "node=n" + std::to_string(port) + "&" + extra + (extra.empty() ? "" : "&") +
            "info_hash=" + pct(ih) + "&peer_id=" + pct(pid) + "&port=" + std::to_string(port) +
            "&uploaded=0&downloaded=0&left=" + std::to_string(left) + "&compact=1";
  r.remote = http::tcp::endpoint(http::net::ip::make_address("10.0.0.1"), 40000);
  return r;
}

std::vector<unsigned> ports_of(const http::response& resp) {
  std::vector<unsigned> out;
  EXPECT_EQ(resp.status, 200u);
  auto v = bencode::decode(std::get<std::string>(resp.body));
  if (!v || !v->find("peers")) return out;
  const auto& s = v->find("peers")->as_string();
  for (std::size_t i = 0; i + 6 <= s.size(); i += 6)
    out.push_back((static_cast<unsigned char>(s[i + 4]) << 8) |
                  static_cast<unsigned char>(s[i + 5]));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<unsigned> handout(bool announced_only) {
  tracker_options o;
  o.announced_peers_only = announced_only;
  tracker trk(o);
  std::array<std::uint8_t, 20> a{};
  a.fill('A');
  // 6001 holds the object (heartbeat) but never loaded it; 6002 holds it and announced (loaded);
  // 6003 held and announced, then unloaded it (stopped); 6004 is downloading.
  trk.set_holdings("n6001", "10.0.0.1", 6001, "", "", {a}, true);
  trk.set_holdings("n6002", "10.0.0.1", 6002, "", "", {a}, true);
  trk.set_holdings("n6003", "10.0.0.1", 6003, "", "", {a}, true);
  EXPECT_EQ(trk.handle(announce(6002, 0, "event=started")).status, 200u);
  EXPECT_EQ(trk.handle(announce(6003, 0, "event=started")).status, 200u);
  EXPECT_EQ(trk.handle(announce(6003, 0, "event=stopped")).status, 200u);
  // A heartbeat after the announce does not make the loaded seed a heartbeat-only holder.
  trk.set_holdings("n6002", "10.0.0.1", 6002, "", "", {a}, true);
  EXPECT_EQ(trk.nodes_in(a).size(), 3u);  // every holder stays in the index
  return ports_of(trk.handle(announce(6004, 1000, "event=started")));
}

TEST(TrackerMembers, OnlyPeersThatLoadedTheSwarmAreHandedOut) {
  EXPECT_EQ(handout(true), (std::vector<unsigned>{6002}));
  // Plain torrents: every holder is handed out (it loads the torrent on demand).
  EXPECT_EQ(handout(false), (std::vector<unsigned>{6001, 6002, 6003}));
}

// peerd replaces a finished download's torrent with a seed of the same info-hash, each with its
// own peer id, and the two torrents' announces race: the download's "stopped" may arrive after
// the seed's "started". It no longer speaks for the endpoint; a stop from the seed itself does.
TEST(TrackerMembers, AStopFromAReplacedTorrentDoesNotHideItsSeed) {
  tracker_options o;
  o.announced_peers_only = true;
  tracker trk(o);
  std::array<std::uint8_t, 20> a{};
  a.fill('A');
  // 6002: download torrent 'd' started, seed torrent 's' started, then the download's stop.
  EXPECT_EQ(trk.handle(announce(6002, 1000, "event=started", 'd')).status, 200u);
  trk.set_holdings("n6002", "10.0.0.1", 6002, "", "", {a}, false);
  EXPECT_EQ(trk.handle(announce(6002, 0, "event=started", 's')).status, 200u);
  EXPECT_EQ(trk.handle(announce(6002, 0, "event=stopped", 'd')).status, 200u);
  // 6003: the stop arrives first, then the seed's start (the order without a race).
  EXPECT_EQ(trk.handle(announce(6003, 1000, "event=started", 'e')).status, 200u);
  EXPECT_EQ(trk.handle(announce(6003, 0, "event=stopped", 'e')).status, 200u);
  EXPECT_EQ(trk.handle(announce(6003, 0, "event=started", 't')).status, 200u);
  EXPECT_EQ(ports_of(trk.handle(announce(6004, 1000, "event=started"))),
            (std::vector<unsigned>{6002, 6003}));
  EXPECT_EQ(trk.stats().stale_stops, 1u);
  // The seed's own stop (it was unloaded) takes it out of the handouts.
  EXPECT_EQ(trk.handle(announce(6002, 0, "event=stopped", 's')).status, 200u);
  EXPECT_EQ(ports_of(trk.handle(announce(6004, 1000))), (std::vector<unsigned>{6003}));
  EXPECT_EQ(trk.stats().stale_stops, 1u);
}

}  // namespace
}  // namespace shoal::scheduler
