// Concurrent writers of one digest coalesce onto one write; followers stream the bytes already
// written and learn the outcome. Also many threads writing and reading different digests.

#include <atomic>
#include <thread>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;
using namespace std::chrono_literals;

TEST(CacheCoalesce, FollowerStreamsWhileTheObjectArrives) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(64 * 1024, 1);
  digest id = sha256_of(content);
  auto t = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->role, write_role::writer);
  ASSERT_TRUE(t->writer->write(std::string_view(content).substr(0, 1000)));

  auto f = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->role, write_role::follower);
  ASSERT_EQ(f->inflight, t->inflight);
  EXPECT_EQ(s->find_inflight(id), t->inflight);
  EXPECT_EQ(s->get_stats().coalesced_writes, 1u);
  auto& in = *f->inflight;
  EXPECT_EQ(in.available(), 1000u);
  EXPECT_EQ(in.expected_size(), content.size());

  // The bytes already written are readable (unverified) through the shared fd.
  std::string buf(4000, '\0');
  auto n = in.pread(0, std::span(reinterpret_cast<std::byte*>(buf.data()), buf.size()));
  ASSERT_TRUE(n);
  ASSERT_EQ(*n, 1000u);
  EXPECT_EQ(buf.substr(0, 1000), content.substr(0, 1000));

  // A waiter past the current end fires once the writer gets there, on the writer's thread.
  std::vector<progress> seen;
  in.wait_for(5000, [&](const progress& p) { seen.push_back(p); });
  in.wait_for(10, [&](const progress& p) { seen.push_back(p); });  // already true: immediate
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].available, 1000u);
  ASSERT_TRUE(t->writer->write(std::string_view(content).substr(1000, 3000)));
  EXPECT_EQ(seen.size(), 1u);  // 4000 is not more than 5000
  ASSERT_TRUE(t->writer->write(std::string_view(content).substr(4000, 2000)));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].state, write_state::writing);
  EXPECT_EQ(seen[1].available, 6000u);

  // A blocking follower on another thread: it sees the rest arrive and then the commit.
  std::atomic<bool> follower_done{false};
  std::string streamed;
  std::thread reader([&] {
    std::uint64_t off = 0;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      progress p = in.wait(off, 100ms);
      if (p.state == write_state::failed) break;
      std::string chunk(8192, '\0');
      auto got = in.pread(off, std::span(reinterpret_cast<std::byte*>(chunk.data()), chunk.size()));
      if (!got) break;
      streamed.append(chunk.data(), *got);
      off += *got;
      if (p.state == write_state::committed && off == p.available) break;
    }
    follower_done = true;
  });
  for (std::size_t off = 6000; off < content.size(); off += 5000) {
    ASSERT_TRUE(t->writer->write(std::string_view(content).substr(off, 5000)));
    std::this_thread::sleep_for(1ms);
  }
  bool committed_cb = false;
  in.wait_for(UINT64_MAX - 1, [&](const progress& p) {
    committed_cb = p.state == write_state::committed && p.available == content.size();
  });
  ASSERT_TRUE(t->writer->commit());
  reader.join();
  EXPECT_TRUE(follower_done);
  EXPECT_TRUE(committed_cb);
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(in.state(), write_state::committed);
  EXPECT_EQ(s->find_inflight(id), nullptr);
  // After the commit a new begin_write finds the object present.
  auto again = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->role, write_role::present);
}

TEST(CacheCoalesce, FollowersSeeAFailedWriteAsFailed) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string claimed = random_bytes(3000, 2);
  digest id = sha256_of(claimed);
  std::string garbage = random_bytes(3000, 3);
  auto t = s->begin_write(id, garbage.size(), object_kind::blob);
  ASSERT_TRUE(t);
  auto f = s->begin_write(id, garbage.size(), object_kind::blob);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->role, write_role::follower);
  std::optional<progress> last;
  f->inflight->wait_for(100000, [&](const progress& p) { last = p; });
  ASSERT_TRUE(t->writer->write(garbage));
  EXPECT_FALSE(last);  // 3000 bytes is not past 100000: still waiting
  auto r = t->writer->commit();
  ASSERT_FALSE(r);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->state, write_state::failed);
  ASSERT_TRUE(last->err);
  EXPECT_TRUE(last->err->is(errc::digest_mismatch));
  std::byte b[16];
  auto read = f->inflight->pread(0, b);
  ASSERT_FALSE(read);  // bytes of a failed write are never handed out
  EXPECT_TRUE(read.error().is(errc::digest_mismatch)) << read.error().to_string();
  EXPECT_EQ(f->inflight->wait(0, 10ms).state, write_state::failed);
  EXPECT_FALSE(s->contains(id));
  // The next begin_write starts a fresh write.
  auto t2 = s->begin_write(id, claimed.size(), object_kind::blob);
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->role, write_role::writer);
  EXPECT_NE(t2->inflight, t->inflight);
}

