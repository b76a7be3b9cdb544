// peerd's fetcher on loopback against a scripted HTTP server standing in for registry-proxy (its
// metainfo answers and its blob URL), with a real cache and swarm and no peers: every object
// arrives through the swarm's HTTP fallback.
//
// What is pinned down here:
//   - ensure() long-polls through 202 progress answers, starts the download from the 200
//     metainfo and returns once the object is committed; the request speaks the origin protocol
//     (repo, ns, wait_ms, chunks, Authorization);
//   - join() is one metainfo request per object however many join, and hands every joiner the
//     same answer: registry-proxy's refusal keeps its status;
//   - an unreachable registry-proxy is a 502 and counts in shoal_peerd_forward_errors_total;
//     202 answers that make no progress end in a 504 within fallback_deadline;
//   - registry-proxy shedding load (429 + Retry-After) is waited out and asked again; one that
//     keeps shedding ends in a 503 with Retry-After at fallback_deadline; the same for a blob
//     fetched in chunks (its chunk list and chunk metainfo requests);
//   - fetch_group without datasets fails; the status snapshot lists no chunked fetch.

#include "peerd/fetcher.h"
#include "peerd/blob_access.h"

#include <gtest/gtest.h>

#include <boost/asio/thread_pool.hpp>
#include <libtorrent/torrent_handle.hpp>
#include <libtorrent/torrent_status.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include "../common/support/test_http_server.h"
#include "common/sha256.h"
#include "test_util.h"

namespace shoal::peerd {
namespace {

using namespace std::chrono_literals;
using testing::temp_dir;
namespace ht = ::shoal::testing;
using steady = std::chrono::steady_clock;

using testing::meta_of;
using testing::range_reply;

// One node (testing::swarm_node: cache, state index, HTTP client, worker pool, swarm), its
// metrics and the fetcher.
struct node : testing::swarm_node {
  explicit node(const std::string& registry_proxy) : swarm_node("n", swarm_settings()) {
    cfg.upstream.registry_proxy = registry_proxy;
    cfg.upstream.metainfo_wait = config::duration(1s);
    cfg.upstream.connect_timeout = config::duration(1s);
    cfg.swarm = swarm_cfg;
    cfg.node.name = "n";
    fetcher::deps fd{cfg, *store, *swarm, http, pool, reg};
    fd.state = state.get();
    fetch = std::make_unique<fetcher>(std::move(fd));
  }
  ~node() {
    stop();  // no pool task of the fetcher's runs after this
    fetch.reset();
  }

  static swarm_config swarm_settings() {
    swarm_config c;
    c.stall_timeout = config::duration(300ms);
    c.fallback_deadline = config::duration(3s);
    return c;
  }

  std::uint64_t swarm_fetches() {
    return reg.counter("shoal_peerd_swarm_fetches_total", "Blobs fetched through the swarm.")
        .with({})
        .value();
  }

