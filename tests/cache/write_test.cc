// The write and read paths of one store: commit, verification failures, aborts, ranged reads,
// out-of-order writes, adoption, persistence, batched access updates and malformed digests.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <future>
#include <thread>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;

TEST(CacheWrite, CommitThenReadWholeAndRanges) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  ASSERT_TRUE(s);
  std::string content = random_bytes(300'000, 1);
  digest id = sha256_of(content);
  std::vector<event> events;
  auto sub = s->on_event([&](const event& e) { events.push_back(e); });

  auto t = s->begin_write(id, content.size(), object_kind::dataset_file);
  ASSERT_TRUE(t) << t.error().to_string();
  ASSERT_EQ(t->role, write_role::writer);
  EXPECT_FALSE(s->contains(id));  // not visible while writing
  EXPECT_FALSE(s->open_read(id).has_value());
  for (std::size_t off = 0; off < content.size(); off += 7000) {
    ASSERT_TRUE(t->writer->write(std::string_view(content).substr(off, 7000)));
  }
  auto info = t->writer->commit();
  ASSERT_TRUE(info) << info.error().to_string();
  EXPECT_EQ(info->size, content.size());
  EXPECT_EQ(info->kind, object_kind::dataset_file);
  EXPECT_EQ(t->inflight->state(), write_state::committed);

  ASSERT_TRUE(s->contains(id));
  auto st = s->stat(id);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->size, content.size());
  EXPECT_EQ(read_all(*s, id), content);

  auto r = s->open_read(id);
  ASSERT_TRUE(r);
  auto part = r->read(1000, 5000);
  ASSERT_TRUE(part);
  EXPECT_EQ(*part, content.substr(1000, 5000));
  auto tail = r->read(content.size() - 10, 10);
  ASSERT_TRUE(tail);
  EXPECT_EQ(*tail, content.substr(content.size() - 10));
  EXPECT_TRUE(r->read(content.size(), 0).has_value());
  auto beyond = r->read(content.size() - 10, 11);
  ASSERT_FALSE(beyond);
  EXPECT_TRUE(beyond.error().is(errc::range_not_satisfiable));
  EXPECT_FALSE(r->check_range(content.size() + 1, 0).has_value());
  // The fd is a plain read-only file descriptor (what sendfile needs).
  char c = 0;
  ASSERT_EQ(::pread(r->fd(), &c, 1, 42), 1);
  EXPECT_EQ(c, content[42]);

  // Layout: objects/sha256/<hh>/<64hex>, read-only, nothing left in tmp/.
  std::string path = dir.path() + "/objects/sha256/" + id.hex().substr(0, 2) + "/" + id.hex();
  EXPECT_EQ(s->object_path(id), path);
  EXPECT_EQ(s->shard_dir(id), dir.path() + "/objects/sha256/" + id.hex().substr(0, 2));
  struct stat fst {};
  ASSERT_EQ(::stat(path.c_str(), &fst), 0);
  EXPECT_EQ(fst.st_mode & 0777, 0444u);
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, event_type::committed);
  EXPECT_EQ(events[0].id, id);
  EXPECT_EQ(events[0].size, content.size());

  auto stats = s->get_stats();
  EXPECT_EQ(stats.objects, 1u);
  EXPECT_EQ(stats.bytes, content.size());
  EXPECT_EQ(stats.by_kind[static_cast<int>(object_kind::dataset_file)].bytes, content.size());
  EXPECT_EQ(stats.by_kind[static_cast<int>(object_kind::blob)].objects, 0u);
  EXPECT_EQ(stats.commits, 1u);
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.inflight_bytes, 0u);
}

TEST(CacheWrite, EmptyObject) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  auto info = put(*s, "");
  ASSERT_TRUE(info) << info.error().to_string();
  EXPECT_EQ(info->size, 0u);
  EXPECT_EQ(read_all(*s, sha256_of("")), "");
}

