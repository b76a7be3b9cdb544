// peerd's swarm_manager on loopback, without a tracker: two or three managers (each with its own
// cache and state index) and a scripted HTTP server standing in for registry-proxy's blob URL.
//
// What is pinned down here:
//   - a node holding an object whose torrent is not loaded serves it when a peer connects
//     (libtorrent's on_unknown_torrent hook → prepare_on_demand → a lazy seed);
//   - such a lazy seed whose file is corrupt on disk never uploads the bad piece and quarantines
//     the object (cache verify → quarantine, state forgotten);
//   - a downloader rejects bad pieces from a loaded seed (hash failures counted) and its readers
//     get an error, never wrong bytes;
//   - a reader following a running download reads its verified pieces from the download's file
//     once a flush confirmed their writes, while it still runs;
//   - a stalled swarm falls back to HTTP ranges; wrong bytes over HTTP are rejected too; a server
//     ignoring Range is never trusted; with no source at all the download fails within
//     fallback_deadline;
//   - dataset groups are jobs of the same engine: a group whose members are cached completes at
//     once and is seeded (in the one seed table), a peer downloads it from that seed, and a group
//     with no source fails within fallback_deadline through the one failure path, keeping its
//     partial directory for the next attempt.

#include "peerd/swarm.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "../common/support/test_http_server.h"
#include "../common/support/test_pki.h"
#include "common/endpoints.h"
#include "common/fd.h"
#include "common/log.h"
#include "common/sha256.h"
#include "test_util.h"

namespace shoal::peerd {
namespace {

using namespace std::chrono_literals;
using testing::temp_dir;
namespace ht = ::shoal::testing;
using steady = std::chrono::steady_clock;

using node = testing::swarm_node;
using testing::meta_of;
using testing::range_reply;

swarm_config fast_cfg() {
  swarm_config c;
  c.stall_timeout = config::duration(300ms);
  // Above 2 s: a holder drops the first connection for an unloaded seed (the torrent is still
  // checking its resume data) and the downloader reconnects after min_reconnect_time (2 s).
  c.fallback_deadline = config::duration(3s);
  c.seed_idle_unload = config::duration(60s);
  return c;
}

// Reads every piece in order; returns the bytes, or the first error.
result<std::string> read_all(download& dl, std::chrono::seconds limit = 20s) {
  std::string out;
  for (std::uint32_t i = 0; i < dl.meta().piece_count(); ++i) {
    auto p = std::make_shared<std::promise<result<piece_buffer>>>();
    auto f = p->get_future();
    dl.read_piece(i, [p](result<piece_buffer> b) { p->set_value(std::move(b)); });
    if (f.wait_for(limit) != std::future_status::ready) {
      return fail(errc::timeout, "piece " + std::to_string(i) + " never arrived");
    }
    auto b = f.get();
    if (!b) return fail(b.error());
    out += **b;
  }
  return out;
}

template <class F>
bool wait_for(F pred, std::chrono::milliseconds limit) {
  auto end = steady::now() + limit;
  while (steady::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

void corrupt(const std::string& path, std::uint64_t off) {
  ::chmod(path.c_str(), 0644);
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  char junk[64];
  std::memset(junk, 0x5a, sizeof junk);
  ASSERT_EQ(::pwrite(fd, junk, sizeof junk, static_cast<off_t>(off)),
            static_cast<ssize_t>(sizeof junk));
  ::close(fd);
  ::chmod(path.c_str(), 0444);
}

TEST(Swarm, UnloadedHolderServesOnDemand) {
  node a("a", fast_cfg()), b("b", fast_cfg());
  auto bytes = testing::bytes_of(3 << 20, 1);
  auto m = meta_of(bytes);
  a.hold(bytes, m);
  EXPECT_EQ(a.swarm->loaded_torrents(), 0u);
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {a.endpoint()}, {});
  ASSERT_TRUE(dl) << dl.error().message;
  auto got = read_all(**dl);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_TRUE(*got == bytes);
  ASSERT_TRUE(wait_for([&] { return b.store->contains(m.object); }, 10s));
  // Every byte came from the other node (peer-id prefix -SN), none from an origin or HTTP.
  EXPECT_EQ(b.swarm->counters().from_peers.load(), bytes.size());
  EXPECT_EQ(b.swarm->counters().from_origin.load(), 0u);
  EXPECT_EQ(b.swarm->counters().from_http.load(), 0u);
  // The holder loaded the torrent on demand and still holds its object.
  EXPECT_EQ(a.swarm->loaded_torrents(), 1u);
  EXPECT_TRUE(a.store->contains(m.object));
  EXPECT_EQ(a.swarm->counters().quarantined.load(), 0u);
  // The downloader now holds it too, and lists it for the scheduler (its cache and its index).
  EXPECT_TRUE(b.store->contains(m.object));
  auto h = b.swarm->info_hashes();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].first, m.object);
  EXPECT_EQ(h[0].second, m.info_hash_hex());
}

TEST(Swarm, CorruptUnloadedHolderQuarantinesAndNeverUploadsBadBytes) {
  node a("a", fast_cfg()), b("b", fast_cfg());
  auto bytes = testing::bytes_of(2 << 20, 2);
  auto m = meta_of(bytes);
  a.hold(bytes, m);
  corrupt(a.store->object_path(m.object), m.piece_offset(5) + 100);
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {a.endpoint()}, {});
  ASSERT_TRUE(dl) << dl.error().message;
  auto t0 = steady::now();
  auto got = read_all(**dl, 15s);
  auto secs = std::chrono::duration<double>(steady::now() - t0).count();
  // No other source: the download fails (fallback_deadline) instead of hanging or serving junk.
  ASSERT_FALSE(got) << "a corrupt holder delivered a whole object";
  EXPECT_LT(secs, 10.0);
  EXPECT_EQ((*dl)->current(), download::state::failed);
  EXPECT_FALSE(b.store->contains(m.object));
  // The holder found out and quarantined the object: gone from its cache and its index.
  ASSERT_TRUE(wait_for([&] { return !a.store->contains(m.object); }, 10s))
      << "holder kept a corrupt object";
  EXPECT_GE(a.swarm->counters().quarantined.load(), 1u);
  EXPECT_FALSE(a.state->by_info_hash(m.info_hash_hex()));
  EXPECT_TRUE(a.swarm->info_hashes().empty());
}

