// Shared by the swarm tests: a random object on disk with its metainfo, a node session as peerd
// runs it, a download added to a session, a super-seeding origin as registry-proxy runs it, a
// bounded wait for completion, and a downloaded file's bytes.
#pragma once

#include <gtest/gtest.h>
#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/alert.hpp>
#include <libtorrent/session.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>

#include "common/sha256.h"
#include "swarm/metainfo.h"
#include "swarm/swarm.h"

namespace shoal::swarm::test_support {

namespace fs = std::filesystem;

// A temp directory holding one random object named by its digest, plus its metainfo.
struct object_dir {
  fs::path root;
  std::string data;
  object_metainfo meta;

  explicit object_dir(std::size_t size, unsigned seed) {
    std::string tmpl = (fs::temp_directory_path() / "shoal-swarm-test-XXXXXX").string();
    root = mkdtemp(tmpl.data());
    std::mt19937 rng(seed);
    data.resize(size);
    for (auto& c : data) c = static_cast<char>(rng());
    digest d = sha256_of(data);
    metainfo_builder b(size);
    b.update(data.data(), data.size());
    meta = *b.finish(d);
    fs::create_directories(root / "origin");
    std::ofstream(root / "origin" / d.hex(), std::ios::binary)
        .write(data.data(), static_cast<std::streamsize>(size));
  }
  ~object_dir() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

// A downloaded file's bytes ("" when it cannot be opened: the comparison with the object fails).
inline std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A downloading node as peerd runs it: node fingerprint, node plugin, redundant connections kept.
// Without `libtorrent_plugins` it has none of libtorrent's default plugins (no peer exchange: it
// knows only the peers it is given).
inline std::unique_ptr<lt::session> start_node(bool libtorrent_plugins = true) {
  settings s;
  s.listen = "127.0.0.1:0";
  s.peer_fingerprint = std::string(superseed_node_fingerprint);
  s.close_redundant_connections = false;
  lt::session_params params(lan_settings(s));
  if (!libtorrent_plugins) params.extensions.clear();
  auto ses = std::make_unique<lt::session>(std::move(params));
  ses->add_extension(node_superseed_plugin());
  return ses;
}

// Adds `torrent` to a downloading session, dialling the seed at 127.0.0.1:port; an error is a
// test failure.
inline lt::torrent_handle add_download(lt::session& ses, const std::string& torrent,
                                       const std::string& dir, std::uint16_t port) {
  lt::error_code ec;
  lt::add_torrent_params p;
  p.ti = std::make_shared<lt::torrent_info>(torrent.data(), static_cast<int>(torrent.size()), ec);
  EXPECT_FALSE(ec) << ec.message();
  p.save_path = dir;
  p.flags = lt::torrent_flags::update_subscribe;
  p.peers.emplace_back(lt::make_address("127.0.0.1"), port);
  auto h = ses.add_torrent(std::move(p), ec);
  EXPECT_FALSE(ec) << ec.message();
  return h;
}

// An origin as registry-proxy runs it when it super-seeds (here 2 offers per node, in order),
// with at most `max_in_flight` offers out and uploading at most `upload_rate` bytes/s (0: no
// limit), counting what it does into `counters` when given.
inline result<std::unique_ptr<session>> start_superseeding_origin(
    int offers = 2, int max_in_flight = superseed_max_in_flight_default,
    std::uint64_t upload_rate = 0, std::shared_ptr<superseed_counters> counters = nullptr) {
  settings os;
  os.listen = "127.0.0.1:0";
  os.peer_fingerprint = std::string(superseeding_origin_fingerprint);
  os.upload_rate_limit = upload_rate;
  auto origin = session::start(os);
  if (origin)
    (*origin)->raw().add_extension(
        origin_superseed_plugin(offers, true, max_in_flight, std::move(counters)));
  return origin;
}

inline bool wait_finished(lt::session& ses, const lt::torrent_handle& h,
                          std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (h.status().is_seeding) return true;
    std::vector<lt::alert*> alerts;
    ses.wait_for_alert(lt::milliseconds(50));
    ses.pop_alerts(&alerts);
  }
  return false;
}

}  // namespace shoal::swarm::test_support