  peerd_config cfg;
  metrics::registry reg;
  std::unique_ptr<fetcher> fetch;
};

bool is_metainfo(const ht::recorded_request& r) {
  return r.target.rfind(std::string(origin::paths::metainfo), 0) == 0;
}

std::size_t metainfo_requests(const ht::test_http_server& srv) {
  std::size_t n = 0;
  for (const auto& r : srv.requests()) n += is_metainfo(r) ? 1 : 0;
  return n;
}

// Joins and waits for the answer.
fetch_start join_and_wait(fetcher& f, const digest& d) {
  auto p = std::make_shared<std::promise<fetch_start>>();
  auto fut = p->get_future();
  f.join({"r.example", "team/app"}, d, "", [p](fetch_start s) { p->set_value(std::move(s)); });
  if (fut.wait_for(20s) != std::future_status::ready) {
    return std::unexpected(fetch_failure{0, error{errc::timeout, "join never answered"}});
  }
  return fut.get();
}

// Joins the fetch of `d`, which must start chunked, and waits for it to end: its error, or why it
// did not start chunked.
status chunked_fetch(fetcher& f, const digest& d) {
  auto s = join_and_wait(f, d);
  if (!s)
    return fail(errc::upstream_error,
                "did not start: " + std::to_string(s.error().status) + " " + s.error().why.message);
  if (!s->chunked) return fail(errc::internal, "started, but not chunked");
  return s->chunked->wait();
}

TEST(Fetcher, EnsureLongPollsThenFetchesAndCommits) {
  auto bytes = testing::bytes_of(1 << 20, 7);
  auto m = meta_of(bytes);
  std::atomic<int> polls{0};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (!is_metainfo(r)) return range_reply(bytes, r);
    ht::reply out;
    if (polls.fetch_add(1) < 2) {
      // Still fetching upstream, and making progress.
      out.status = 202;
      out.body = R"({"status":"fetching","bytes":)" + std::to_string(polls.load()) + "}";
      return out;
    }
    out.body = m.torrent_file({});
    return out;
  });
  node n(srv.url(""));
  auto st = n.fetch->ensure({"r.example", "team/app"}, m.object, "Bearer secret");
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(n.store->contains(m.object));
  EXPECT_EQ(metainfo_requests(srv), 3u);
  for (const auto& r : srv.requests()) {
    EXPECT_EQ(r.header("Authorization").value_or(""), "Bearer secret") << r.target;
    if (!is_metainfo(r)) continue;
    EXPECT_NE(r.target.find(m.object.str()), std::string::npos) << r.target;
    for (const char* q : {"repo=team", "ns=r.example", "wait_ms=", "chunks=1"})
      EXPECT_NE(r.target.find(q), std::string::npos) << r.target << " lacks " << q;
  }
  // Held now: no request at all.
  auto before = srv.requests().size();
  EXPECT_TRUE(n.fetch->ensure({"r.example", "team/app"}, m.object, ""));
  EXPECT_EQ(srv.requests().size(), before);
  // ensure() is not a containerd fetch.
  EXPECT_EQ(n.swarm_fetches(), 0u);
}

TEST(Fetcher, JoinIsOneMetainfoRequestPerObject) {
  auto d = sha256_of("nobody has this");
  ht::test_http_server srv([&](const ht::recorded_request&) {
    ht::reply out;
    out.status = 404;
    out.head_delay = 500ms;
    out.body = R"({"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown"}]})";
    out.headers.emplace_back("Content-Type", "application/json");
    return out;
  });
  node n(srv.url(""));
  std::vector<std::future<fetch_start>> answers;
  for (int i = 0; i < 3; ++i) {
    answers.push_back(std::async(std::launch::async, [&] { return join_and_wait(*n.fetch, d); }));
    std::this_thread::sleep_for(50ms);
  }
  for (auto& a : answers) {
    auto s = a.get();
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().status, 404u) << s.error().why.message;
    EXPECT_NE(s.error().why.message.find("HTTP 404"), std::string::npos) << s.error().why.message;
  }
  EXPECT_EQ(metainfo_requests(srv), 1u);
  EXPECT_EQ(n.swarm_fetches(), 1u);
  EXPECT_FALSE(n.fetch->find(d));
  // Once answered, the next join asks again.
  EXPECT_FALSE(join_and_wait(*n.fetch, d));
  EXPECT_EQ(metainfo_requests(srv), 2u);
}

TEST(Fetcher, UnreachableRegistryProxyIs502AndCounted) {
  node n("http://127.0.0.1:1");
  auto d = sha256_of("x");
  auto t0 = steady::now();
  auto s = join_and_wait(*n.fetch, d);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().status, 502u) << s.error().why.message;
  EXPECT_FALSE(n.fetch->ensure({"r.example", "team/app"}, d, ""));
  EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 5.0);
  EXPECT_EQ(forward_errors_counter(n.reg).value(), 2u);
}

TEST(Fetcher, ProgressThatStopsIsA504WithinTheDeadline) {
  ht::test_http_server srv([&](const ht::recorded_request&) {
    ht::reply out;
    out.status = 202;
    out.head_delay = 200ms;
    out.body = R"({"status":"fetching","bytes":5})";
    return out;
  });
  node n(srv.url(""));
  auto t0 = steady::now();
  auto s = join_and_wait(*n.fetch, sha256_of("stuck"));
  double secs = std::chrono::duration<double>(steady::now() - t0).count();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().status, 504u) << s.error().why.message;
  EXPECT_TRUE(s.error().why.is(errc::timeout));
  EXPECT_GE(secs, 2.9);  // fallback_deadline is 3 s
  EXPECT_LT(secs, 8.0);
}