TEST(Swarm, BadPiecesFromALoadedSeedAreRejected) {
  node a("a", fast_cfg()), b("b", fast_cfg()), c("c", fast_cfg());
  auto bytes = testing::bytes_of(2 << 20, 3);
  auto m = meta_of(bytes);
  // a becomes a loaded seed the normal way (it downloaded the object from c), then its file is
  // damaged behind libtorrent's back: it trusts its verified pieces and uploads the bad bytes.
  c.hold(bytes, m);
  auto first = a.swarm->fetch(m.object, m.torrent_file({}), m, {c.endpoint()}, {});
  ASSERT_TRUE(first);
  ASSERT_TRUE(read_all(**first));
  ASSERT_TRUE(wait_for([&] { return a.store->contains(m.object); }, 10s));
  corrupt(a.store->object_path(m.object), m.piece_offset(7) + 5);
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {a.endpoint()}, {});
  ASSERT_TRUE(dl) << dl.error().message;
  // The bad seed is banned, comes back from a new port and sends the bad piece again, while the
  // good pieces keep arriving; once nothing verifies any more the download must fail within
  // fallback_deadline (3 s), not hang while the bad bytes keep coming.
  auto reader = std::async(std::launch::async, [&] { return read_all(**dl, 40s); });
  std::uint32_t done = 0;
  auto last_change = steady::now();
  while (reader.wait_for(50ms) != std::future_status::ready) {
    if ((*dl)->pieces_done() != done) {
      done = (*dl)->pieces_done();
      last_change = steady::now();
    }
  }
  auto got = reader.get();
  ASSERT_FALSE(got) << "wrong bytes were accepted";
  EXPECT_LT(std::chrono::duration<double>(steady::now() - last_change).count(), 3.0 + 3.0)
      << got.error().message;
  EXPECT_EQ((*dl)->current(), download::state::failed);
  EXPECT_GE(b.swarm->counters().hash_failures.load(), 1u);
  EXPECT_FALSE(b.store->contains(m.object));
}