TEST(CacheWrite, DigestMismatchIsDiscardedAndReported) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(10'000, 2);
  digest claimed = sha256_of("something else");
  int committed = 0;
  auto sub = s->on_event([&](const event&) { ++committed; });
  auto t = s->begin_write(claimed, content.size(), object_kind::blob);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->writer->write(content));
  auto r = t->writer->commit();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::digest_mismatch)) << r.error().to_string();
  EXPECT_NE(r.error().message.find(sha256_of(content).str()), std::string::npos);
  EXPECT_EQ(t->inflight->state(), write_state::failed);
  EXPECT_FALSE(s->contains(claimed));
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());
  EXPECT_TRUE(object_files(dir.path()).empty());
  EXPECT_EQ(committed, 0);
  EXPECT_EQ(s->get_stats().commit_mismatches, 1u);
  EXPECT_EQ(s->usage_bytes(), 0u);  // the reservation is released
  // A second commit or write on a failed writer is refused, not a crash.
  EXPECT_FALSE(t->writer->commit());
  EXPECT_FALSE(t->writer->write("x"));
}

TEST(CacheWrite, SizeMismatchAtCommitAndPastExpected) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(1000, 3);
  digest id = sha256_of(content);
  {
    auto t = s->begin_write(id, 1001, object_kind::blob);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->writer->write(content));
    auto r = t->writer->commit();
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(errc::size_mismatch)) << r.error().to_string();
  }
  {
    auto t = s->begin_write(id, 999, object_kind::blob);
    ASSERT_TRUE(t);
    auto w = t->writer->write(content);
    ASSERT_FALSE(w);
    EXPECT_TRUE(w.error().is(errc::size_mismatch)) << w.error().to_string();
    EXPECT_EQ(t->inflight->state(), write_state::failed);
  }
  EXPECT_FALSE(s->contains(id));
  EXPECT_EQ(s->get_stats().commit_mismatches, 2u);
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());
  // Unknown expected size: the content decides.
  auto t = s->begin_write(id, std::nullopt, object_kind::blob);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->writer->write(content));
  ASSERT_TRUE(t->writer->commit());
  EXPECT_EQ(read_all(*s, id), content);
}

TEST(CacheWrite, AbortAndDropWithoutCommitFailFollowers) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(5000, 4);
  digest id = sha256_of(content);
  std::shared_ptr<inflight_object> followed;
  {
    auto t = s->begin_write(id, content.size(), object_kind::blob);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->writer->write(std::string_view(content).substr(0, 100)));
    auto f = s->begin_write(id, content.size(), object_kind::blob);
    ASSERT_TRUE(f);
    ASSERT_EQ(f->role, write_role::follower);
    followed = f->inflight;
    // The writer handle goes out of scope without commit.
  }
  EXPECT_EQ(followed->state(), write_state::failed);
  auto p = followed->snapshot();
  ASSERT_TRUE(p.err);
  EXPECT_TRUE(p.err->is(errc::cancelled)) << p.err->to_string();
  std::byte buf[10];
  EXPECT_FALSE(followed->pread(0, buf).has_value());
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());

  // A fresh write after the failure owns the digest again; abort() fails it too.
  auto t2 = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(t2);
  ASSERT_EQ(t2->role, write_role::writer);
  t2->writer->abort("upstream went away");
  EXPECT_EQ(t2->inflight->state(), write_state::failed);
  EXPECT_NE(t2->inflight->snapshot().err->message.find("upstream went away"), std::string::npos);
  EXPECT_EQ(s->get_stats().aborted_writes, 2u);
  auto t3 = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(t3);
  ASSERT_EQ(t3->role, write_role::writer);
  ASSERT_TRUE(t3->writer->write(content));
  ASSERT_TRUE(t3->writer->commit());
  EXPECT_EQ(read_all(*s, id), content);
}

TEST(CacheWrite, BeginWriteOfPresentObjectReturnsReader) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(2000, 5);
  ASSERT_TRUE(put(*s, content));
  auto t = s->begin_write(sha256_of(content), content.size(), object_kind::blob);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->role, write_role::present);
  ASSERT_TRUE(t->reader);
  EXPECT_EQ(t->reader->size(), content.size());
  EXPECT_EQ(*t->reader->read_all(), content);
  EXPECT_FALSE(t->writer);
  EXPECT_EQ(s->get_stats().hits, 1u);
}