// registry-proxy sheds load with 429 + Retry-After while its fetch queue is full: peerd waits as
// told and asks again instead of failing the client.
TEST(Fetcher, ShedLoadIsWaitedOutThenFetched) {
  auto bytes = testing::bytes_of(256 << 10, 3);
  auto m = meta_of(bytes);
  std::atomic<int> polls{0};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (!is_metainfo(r)) return range_reply(bytes, r);
    ht::reply out;
    if (polls.fetch_add(1) == 0) {
      out.status = 429;
      out.headers.emplace_back("Retry-After", "1");
      out.headers.emplace_back("Content-Type", "application/json");
      out.body = R"({"errors":[{"code":"TOOMANYREQUESTS","message":"fetch queue full"}]})";
      return out;
    }
    out.body = m.torrent_file({});
    return out;
  });
  node n(srv.url(""));
  auto t0 = steady::now();
  auto s = join_and_wait(*n.fetch, m.object);
  ASSERT_TRUE(s) << s.error().status << " " << s.error().why.message;
  EXPECT_GE(std::chrono::duration<double>(steady::now() - t0).count(), 0.9);  // Retry-After: 1
  EXPECT_EQ(metainfo_requests(srv), 2u);
  EXPECT_TRUE(n.fetch->ensure({"r.example", "team/app"}, m.object, ""));
  EXPECT_TRUE(n.store->contains(m.object));
}

// A registry-proxy that keeps shedding: the client hears 503 with Retry-After and the cause at
// the deadline (swarm.fallback_deadline, 3 s here), however long Retry-After says.
TEST(Fetcher, PermanentShedIsA503AtTheDeadline) {
  ht::test_http_server srv([&](const ht::recorded_request&) {
    ht::reply out;
    out.status = 429;
    out.headers.emplace_back("Retry-After", "3600");
    out.headers.emplace_back("Content-Type", "application/json");
    out.body = R"({"errors":[{"code":"TOOMANYREQUESTS","message":"fetch queue full"}]})";
    return out;
  });
  node n(srv.url(""));
  auto t0 = steady::now();
  auto s = join_and_wait(*n.fetch, sha256_of("always shed"));
  double secs = std::chrono::duration<double>(steady::now() - t0).count();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().status, 503u) << s.error().why.message;
  EXPECT_EQ(s.error().retry_after, "3600");
  EXPECT_NE(s.error().why.message.find("HTTP 429"), std::string::npos) << s.error().why.message;
  EXPECT_NE(s.error().why.message.find("fetch queue full"), std::string::npos);
  EXPECT_GE(secs, 2.9);
  EXPECT_LT(secs, 6.0);
  EXPECT_GE(metainfo_requests(srv), 2u);  // asked again, not given up at the first 429
  EXPECT_LE(metainfo_requests(srv), 3u);  // at most 5 s apart
}

// A blob registry-proxy cuts into chunk objects (chunked.h): 202 with chunk_size to the metainfo
// request, then the chunk list, each chunk's metainfo (parent=) and the blob's bytes by range.
// `shed(r)` answers a request with 429 instead when it returns true.
struct chunked_origin {
  static constexpr std::uint64_t chunk = 128 << 10;
  std::string bytes = testing::bytes_of(2 * chunk, 11);
  object_metainfo whole = meta_of(bytes);
  std::vector<object_metainfo> parts{meta_of(bytes.substr(0, chunk)), meta_of(bytes.substr(chunk))};