// Another path (a dataset group, a chunk join; here a direct cache write) commits the object
// while a swarm download of it is under way: when the download finishes, the committed file is
// never written over or deleted (same inode, same bytes), the index keeps it, and the download
// completes with the committed object.
TEST(Swarm, DownloadFinishingBesideACommittedObjectLeavesItIntact) {
  auto bytes = testing::bytes_of(1 << 20, 14);
  auto m = meta_of(bytes);
  std::atomic<bool> open{false};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (!open.load()) {
      ht::reply busy;
      busy.status = 503;
      return busy;
    }
    return range_reply(bytes, r);
  });
  node b("b", fast_cfg());
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {srv.url("/blob"), ""});
  ASSERT_TRUE(dl);
  auto t = b.store->begin_write(m.object, bytes.size(), cache::object_kind::blob);
  ASSERT_TRUE(t) << t.error().message;
  ASSERT_EQ(t->role, cache::write_role::writer);
  ASSERT_TRUE(t->writer->write(bytes));
  ASSERT_TRUE(t->writer->commit());
  const std::string path = b.store->object_path(m.object);
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  open = true;  // the download's bytes may come now
  auto got = read_all(**dl);
  EXPECT_TRUE(got && *got == bytes) << (got ? "wrong bytes" : got.error().message);
  EXPECT_EQ((*dl)->wait_done(10s), download::state::complete)
      << ((*dl)->failure() ? (*dl)->failure()->message : "");
  std::this_thread::sleep_for(300ms);  // anything still running on the pool gets its chance
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0) << "the committed object's file was deleted";
  EXPECT_EQ(after.st_ino, before.st_ino) << "the committed object's file was replaced";
  EXPECT_TRUE(b.store->contains(m.object));
  auto rd = b.store->open_read(m.object);
  ASSERT_TRUE(rd) << rd.error().message;
  std::string back(bytes.size(), '\0');
  ASSERT_EQ(::pread(rd->fd(), back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  EXPECT_TRUE(back == bytes);
  EXPECT_EQ(b.swarm->counters().downloads_failed.load(), 0u);
}

TEST(Swarm, StalledSwarmFallsBackToHttpRanges) {
  auto bytes = testing::bytes_of(3 << 20, 4);
  auto m = meta_of(bytes);
  ht::test_http_server srv([&](const ht::recorded_request& r) { return range_reply(bytes, r); });
  node b("b", fast_cfg());
  fallback_info fb{srv.url("/v2/x/blobs/" + m.object.str()), "Bearer secret"};
  auto t0 = steady::now();
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, fb);
  ASSERT_TRUE(dl);
  auto got = read_all(**dl);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_TRUE(*got == bytes);
  EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 15.0);
  ASSERT_TRUE(wait_for([&] { return b.store->contains(m.object); }, 10s));
  EXPECT_EQ(b.swarm->counters().from_http.load(), bytes.size());
  EXPECT_GE(b.swarm->counters().fallbacks.load(), 1u);
  // Every range request carried the client's credentials and asked for whole pieces.
  auto reqs = srv.requests();
  ASSERT_FALSE(reqs.empty());
  for (const auto& r : reqs) {
    EXPECT_EQ(r.header("Authorization").value_or(""), "Bearer secret");
    auto range = r.header("Range").value_or("");
    ASSERT_EQ(range.rfind("bytes=", 0), 0u) << range;
    EXPECT_EQ(std::stoull(range.substr(6)) % m.piece_size, 0u) << range;
  }
}