TEST(CacheWrite, OutOfOrderPiecesExposeOnlyTheContiguousPrefix) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  const std::size_t piece = 4096;
  std::string content = random_bytes(piece * 16 + 123, 6);
  digest id = sha256_of(content);
  auto t = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(t);
  std::vector<std::size_t> order(17);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::size_t prefix_pieces = 0;
  std::vector<bool> have(order.size());
  for (std::size_t i : order) {
    std::size_t off = i * piece;
    std::size_t len = std::min(piece, content.size() - off);
    ASSERT_TRUE(t->writer->write_at(off, as_bytes(std::string_view(content).substr(off, len))));
    have[i] = true;
    while (prefix_pieces < have.size() && have[prefix_pieces]) ++prefix_pieces;
    std::uint64_t expect = std::min(prefix_pieces * piece, content.size());
    EXPECT_EQ(t->inflight->available(), expect);
    EXPECT_EQ(t->writer->bytes_written(), expect);
  }
  // Rewriting the verified prefix is refused without failing the write.
  auto again = t->writer->write_at(0, as_bytes(std::string_view(content).substr(0, 10)));
  ASSERT_FALSE(again);
  EXPECT_TRUE(again.error().is(errc::invalid_argument));
  ASSERT_TRUE(t->writer->commit());
  EXPECT_EQ(read_all(*s, id), content);
}

TEST(CacheWrite, GapAtCommitIsASizeMismatch) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(10000, 8);
  digest id = sha256_of(content);
  auto t = s->begin_write(id, std::nullopt, object_kind::blob);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->writer->write_at(5000, as_bytes(std::string_view(content).substr(5000))));
  auto r = t->writer->commit();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::size_mismatch)) << r.error().to_string();
}

// Every malformed digest form the text entry points can receive: a typed error, nothing on disk.
TEST(CacheWrite, MalformedDigestsAreRefusedWithTheirReason) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  const std::string hex64 = sha256_of("x").hex();
  struct bad {
    std::string input;
    digest_errc code;
  };
  const std::vector<bad> cases = {
      {"", digest_errc::empty},
      {hex64, digest_errc::missing_algorithm},
      {"sha512:" + hex64 + hex64, digest_errc::unsupported_algorithm},
      {"SHA256:" + hex64, digest_errc::unsupported_algorithm},
      {"md5:d41d8cd98f00b204e9800998ecf8427e", digest_errc::unsupported_algorithm},
      {":" + hex64, digest_errc::unsupported_algorithm},
      {"sha256+b64u:" + hex64, digest_errc::unsupported_algorithm},
      {"sha256:", digest_errc::wrong_length},
      {"sha256:" + hex64.substr(1), digest_errc::wrong_length},
      {"sha256:" + hex64 + "0", digest_errc::wrong_length},
      {"sha256:" + hex64 + "\n", digest_errc::wrong_length},
      {"sha256:" + hex64 + "/../x", digest_errc::wrong_length},
      {"sha256:" + std::string(64, 'A'), digest_errc::uppercase_hex},
      {"sha256:" + hex64.substr(0, 63) + "g", digest_errc::invalid_character},
      {"sha256:" + hex64.substr(0, 63) + std::string(1, '\0'), digest_errc::invalid_character},
      {"sha256:../../" + hex64.substr(6), digest_errc::invalid_character},
      {"sha256: " + hex64.substr(1), digest_errc::invalid_character},
  };
  for (const bad& b : cases) {
    SCOPED_TRACE(b.input);
    auto w = s->begin_write(b.input, 10, object_kind::blob);
    ASSERT_FALSE(w);
    EXPECT_EQ(w.error().code, make_error_code(b.code)) << w.error().to_string();
    auto r = s->open_read(b.input);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, make_error_code(b.code));
    auto st = s->stat(b.input);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, make_error_code(b.code));
    EXPECT_NE(st.error().message.find("invalid digest"), std::string::npos);
  }
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());
  EXPECT_TRUE(object_files(dir.path()).empty());
  EXPECT_EQ(s->get_stats().misses, 0u);  // refused before any lookup
  // The well-formed text form works.
  std::string content = "hello";
  ASSERT_TRUE(put(*s, content));
  auto r = s->open_read(sha256_of(content).str());
  ASSERT_TRUE(r);
  EXPECT_EQ(*r->read_all(), content);
  auto st = s->stat(sha256_of("absent").str());
  ASSERT_FALSE(st);
  EXPECT_TRUE(st.error().is(errc::not_found));
}

