// proxy_bt_fetch: a plain libtorrent downloader for the registry-proxy seeding test
// (tests/registry-proxy/metainfo_test.py). It stands in for a peer that knows nothing but a
// .torrent and one seed endpoint: no tracker, no DHT, nothing of Shoal's own except the LAN
// session settings of swarm/swarm.h (so it behaves like peerd's session will).
//
//   proxy_bt_fetch <file.torrent> <seed ip:port> <save dir> [timeout seconds]
//
// Downloads the single file of the torrent into <save dir>/<name> by connecting to the seed,
// and prints one JSON line: {"ok":true,"bytes":N,"seconds":S,"name":"..."} (exit 0), or
// {"ok":false,"error":"..."} (exit 1). libtorrent verifies every piece against the torrent's
// SHA-1s; the test checks the file's sha256 itself.

#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>

#include <boost/asio/ip/address.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "swarm/swarm.h"

namespace {

int fail_json(const std::string& why) {
  std::printf("{\"ok\":false,\"error\":\"%s\"}\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <file.torrent> <seed ip:port> <save dir> [timeout s]\n",
                 argv[0]);
    return 2;
  }
  const std::string torrent_path = argv[1], seed = argv[2], save = argv[3];
  const int timeout_s = argc > 4 ? std::atoi(argv[4]) : 60;

  std::ifstream in(torrent_path, std::ios::binary);
  std::string buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (buf.empty()) return fail_json("cannot read " + torrent_path);
  lt::error_code ec;
  auto ti = std::make_shared<lt::torrent_info>(buf.data(), static_cast<int>(buf.size()), ec);
  if (ec) return fail_json("libtorrent refused the torrent: " + ec.message());

  auto colon = seed.rfind(':');
  if (colon == std::string::npos) return fail_json("seed must be ip:port");
  boost::system::error_code aec;
  auto addr = boost::asio::ip::make_address(seed.substr(0, colon), aec);
  if (aec) return fail_json("bad seed address " + seed);
  lt::tcp::endpoint ep(addr, static_cast<unsigned short>(std::stoi(seed.substr(colon + 1))));

  shoal::swarm::settings ss;
  ss.listen = "127.0.0.1:0";
  auto ses = shoal::swarm::session::start(ss);
  if (!ses) return fail_json(ses.error().message);

  lt::add_torrent_params p;
  p.ti = ti;
  p.save_path = save;
  p.flags = {};  // neither auto-managed nor paused
  auto h = (*ses)->raw().add_torrent(std::move(p), ec);
  if (ec) return fail_json("add_torrent: " + ec.message());

  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::seconds(timeout_s);
  auto last_connect = t0 - std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto st = h.status();
    if (st.errc) return fail_json("torrent error: " + st.errc.message());
    if (st.is_seeding) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("{\"ok\":true,\"bytes\":%lld,\"seconds\":%.3f,\"name\":\"%s\"}\n",
                  static_cast<long long>(st.total_wanted), secs, ti->name().c_str());
      (*ses)->stop();
      return 0;
    }
    // The seed may load the torrent a moment after serving its metainfo, and a refused peer is
    // not retried at once: connect again every second while no peer is connected.
    if (st.num_peers == 0 &&
        std::chrono::steady_clock::now() - last_connect > std::chrono::seconds(1) &&
        (st.state == lt::torrent_status::downloading || st.state == lt::torrent_status::finished)) {
      try {
        h.connect_peer(ep);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "connect_peer: %s\n", e.what());
      }
      last_connect = std::chrono::steady_clock::now();
    }
    if (std::getenv("SHOAL_BT_FETCH_DEBUG")) {
      std::fprintf(stderr, "state=%d peers=%d done=%lld\n", static_cast<int>(st.state),
                   st.num_peers, static_cast<long long>(st.total_wanted_done));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto st = h.status();
  return fail_json("timed out with " + std::to_string(st.total_wanted_done) + " of " +
                   std::to_string(st.total_wanted) + " bytes, " + std::to_string(st.num_peers) +
                   " peers");
}