// After one stall, the ranges of a swarm that stays silent follow each other at once: waiting a
// stall_timeout before each 4 MiB range made a 1 GiB object take 256 stall timeouts.
TEST(Swarm, HttpRangesChainOnceTheSwarmIsSilent) {
  auto bytes = testing::bytes_of(12 << 20, 11);
  auto m = meta_of(bytes);
  ht::test_http_server srv([&](const ht::recorded_request& r) { return range_reply(bytes, r); });
  auto cfg = fast_cfg();
  cfg.stall_timeout = config::duration(1500ms);
  cfg.fallback_deadline = config::duration(6s);
  node b("b", cfg);
  auto t0 = steady::now();
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {srv.url("/blob"), ""});
  ASSERT_TRUE(dl);
  auto got = read_all(**dl);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_TRUE(*got == bytes);
  auto secs = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_EQ(srv.request_count(), 3u);  // 3 ranges of 4 MiB
  EXPECT_LT(secs, 1.5 + 2.0) << "ranges waited for a stall timeout each";
}

// A reader following a running download takes its verified pieces from the download's file once a
// flush confirmed their writes (download::when_in_file), not one read_piece at a time through
// libtorrent's disk queue: here the first 4 MiB are in, the rest is held back upstream, and the
// first pieces come from the file while the download still runs.
TEST(Swarm, VerifiedPiecesOfARunningDownloadAreReadFromItsFile) {
  auto bytes = testing::bytes_of(12 << 20, 12);
  auto m = meta_of(bytes);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    auto range = r.header("Range").value_or("");
    // Bounded: a failing test never hangs on it.
    if (range.rfind("bytes=0-", 0) != 0) (void)released.wait_for(20s);
    return range_reply(bytes, r);
  });
  node b("b", fast_cfg());
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {srv.url("/blob"), ""});
  ASSERT_TRUE(dl);
  auto& d = **dl;
  ASSERT_TRUE(wait_for([&] { return d.pieces_done() > 0; }, 10s));
  EXPECT_EQ(d.file_run(0, m.size), 0u) << "a piece counted in the file before any flush";
  auto answered = std::make_shared<std::promise<void>>();
  d.when_in_file(0, [answered] { answered->set_value(); });
  ASSERT_EQ(answered->get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(d.current(), download::state::running) << "answered only once the download ended";
  EXPECT_GE(b.swarm->counters().stream_flushes.load(), 1u);
  auto run = d.file_run(0, m.size);
  ASSERT_GE(run, m.piece_size);
  EXPECT_LE(run, std::uint64_t{4} << 20) << "bytes held back upstream counted as in the file";
  EXPECT_EQ(run % m.piece_size, 0u);
  // Those bytes are in the file, right, while the download still runs.
  {
    unique_fd fd(::open(d.partial_path().c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd) << d.partial_path();
    std::string got(static_cast<std::size_t>(run), '\0');
    ASSERT_EQ(::pread(fd.get(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
    EXPECT_TRUE(got == bytes.substr(0, got.size()));
  }
  EXPECT_EQ(d.current(), download::state::running);
  // A reader of a piece not verified yet waits for it; the rest arrives and it is answered.
  auto later = std::make_shared<std::promise<void>>();
  d.when_in_file(m.piece_count() - 1, [later] { later->set_value(); });
  auto later_f = later->get_future();
  EXPECT_EQ(later_f.wait_for(300ms), std::future_status::timeout);
  release.set_value();
  ASSERT_EQ(later_f.wait_for(15s), std::future_status::ready);
  auto got = read_all(d);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_TRUE(*got == bytes);
  ASSERT_TRUE(wait_for([&] { return b.store->contains(m.object); }, 10s));
  // The object's sha256 was fed from the file as flushes confirmed its prefix (at least the
  // pieces in before the release), the rest after the last piece, each byte once; the cache
  // committed it on that hash, with no pass of its own.
  const auto& c = b.swarm->counters();
  EXPECT_GE(c.hashed_while_downloading.load(), run);
  EXPECT_EQ(c.hashed_while_downloading.load() + c.hashed_after_download.load(), m.size);
  EXPECT_EQ(b.store->get_stats().adoptions_proven, 1u);
  EXPECT_TRUE(d.verified());
}

TEST(Swarm, WrongBytesOverHttpAreRejected) {
  auto bytes = testing::bytes_of(1 << 20, 5);
  auto m = meta_of(bytes);
  auto wrong = bytes;
  wrong[m.piece_offset(3) + 7] ^= 1;
  ht::test_http_server srv([&](const ht::recorded_request& r) { return range_reply(wrong, r); });
  node b("b", fast_cfg());
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {srv.url("/blob"), ""});
  ASSERT_TRUE(dl);
  auto t0 = steady::now();
  auto got = read_all(**dl, 15s);
  ASSERT_FALSE(got) << "a piece with a flipped bit was accepted";
  // Bytes keep arriving, but none verify: the download still fails within the deadline.
  EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 10.0) << got.error().message;
  EXPECT_EQ((*dl)->current(), download::state::failed);
  EXPECT_GE(b.swarm->counters().hash_failures.load(), 1u);
  EXPECT_FALSE(b.store->contains(m.object));
}

TEST(Swarm, ServerIgnoringRangeIsNotTrustedAndNothingHangs) {
  auto bytes = testing::bytes_of(1 << 20, 6);
  auto m = meta_of(bytes);
  // Pieces 0-3 come right; after that the server answers every range with the whole object
  // from offset 0 (200), which must never be fed in at the requested offset.
  std::atomic<int> n{0};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (n++ == 0) {
      auto rr = r;
      rr.headers = {{"Range", "bytes=0-" + std::to_string(m.piece_offset(4) - 1)}};
      return range_reply(bytes, rr);
    }
    ht::reply out;
    out.body = bytes;
    return out;
  });
  node b("b", fast_cfg());
  auto t0 = steady::now();
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {srv.url("/blob"), ""});
  ASSERT_TRUE(dl);
  auto got = read_all(**dl, 20s);
  ASSERT_FALSE(got);
  EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 12.0);
  EXPECT_EQ((*dl)->current(), download::state::failed);
  EXPECT_EQ(b.swarm->counters().hash_failures.load(), 0u);
}