// A server streaming an object holds its last byte until the content is verified. The
// verification fires before the commit's fdatasync and is seen by waiters registered with
// wait_verified (plain wait_for waiters keep their meaning); a mismatch fails them instead.
TEST(CacheCoalesce, WaitVerifiedFiresOnAMatchingDigestAndFailsOnAMismatch) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(32 * 1024, 7);
  digest id = sha256_of(content);
  auto t = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->writer->write(content));
  EXPECT_FALSE(t->inflight->snapshot().verified);  // every byte written, not yet verified
  std::vector<progress> seen;
  t->inflight->wait_verified([&](const progress& p) { seen.push_back(p); });
  EXPECT_TRUE(seen.empty());
  // A byte-count waiter past the end is not woken by the verification, only by the commit.
  std::optional<progress> past_end;
  t->inflight->wait_for(content.size(), [&](const progress& p) { past_end = p; });
  ASSERT_TRUE(t->writer->commit());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].verified);
  EXPECT_EQ(seen[0].available, content.size());
  ASSERT_TRUE(past_end);
  EXPECT_EQ(past_end->state, write_state::committed);
  EXPECT_TRUE(past_end->verified);
  // After the fact it fires at once.
  t->inflight->wait_verified([&](const progress& p) { seen.push_back(p); });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].state, write_state::committed);

  std::string other = random_bytes(32 * 1024, 8);
  digest claimed = sha256_of(random_bytes(32 * 1024, 9));
  auto bad = s->begin_write(claimed, other.size(), object_kind::blob);
  ASSERT_TRUE(bad);
  ASSERT_TRUE(bad->writer->write(other));
  std::optional<progress> outcome;
  bad->inflight->wait_verified([&](const progress& p) { outcome = p; });
  ASSERT_FALSE(bad->writer->commit());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->state, write_state::failed);
  EXPECT_FALSE(outcome->verified);
}

TEST(CacheCoalesce, WaitTimesOutWithoutProgress) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  auto t = s->begin_write(sha256_of("abc"), 3, object_kind::blob);
  ASSERT_TRUE(t);
  auto start = std::chrono::steady_clock::now();
  progress p = t->inflight->wait(0, 50ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 45ms);
  EXPECT_EQ(p.state, write_state::writing);
  EXPECT_EQ(p.available, 0u);
}

// Many threads race to fetch the same few objects: each object is written once, the others
// follow (or find it present), and everyone ends up reading the right bytes.
TEST(CacheCoalesce, ManyThreadsSameDigests) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  constexpr int objects = 4, threads = 8;
  std::vector<std::string> contents;
  for (int i = 0; i < objects; ++i) contents.push_back(random_bytes(200'000 + i * 1000, 100 + i));
  std::atomic<int> writers{0}, followers{0}, present{0}, failures{0};
  std::vector<std::thread> ts;
  for (int th = 0; th < threads; ++th) {
    ts.emplace_back([&, th] {
      for (int k = 0; k < objects; ++k) {
        const std::string& c = contents[static_cast<std::size_t>((k + th) % objects)];
        digest id = sha256_of(c);
        auto t = s->begin_write(id, c.size(), object_kind::blob);
        if (!t) {
          ++failures;
          continue;
        }
        if (t->role == write_role::writer) {
          ++writers;
          bool ok = true;
          for (std::size_t off = 0; off < c.size() && ok; off += 16384) {
            ok = t->writer->write(std::string_view(c).substr(off, 16384)).has_value();
            std::this_thread::yield();
          }
          if (!ok || !t->writer->commit()) ++failures;
        } else if (t->role == write_role::follower) {
          ++followers;
          progress p = t->inflight->wait(UINT64_MAX - 1, 20s);
          if (p.state != write_state::committed || p.available != c.size()) ++failures;
        } else {
          ++present;
          if (t->reader->read_all().value_or("") != c) ++failures;
        }
        if (read_all(*s, id) != c) ++failures;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(writers.load(), objects);  // exactly one write per digest
  EXPECT_EQ(writers + followers + present, objects * threads);
  auto st = s->get_stats();
  EXPECT_EQ(st.commits, static_cast<std::uint64_t>(objects));
  EXPECT_EQ(st.objects, static_cast<std::uint64_t>(objects));
  EXPECT_EQ(st.coalesced_writes, static_cast<std::uint64_t>(followers.load()));
  EXPECT_EQ(st.inflight_objects, 0u);
  EXPECT_EQ(st.inflight_bytes, 0u);
}

// Writers of distinct objects and readers of random ones at the same time.
TEST(CacheCoalesce, ManyThreadsDifferentDigests) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  constexpr int writers = 4, per_writer = 25, readers = 3;
  std::vector<std::string> contents;
  for (int i = 0; i < writers * per_writer; ++i) {
    contents.push_back(random_bytes(1000 + static_cast<std::size_t>(i) * 37, 1000 + i));
  }
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::atomic<std::uint64_t> good_reads{0};
  std::vector<std::thread> ts;
  for (int w = 0; w < writers; ++w) {
    ts.emplace_back([&, w] {
      for (int k = 0; k < per_writer; ++k) {
        if (!put(*s, contents[static_cast<std::size_t>(w * per_writer + k)])) ++failures;
      }
    });
  }
  for (int r = 0; r < readers; ++r) {
    ts.emplace_back([&, r] {
      std::mt19937 rng(static_cast<unsigned>(r));
      auto deadline = std::chrono::steady_clock::now() + 30s;
      while (!done && std::chrono::steady_clock::now() < deadline) {
        const std::string& c = contents[rng() % contents.size()];
        auto rd = s->open_read(sha256_of(c));
        if (rd) {
          if (rd->read_all().value_or("") != c) ++failures;  // a reader never sees partial data
          ++good_reads;
        } else if (!rd.error().is(errc::not_found)) {
          ++failures;
        }
        (void)s->stat(sha256_of(c));
      }
    });
  }
  for (int w = 0; w < writers; ++w) ts[static_cast<std::size_t>(w)].join();
  done = true;
  for (std::size_t i = writers; i < ts.size(); ++i) ts[i].join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(good_reads.load(), 0u);
  std::uint64_t bytes = 0;
  for (const auto& c : contents) {
    EXPECT_EQ(read_all(*s, sha256_of(c)), c);
    bytes += c.size();
  }
  EXPECT_EQ(s->get_stats().bytes, bytes);
  EXPECT_EQ(s->get_stats().objects, contents.size());
  EXPECT_EQ(object_files(dir.path()).size(), contents.size());
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());
}

}  // namespace
}  // namespace shoal::cache
