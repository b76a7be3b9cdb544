// common/swarm: the session's rate limits (settings::upload_rate_limit, download_rate_limit; the
// `upload_rate_limit` keys of registry-proxy and peerd) cap peers on private and loopback
// addresses too. libtorrent puts such peers into its "local" peer class only, and its rate limit
// settings cap the "global" class, so before session::start put them into both, a cluster on
// 10/8 (every real one) or on loopback was never capped.
// The same capped download shows swarm::serving_peers (peerd's idle-seed sweep) at work.

#include <gtest/gtest.h>
#include <libtorrent/ip_filter.hpp>
#include <libtorrent/torrent_status.hpp>

#include <chrono>
#include <fstream>
#include <thread>

#include "swarm/swarm.h"
#include "swarm_support.h"

namespace shoal::swarm {
namespace {

using namespace test_support;
using clk = std::chrono::steady_clock;

constexpr std::uint64_t rate = 512 * 1024;         // bytes/s
constexpr std::size_t size = 2 * 1024 * 1024 + 7;  // 33 pieces of 64 KiB: 4 s at `rate`

result<std::unique_ptr<session>> start(std::uint64_t up, std::uint64_t down) {
  settings s;
  s.listen = "127.0.0.1:0";
  s.upload_rate_limit = up;
  s.download_rate_limit = down;
  return session::start(s);
}

// Seconds the node (a swarm::session, whose own thread takes the alerts) needs to download `obj`
// from `seed`, or a negative value when it did not finish within 30 s or got other bytes.
double download_seconds(session& seed, session& node, const object_dir& obj) {
  if (!seed.add_seed(obj.meta, (obj.root / "origin").string(), {})) return -1;
  auto t0 = clk::now();
  auto h = add_download(node.raw(), obj.meta.torrent_file({}), (obj.root / "node").string(),
                        seed.listen_port());
  if (!h.is_valid()) return -1;
  while (!h.status().is_seeding) {
    if (clk::now() - t0 > std::chrono::seconds(30)) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  double s = std::chrono::duration<double>(clk::now() - t0).count();
  return file_bytes(obj.root / "node" / obj.meta.object.hex()) == obj.data ? s : -2;
}

// libtorrent lets a rate-limited channel run a little ahead of its rate (the quota of a tick is
// handed out at once), so the bound is 70 % of size / rate: uncapped, 2 MiB on loopback takes a
// fraction of a second.
constexpr double min_capped_s = 0.7 * static_cast<double>(size) / static_cast<double>(rate);

TEST(SwarmRateLimit, PrivateAndLoopbackPeersAreInTheCappedClass) {
  auto ses = start(rate, 0);
  ASSERT_TRUE(ses) << ses.error().message;
  auto f = (*ses)->raw().get_peer_class_filter();
  const std::uint32_t global = 1u << static_cast<std::uint32_t>(lt::session::global_peer_class_id);
  const std::uint32_t local = 1u << static_cast<std::uint32_t>(lt::session::local_peer_class_id);
  for (const char* a : {"127.0.0.1", "10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.3.4", "::1",
                        "fd00::1", "fe80::1"}) {
    EXPECT_EQ(f.access(lt::make_address(a)), global | local) << a;
  }
  for (const char* a : {"8.8.8.8", "2001:db8::1"})
    EXPECT_EQ(f.access(lt::make_address(a)), global) << a;
}

TEST(SwarmRateLimit, UploadCapHoldsForALoopbackPeer) {
  object_dir obj(size, 21);
  auto seed = start(rate, 0);
  ASSERT_TRUE(seed) << seed.error().message;
  auto node = start(0, 0);
  ASSERT_TRUE(node) << node.error().message;
  double s = download_seconds(**seed, **node, obj);
  ASSERT_GT(s, 0) << "the node did not get the blob intact within 30 s";
  EXPECT_GE(s, min_capped_s) << "2 MiB at a 512 KiB/s upload cap came in " << s << " s";
}

TEST(SwarmRateLimit, DownloadCapHoldsForALoopbackPeer) {
  object_dir obj(size, 22);
  auto seed = start(0, 0);
  ASSERT_TRUE(seed) << seed.error().message;
  auto node = start(0, rate);
  ASSERT_TRUE(node) << node.error().message;
  double s = download_seconds(**seed, **node, obj);
  ASSERT_GT(s, 0) << "the node did not get the blob intact within 30 s";
  EXPECT_GE(s, min_capped_s) << "2 MiB at a 512 KiB/s download cap came in " << s << " s";
}

// serving_peers (peerd's idle-seed sweep): a seed serves while a node that is not yet a seed
// downloads from it, and not before or after; a torrent nobody asks for never does. The upload
// cap makes the download last a few seconds.
TEST(SwarmServing, OnlyWhileANonSeedPeerDownloads) {
  object_dir asked(size, 31), idle(size, 32);
  auto seed = start(rate, 0);
  ASSERT_TRUE(seed) << seed.error().message;
  auto node = start(0, 0);
  ASSERT_TRUE(node) << node.error().message;
  auto h1 = (*seed)->add_seed(asked.meta, (asked.root / "origin").string(), {});
  ASSERT_TRUE(h1) << h1.error().message;
  auto h2 = (*seed)->add_seed(idle.meta, (idle.root / "origin").string(), {});
  ASSERT_TRUE(h2) << h2.error().message;
  EXPECT_TRUE(serving_peers((*seed)->raw()).empty());

  auto d = add_download((*node)->raw(), asked.meta.torrent_file({}), (asked.root / "node").string(),
                        (*seed)->listen_port());
  ASSERT_TRUE(d.is_valid());
  auto t0 = clk::now();
  std::vector<lt::torrent_handle> during;
  while (clk::now() - t0 < std::chrono::seconds(10)) {
    auto st = d.status();
    if (st.is_seeding) break;
    if (st.total_wanted_done > 0) {
      during = serving_peers((*seed)->raw());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(d.status().is_seeding) << "the capped download ended before it was looked at";
  ASSERT_EQ(during.size(), 1u);
  EXPECT_EQ(during[0], *h1);
  EXPECT_EQ(serving_a_peer(*h1), true);
  EXPECT_EQ(serving_a_peer(*h2), false);

  // Once the node holds everything it is a seed too: nobody is served any more.
  while (!d.status().is_seeding && clk::now() - t0 < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(d.status().is_seeding);
  std::vector<lt::torrent_handle> after{*h1};
  while (!after.empty() && clk::now() - t0 < std::chrono::seconds(35)) {
    after = serving_peers((*seed)->raw());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(after.empty());
}

}  // namespace
}  // namespace shoal::swarm