TEST(Swarm, NoSourceAtAllFailsWithinTheDeadline) {
  auto bytes = testing::bytes_of(512 << 10, 7);
  auto m = meta_of(bytes);
  node b("b", fast_cfg());
  auto t0 = steady::now();
  // A blob URL nobody listens on, and no peers.
  auto dl = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {"http://127.0.0.1:1/blob", ""});
  ASSERT_TRUE(dl);
  auto got = read_all(**dl, 20s);
  ASSERT_FALSE(got);
  auto secs = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_GE(secs, 2.7);  // fallback_deadline is 3 s
  EXPECT_LT(secs, 6.0);
  EXPECT_EQ((*dl)->failure()->code, make_error_code(errc::timeout));
  // A later read of a failed download answers at once with the same error.
  auto again = read_all(**dl, 1s);
  ASSERT_FALSE(again);
}

TEST(Swarm, FetchIsSingleFlightAndRejectsBadMetainfo) {
  auto bytes = testing::bytes_of(256 << 10, 8);
  auto m = meta_of(bytes);
  node b("b", fast_cfg());
  auto x = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {});
  auto y = b.swarm->fetch(m.object, m.torrent_file({}), m, {}, {});
  ASSERT_TRUE(x && y);
  EXPECT_EQ(x->get(), y->get());
  EXPECT_EQ(b.swarm->active_downloads(), 1u);
  auto other = meta_of(testing::bytes_of(256 << 10, 9));
  auto bad = b.swarm->fetch(other.object, "d4:infoi1ee", other, {}, {});
  ASSERT_FALSE(bad);
  EXPECT_EQ(b.swarm->active_downloads(), 1u);
  // Out-of-range reads are refused, not crashed on.
  std::promise<result<piece_buffer>> p;
  (*x)->read_piece(m.piece_count() + 5, [&](result<piece_buffer> r) { p.set_value(std::move(r)); });
  EXPECT_FALSE(p.get_future().get());
}

