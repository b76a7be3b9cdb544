// Scheduler replicas as trackers (docs/scheduler.md "Clients fail over"): a torrent with every
// replica in one tier announces to one of them, and moves on to the next at once when the
// first refuses the connection, and within the LAN table's tracker_completion_timeout when the
// first accepts and never answers. A real libtorrent session with peerd's settings and loopback
// trackers.

#include <gtest/gtest.h>
#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/torrent_info.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../common/http_client_test_util.h"
#include "../common/support/test_http_server.h"
#include "swarm_support.h"

namespace shoal::swarm {
namespace {

using namespace std::chrono_literals;
using namespace test_support;
using shoal::testing::recorded_request;
using shoal::testing::reply;
using shoal::testing::test_http_server;
using steady = std::chrono::steady_clock;

reply tracker_answer(const recorded_request&) {
  reply r;
  r.body = "d8:intervali60e5:peers0:e";
  return r;
}

reply hang(const recorded_request&) {
  reply r;
  r.no_response = true;
  return r;
}

std::string announce_url(std::uint16_t port) {
  return "http://127.0.0.1:" + std::to_string(port) + "/announce";
}

std::size_t announces(const test_http_server& s) {
  std::size_t n = 0;
  for (const auto& r : s.requests()) n += r.target.starts_with("/announce") ? 1 : 0;
  return n;
}

// Adds the object as a seed with `trackers` (one tier, as peerd does) to a node session and
// returns how long until `live` saw an announce (or nullopt past `limit`).
std::optional<steady::duration> time_to_announce(const std::vector<std::string>& trackers,
                                                 const test_http_server& live,
                                                 steady::duration limit) {
  object_dir obj(64 * 1024, 3);
  auto ses = start_node();
  std::string torrent = obj.meta.torrent_file({});
  lt::error_code ec;
  lt::add_torrent_params p;
  p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  EXPECT_FALSE(ec) << ec.message();
  p.save_path = (obj.root / "origin").string();
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::override_trackers;
  p.trackers = trackers;
  auto t0 = steady::now();
  ses->add_torrent(std::move(p), ec);
  EXPECT_FALSE(ec) << ec.message();
  std::optional<steady::duration> took;
  while (steady::now() - t0 < limit) {
    if (announces(live) > 0) {
      took = steady::now() - t0;
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  ses->abort();
  return took;
}

TEST(TrackerFailover, OneAnnounceToTheFirstOfTheTier) {
  test_http_server first(tracker_answer), second(tracker_answer);
  auto took =
      time_to_announce({announce_url(first.port()), announce_url(second.port())}, first, 5s);
  ASSERT_TRUE(took.has_value());
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(announces(second), 0u) << "announce_to_all_trackers is off: one replica is enough";
}

TEST(TrackerFailover, RefusedMovesToTheNextAtOnce) {
  test_http_server live(tracker_answer);
  auto dead = shoal::http::client_test::closed_port();
  auto took = time_to_announce({announce_url(dead), announce_url(live.port())}, live, 10s);
  ASSERT_TRUE(took.has_value()) << "no announce reached the second tracker";
  std::printf("refused first tracker: the second announced to after %.2f s\n",
              std::chrono::duration<double>(*took).count());
  EXPECT_LT(*took, 2s);
}

TEST(TrackerFailover, HungMovesToTheNextWithinTheCompletionTimeout) {
  test_http_server hung(hang), live(tracker_answer);
  auto took = time_to_announce({announce_url(hung.port()), announce_url(live.port())}, live, 15s);
  ASSERT_TRUE(took.has_value()) << "no announce reached the second tracker";
  std::printf("hung first tracker: the second announced to after %.2f s\n",
              std::chrono::duration<double>(*took).count());
  EXPECT_GE(announces(hung), 1u);
  EXPECT_LT(*took, 5s);  // tracker_completion_timeout 3 s (libtorrent's default: 30 s)
}

}  // namespace
}  // namespace shoal::swarm
