// Unit tests of chunk objects (registry-proxy/chunks.h): the layout rule, the chunker's
// cutting of a byte stream fed in arbitrary pieces (each chunk's digest and metainfo match its
// bytes), waiters on the published list, and failures (a commit that fails, a short stream, an
// aborted transfer) that must fail the list rather than publish a wrong or partial chunk.

#include <gtest/gtest.h>

#include <atomic>
#include <random>

#include "registry-proxy/chunks.h"
#include "common/sha256.h"

namespace shoal::proxy {
namespace {

constexpr std::uint64_t mib = 1u << 20;

std::string bytes_of(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

TEST(ChunkLayout, SizeRule) {
  EXPECT_EQ(chunk_size_for(100 * mib, 0), 0u) << "0 turns chunking off";
  EXPECT_EQ(chunk_size_for(31 * mib, 16 * mib), 0u) << "shorter than two chunks";
  EXPECT_EQ(chunk_size_for(32 * mib, 16 * mib), 16 * mib);
  EXPECT_EQ(chunk_size_for(64 * mib + 2048, 16 * mib), 16 * mib);
  // At most 256 chunks, in whole MiB.
  std::uint64_t big = 10ull << 30;
  auto c = chunk_size_for(big, 16 * mib);
  EXPECT_EQ(c % mib, 0u);
  EXPECT_LE(big / c, 256u);
  EXPECT_EQ(chunk_size_for(3 * mib + 5, 1), mib);
}

TEST(ChunkLayout, LastChunkTakesTheRemainder) {
  chunk_list l(sha256_of(std::string_view("x")), 64 * mib + 2048, 16 * mib);
  ASSERT_EQ(l.chunk_count(), 4u);
  EXPECT_EQ(l.chunk_length(0), 16 * mib);
  EXPECT_EQ(l.chunk_length(3), 16 * mib + 2048);
  std::uint64_t sum = 0;
  for (std::uint32_t i = 0; i < l.chunk_count(); ++i) sum += l.chunk_length(i);
  EXPECT_EQ(sum, l.size());
}

TEST(Chunker, CutsAStreamFedInOddPiecesIntoVerifiedChunks) {
  const std::uint64_t cs = mib;
  const std::string data = bytes_of(static_cast<std::size_t>(3 * mib + 12345), 7);
  auto list = std::make_shared<chunk_list>(sha256_of(std::string_view(data)), data.size(), cs);
  std::vector<std::pair<chunk_entry, object_metainfo>> committed;
  {
    chunker c(list,
              [&](const chunk_entry& e, const std::string& b, const object_metainfo& m) -> status {
                EXPECT_EQ(b.size(), e.size);
                committed.emplace_back(e, m);
                return {};
              });
    std::mt19937 g(3);
    std::size_t off = 0;
    while (off < data.size()) {
      std::size_t n = std::min<std::size_t>(data.size() - off, 1 + g() % 300000);
      c.update(data.data() + off, n);
      off += n;
    }
    ASSERT_TRUE(c.finish());
  }
  auto s = list->snap();
  EXPECT_TRUE(s.complete);
  EXPECT_FALSE(s.failed);
  ASSERT_EQ(s.chunks.size(), 3u);
  ASSERT_EQ(committed.size(), 3u);
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& e = s.chunks[i];
    EXPECT_EQ(e.offset, off);
    EXPECT_EQ(e.size, i < 2 ? cs : cs + 12345);
    auto part = std::string_view(data).substr(static_cast<std::size_t>(e.offset),
                                              static_cast<std::size_t>(e.size));
    EXPECT_EQ(e.id, sha256_of(part)) << "chunk " << i;
    EXPECT_TRUE(list->contains(e.id));
    // The chunk's metainfo is that of the chunk as an object of its own.
    metainfo_builder b(e.size);
    b.update(part.data(), part.size());
    auto want = b.finish(e.id);
    ASSERT_TRUE(want);
    EXPECT_EQ(committed[i].second.info_hash(), want->info_hash());
    off += e.size;
  }
  EXPECT_FALSE(list->contains(sha256_of(std::string_view("not a chunk"))));
}

TEST(Chunker, WaitersFireOnPublishAndOnFailure) {
  const std::string data = bytes_of(static_cast<std::size_t>(2 * mib), 1);
  auto list = std::make_shared<chunk_list>(sha256_of(std::string_view(data)), data.size(), mib);
  std::atomic<int> fired{0};
  EXPECT_FALSE(list->when_beyond(0, [&] { ++fired; }));
  EXPECT_FALSE(list->when_beyond(1, [&] { ++fired; }));
  chunker c(list, [](const chunk_entry&, const std::string&, const object_metainfo&) -> status {
    return {};
  });
  c.update(data.data(), static_cast<std::size_t>(mib));
  for (int i = 0; i < 500 && fired.load() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(fired.load(), 1) << "the first chunk wakes only the waiter that had none";
  c.update(data.data() + mib, static_cast<std::size_t>(mib));
  ASSERT_TRUE(c.finish());
  EXPECT_EQ(fired.load(), 2);
  // A complete list answers at once.
  EXPECT_TRUE(list->when_beyond(5, [&] { ++fired; }));
  EXPECT_EQ(fired.load(), 3);
}

TEST(Chunker, AFailedCommitFailsTheListAndPublishesNothingAfter) {
  const std::string data = bytes_of(static_cast<std::size_t>(4 * mib), 2);
  auto list = std::make_shared<chunk_list>(sha256_of(std::string_view(data)), data.size(), mib);
  int calls = 0;
  chunker c(list, [&](const chunk_entry& e, const std::string&, const object_metainfo&) -> status {
    ++calls;
    if (e.offset == mib) return fail(errc::no_space, "cache full");
    return {};
  });
  c.update(data.data(), data.size());
  auto st = c.finish();
  ASSERT_FALSE(st);
  EXPECT_TRUE(st.error().is(errc::no_space));
  auto s = list->snap();
  EXPECT_EQ(s.chunks.size(), 1u);
  ASSERT_TRUE(s.failed);
  EXPECT_NE(s.failed->find("cache full"), std::string::npos);
  EXPECT_EQ(calls, 2) << "no chunk is cut after a failed one";
}

TEST(Chunker, ShortStreamAndAbortFailTheList) {
  const std::string data = bytes_of(static_cast<std::size_t>(3 * mib), 4);
  {
    auto list = std::make_shared<chunk_list>(sha256_of(std::string_view(data)), data.size(), mib);
    chunker c(list, [](const chunk_entry&, const std::string&, const object_metainfo&) -> status {
      return {};
    });
    c.update(data.data(), static_cast<std::size_t>(2 * mib + 10));
    auto st = c.finish();
    ASSERT_FALSE(st);
    auto s = list->snap();
    EXPECT_EQ(s.chunks.size(), 2u);
    EXPECT_TRUE(s.failed);
    EXPECT_FALSE(s.complete);
  }
  {
    auto list = std::make_shared<chunk_list>(sha256_of(std::string_view(data)), data.size(), mib);
    std::atomic<bool> woke{false};
    list->when_beyond(10, [&] { woke = true; });
    chunker c(list, [](const chunk_entry&, const std::string&, const object_metainfo&) -> status {
      return {};
    });
    c.update(data.data(), 100);
    c.abort("upstream went away");
    EXPECT_TRUE(woke.load());
    auto s = list->snap();
    ASSERT_TRUE(s.failed);
    EXPECT_EQ(*s.failed, "upstream went away");
    // Bytes after an abort are ignored, never cut.
    c.update(data.data(), data.size());
    EXPECT_TRUE(list->snap().chunks.empty());
  }
}

}  // namespace
}  // namespace shoal::proxy