TEST(CacheWrite, AdoptFileMovesVerifiedFilesIn) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(50'000, 9);
  digest id = sha256_of(content);
  std::string staged = dir.path() + "/staged.bin";
  write_file(staged, content);

  // Wrong digest: refused, the file stays where it was.
  auto bad = s->adopt_file(staged, sha256_of("other"), object_kind::blob);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(errc::digest_mismatch)) << bad.error().to_string();
  EXPECT_EQ(::access(staged.c_str(), F_OK), 0);

  auto ok = s->adopt_file(staged, id, object_kind::dataset_file);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_NE(::access(staged.c_str(), F_OK), 0);  // renamed away
  EXPECT_EQ(read_all(*s, id), content);
  EXPECT_EQ(s->stat(id)->kind, object_kind::dataset_file);
  struct stat fst {};
  ASSERT_EQ(::stat(s->object_path(id).c_str(), &fst), 0);
  EXPECT_EQ(fst.st_mode & 0777, 0444u);

  write_file(staged, content);
  auto again = s->adopt_file(staged, id, object_kind::blob);
  ASSERT_FALSE(again);
  EXPECT_TRUE(again.error().is(errc::already_exists));

  // libtorrent writes straight to the object path: adoption in place.
  std::string other = random_bytes(3000, 10);
  digest oid = sha256_of(other);
  write_file(s->object_path(oid), other);
  ASSERT_TRUE(s->adopt_file(s->object_path(oid), oid, object_kind::blob));
  EXPECT_EQ(read_all(*s, oid), other);
  // ... and a bad file at an object path is removed rather than left looking like an object.
  std::string junk = "not what the name says";
  digest jid = sha256_of("the name");
  write_file(s->object_path(jid), junk);
  EXPECT_FALSE(s->adopt_file(s->object_path(jid), jid, object_kind::blob));
  EXPECT_NE(::access(s->object_path(jid).c_str(), F_OK), 0);

  EXPECT_FALSE(s->adopt_file(dir.path() + "/missing", id, object_kind::blob));
  EXPECT_FALSE(s->adopt_file(dir.path(), id, object_kind::blob));  // a directory
  EXPECT_EQ(s->get_stats().adoptions, 2u);
}

