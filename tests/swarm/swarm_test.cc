// common/swarm: the settings table, raw overrides, and Shoal super seeding between a real origin
// session and real node sessions on loopback.

#include "swarm/swarm.h"

#include <gtest/gtest.h>
#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert_types.hpp>
#include <libtorrent/session.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "../common/http_client_test_util.h"
#include "../common/support/test_pki.h"
#include "common/sha256.h"
#include "swarm/metainfo.h"
#include "swarm_support.h"

namespace shoal::swarm {
namespace {

namespace fs = std::filesystem;
using sp = lt::settings_pack;
using namespace test_support;

TEST(SwarmSettings, LanTableTurnsOffWhatHurtsOnALan) {
  settings s;
  s.listen = "127.0.0.1:0";
  auto p = lan_settings(s);
  EXPECT_FALSE(p.get_bool(sp::enable_outgoing_utp));
  EXPECT_FALSE(p.get_bool(sp::enable_incoming_utp));
  EXPECT_FALSE(p.get_bool(sp::enable_dht));
  EXPECT_EQ(p.get_int(sp::unchoke_slots_limit), -1);
  EXPECT_EQ(p.get_str(sp::listen_interfaces), "127.0.0.1:0");
  EXPECT_TRUE(p.get_bool(sp::close_redundant_connections));
  s.close_redundant_connections = false;
  EXPECT_FALSE(lan_settings(s).get_bool(sp::close_redundant_connections));
}

TEST(SwarmSettings, OverridesSetEveryTypeByLibtorrentName) {
  sp p;
  ASSERT_TRUE(apply_overrides(p, {{"predictive_piece_announce", "25"},
                                  {"strict_end_game_mode", "false"},
                                  {"user_agent", "bench"}}));
  EXPECT_EQ(p.get_int(sp::predictive_piece_announce), 25);
  EXPECT_FALSE(p.get_bool(sp::strict_end_game_mode));
  EXPECT_EQ(p.get_str(sp::user_agent), "bench");
  ASSERT_TRUE(apply_overrides(p, {{"strict_end_game_mode", "1"}}));
  EXPECT_TRUE(p.get_bool(sp::strict_end_game_mode));
}

TEST(SwarmSettings, OverridesRefuseUnknownKeysAndBadValues) {
  sp p;
  auto unknown = apply_overrides(p, {{"no_such_setting", "1"}});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("no_such_setting"), std::string::npos);
  EXPECT_FALSE(apply_overrides(p, {{"aio_threads", "four"}}));
  EXPECT_FALSE(apply_overrides(p, {{"aio_threads", "4x"}}));
  EXPECT_FALSE(apply_overrides(p, {{"aio_threads", "99999999999"}}));
  EXPECT_FALSE(apply_overrides(p, {{"strict_end_game_mode", "yes"}}));
}

TEST(SwarmSettings, SessionStartFailsOnABadOverride) {
  settings s;
  s.listen = "127.0.0.1:0";
  s.libtorrent = {{"no_such_setting", "1"}};
  EXPECT_FALSE(session::start(s));
}

// A listening TCP socket on 127.0.0.1, port chosen by the kernel; closed with the object.
struct held_port {
  int fd = -1;
  std::uint16_t port = 0;
  held_port() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd, 8) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    port = ntohs(a.sin_port);
  }
  ~held_port() {
    if (fd >= 0) ::close(fd);
  }
};

// libtorrent by default moves to one of the next ten ports, then to any, when the configured one
// is taken: the node then listens where no firewall rule or NetworkPolicy expects it, and says
// so only in an info line. The start fails instead and names the port and the cause.
TEST(SwarmSettings, SessionStartFailsWhenItsPortIsTaken) {
  EXPECT_EQ(lan_settings(settings{}).get_int(sp::max_retry_port_bind), 0);
  EXPECT_FALSE(lan_settings(settings{}).get_bool(sp::listen_system_port_fallback));
  held_port taken;
  ASSERT_NE(taken.port, 0) << std::strerror(errno);
  settings s;
  s.listen = "127.0.0.1:" + std::to_string(taken.port);
  auto refused = session::start(s);
  ASSERT_FALSE(refused) << "listening on " << (*refused)->listen_port();
  EXPECT_NE(refused.error().message.find(s.listen), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("in use"), std::string::npos) << refused.error().message;

  // Port 0 is the kernel's choice, and a free port is taken as configured.
  s.listen = "127.0.0.1:0";
  auto any = session::start(s);
  ASSERT_TRUE(any) << any.error().message;
  EXPECT_NE((*any)->listen_port(), 0);
  const std::uint16_t freed = http::client_test::closed_port();
  s.listen = "127.0.0.1:" + std::to_string(freed);
  auto exact = session::start(s);
  ASSERT_TRUE(exact) << exact.error().message;
  EXPECT_EQ((*exact)->listen_port(), freed);

  // An operator who wants libtorrent's fallback back gets it through swarm.libtorrent.
  held_port again;
  s.listen = "127.0.0.1:" + std::to_string(again.port);
  s.libtorrent = {{"max_retry_port_bind", "10"}};
  auto moved = session::start(s);
  ASSERT_TRUE(moved) << moved.error().message;
  EXPECT_NE((*moved)->listen_port(), again.port);
}