TEST(Swarm, PrepareOnDemandOnlyForHeldObjects) {
  node a("a", fast_cfg());
  auto bytes = testing::bytes_of(256 << 10, 10);
  auto m = meta_of(bytes);
  lt::add_torrent_params p;
  lt::sha1_hash ih(reinterpret_cast<const char*>(m.info_hash().data()));
  EXPECT_FALSE(a.swarm->prepare_on_demand(ih, p)) << "unknown info-hash";
  a.hold(bytes, m);
  lt::add_torrent_params q;
  ASSERT_TRUE(a.swarm->prepare_on_demand(ih, q));
  EXPECT_TRUE(q.flags & lt::torrent_flags::seed_mode);
  EXPECT_FALSE(q.flags & lt::torrent_flags::paused);
  EXPECT_FALSE(q.flags & lt::torrent_flags::auto_managed);
  // No trusted pieces: each is verified before its first upload.
  EXPECT_TRUE(q.verified_pieces.empty());
  EXPECT_EQ(q.save_path, a.store->shard_dir(m.object));
  // Indexed but no longer in the cache (evicted): not served.
  ASSERT_TRUE(a.store->remove(m.object));
  lt::add_torrent_params r;
  EXPECT_FALSE(a.swarm->prepare_on_demand(ih, r));
}

// A single-object dataset group: `a` holds the object and seeds the group, `b` downloads it.
group_spec single_group(const object_metainfo& m, std::vector<std::string> seeds) {
  group_spec g;
  g.torrent = m.torrent_file({});
  g.objects = {{m.object, m.size}};
  g.seeds = std::move(seeds);
  g.name = "test group 0";
  return g;
}

swarm_manager::group_options group_dirs(const node& n) {
  return {n.dir.path() + "/dataset-partial", n.dir.path() + "/datasets"};
}

TEST(Swarm, GroupsAreJobsOfTheSameEngine) {
  node a("a", fast_cfg()), b("b", fast_cfg());
  auto bytes = testing::bytes_of(2 << 20, 11);
  auto m = meta_of(bytes);
  EXPECT_FALSE(b.swarm->fetch_group(single_group(m, {}))) << "groups not enabled yet";
  ASSERT_TRUE(a.swarm->enable_groups(group_dirs(a)));
  ASSERT_TRUE(b.swarm->enable_groups(group_dirs(b)));
  a.hold(bytes, m);
  auto held = a.swarm->fetch_group(single_group(m, {}));
  ASSERT_TRUE(held) << held.error().message;
  EXPECT_EQ((*held)->current(), transfer::state::complete);
  EXPECT_EQ(a.swarm->loaded_groups(), 1u);
  EXPECT_EQ(a.swarm->loaded_torrents(), 0u);  // objects only

  auto dl = b.swarm->fetch_group(single_group(m, {a.endpoint()}));
  ASSERT_TRUE(dl) << dl.error().message;
  EXPECT_EQ((*dl)->wait_for(20s), transfer::state::complete)
      << ((*dl)->failure() ? (*dl)->failure()->message : "");
  EXPECT_TRUE(b.store->contains(m.object));
  EXPECT_EQ((*dl)->bytes_done(), bytes.size());
  EXPECT_EQ((*dl)->from_peers.load(), bytes.size());
  EXPECT_EQ(b.swarm->active_groups(), 0u);
  EXPECT_EQ(b.swarm->loaded_groups(), 1u);
  EXPECT_EQ(b.swarm->counters().downloads_failed.load(), 0u);
}

TEST(Swarm, GroupWithoutSourcesFailsAndKeepsItsPartialDirectory) {
  node b("b", fast_cfg());
  ASSERT_TRUE(b.swarm->enable_groups(group_dirs(b)));
  auto m = meta_of(testing::bytes_of(1 << 20, 12));
  auto dl = b.swarm->fetch_group(single_group(m, {}));
  ASSERT_TRUE(dl) << dl.error().message;
  EXPECT_EQ(b.swarm->active_groups(), 1u);
  auto start = steady::now();
  EXPECT_EQ((*dl)->wait_for(10s), transfer::state::failed);
  double secs = std::chrono::duration<double>(steady::now() - start).count();
  EXPECT_GE(secs, 2.7);  // fallback_deadline is 3 s
  ASSERT_TRUE((*dl)->failure());
  EXPECT_EQ((*dl)->failure()->code, make_error_code(errc::timeout));
  // Waiters wake as the state changes; the table and the counter follow at once.
  EXPECT_TRUE(wait_for([&] { return b.swarm->active_groups() == 0; }, 2s));
  EXPECT_TRUE(wait_for([&] { return b.swarm->counters().downloads_failed.load() == 1; }, 2s));
  EXPECT_TRUE(std::filesystem::exists(group_dirs(b).partial_dir + "/" + (*dl)->info_hash()));
}