// A caller that hashed the file itself (peerd, as a download's bytes landed) hands the cache a
// content_proof: it stands for the cache's own pass only for the very file it was made of (the
// same inode, the same size); any other file is hashed as ever.
TEST(CacheWrite, AdoptTakesTheCallersHashOnlyForTheFileItHashed) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  auto proof_of = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return content_proof{static_cast<std::uint64_t>(st.st_size),
                         static_cast<std::uint64_t>(st.st_dev),
                         static_cast<std::uint64_t>(st.st_ino)};
  };
  std::string content = random_bytes(70'000, 21);
  digest id = sha256_of(content);
  const std::string staged = s->staging_dir() + "/" + id.hex();
  write_file(staged, content);
  auto proof = proof_of(staged);
  auto ok = s->adopt_staged(staged, id, object_kind::blob, &proof);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(*ok, adopt_outcome::adopted);
  EXPECT_EQ(read_all(*s, id), content);
  EXPECT_EQ(s->get_stats().adoptions_proven, 1u);

  // A proof made of another file (a copy, a replaced file) is not this file's: the wrong bytes
  // are hashed and refused.
  std::string other = random_bytes(70'000, 22);
  digest oid = sha256_of(other);
  const std::string hashed = dir.path() + "/hashed.bin";
  write_file(hashed, other);
  auto foreign = proof_of(hashed);
  const std::string swapped = s->staging_dir() + "/" + oid.hex();
  write_file(swapped, random_bytes(70'000, 23));
  auto refused = s->adopt_staged(swapped, oid, object_kind::blob, &foreign);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(errc::digest_mismatch)) << refused.error().to_string();
  EXPECT_FALSE(s->contains(oid));
  // The proof's size must be the file's: a file that grew after it was hashed is hashed again.
  write_file(hashed, other + "tail");
  auto grown = proof_of(hashed);
  grown.size = other.size();
  auto longer = s->adopt_file(hashed, oid, object_kind::blob, &grown);
  ASSERT_FALSE(longer);
  EXPECT_TRUE(longer.error().is(errc::digest_mismatch)) << longer.error().to_string();
  EXPECT_EQ(s->get_stats().adoptions_proven, 1u);
}

// Adoption never writes over or deletes what is at an object path: a committed object stays (same
// inode, same bytes, still indexed) whichever way another copy arrives; a staged copy is verified
// and consumed; a file without a row at the object path is set aside, not overwritten.
TEST(CacheWrite, AdoptNeverReplacesACommittedObject) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(40'000, 11);
  digest id = sha256_of(content);
  ASSERT_TRUE(put(*s, content));
  struct stat before {};
  ASSERT_EQ(::stat(s->object_path(id).c_str(), &before), 0);
  auto intact = [&] {
    struct stat now {};
    ASSERT_EQ(::stat(s->object_path(id).c_str(), &now), 0) << "the object's file went";
    EXPECT_EQ(now.st_ino, before.st_ino) << "the object's file was replaced";
    EXPECT_TRUE(s->contains(id));
    EXPECT_EQ(read_all(*s, id), content);
  };
  const std::string staged = s->staging_dir() + "/" + id.hex();
  // The same bytes staged by a download: verified, then dropped; the object stays.
  write_file(staged, content);
  auto same = s->adopt_staged(staged, id, object_kind::blob);
  ASSERT_TRUE(same) << same.error().to_string();
  EXPECT_EQ(*same, adopt_outcome::already_present);
  EXPECT_NE(::access(staged.c_str(), F_OK), 0);
  intact();
  // Wrong bytes staged under its name: a digest mismatch, dropped as well.
  write_file(staged, random_bytes(content.size(), 12));
  auto wrong = s->adopt_staged(staged, id, object_kind::blob);
  ASSERT_FALSE(wrong);
  EXPECT_TRUE(wrong.error().is(errc::digest_mismatch)) << wrong.error().to_string();
  EXPECT_NE(::access(staged.c_str(), F_OK), 0);
  intact();
  // adopt_file of another copy: already_exists, and that copy is left to its owner.
  std::string copy = dir.path() + "/copy.bin";
  write_file(copy, content);
  EXPECT_TRUE(s->adopt_file(copy, id, object_kind::blob).error().is(errc::already_exists));
  EXPECT_EQ(::access(copy.c_str(), F_OK), 0);
  intact();

  // A write of the object in progress: adopt_staged waits for it, then keeps its result.
  std::string other = random_bytes(30'000, 13);
  digest oid = sha256_of(other);
  auto t = s->begin_write(oid, other.size(), object_kind::blob);
  ASSERT_TRUE(t && t->role == write_role::writer);
  ASSERT_TRUE(t->writer->write(other));
  const std::string staged2 = s->staging_dir() + "/" + oid.hex();
  write_file(staged2, other);
  auto waiting = std::async(std::launch::async,
                            [&] { return s->adopt_staged(staged2, oid, object_kind::blob); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(t->writer->commit());
  auto joined = waiting.get();
  ASSERT_TRUE(joined) << joined.error().to_string();
  EXPECT_EQ(*joined, adopt_outcome::already_present);
  EXPECT_NE(::access(staged2.c_str(), F_OK), 0);
  EXPECT_EQ(read_all(*s, oid), other);

  // A stray file (no row) at an object path is set aside in quarantine/, never overwritten.
  std::string third = random_bytes(20'000, 14);
  digest tid = sha256_of(third);
  write_file(s->object_path(tid), "debris");
  const std::string staged3 = s->staging_dir() + "/" + tid.hex();
  write_file(staged3, third);
  auto adopted = s->adopt_staged(staged3, tid, object_kind::blob);
  ASSERT_TRUE(adopted) << adopted.error().to_string();
  EXPECT_EQ(*adopted, adopt_outcome::adopted);
  EXPECT_EQ(read_all(*s, tid), third);
  auto q = list_dir(dir.path() + "/quarantine");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].rfind(tid.hex() + ".stray.", 0), 0u) << q[0];
}

TEST(CacheWrite, IndexSurvivesReopenWithAccessHistory) {
  temp_dir dir;
  std::string a = random_bytes(1234, 11), b = random_bytes(4321, 12);
  {
    auto s = open_store(test_options(dir.path()));
    ASSERT_TRUE(put(*s, a, object_kind::manifest));
    ASSERT_TRUE(put(*s, b, object_kind::metainfo));
    ASSERT_TRUE(s->add_label(sha256_of(a), "image:library/nginx:1.25"));
    ASSERT_TRUE(s->add_label(sha256_of(a), "dataset:imagenet@v2"));
    ASSERT_TRUE(s->add_label(sha256_of(a), "dataset:imagenet@v2"));  // idempotent
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(s->open_read(sha256_of(a)));
    // 100 reads, no index write yet: updates are batched.
    EXPECT_EQ(s->get_stats().access_flushes, 0u);
    s->flush_access();
    EXPECT_EQ(s->get_stats().access_flushes, 1u);
    ASSERT_TRUE(s->open_read(sha256_of(b)));
    // Closing flushes the rest.
  }
  auto s = open_store(test_options(dir.path()));
  EXPECT_EQ(s->last_reconcile().rows_loaded, 2u);
  EXPECT_EQ(s->last_reconcile().rows_dropped, 0u);
  auto ia = s->stat(sha256_of(a));
  ASSERT_TRUE(ia);
  EXPECT_EQ(ia->kind, object_kind::manifest);
  EXPECT_EQ(ia->size, a.size());
  EXPECT_EQ(ia->hit_count, 100u);
  std::vector<std::string> labels = ia->labels;
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, (std::vector<std::string>{"dataset:imagenet@v2", "image:library/nginx:1.25"}));
  EXPECT_EQ(s->stat(sha256_of(b))->hit_count, 1u);
  EXPECT_EQ(s->stat(sha256_of(b))->kind, object_kind::metainfo);
  ASSERT_TRUE(s->remove_label(sha256_of(a), "dataset:imagenet@v2"));
  EXPECT_EQ(s->stat(sha256_of(a))->labels.size(), 1u);
  EXPECT_FALSE(s->add_label(sha256_of("absent"), "x"));
  EXPECT_FALSE(s->add_label(sha256_of(a), ""));
  EXPECT_EQ(read_all(*s, sha256_of(a)), a);
}

TEST(CacheWrite, ClosedStoreRefusesWrites) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(100, 13);
  auto t = s->begin_write(sha256_of(content), content.size(), object_kind::blob);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->writer->write(content));
  s->stop();
  auto r = t->writer->commit();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::cancelled));
  auto t2 = s->begin_write(sha256_of("x"), 1, object_kind::blob);
  ASSERT_FALSE(t2);
  EXPECT_TRUE(t2.error().is(errc::cancelled));
}