TEST(SwarmIdentity, OriginPeerIdsAreRecognised) {
  auto id = [](std::string_view prefix) {
    lt::peer_id p;
    std::fill(p.begin(), p.end(), 'x');
    std::copy(prefix.begin(), prefix.end(), p.begin());
    return p;
  };
  EXPECT_TRUE(is_origin(id(origin_fingerprint)));
  EXPECT_TRUE(is_origin(id(superseeding_origin_fingerprint)));
  EXPECT_FALSE(is_origin(id(node_fingerprint)));
  EXPECT_FALSE(is_origin(id(superseed_node_fingerprint)));
}

// The origin offers pieces one HAVE at a time and the nodes, which ignore its have-all, still
// get the whole object: without working offers they could request nothing at all.
TEST(SwarmSuperSeed, NodesCompleteFromOffersAlone) {
  object_dir obj(64 * 64 * 1024 + 123, 7);  // 65 pieces of 64 KiB
  auto origin = start_superseeding_origin();
  ASSERT_TRUE(origin) << origin.error().message;
  auto seed = (*origin)->add_seed(obj.meta, (obj.root / "origin").string(), {});
  ASSERT_TRUE(seed) << seed.error().message;
  std::uint16_t port = (*origin)->listen_port();
  ASSERT_NE(port, 0);

  std::string torrent = obj.meta.torrent_file({});
  std::vector<std::unique_ptr<lt::session>> nodes;
  std::vector<lt::torrent_handle> handles;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(start_node());
    lt::error_code ec;
    lt::add_torrent_params p;
    p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
    ASSERT_FALSE(ec) << ec.message();
    p.save_path = (obj.root / ("node" + std::to_string(i))).string();
    p.flags = lt::torrent_flags::update_subscribe;
    p.peers.emplace_back(lt::make_address("127.0.0.1"), port);
    handles.push_back(nodes.back()->add_torrent(std::move(p), ec));
    ASSERT_FALSE(ec) << ec.message();
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(wait_finished(*nodes[static_cast<std::size_t>(i)],
                              handles[static_cast<std::size_t>(i)], std::chrono::seconds(30)))
        << "node " << i << " did not complete from the origin's offers";
    EXPECT_EQ(file_bytes(obj.root / ("node" + std::to_string(i)) / obj.meta.object.hex()),
              obj.data);
  }
  for (auto& n : nodes) n->abort();
  (*origin)->stop();
}

// A plain BitTorrent client (no node fingerprint) gets a plain seed from the same origin.
TEST(SwarmSuperSeed, OtherClientsSeeAPlainSeed) {
  object_dir obj(16 * 64 * 1024, 9);
  auto origin = start_superseeding_origin();
  ASSERT_TRUE(origin) << origin.error().message;
  ASSERT_TRUE((*origin)->add_seed(obj.meta, (obj.root / "origin").string(), {}));

  settings ns;
  ns.listen = "127.0.0.1:0";
  lt::session node(lt::session_params(lan_settings(ns)));  // no plugin, default fingerprint
  std::string torrent = obj.meta.torrent_file({});
  lt::error_code ec;
  lt::add_torrent_params p;
  p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  ASSERT_FALSE(ec);
  p.save_path = (obj.root / "plain").string();
  p.flags = lt::torrent_flags::update_subscribe;
  p.peers.emplace_back(lt::make_address("127.0.0.1"), (*origin)->listen_port());
  auto h = node.add_torrent(std::move(p), ec);
  ASSERT_FALSE(ec);
  EXPECT_TRUE(wait_finished(node, h, std::chrono::seconds(30)));
  node.abort();
  (*origin)->stop();
}