  static bool is_chunk_list(const ht::recorded_request& r) {
    return r.target.rfind(std::string(origin::paths::chunks), 0) == 0;
  }
  // An OCI error answer, `delay` after the request.
  static ht::reply error(int status, const std::string& code, const std::string& message,
                         std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
    ht::reply out;
    out.status = status;
    out.head_delay = delay;
    out.body = R"({"errors":[{"code":")" + code + R"(","message":")" + message + R"("}]})";
    return out;
  }
  static ht::reply shed() {
    ht::reply out;
    out.status = 429;
    out.headers.emplace_back("Retry-After", "1");
    out.headers.emplace_back("Content-Type", "application/json");
    out.body = R"({"errors":[{"code":"TOOMANYREQUESTS","message":"fetch queue full"}]})";
    return out;
  }
  // The chunk list while only the first chunk is cut: incomplete, after a long poll cut short.
  ht::reply first_chunk_only() const {
    origin::chunk_list l{whole.object, bytes.size(), chunk, false, std::nullopt, {}};
    l.chunks.push_back({parts[0].object, 0, parts[0].size});
    ht::reply out;
    out.head_delay = 50ms;
    out.headers.emplace_back("Content-Type", "application/json");
    out.body = origin::encode(l);
    return out;
  }
  ht::reply answer(const ht::recorded_request& r) const {
    ht::reply out;
    if (is_chunk_list(r)) {
      origin::chunk_list l{whole.object, bytes.size(), chunk, true, std::nullopt, {}};
      for (std::uint64_t i = 0; i < parts.size(); ++i)
        l.chunks.push_back({parts[i].object, i * chunk, parts[i].size});
      out.headers.emplace_back("Content-Type", "application/json");
      out.body = origin::encode(l);
      return out;
    }
    if (!is_metainfo(r)) return range_reply(bytes, r);
    for (const auto& m : parts) {
      if (r.target.find(m.object.str()) != std::string::npos) {
        out.body = m.torrent_file({});
        return out;
      }
    }
    if (r.target.find("chunks=1") == std::string::npos) {  // the joined blob's own metainfo
      out.body = whole.torrent_file({});
      return out;
    }
    auto p =
        origin::encode(origin::progress{.bytes = 1, .size = bytes.size(), .chunk_size = chunk});
    out.status = 202;
    out.headers.emplace_back("Content-Type", "application/json");
    out.body = std::get<std::string>(p.body);
    return out;
  }
};

std::size_t requests_where(const ht::test_http_server& srv,
                           const std::function<bool(const ht::recorded_request&)>& pred) {
  std::size_t n = 0;
  for (const auto& r : srv.requests()) n += pred(r) ? 1 : 0;
  return n;
}

// The chunked fetch's own requests (chunk list, chunk metainfo) wait out 429 + Retry-After too.
TEST(Fetcher, ChunkedShedLoadIsWaitedOutThenFetched) {
  chunked_origin o;
  std::atomic<int> lists{0}, chunk_metas{0};
  auto is_chunk_meta = [](const ht::recorded_request& r) {
    return is_metainfo(r) && r.target.find("parent=") != std::string::npos;
  };
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    // Twice in a row each: more than the HTTP client's own retry takes.
    if (chunked_origin::is_chunk_list(r) && lists.fetch_add(1) < 2) return chunked_origin::shed();
    if (is_chunk_meta(r) && chunk_metas.fetch_add(1) < 2) {
      auto out = chunked_origin::shed();
      out.headers[0].second = "0";  // waited 100 ms (the floor)
      return out;
    }
    return o.answer(r);
  });
  node n(srv.url(""));
  auto t0 = steady::now();
  auto st = chunked_fetch(*n.fetch, o.whole.object);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(n.store->contains(o.whole.object));
  EXPECT_GE(std::chrono::duration<double>(steady::now() - t0).count(), 1.9);  // 2 × Retry-After
  EXPECT_EQ(requests_where(srv, chunked_origin::is_chunk_list), 3u);
  EXPECT_EQ(requests_where(srv, is_chunk_meta), 4u);  // 2 chunks, the first asked 3 times
}

// The client that starts a chunked fetch is confirmed by its first chunk list (a 200 comes only
// after registry-proxy's access check of the parent blob): it is known allowed at once, so the
// mirror sends no HEAD /v2/.../blobs/ of its own for it; another credential is not.
TEST(Fetcher, ChunkedStartConfirmsItsClient) {
  chunked_origin o;
  ht::test_http_server srv([&](const ht::recorded_request& r) { return o.answer(r); });
  node n(srv.url(""));
  blob_access access({n.cfg, n.http, n.reg});
  fetcher::deps fd{n.cfg, *n.store, *n.swarm, n.http, n.pool, n.reg};
  fd.state = n.state.get();
  fd.access = &access;
  n.fetch = std::make_unique<fetcher>(std::move(fd));
  const origin::object_ref where{"r.example", "team/app"};
  EXPECT_FALSE(access.known_allowed(where, o.whole.object, ""));
  auto s = join_and_wait(*n.fetch, o.whole.object);
  ASSERT_TRUE(s) << s.error().status << " " << s.error().why.message;
  ASSERT_TRUE(s->chunked);
  EXPECT_TRUE(access.known_allowed(where, o.whole.object, ""));
  EXPECT_FALSE(access.known_allowed(where, o.whole.object, "Basic b3RoZXI6b3RoZXI="));
  EXPECT_FALSE(access.known_allowed({"r.example", "other/repo"}, o.whole.object, ""));
  ASSERT_TRUE(s->chunked->wait());
  n.stop();  // the fetcher, which points at `access`, ends before it
  n.fetch.reset();
}