// A chunk cut in memory is named by hashing it; the cache takes that hash instead of hashing the
// same bytes again. The caller's hash is still what commit checks, and the call is refused
// where it could leave bytes unhashed (after other writes, at another size).
TEST(CacheWrite, WholeWriteWithTheCallersHash) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  ASSERT_TRUE(s);
  std::string content = random_bytes(3 << 20, 21);
  digest id = sha256_of(content);

  auto t = s->begin_write(id, content.size(), object_kind::blob);
  ASSERT_TRUE(t && t->role == write_role::writer);
  ASSERT_TRUE(t->writer->write_whole_hashed(content, id));
  auto info = t->writer->commit();
  ASSERT_TRUE(info) << info.error().to_string();
  EXPECT_EQ(read_all(*s, id), content);

  // A caller's hash that is not the id fails the commit as a mismatch, and nothing is kept.
  std::string other = random_bytes(4096, 22);
  digest other_id = sha256_of(other);
  auto bad = s->begin_write(other_id, other.size(), object_kind::blob);
  ASSERT_TRUE(bad && bad->role == write_role::writer);
  ASSERT_TRUE(bad->writer->write_whole_hashed(other, sha256_of(std::string_view("x"))));
  auto refused = bad->writer->commit();
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(errc::digest_mismatch)) << refused.error().to_string();
  EXPECT_FALSE(s->contains(other_id));

  // Not after a write (those bytes were hashed by the cache, the rest would not be), not at
  // another size than expected, not when the size is unknown.
  auto part = s->begin_write(other_id, other.size(), object_kind::blob);
  ASSERT_TRUE(part && part->role == write_role::writer);
  ASSERT_TRUE(part->writer->write(std::string_view(other).substr(0, 10)));
  auto after = part->writer->write_whole_hashed(other, other_id);
  ASSERT_FALSE(after);
  EXPECT_TRUE(after.error().is(errc::invalid_argument));
  part->writer->abort("test");
  auto sized = s->begin_write(other_id, other.size() + 1, object_kind::blob);
  ASSERT_TRUE(sized && sized->role == write_role::writer);
  auto wrong = sized->writer->write_whole_hashed(other, other_id);
  ASSERT_FALSE(wrong);
  EXPECT_TRUE(wrong.error().is(errc::size_mismatch));
  sized->writer->abort("test");
  auto unknown = s->begin_write(other_id, std::nullopt, object_kind::blob);
  ASSERT_TRUE(unknown && unknown->role == write_role::writer);
  EXPECT_FALSE(unknown->writer->write_whole_hashed(other, other_id));
  unknown->writer->abort("test");
  EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());
}