// A node ignores a super-seeding origin's bitfield for every torrent: dataset packs must be
// offered too, or the node could request nothing from the origin (it would idle until peerd's
// HTTP fallback).
TEST(SwarmSuperSeed, PackSeedsAreAnnouncedToNodesInFull) {
  std::string tmpl = (fs::temp_directory_path() / "shoal-swarm-pack-XXXXXX").string();
  fs::path root = mkdtemp(tmpl.data());
  std::mt19937 rng(11);
  std::map<digest, std::string> objs;
  for (int i = 0; i < 30; ++i) {
    std::string s(5000 + rng() % 90000, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    objs[sha256_of(s)] = s;
  }
  std::vector<std::pair<digest, std::uint64_t>> members;
  for (const auto& [d, s] : objs) {
    members.emplace_back(d, s.size());
    fs::path f = root / "origin" / "sha256" / d.hex().substr(0, 2) / d.hex();
    fs::create_directories(f.parent_path());
    std::ofstream(f, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
  }
  auto pack = build_pack(
      members,
      [&](const digest& d, std::uint64_t off, char* buf, std::size_t n) -> result<std::size_t> {
        const auto& s = objs.at(d);
        std::size_t k = std::min<std::size_t>(n, s.size() - static_cast<std::size_t>(off));
        std::memcpy(buf, s.data() + off, k);
        return k;
      });
  ASSERT_TRUE(pack) << pack.error().to_string();

  auto origin = start_superseeding_origin();
  ASSERT_TRUE(origin) << origin.error().message;
  ASSERT_TRUE((*origin)->add_pack_seed(*pack, (root / "origin").string(), {}));

  auto node = start_node();
  std::string torrent = pack->torrent_file({});
  lt::error_code ec;
  lt::add_torrent_params p;
  p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  ASSERT_FALSE(ec) << ec.message();
  p.save_path = (root / "node").string();
  p.flags = lt::torrent_flags::update_subscribe;
  p.peers.emplace_back(lt::make_address("127.0.0.1"), (*origin)->listen_port());
  auto h = node->add_torrent(std::move(p), ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(wait_finished(*node, h, std::chrono::seconds(30)))
      << "the node got nothing from a pack seed";
  for (const auto& [d, s] : objs) {
    EXPECT_EQ(file_bytes(root / "node" / "sha256" / d.hex().substr(0, 2) / d.hex()), s) << d.str();
  }
  node->abort();
  (*origin)->stop();
  std::error_code rec;
  fs::remove_all(root, rec);
}

// A node that does not want some pieces (a dataset node skips files it already holds, and its
// bitfield does not show them) never takes up those offers; they expire and free their slots,
// so the node still completes what it wants from the origin alone.
TEST(SwarmSuperSeed, OffersANodeDoesNotTakeUpExpire) {
  object_dir obj(24 * 64 * 1024, 13);  // 24 pieces of 64 KiB in one file
  auto counters = std::make_shared<superseed_counters>();
  auto origin = start_superseeding_origin(2, superseed_max_in_flight_default, 0, counters);
  ASSERT_TRUE(origin) << origin.error().message;
  ASSERT_TRUE((*origin)->add_seed(obj.meta, (obj.root / "origin").string(), {}));

  auto node = start_node();
  std::string torrent = obj.meta.torrent_file({});
  lt::error_code ec;
  lt::add_torrent_params p;
  p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  ASSERT_FALSE(ec) << ec.message();
  p.save_path = (obj.root / "node").string();
  p.flags = lt::torrent_flags::update_subscribe;
  // The first two pieces (the first two offers, in order) are not wanted.
  p.piece_priorities.assign(24, lt::default_priority);
  p.piece_priorities[0] = lt::dont_download;
  p.piece_priorities[1] = lt::dont_download;
  p.peers.emplace_back(lt::make_address("127.0.0.1"), (*origin)->listen_port());
  auto h = node->add_torrent(std::move(p), ec);
  ASSERT_FALSE(ec) << ec.message();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool finished = false;
  while (!finished && std::chrono::steady_clock::now() < deadline) {
    finished = h.status().is_finished;
    std::vector<lt::alert*> alerts;
    node->wait_for_alert(lt::milliseconds(50));
    node->pop_alerts(&alerts);
  }
  EXPECT_TRUE(finished) << "stuck behind offers of unwanted pieces";
  auto st = h.status(lt::torrent_handle::query_pieces);
  EXPECT_FALSE(st.pieces[lt::piece_index_t(0)]);
  EXPECT_TRUE(st.pieces[lt::piece_index_t(23)]);
  // The two unwanted offers held both slots until they expired; every piece was offered once.
  EXPECT_EQ(counters->offers_expired.load(), 2u);
  EXPECT_EQ(counters->offers_first.load(), 24u);
  EXPECT_EQ(counters->offers_second.load(), 0u);
  EXPECT_EQ(counters->repeat_bytes_same_node.load() + counters->repeat_bytes_other_node.load(), 0u);
  node->abort();
  (*origin)->stop();
}

// Two nodes that cannot reach each other (no tracker, no peer exchange) each need every piece
// from the origin: it offers each piece once as a first copy, then to the other node as a second
// one (a node that got nothing from other nodes), and counts every byte of the second copies as
// sent to another node, none as sent twice to the same node.
TEST(SwarmSuperSeed, SecondCopiesAreCounted) {
  object_dir obj(20 * 64 * 1024 + 1000, 17);  // 21 pieces, the last one short
  auto counters = std::make_shared<superseed_counters>();
  auto origin = start_superseeding_origin(2, superseed_max_in_flight_default, 0, counters);
  ASSERT_TRUE(origin) << origin.error().message;
  ASSERT_TRUE((*origin)->add_seed(obj.meta, (obj.root / "origin").string(), {}));
  std::string torrent = obj.meta.torrent_file({});
  std::vector<std::unique_ptr<lt::session>> nodes;
  std::vector<lt::torrent_handle> handles;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(start_node(false));
    lt::error_code ec;
    lt::add_torrent_params p;
    p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
    ASSERT_FALSE(ec) << ec.message();
    p.save_path = (obj.root / ("node" + std::to_string(i))).string();
    p.peers.emplace_back(lt::make_address("127.0.0.1"), (*origin)->listen_port());
    handles.push_back(nodes.back()->add_torrent(std::move(p), ec));
    ASSERT_FALSE(ec) << ec.message();
  }
  for (std::size_t i = 0; i < 2; ++i)
    ASSERT_TRUE(wait_finished(*nodes[i], handles[i], std::chrono::seconds(60))) << "node " << i;
  // Every piece offered to each node once: as a second copy to the node that came second, unless
  // the first node had finished and left the origin (two seeds) by then, so that what it held
  // counts as held by no connected node (under ASan all 42 offers were first ones).
  EXPECT_EQ(counters->offers_first.load() + counters->offers_second.load(), 42u);
  EXPECT_GE(counters->offers_first.load(), 21u);
  EXPECT_EQ(counters->repeat_bytes_other_node.load(), obj.data.size());
  EXPECT_EQ(counters->repeat_bytes_same_node.load(), 0u);
  for (auto& n : nodes) n->abort();
  (*origin)->stop();
}

// ---- SSL torrents: BitTorrent between members (docs/security.md) ----

// The cluster's PKI, made once with the openssl CLI: "ca" and "other-ca"; "seed" and "member"
// follow the profile (signed by ca, DNS SAN *, URI SAN shoal://node/<name>, serverAuth and
// clientAuth); "foreign" is the same profile under other-ca; "uri_only" is signed by ca without
// DNS *; "expired" follows the profile but ended yesterday.
testing::test_pki& swarm_pki() {
  static testing::test_pki* pki = [] {
    auto* p = testing::test_pki::process_wide();
    p->make_ca("ca");
    p->make_ca("other-ca");
    p->issue("seed", "ca", "DNS:*,URI:shoal://node/seed");
    p->issue("member", "ca", "DNS:*,URI:shoal://node/member");
    p->issue("member2", "ca", "DNS:*,URI:shoal://node/member");
    p->issue("foreign", "other-ca", "DNS:*,URI:shoal://node/member");
    p->issue("seed-new", "other-ca", "DNS:*,URI:shoal://node/seed");
    p->issue("uri_only", "ca", "URI:shoal://node/member");
    p->issue("expired", "ca", "DNS:*,URI:shoal://node/member", -1);
    p->issue("proxy", "ca", "DNS:*,URI:shoal://registry-proxy");
    p->issue("thief", "ca", "DNS:*,URI:shoal://node/thief");
    return p;
  }();
  return *pki;
}

std::string cluster_root() {
  auto r = load_root_pem(swarm_pki().pem("ca"));
  if (!r) ADD_FAILURE() << r.error().to_string();
  return r ? *r : std::string();
}

settings ssl_settings(const std::string& who, std::string_view fingerprint) {
  settings s;
  s.listen = "127.0.0.1:0";
  s.peer_fingerprint = std::string(fingerprint);
  s.close_redundant_connections = false;
  s.ssl = true;
  s.cert_file = swarm_pki().pem(who);
  s.key_file = swarm_pki().key(who);
  s.reload_interval = std::chrono::milliseconds(100);
  s.ca_file = swarm_pki().pem("ca");
  s.require_grants = false;  // the SwarmGrants cases turn them on
  return s;
}

// Offers outstanding on all of an origin's connections together stay within max_in_flight, and
// nodes beyond it still complete (the slots move on as offers are taken up). 4 nodes that know
// only the origin, each 16 pieces at 1 MiB/s from it: with 8 offers (2 per node) and no bound,
// up to 8 are out at once, which is what the check must be able to see; with a bound of 2, two.
// A node counts an offer as outstanding from the origin's HAVE until the piece is its own. The
// rate keeps each offer out for half a second. Until 2026-12-06 the cap was set on the global
// peer class, which loopback peers are not in: the transfer ran unlimited, and once nodes asked
// for an offer at once (the origin's UNCHOKE with it) a loaded machine's sampling saw 0 or 1.
int most_offers_in_flight(int max_in_flight, bool& all_completed) {
  object_dir obj(16 * 64 * 1024, 31);
  auto origin = start_superseeding_origin(8, max_in_flight, 1 << 20);
  if (!origin) {
    ADD_FAILURE() << origin.error().message;
    return -1;
  }
  if (!(*origin)->add_seed(obj.meta, (obj.root / "origin").string(), {})) return -1;
  std::string torrent = obj.meta.torrent_file({});
  std::vector<std::unique_ptr<lt::session>> nodes;
  std::vector<lt::torrent_handle> hs;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(start_node());
    hs.push_back(add_download(*nodes.back(), torrent,
                              (obj.root / ("n" + std::to_string(i))).string(),
                              (*origin)->listen_port()));
  }
  int most = 0;
  all_completed = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!all_completed && std::chrono::steady_clock::now() < deadline) {
    // Every node's view of the origin first, then every node's own pieces: an offer counted was
    // made before the last view and not yet taken up after it, so all counted offers were out at
    // that one moment. (Sampled node by node, an offer taken up at one node between two samples
    // and its slot given to the next node counted twice; a loaded machine saw 3 with a bound of 2.)
    std::vector<std::vector<lt::peer_info>> views(hs.size());
    for (std::size_t i = 0; i < hs.size(); ++i) hs[i].get_peer_info(views[i]);
    int out = 0;
    all_completed = true;
    for (std::size_t i = 0; i < hs.size(); ++i) {
      auto st = hs[i].status(lt::torrent_handle::query_pieces);
      all_completed = all_completed && st.is_seeding;
      for (const auto& pi : views[i]) {
        if (!is_origin(pi.pid)) continue;
        for (int p = 0; p < std::min(pi.pieces.size(), st.pieces.size()); ++p) {
          lt::piece_index_t k(p);
          if (pi.pieces[k] && !st.pieces[k]) ++out;
        }
      }
    }
    most = std::max(most, out);
    for (auto& n : nodes) {
      std::vector<lt::alert*> alerts;
      n->pop_alerts(&alerts);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& n : nodes) n->abort();
  (*origin)->stop();
  return most;
}

TEST(SwarmSuperSeed, OffersInFlightAreBoundedForAllNodes) {
  bool completed = false;
  int unbounded = most_offers_in_flight(64, completed);
  // That the sampling can see more than two offers out is the check's precondition, not the
  // property: under ASan beside other tests the 4 nodes may join the origin too far apart to have
  // their offers out together (seen once in a clean-clone run, 2026-12-07), so once more then.
  if (unbounded <= 2 && completed)
    unbounded = std::max(unbounded, most_offers_in_flight(64, completed));
  EXPECT_TRUE(completed) << "without a bound";
  EXPECT_GT(unbounded, 2) << "the check cannot see offers in flight";
  int bounded = most_offers_in_flight(2, completed);
  EXPECT_TRUE(completed) << "nodes beyond the bound never got an offer";
  EXPECT_GE(bounded, 1);
  EXPECT_LE(bounded, 2);
}

std::int64_t downloaded(const lt::torrent_handle& h) {
  auto st = h.status();
  return st.total_payload_download + st.total_wanted_done;
}

bool wait_seeding(const lt::torrent_handle& h, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (h.status().is_seeding) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// A member (cluster CA, DNS *) downloads the whole object from a seed over TLS; at the same time
// a certificate from another CA, one without DNS *, and a session with no certificate at all get
// no byte, and a plain BitTorrent client of the plain torrent cannot reach the SSL-only port.
TEST(SwarmSsl, MembersDownloadNonMembersGetNothing) {
  object_dir obj(16 * 64 * 1024 + 77, 21);
  auto root = cluster_root();
  auto meta = obj.meta;
  meta.ssl_cert = root;
  auto seed = session::start(ssl_settings("seed", superseeding_origin_fingerprint));
  ASSERT_TRUE(seed) << seed.error().to_string();
  (*seed)->raw().add_extension(origin_superseed_plugin(2, true));
  ASSERT_TRUE((*seed)->ssl());
  EXPECT_FALSE((*seed)->add_seed(obj.meta, (obj.root / "origin").string(), {}))
      << "an SSL-only session must refuse a plain torrent";
  ASSERT_TRUE((*seed)->add_seed(meta, (obj.root / "origin").string(), {}));
  std::uint16_t port = (*seed)->listen_port();
  ASSERT_NE(port, 0);
  EXPECT_EQ((*seed)->raw().listen_port(), 0) << "no plain listener with ssl on";

  std::string torrent = meta.torrent_file({});
  struct dl {
    std::string name;
    std::unique_ptr<session> ses;
    lt::torrent_handle h;
  };
  std::vector<dl> dls;
  for (const char* who : {"member", "foreign", "uri_only"}) {
    auto s = session::start(ssl_settings(who, superseed_node_fingerprint));
    ASSERT_TRUE(s) << who << ": " << s.error().to_string();
    (*s)->raw().add_extension(node_superseed_plugin());
    dls.push_back({who, std::move(*s), {}});
  }
  for (auto& d : dls) d.h = add_download(d.ses->raw(), torrent, (obj.root / d.name).string(), port);
  // No certificate at all: a raw session listening on an SSL port, never given one.
  settings ns;
  ns.listen = "127.0.0.1:0s";
  lt::session no_cert(lt::session_params(lan_settings(ns)));
  auto nh = add_download(no_cert, torrent, (obj.root / "no_cert").string(), port);
  // A plain client with the plain torrent (same bytes) dialling the SSL port.
  settings ps;
  ps.listen = "127.0.0.1:0";
  lt::session plain(lt::session_params(lan_settings(ps)));
  auto ph = add_download(plain, obj.meta.torrent_file({}), (obj.root / "plain").string(), port);

  ASSERT_TRUE(wait_seeding(dls[0].h, std::chrono::seconds(20))) << "the member did not complete";
  EXPECT_EQ(file_bytes(obj.root / "member" / obj.meta.object.hex()), obj.data);
  // The others had the same time plus a second and several reconnect rounds (2 s apart).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (std::size_t i = 1; i < dls.size(); ++i)
    EXPECT_EQ(downloaded(dls[i].h), 0) << dls[i].name << " got bytes";
  EXPECT_EQ(downloaded(nh), 0) << "no_cert got bytes";
  EXPECT_EQ(downloaded(ph), 0) << "plain got bytes";
  EXPECT_GT(dls[0].ses->raw().get_torrents().size(), 0u);
  no_cert.abort();
  plain.abort();
  for (auto& d : dls) d.ses->stop();
  (*seed)->stop();
}

// A certificate renewed on disk under a running session is picked up without a restart: a
// downloader whose certificate expired gets nothing, then its files are replaced (atomic renames)
// and the same running torrent completes.
TEST(SwarmSsl, CertificateRotatedOnDiskIsPickedUp) {
  object_dir obj(8 * 64 * 1024, 22);
  auto meta = obj.meta;
  meta.ssl_cert = cluster_root();
  auto seed = session::start(ssl_settings("seed", origin_fingerprint));
  ASSERT_TRUE(seed) << seed.error().to_string();
  ASSERT_TRUE((*seed)->add_seed(meta, (obj.root / "origin").string(), {}));

  auto& pki = swarm_pki();
  pki.install("expired", "rot");
  auto s = session::start(ssl_settings("rot", node_fingerprint));
  ASSERT_TRUE(s) << s.error().to_string();
  auto h = add_download((*s)->raw(), meta.torrent_file({}), (obj.root / "rot").string(),
                        (*seed)->listen_port());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(downloaded(h), 0) << "an expired certificate got bytes";
  EXPECT_EQ((*s)->tls_stats().reloads, 0u);

  // The new certificate lands before its key: not a failure while the rotation settles.
  std::filesystem::copy_file(pki.pem("member2"), pki.pem("rot") + ".tmp",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(pki.pem("rot") + ".tmp", pki.pem("rot"));
  auto half = (*s)->reload_certificate_if_changed();
  ASSERT_TRUE(half) << half.error().to_string();
  EXPECT_FALSE(*half);
  EXPECT_EQ((*s)->tls_stats().reload_failures, 0u);

  pki.install("member2", "rot");
  ASSERT_TRUE(wait_seeding(h, std::chrono::seconds(20)))
      << "the renewed certificate was not used by the running torrent";
  EXPECT_EQ((*s)->tls_stats().reloads, 1u);

  // A broken replacement keeps the working pair and counts a failure.
  std::ofstream(pki.pem("rot"), std::ios::trunc) << "garbage";
  auto r = (*s)->reload_certificate_if_changed();
  EXPECT_FALSE(r);
  EXPECT_EQ((*s)->tls_stats().reload_failures, 1u);
  (*s)->stop();
  (*seed)->stop();
}

// ---- Grants (swarm/grants.h): pieces only for holders of registry-proxy's grant ----

settings grant_settings(const std::string& who, std::string_view fingerprint) {
  auto s = ssl_settings(who, fingerprint);
  s.require_grants = true;
  return s;
}

std::string grant_for(const lt::sha1_hash& swarm, const std::string& node,
                      std::chrono::seconds ttl = std::chrono::seconds(600)) {
  auto sg = grant::signer::load(swarm_pki().pem("proxy"), swarm_pki().key("proxy"));
  EXPECT_TRUE(sg) << (sg ? "" : sg.error().message);
  if (!sg) return {};
  grant::info_hash ih{};
  std::copy(swarm.begin(), swarm.end(), ih.begin());
  auto g = (*sg)->sign({ih, node, std::chrono::system_clock::now() + ttl});
  EXPECT_TRUE(g);
  return g ? *g : std::string();
}

// With grants on, the seed uploads only to members presenting registry-proxy's grant for this
// swarm and their own node: "member" (a grant for node "member") completes; at the same time
// "thief" (a member of the same CA with no grant), "replay" (a member presenting the grant
// issued to "member", under its own certificate shoal://node/thief) and "stale" (its grant
// expired) get no byte, and the seed counts them refused. A member with a grant for another
// swarm gets nothing either.
TEST(SwarmGrants, OnlyHoldersOfAValidGrantGetPieces) {
  object_dir obj(16 * 64 * 1024 + 5, 31);
  auto meta = obj.meta;
  meta.ssl_cert = cluster_root();
  auto seed = session::start(grant_settings("seed", superseeding_origin_fingerprint));
  ASSERT_TRUE(seed) << seed.error().to_string();
  ASSERT_TRUE((*seed)->grants_required());
  (*seed)->raw().add_extension(origin_superseed_plugin(2, true));
  ASSERT_TRUE((*seed)->add_seed(meta, (obj.root / "origin").string(), {}));
  std::uint16_t port = (*seed)->listen_port();
  const lt::sha1_hash ih(reinterpret_cast<const char*>(meta.info_hash().data()));
  lt::sha1_hash other_swarm = ih;
  other_swarm[0] ^= 1;

  struct dl {
    std::string name, cert, grant;
    std::unique_ptr<session> ses;
    lt::torrent_handle h;
  };
  std::vector<dl> dls;
  dls.push_back({"member", "member", grant_for(ih, "member"), nullptr, {}});
  dls.push_back({"thief", "thief", "", nullptr, {}});
  dls.push_back({"replay", "thief", grant_for(ih, "member"), nullptr, {}});
  dls.push_back(
      {"stale", "thief", grant_for(ih, "thief", std::chrono::seconds(-120)), nullptr, {}});
  dls.push_back({"elsewhere", "thief", grant_for(other_swarm, "thief"), nullptr, {}});
  std::string torrent = meta.torrent_file({});
  for (auto& d : dls) {
    auto s = session::start(grant_settings(d.cert, superseed_node_fingerprint));
    ASSERT_TRUE(s) << d.name << ": " << s.error().to_string();
    (*s)->raw().add_extension(node_superseed_plugin());
    // The grant a node keeps is stored by the swarm it names (peerd's note_grant).
    if (!d.grant.empty()) {
      auto c = grant::peek(d.grant);
      ASSERT_TRUE(c);
      lt::sha1_hash named(reinterpret_cast<const char*>(c->swarm.data()));
      (*s)->set_grant(named, d.grant, std::chrono::system_clock::now() + std::chrono::hours(1));
    }
    d.ses = std::move(*s);
  }
  for (auto& d : dls) d.h = add_download(d.ses->raw(), torrent, (obj.root / d.name).string(), port);

  ASSERT_TRUE(wait_seeding(dls[0].h, std::chrono::seconds(60)))
      << "the granted member did not complete";
  EXPECT_EQ(file_bytes(obj.root / "member" / obj.meta.object.hex()), obj.data);
  const auto* c = (*seed)->grant_stats();
  ASSERT_NE(c, nullptr);
  // The refused ones connect on their own schedule (seconds apart under a sanitizer on a busy
  // machine): wait, bounded, until the seed has refused each of them, then check none got a byte.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(45);
  while (c->refused.load() < dls.size() - 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (std::size_t i = 1; i < dls.size(); ++i)
    EXPECT_EQ(downloaded(dls[i].h), 0) << dls[i].name << " got bytes";
  EXPECT_GE(c->accepted.load(), 1u);
  EXPECT_GE(c->refused.load(), dls.size() - 1) << "each refused downloader is counted";
  // The granted member, now a seed, refuses the others the same way.
  for (auto& d : dls) d.ses->stop();
  (*seed)->stop();
}

// A granted member relays to another granted member: two nodes with grants, a seed that offers
// each only some pieces (super seeding, 2 at a time), both complete and bytes moved between them.
TEST(SwarmGrants, GrantedMembersTradeWithEachOther) {
  object_dir obj(32 * 64 * 1024, 32);
  auto meta = obj.meta;
  meta.ssl_cert = cluster_root();
  auto seed = session::start(grant_settings("seed", superseeding_origin_fingerprint));
  ASSERT_TRUE(seed) << seed.error().to_string();
  (*seed)->raw().add_extension(origin_superseed_plugin(2, true));
  ASSERT_TRUE((*seed)->add_seed(meta, (obj.root / "origin").string(), {}));
  const lt::sha1_hash ih(reinterpret_cast<const char*>(meta.info_hash().data()));
  std::vector<std::unique_ptr<session>> nodes;
  std::vector<lt::torrent_handle> hs;
  for (const char* who : {"member", "thief"}) {
    auto s = session::start(grant_settings(who, superseed_node_fingerprint));
    ASSERT_TRUE(s) << s.error().to_string();
    (*s)->raw().add_extension(node_superseed_plugin());
    std::string node = std::string(who);
    (*s)->set_grant(ih, grant_for(ih, node),
                    std::chrono::system_clock::now() + std::chrono::hours(1));
    nodes.push_back(std::move(*s));
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    hs.push_back(add_download(nodes[i]->raw(), meta.torrent_file({}),
                              (obj.root / ("n" + std::to_string(i))).string(),
                              (*seed)->listen_port()));
  }
  // Each node learns of the other.
  hs[0].connect_peer({lt::make_address("127.0.0.1"), nodes[1]->listen_port()});
  for (auto& h : hs) ASSERT_TRUE(wait_seeding(h, std::chrono::seconds(60)));
  std::int64_t between = 0;
  for (auto& n : nodes) between += n->grant_stats()->accepted.load();
  EXPECT_GE(between, 1) << "the nodes never accepted each other's grant";
  for (auto& n : nodes) EXPECT_EQ(n->grant_stats()->refused.load(), 0u);
  for (auto& n : nodes) n->stop();
  (*seed)->stop();
}

TEST(SwarmGrants, StartNeedsTheCaBundle) {
  auto s = grant_settings("member", node_fingerprint);
  s.ca_file = swarm_pki().dir() + "/missing.pem";
  auto r = session::start(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("swarm grants"), std::string::npos) << r.error().message;
}

// A CA rotation: one session with a pair from each CA seeds the same object as two SSL torrents
// (one per root) on one port; a downloader with only the old CA's leaf and one with only the new
// CA's leaf each complete their own root's torrent, and neither can join the other's.
TEST(SwarmSsl, OneSessionServesBothRootsOfARotation) {
  object_dir obj(8 * 64 * 1024 + 5, 24);
  auto old_root = cluster_root();
  auto new_root = *load_root_pem(swarm_pki().pem("other-ca"));
  auto s = ssl_settings("seed", origin_fingerprint);
  s.extra_certs.push_back({swarm_pki().pem("seed-new"), swarm_pki().key("seed-new")});
  s.roots = {old_root, new_root};
  auto seed = session::start(s);
  ASSERT_TRUE(seed) << seed.error().to_string();
  EXPECT_EQ((*seed)->roots(), (std::vector<std::string>{old_root, new_root}));
  EXPECT_EQ((*seed)->root_for_ca(root_fingerprint(new_root)), new_root);
  EXPECT_EQ((*seed)->root_for_ca("00"), "");
  auto old_meta = obj.meta, new_meta = obj.meta;
  old_meta.ssl_cert = old_root;
  new_meta.ssl_cert = new_root;
  ASSERT_TRUE((*seed)->add_seed(old_meta, (obj.root / "origin").string(), {}));
  ASSERT_TRUE((*seed)->add_seed(new_meta, (obj.root / "origin").string(), {}));
  const auto port = (*seed)->listen_port();

  struct dl {
    const char* who;
    const object_metainfo& meta;
    std::unique_ptr<session> ses;
    lt::torrent_handle h;
  };
  // "member" holds the old CA's leaf, "foreign" the new CA's; the last two dial the other root.
  std::vector<dl> dls;
  dls.push_back({"member", old_meta, nullptr, {}});
  dls.push_back({"foreign", new_meta, nullptr, {}});
  dls.push_back({"member", new_meta, nullptr, {}});
  dls.push_back({"foreign", old_meta, nullptr, {}});
  int i = 0;
  for (auto& d : dls) {
    auto ses = session::start(ssl_settings(d.who, node_fingerprint));
    ASSERT_TRUE(ses) << ses.error().to_string();
    d.ses = std::move(*ses);
    d.h = add_download(d.ses->raw(), d.meta.torrent_file({}),
                       (obj.root / ("dl" + std::to_string(i++))).string(), port);
  }
  EXPECT_TRUE(wait_seeding(dls[0].h, std::chrono::seconds(20))) << "old-CA leaf, old root";
  EXPECT_TRUE(wait_seeding(dls[1].h, std::chrono::seconds(20))) << "new-CA leaf, new root";
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(downloaded(dls[2].h), 0) << "an old-CA leaf got bytes of the new root's swarm";
  EXPECT_EQ(downloaded(dls[3].h), 0) << "a new-CA leaf got bytes of the old root's swarm";
  for (auto& d : dls) d.ses->stop();

  // A second pair must come from a root of its own.
  auto bad = ssl_settings("seed", origin_fingerprint);
  bad.roots = {old_root};
  bad.extra_certs.push_back({swarm_pki().pem("seed-new"), swarm_pki().key("seed-new")});
  EXPECT_FALSE(session::start(bad));
  (*seed)->stop();
}

TEST(SwarmSsl, StartNeedsAMatchingCertificateAndKey) {
  auto s = ssl_settings("member", node_fingerprint);
  s.key_file = swarm_pki().key("seed");
  auto r = session::start(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("does not match"), std::string::npos) << r.error().message;
  s.cert_file.clear();
  EXPECT_FALSE(session::start(s));
  // A plain session refuses an SSL torrent: it would have no certificate for it.
  object_dir obj(64 * 1024, 23);
  auto meta = obj.meta;
  meta.ssl_cert = cluster_root();
  settings ps;
  ps.listen = "127.0.0.1:0";
  auto plain = session::start(ps);
  ASSERT_TRUE(plain);
  EXPECT_FALSE((*plain)->add_seed(meta, (obj.root / "origin").string(), {}));
  (*plain)->stop();
}

}  // namespace
}  // namespace shoal::swarm