// A blob joined from its chunks is seeded at once under its whole-object torrent (registry-proxy's
// metainfo), with every piece trusted: the commit verified the blob's sha256, so no piece is
// SHA-1 hashed again before its first upload (a seed loaded on demand would hash each one).
TEST(Fetcher, AJoinedBlobIsSeededAtOnceWithItsPiecesTrusted) {
  chunked_origin o;
  ht::test_http_server srv([&](const ht::recorded_request& r) { return o.answer(r); });
  node n(srv.url(""));
  auto st = chunked_fetch(*n.fetch, o.whole.object);
  ASSERT_TRUE(st) << st.error().message;
  ASSERT_TRUE(n.store->contains(o.whole.object));
  const auto want = o.whole.info_hash_hex();
  lt::torrent_handle seed;
  for (auto until = steady::now() + 10s; !seed.is_valid() && steady::now() < until;) {
    for (const auto& h : n.swarm->session()->raw().get_torrents())
      if (swarm::hash_hex(h) == want) seed = h;
    if (!seed.is_valid()) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(seed.is_valid()) << "the joined blob's whole-object torrent was not loaded";
  auto ts = seed.status(lt::torrent_handle::query_verified_pieces);
  EXPECT_TRUE(ts.is_seeding);
  ASSERT_EQ(ts.verified_pieces.size(), static_cast<int>(o.whole.pieces.size()));
  EXPECT_TRUE(ts.verified_pieces.all_set()) << "pieces left to hash before their first upload";
}

// A chunked fetch that fails after a chunk completed leaves that chunk seeded from its transient
// file (never committed to the cache). A retry of the blob found the chunk "already held and
// seeded" and failed at once, again and again while the seed stayed loaded; it now takes the
// chunk's bytes from that file, with no range of it asked of registry-proxy.
TEST(Fetcher, ARetryAfterAFailedChunkedFetchUsesTheChunkItAlreadyHas) {
  chunked_origin o;
  std::atomic<bool> break_chunk1{true};
  auto is_chunk_meta = [](const ht::recorded_request& r) {
    return is_metainfo(r) && r.target.find("parent=") != std::string::npos;
  };
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (is_chunk_meta(r) && r.target.find(o.parts[1].object.str()) != std::string::npos &&
        break_chunk1)
      return chunked_origin::error(400, "UNKNOWN", "broken",
                                   1500ms);  // chunk 0 completes meanwhile
    return o.answer(r);
  });
  node n(srv.url(""));
  auto first = chunked_fetch(*n.fetch, o.whole.object);
  ASSERT_FALSE(first);
  EXPECT_FALSE(n.store->contains(o.whole.object));
  EXPECT_FALSE(n.store->contains(o.parts[0].object));  // transient: seeded, not cached
  ASSERT_NE(n.swarm->transient_file_of(o.parts[0].object), "");
  const auto boundary = srv.requests().size();
  break_chunk1 = false;
  auto second = chunked_fetch(*n.fetch, o.whole.object);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE(n.store->contains(o.whole.object));
  // Chunk 1's bytes came by range (no seeds here); none of chunk 0's: they came from its file.
  std::size_t ranges = 0, chunk0_ranges = 0;
  for (const auto& r : srv.requests()) {
    if (static_cast<std::size_t>(r.index) < boundary || is_metainfo(r) ||
        chunked_origin::is_chunk_list(r))
      continue;
    ++ranges;
    if (r.header("Range").value_or("").rfind("bytes=0-", 0) == 0) ++chunk0_ranges;
  }
  EXPECT_GE(ranges, 1u);
  EXPECT_EQ(chunk0_ranges, 0u);
}