TEST(CacheWrite, WriterOutlivingTheStoreFailsCleanly) {
  temp_dir dir;
  std::unique_ptr<object_writer> w;
  {
    auto s = open_store(test_options(dir.path()));
    auto t = s->begin_write(sha256_of("abc"), 3, object_kind::blob);
    ASSERT_TRUE(t);
    w = std::move(t->writer);
  }
  EXPECT_FALSE(w->write("abc"));
  EXPECT_FALSE(w->commit());
}

TEST(CacheOpen, RejectsBadOptionsAndASecondOpener) {
  temp_dir dir;
  options o = test_options(dir.path());
  o.low_watermark = 0.9;
  auto bad = store::open(o);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(errc::config_error));
  EXPECT_NE(bad.error().message.find("low_watermark"), std::string::npos);
  EXPECT_FALSE(store::open(options{}));  // no root

  auto s = open_store(test_options(dir.path()));
  ASSERT_TRUE(s);
  auto second = store::open(test_options(dir.path()));
  ASSERT_FALSE(second);
  EXPECT_TRUE(second.error().is(errc::busy)) << second.error().to_string();

  // A root that is a file is a clear error.
  std::string file = dir.path() + "/plainfile";
  write_file(file, "x");
  auto f = store::open(test_options(file));
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find(file), std::string::npos);
}

TEST(CacheOpen, CapacityFromFilesystemShare) {
  temp_dir dir;
  options o = test_options(dir.path(), 0);
  o.fs_share = 0.5;
  auto s = open_store(o);
  ASSERT_TRUE(s);
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(dir.path().c_str(), &vfs), 0);
  double total = static_cast<double>(vfs.f_blocks) * static_cast<double>(vfs.f_frsize);
  EXPECT_NEAR(static_cast<double>(s->capacity_bytes()), total * 0.5, total * 0.001);
}

}  // namespace
}  // namespace shoal::cache