// A group with no peers comes over HTTP from registry-proxy. With several replicas the objects
// are asked of the first in the set's order; one that does not answer (here: nothing listens,
// as when it died) is marked down and the objects still missing come from the next.
TEST(Swarm, GroupFallbackMovesToTheNextReplicaWhenOneFails) {
  node b("b", fast_cfg());
  ASSERT_TRUE(b.swarm->enable_groups(group_dirs(b)));
  auto bytes = testing::bytes_of(1 << 20, 13);
  auto m = meta_of(bytes);
  const std::string path = "/v2/team/ds/objects/";
  ht::test_http_server live([&](const ht::recorded_request& r) {
    if (r.target != path + m.object.str()) return ht::reply{404, {}, {}, "no such object"};
    return range_reply(bytes, r);
  });
  // A port nothing listens on: the first replica, dead.
  std::string dead;
  {
    ht::test_http_server gone([](const ht::recorded_request&) { return ht::reply{}; });
    dead = gone.base();
  }
  auto set = endpoints::endpoint_set::create({dead, live.base()});
  ASSERT_TRUE(set) << set.error().message;
  auto g = single_group(m, {});
  g.fallback_base = dead + path;  // what a lone link would use: never reached here
  g.fallback_endpoints = *set;
  g.fallback_path = path;
  auto dl = b.swarm->fetch_group(g);
  ASSERT_TRUE(dl) << dl.error().message;
  EXPECT_EQ((*dl)->wait_for(20s), transfer::state::complete)
      << ((*dl)->failure() ? (*dl)->failure()->message : "");
  EXPECT_TRUE(b.store->contains(m.object));
  EXPECT_EQ(live.request_count(), 1u);
  // The dead replica is now tried last.
  EXPECT_EQ((*set)->order().front().base, live.base());
}

// BitTorrent between members: with a cluster root set, peerd's one parse of a .torrent (every
// object, chunk, group and held seed goes through it before libtorrent) takes only torrents
// rooted at exactly that CA; with none, only plain ones.
TEST(Swarm, ParseTorrentTakesOnlyTheClusterRoot) {
  ht::test_pki pki;
  pki.make_ca("ca");
  pki.make_ca("other");
  auto ca = load_root_pem(pki.pem("ca"));
  auto other = load_root_pem(pki.pem("other"));
  ASSERT_TRUE(ca && other);
  std::string data(200000, 'x');
  metainfo_builder b(data.size());
  b.update(data.data(), data.size());
  auto plain = *b.finish(sha256_of(data));
  auto ours = plain;
  ours.ssl_cert = *ca;
  auto theirs = plain;
  theirs.ssl_cert = *other;

  std::string why;
  EXPECT_TRUE(parse_torrent(plain.torrent_file({}), &why)) << why;
  EXPECT_FALSE(parse_torrent(ours.torrent_file({}), &why));
  EXPECT_NE(why.find("tls is off"), std::string::npos) << why;

  set_metainfo_root(*ca);
  auto ok = parse_torrent(ours.torrent_file({}), &why);
  auto foreign = parse_torrent(theirs.torrent_file({}), &why);
  std::string foreign_why = why;
  auto unrooted = parse_torrent(plain.torrent_file({}), &why);
  set_metainfo_root("");
  EXPECT_TRUE(ok);
  EXPECT_FALSE(foreign);
  EXPECT_NE(foreign_why.find("rooted at another CA"), std::string::npos) << foreign_why;
  EXPECT_FALSE(unrooted);
  EXPECT_NE(why.find("not rooted at the cluster CA"), std::string::npos) << why;
}

}  // namespace
}  // namespace shoal::peerd