// A chunked fetch's thread goes on after the blob is committed (it asks registry-proxy for the
// whole blob's metainfo, then seeds the blob). A fetcher going away stops and joins it first: it
// used the swarm, cache and HTTP client after they were gone (an ASan use-after-free in
// swarm_manager::load_seed in a clean-clone run, when the metainfo answer came late).
TEST(Fetcher, ChunkedFetchThreadsEndWithTheFetcher) {
  chunked_origin o;
  std::atomic<int> late_metainfo{0};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    auto out = o.answer(r);
    if (is_metainfo(r) && r.target.find(o.whole.object.str()) != std::string::npos &&
        r.target.find("chunks=1") == std::string::npos &&
        r.target.find("parent=") == std::string::npos) {  // not a chunk's (it names its blob)
      ++late_metainfo;
      out.head_delay = 1500ms;  // the fetch is committed; its thread waits for this answer
    }
    return out;
  });
  node n(srv.url(""));
  auto s = join_and_wait(*n.fetch, o.whole.object);
  ASSERT_TRUE(s) << s.error().why.message;
  ASSERT_TRUE(s->chunked);
  ASSERT_TRUE(s->chunked->wait());
  std::weak_ptr<chunked_blob> blob = s->chunked;
  s = std::unexpected(fetch_failure{0, error{errc::cancelled, "dropped"}});  // our reference
  for (auto until = steady::now() + 5s; late_metainfo == 0 && steady::now() < until;)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(late_metainfo, 1) << "the blob's metainfo was not asked for";
  // The fetcher goes while its thread waits for that answer (every pool task of its join ran:
  // the join answered and the blob is committed).
  const auto t0 = steady::now();
  n.fetch.reset();
  // Its thread was joined: nothing holds the fetch any more. Before, the destructor returned at
  // once and the thread went on to seed through whatever was left of the swarm.
  EXPECT_TRUE(blob.expired());
  EXPECT_LT(steady::now() - t0, 5s);
  // It did not seed the blob after it was told to stop.
  for (const auto& h : n.swarm->session()->raw().get_torrents())
    EXPECT_NE(swarm::hash_hex(h), o.whole.info_hash_hex());
}

// A small Range inside a chunk registry-proxy has not listed yet is asked of registry-proxy at once
// (a Range GET of the blob) and read from its answer (chunked.h, want_range): six of them, more
// than the four a blob holds at once. An open-ended range is not asked. Once the chunk is listed
// the blob completes from its chunks.
TEST(Fetcher, ASmallRangeOfAChunkNotCutYetIsReadFromRegistryProxy) {
  chunked_origin o;
  const std::uint64_t c = chunked_origin::chunk;
  std::atomic<bool> cut{false};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (chunked_origin::is_chunk_list(r) && !cut) return o.first_chunk_only();
    return o.answer(r);
  });
  node n(srv.url(""));
  auto s = join_and_wait(*n.fetch, o.whole.object);
  ASSERT_TRUE(s) << s.error().why.message;
  ASSERT_TRUE(s->chunked);
  auto& blob = *s->chunked;
  auto read = [&](std::uint64_t off, std::size_t len) -> result<std::string> {
    auto p = std::make_shared<std::promise<result<std::string>>>();
    auto f = p->get_future();
    blob.read(off, len, [p](result<std::string> b) { p->set_value(std::move(b)); });
    if (f.wait_for(10s) != std::future_status::ready) return fail(errc::timeout, "no read");
    return f.get();
  };
  for (std::uint64_t i = 0; i < 6; ++i) {
    const std::uint64_t off = c + 1000 * i + 7;
    blob.want_range(off, off + 500);
    auto b = read(off, 500);
    ASSERT_TRUE(b) << b.error().message;
    EXPECT_EQ(*b, o.bytes.substr(off, 500));
    EXPECT_EQ(requests_where(srv,
                             [&](const ht::recorded_request& r) {
                               return r.header("Range") == "bytes=" + std::to_string(off) + "-" +
                                                               std::to_string(off + 499);
                             }),
              1u);
  }
  EXPECT_EQ(n.swarm->counters().range_direct.load(), 6u);
  EXPECT_EQ(n.swarm->counters().range_direct_bytes.load(), 6u * 500);
  blob.want_range(c + 20000, o.bytes.size());
  EXPECT_EQ(n.swarm->counters().range_direct.load(), 6u);
  EXPECT_EQ(blob.current(), chunked_blob::state::running);
  cut = true;
  ASSERT_TRUE(blob.wait());
  EXPECT_TRUE(n.store->contains(o.whole.object));
  auto last = read(o.bytes.size() - 10, 10);
  ASSERT_TRUE(last) << last.error().message;
  EXPECT_EQ(*last, o.bytes.substr(o.bytes.size() - 10));
}

