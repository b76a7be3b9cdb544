// A node that super-seeds what it published (peerd, the writer of a checkpoint): its peer id is a
// node's, so the downloading nodes learn it from the extension handshake, per torrent, and ignore
// its have-all for that torrent only. Real libtorrent sessions on loopback.

#include <gtest/gtest.h>
#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/peer_class.hpp>
#include <libtorrent/peer_info.hpp>
#include <libtorrent/torrent_info.hpp>

#include <thread>

#include "swarm/swarm.h"
#include "swarm_support.h"

namespace shoal::swarm {
namespace {

using namespace test_support;

// A writer as peerd runs it: a node's peer id, both plugins, its published torrent tagged.
result<std::unique_ptr<session>> start_writer(std::uint64_t upload_rate) {
  settings s;
  s.listen = "127.0.0.1:0";
  s.peer_fingerprint = std::string(superseed_node_fingerprint);
  s.close_redundant_connections = false;
  s.upload_rate_limit = upload_rate;
  auto w = session::start(s);
  if (!w) return w;
  (*w)->raw().add_extension(node_superseed_plugin());
  (*w)->raw().add_extension(origin_superseed_plugin(2, true));
  return w;
}

lt::torrent_handle add_download(lt::session& node, const object_dir& obj, const std::string& dir,
                                std::uint16_t port, lt::error_code& ec) {
  std::string torrent = obj.meta.torrent_file({});
  lt::add_torrent_params p;
  p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  if (ec) return {};
  p.save_path = (obj.root / dir).string();
  p.flags = lt::torrent_flags::update_subscribe;
  p.peers.emplace_back(lt::make_address("127.0.0.1"), port);
  return node.add_torrent(std::move(p), ec);
}

// The pieces the node believes `port`'s peer holds, and how many blocks it downloaded: -1 when
// that peer is not connected (yet).
int pieces_claimed(const lt::torrent_handle& h) {
  std::vector<lt::peer_info> peers;
  h.get_peer_info(peers);
  for (const auto& pi : peers) {
    if (!(pi.flags & lt::peer_info::handshake) && !(pi.flags & lt::peer_info::connecting))
      return pi.pieces.count();
  }
  return -1;
}

// The node sees only the writer's offers for the tagged torrent (not its have-all: the writer is
// throttled, so the node would otherwise see all 32 pieces at once) and still completes from
// them; the same writer's untagged torrent stays a plain seed whose have-all counts.
TEST(NodeSuperSeed, NodesLearnItFromTheHandshakePerTorrent) {
  object_dir tagged(32 * 64 * 1024, 21);  // 32 pieces of 64 KiB
  object_dir plain(8 * 64 * 1024, 22);
  auto writer = start_writer(512 * 1024);  // 2.5 MiB at 512 KiB/s: about 5 s for both
  ASSERT_TRUE(writer) << writer.error().message;
  // add_seed tags the torrent for the plugin; the plain one is added without the tag.
  ASSERT_TRUE((*writer)->add_seed(tagged.meta, (tagged.root / "origin").string(), {}));
  {
    std::string torrent = plain.meta.torrent_file({});
    lt::error_code ec;
    lt::add_torrent_params p;
    p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
    ASSERT_FALSE(ec) << ec.message();
    p.save_path = (plain.root / "origin").string();
    p.flags = lt::torrent_flags::seed_mode;
    auto h = (*writer)->add_torrent(std::move(p), ec);
    ASSERT_TRUE(h.is_valid());
    ASSERT_FALSE(ec) << ec.message();
  }
  std::uint16_t port = (*writer)->listen_port();
  ASSERT_NE(port, 0);

  auto node = start_node();
  lt::error_code ec;
  auto ht = add_download(*node, tagged, "node", port, ec);
  ASSERT_FALSE(ec) << ec.message();
  auto hp = add_download(*node, plain, "node", port, ec);
  ASSERT_FALSE(ec) << ec.message();

  // Once both connections are up: the tagged torrent's writer claims only what it offered (2
  // outstanding, plus what the node completed), the plain one all 8 of its pieces.
  int claimed_tagged = -1, claimed_plain = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // (Connected before the bitfield arrives: 0 at first. Offers come with the bitfield.)
  while ((claimed_tagged <= 0 || claimed_plain <= 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    claimed_tagged = pieces_claimed(ht);
    claimed_plain = pieces_claimed(hp);
    std::vector<lt::alert*> alerts;
    node->pop_alerts(&alerts);
  }
  ASSERT_GT(claimed_tagged, 0) << "no offer from the writer for the tagged torrent";
  ASSERT_GT(claimed_plain, 0) << "no bitfield from the writer for the plain torrent";
  EXPECT_EQ(claimed_plain, 8);
  int done = ht.status().num_pieces;
  EXPECT_LT(claimed_tagged, 32) << "the node took the super-seeding writer's have-all";
  EXPECT_LE(claimed_tagged, done + 2 + 1) << "more pieces claimed than offered";

  EXPECT_TRUE(wait_finished(*node, ht, std::chrono::seconds(60)))
      << "the node did not complete from the writer's offers";
  EXPECT_TRUE(wait_finished(*node, hp, std::chrono::seconds(60)));
  EXPECT_EQ(file_bytes(tagged.root / "node" / tagged.meta.object.hex()), tagged.data);
  node->abort();
  (*writer)->stop();
}

}  // namespace
}  // namespace shoal::swarm