// The client that starts a chunked fetch with a small Range (fetcher::join's `range`) has it
// asked of registry-proxy at once, while the first chunk list is still outstanding: a lazy
// reader's first bytes do not wait for the first chunk to be cut.
TEST(Fetcher, TheStartingClientsRangeIsAskedBeforeTheFirstChunkList) {
  chunked_origin o;
  const std::uint64_t off = chunked_origin::chunk + 77, end = off + 1000;
  const std::string want = "bytes=" + std::to_string(off) + "-" + std::to_string(end - 1);
  std::atomic<bool> asked{false}, asked_before_list{false};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (chunked_origin::is_chunk_list(r)) {
      // The list waits (at most 5 s) for the range to be asked.
      for (int i = 0; i < 500 && !asked; ++i) std::this_thread::sleep_for(10ms);
      if (asked) asked_before_list = true;
    }
    if (r.header("Range") == want) asked = true;
    return o.answer(r);
  });
  node n(srv.url(""));
  auto p = std::make_shared<std::promise<fetch_start>>();
  auto fut = p->get_future();
  n.fetch->join(
      {"r.example", "team/app"}, o.whole.object, "",
      [p](fetch_start s) { p->set_value(std::move(s)); }, http::byte_range{off, end - 1});
  ASSERT_EQ(fut.wait_for(20s), std::future_status::ready);
  auto s = fut.get();
  ASSERT_TRUE(s) << s.error().why.message;
  ASSERT_TRUE(s->chunked);
  EXPECT_TRUE(asked_before_list);
  EXPECT_EQ(n.swarm->counters().range_direct.load(), 1u);
  auto rp = std::make_shared<std::promise<result<std::string>>>();
  auto rf = rp->get_future();
  s->chunked->read(off, 1000, [rp](result<std::string> b) { rp->set_value(std::move(b)); });
  ASSERT_EQ(rf.wait_for(10s), std::future_status::ready);
  auto b = rf.get();
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(*b, o.bytes.substr(off, 1000));
  ASSERT_TRUE(s->chunked->wait());
  EXPECT_TRUE(n.store->contains(o.whole.object));
}

// registry-proxy stops listing the chunks after the first (the replica cutting the blob died and
// another answers 404, not cutting it): the rest of the blob comes as a range of it, a reader
// waiting in the unlisted chunk reads the blob as it is written, and the blob completes.
TEST(Fetcher, ChunksNoLongerListedComeAsRangesOfTheBlob) {
  chunked_origin o;
  const std::uint64_t c = chunked_origin::chunk;
  std::atomic<bool> lost{false};
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (chunked_origin::is_chunk_list(r) && lost) {
      ht::reply out;
      out.status = 404;
      out.headers.emplace_back("Content-Type", "application/json");
      out.body = R"({"error":"the object is not cut into chunks here"})";
      return out;
    }
    if (chunked_origin::is_chunk_list(r)) return o.first_chunk_only();
    return o.answer(r);
  });
  node n(srv.url(""));
  auto s = join_and_wait(*n.fetch, o.whole.object);
  ASSERT_TRUE(s) << s.error().why.message;
  ASSERT_TRUE(s->chunked);
  auto& blob = *s->chunked;
  auto p = std::make_shared<std::promise<result<std::string>>>();
  auto got = p->get_future();
  blob.read(c + 100, 1000, [p](result<std::string> b) { p->set_value(std::move(b)); });
  EXPECT_EQ(got.wait_for(300ms), std::future_status::timeout) << "chunk 1 is not listed yet";
  lost = true;
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  auto b = got.get();
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(*b, o.bytes.substr(c + 100, b->size()));
  EXPECT_GT(b->size(), 0u);
  ASSERT_TRUE(blob.wait());
  EXPECT_TRUE(n.store->contains(o.whole.object));
  EXPECT_EQ(n.swarm->counters().chunked_tails.load(), 1u);
  const std::string tail = "bytes=" + std::to_string(c) + "-" + std::to_string(2 * c - 1);
  EXPECT_EQ(
      requests_where(srv, [&](const ht::recorded_request& r) { return r.header("Range") == tail; }),
      1u);
}

// A listed chunk whose metainfo registry-proxy no longer has (evicted, or a restart): its range of
// the blob comes over HTTP into the cache under the chunk's digest, and the blob completes.
TEST(Fetcher, AChunkWithoutSwarmIsFetchedByItsRange) {
  chunked_origin o;
  const std::string gone = o.parts[1].object.str();
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (is_metainfo(r) && r.target.find(gone) != std::string::npos)
      return chunked_origin::error(404, "BLOB_UNKNOWN", "evicted");
    return o.answer(r);
  });
  node n(srv.url(""));
  auto st = chunked_fetch(*n.fetch, o.whole.object);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(n.store->contains(o.whole.object));
  EXPECT_TRUE(n.store->contains(o.parts[1].object));
  const std::string want = "bytes=" + std::to_string(chunked_origin::chunk) + "-" +
                           std::to_string(2 * chunked_origin::chunk - 1);
  EXPECT_EQ(
      requests_where(srv, [&](const ht::recorded_request& r) { return r.header("Range") == want; }),
      1u);
  EXPECT_GE(n.swarm->counters().from_http.load(), chunked_origin::chunk);
}

// The same with wrong bytes in that range: the chunk never enters the cache, and the blob fails
// with the cause instead of being joined from them.
TEST(Fetcher, AChunkRangeWithWrongBytesFailsTheBlob) {
  chunked_origin o;
  std::string bad = o.bytes;
  bad[chunked_origin::chunk + 7] ^= 1;
  const std::string gone = o.parts[1].object.str();
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (is_metainfo(r) && r.target.find(gone) != std::string::npos) {
      ht::reply out;
      out.status = 404;
      return out;
    }
    if (!is_metainfo(r) && !chunked_origin::is_chunk_list(r)) return range_reply(bad, r);
    return o.answer(r);
  });
  node n(srv.url(""));
  auto s = join_and_wait(*n.fetch, o.whole.object);
  // Found in the first round here (two small chunks): the client hears 502 with the cause. A
  // chunk found later fails the blob the client already reads.
  std::string why;
  if (s) {
    ASSERT_TRUE(s->chunked);
    auto st = s->chunked->wait();
    ASSERT_FALSE(st);
    why = st.error().message;
  } else {
    EXPECT_EQ(s.error().status, 502u);
    why = s.error().why.message;
  }
  EXPECT_NE(why.find("chunk 1 from its range"), std::string::npos) << why;
  EXPECT_NE(why.find("hashes to"), std::string::npos) << why;
  EXPECT_FALSE(n.store->contains(o.parts[1].object));
  EXPECT_FALSE(n.store->contains(o.whole.object));
}

// A registry-proxy that keeps shedding the chunk list: the client hears 503 with Retry-After and
// the cause at the deadline (3 s), not a 200 whose body breaks off.
TEST(Fetcher, ChunkedPermanentShedIsA503AtTheDeadline) {
  chunked_origin o;
  ht::test_http_server srv([&](const ht::recorded_request& r) {
    if (!chunked_origin::is_chunk_list(r)) return o.answer(r);
    auto out = chunked_origin::shed();
    out.headers[0].second = "3600";
    return out;
  });
  node n(srv.url(""));
  auto t0 = steady::now();
  auto s = join_and_wait(*n.fetch, o.whole.object);
  double secs = std::chrono::duration<double>(steady::now() - t0).count();
  ASSERT_FALSE(s) << "a 200 whose chunk list is shed";
  EXPECT_EQ(s.error().status, 503u) << s.error().why.message;
  EXPECT_EQ(s.error().retry_after, "3600");
  EXPECT_NE(s.error().why.message.find("chunk list"), std::string::npos) << s.error().why.message;
  EXPECT_NE(s.error().why.message.find("HTTP 429"), std::string::npos) << s.error().why.message;
  EXPECT_NE(s.error().why.message.find("fetch queue full"), std::string::npos);
  EXPECT_GE(secs, 2.9);
  EXPECT_LT(secs, 7.0);
  auto lists = requests_where(srv, chunked_origin::is_chunk_list);
  EXPECT_GE(lists, 2u);  // asked again, not given up at the first 429
  EXPECT_LE(lists, 3u);  // at most 5 s apart
  EXPECT_FALSE(n.store->contains(o.whole.object));
}

TEST(Fetcher, GroupsNeedDatasetsAndStatusStartsEmpty) {
  node n("http://127.0.0.1:1");
  auto g = n.fetch->fetch_group(group_spec{});
  ASSERT_FALSE(g);
  EXPECT_TRUE(g.error().is(errc::unavailable));
  auto s = n.fetch->status_snapshot();
  EXPECT_TRUE(s.chunked.empty());
  EXPECT_EQ(s.chunked_fetches, 0u);
}

}  // namespace
}  // namespace shoal::peerd
