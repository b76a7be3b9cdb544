#include "common/http_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>

#include <atomic>
#include <csignal>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "common/http_range.h"
#include "common/log.h"
#include "http_server_fixture.h"
#include "http_test_util.h"

namespace shoal::http {
namespace {

using namespace std::chrono_literals;
using shoal::testing::get_req;
using shoal::testing::raw_conn;

using shoal::testing::server_fixture;

response text_ok(std::string body) {
  auto r = response::text(200, std::move(body));
  r.rangeable = true;
  return r;
}

std::string pattern(std::size_t n, unsigned seed = 7) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

TEST(HttpRange, Forms) {
  auto r = parse_range("bytes=0-99", 1000);
  EXPECT_EQ(r.kind, range_kind::single);
  EXPECT_EQ(r.range.first, 0u);
  EXPECT_EQ(r.range.last, 99u);
  r = parse_range("bytes=900-", 1000);
  EXPECT_EQ(r.kind, range_kind::single);
  EXPECT_EQ(r.range.first, 900u);
  EXPECT_EQ(r.range.last, 999u);
  r = parse_range("bytes=-100", 1000);
  EXPECT_EQ(r.kind, range_kind::single);
  EXPECT_EQ(r.range.first, 900u);
  r = parse_range("bytes=-5000", 1000);  // suffix longer than the body: the whole body
  EXPECT_EQ(r.kind, range_kind::single);
  EXPECT_EQ(r.range.first, 0u);
  EXPECT_EQ(r.range.last, 999u);
  r = parse_range("bytes=500-99999", 1000);  // last clamped
  EXPECT_EQ(r.range.last, 999u);
  EXPECT_EQ(parse_range("bytes=1000-", 1000).kind, range_kind::unsatisfiable);
  EXPECT_EQ(parse_range("bytes=1000-2000", 1000).kind, range_kind::unsatisfiable);
  EXPECT_EQ(parse_range("bytes=-0", 1000).kind, range_kind::unsatisfiable);
  EXPECT_EQ(parse_range("bytes=0-", 0).kind, range_kind::unsatisfiable);
  EXPECT_EQ(parse_range("", 1000).kind, range_kind::none);
  EXPECT_EQ(parse_range("BYTES=0-1", 1000).kind, range_kind::single);
  EXPECT_EQ(parse_range(" bytes = 0 - 1 ", 1000).kind, range_kind::single);
  for (const char* bad :
       {"bytes=5-1", "bytes=abc", "bytes=", "bytes=-", "items=0-1", "bytes=0-1,5-x",
        "bytes=0-1,,junk", "bytes=--1", "bytes=+1-2", "bytes=1-+2",
        "bytes=99999999999999999999999-", "0-1", "bytes=1.5-2", "bytes=0x10-"}) {
    EXPECT_EQ(parse_range(bad, 1000).kind, range_kind::ignored) << bad;
  }
  // Sets: several ranges in the order asked; unsatisfiable ones left out; one left is single.
  r = parse_range("bytes=0-1, 5-6,-2", 1000);
  ASSERT_EQ(r.kind, range_kind::multi);
  ASSERT_EQ(r.ranges.size(), 3u);
  EXPECT_EQ(r.ranges[1].first, 5u);
  EXPECT_EQ(r.ranges[2].first, 998u);
  r = parse_range("bytes=900-949,5000-6000", 1000);
  EXPECT_EQ(r.kind, range_kind::single);
  EXPECT_EQ(r.range.first, 900u);
  EXPECT_EQ(parse_range("bytes=5000-,6000-7000", 1000).kind, range_kind::unsatisfiable);
  EXPECT_EQ(parse_range("bytes=0-1,,5-6,", 1000).kind, range_kind::multi);
  // At most 64 ranges; overlaps that repeat more bytes than the body has are not served.
  std::string many = "bytes=0-0";
  for (int i = 1; i < 64; ++i) many += "," + std::to_string(i * 10) + "-" + std::to_string(i * 10);
  EXPECT_EQ(parse_range(many, 1000).kind, range_kind::multi);
  EXPECT_EQ(parse_range(many + ",999-999", 1000).kind, range_kind::ignored);
  EXPECT_EQ(parse_range("bytes=0-599,400-999", 1000).kind, range_kind::ignored);
  EXPECT_EQ(parse_range("bytes=0-499,400-499", 1000).kind, range_kind::multi);
  EXPECT_EQ(content_range({0, 99}, 1000), "bytes 0-99/1000");
  EXPECT_EQ(unsatisfied_range(1000), "bytes */1000");
}

TEST(HttpRange, RandomInputNeverCrashes) {
  std::mt19937_64 rng(3);
  const std::string alpha = "bytes=-,0123456789 \t;x";
  for (int i = 0; i < 100000; ++i) {
    std::string s;
    for (std::size_t j = 0, n = rng() % 24; j < n; ++j) s += alpha[rng() % alpha.size()];
    std::uint64_t size = rng() % 3 == 0 ? 0 : rng() % 5000;
    auto r = parse_range(s, size);
    if (r.kind == range_kind::single) {
      EXPECT_LE(r.range.first, r.range.last);
      EXPECT_LT(r.range.last, size);
    }
    if (r.kind == range_kind::multi) {
      std::uint64_t total = 0;
      EXPECT_GE(r.ranges.size(), 2u);
      EXPECT_LE(r.ranges.size(), max_ranges);
      for (const auto& x : r.ranges) {
        EXPECT_LE(x.first, x.last);
        EXPECT_LT(x.last, size);
        total += x.length();
      }
      EXPECT_LE(total, size);
    }
  }
}

TEST(HttpServer, KeepAliveGetAndHead) {
  std::atomic<int> calls{0};
  server_fixture f([&](request&& req, responder resp) {
    ++calls;
    EXPECT_EQ(req.path, "/hello");
    EXPECT_EQ(req.query_param("ns").value_or(""), "docker.io");
    resp.send(text_ok("hello world"));
  });
  raw_conn c(f.port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send_all(get_req("/hello?ns=docker.io")));
  auto r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello world");
  EXPECT_EQ(r.header("accept-ranges"), "bytes");
  EXPECT_FALSE(r.header("date").empty());
  // Second request on the same connection.
  ASSERT_TRUE(c.send_all(get_req("/hello?ns=docker.io", "", "HEAD")));
  r = c.read_response(true);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-length"), "11");
  EXPECT_TRUE(r.body.empty());
  // And a third: the HEAD must not have left body bytes on the wire.
  ASSERT_TRUE(c.send_all(get_req("/hello?ns=docker.io")));
  r = c.read_response();
  EXPECT_EQ(r.body, "hello world");
  EXPECT_EQ(calls.load(), 3);
}

TEST(HttpServer, RangesOnStringBody) {
  const std::string body = pattern(1000);
  server_fixture f([&](request&&, responder resp) { resp.send(text_ok(body)); });
  raw_conn c(f.port());
  struct rc {
    std::string range;
    int status;
    std::string expect;
    std::string cr;
  };
  std::vector<rc> cases = {
      {"bytes=0-99", 206, body.substr(0, 100), "bytes 0-99/1000"},
      {"bytes=990-", 206, body.substr(990), "bytes 990-999/1000"},
      {"bytes=-10", 206, body.substr(990), "bytes 990-999/1000"},
      {"bytes=0-0", 206, body.substr(0, 1), "bytes 0-0/1000"},
      {"bytes=0-1,5000-", 206, body.substr(0, 2), "bytes 0-1/1000"},
      {"bytes=junk", 200, body, ""},
      {"bytes=1000-", 416, "", "bytes */1000"},
  };
  for (auto& k : cases) {
    ASSERT_TRUE(c.send_all(get_req("/x", "Range: " + k.range + "\r\n")));
    auto r = c.read_response();
    EXPECT_EQ(r.status, k.status) << k.range;
    if (k.status != 416) {
      EXPECT_EQ(r.body, k.expect) << k.range;
    }
    EXPECT_EQ(r.header("content-range"), k.cr) << k.range;
  }
}

class temp_file {
 public:
  explicit temp_file(const std::string& content) {
    char tmpl[] = "/tmp/shoal-http-test-XXXXXX";
    int fd = ::mkstemp(tmpl);
    path_ = tmpl;
    std::size_t off = 0;
    while (off < content.size()) {
      ssize_t n = ::write(fd, content.data() + off, content.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  ~temp_file() { std::filesystem::remove(path_); }
  std::shared_ptr<unique_fd> open() const {
    return std::make_shared<unique_fd>(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(HttpServer, FileBodyWithSendfileAndRange) {
  const std::string content = pattern(8 << 20, 11);
  temp_file tf(content);
  server_fixture f([&](request&&, responder resp) {
    response r;
    r.headers.set("Content-Type", "application/octet-stream");
    r.body = file_body{tf.open(), 0, content.size()};
    r.rangeable = true;
    resp.send(std::move(r));
  });
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/blob")));
  auto r = c.read_response(false, 20000ms);
  EXPECT_EQ(r.status, 200);
  ASSERT_TRUE(r.complete);
  EXPECT_TRUE(r.body == content);
  ASSERT_TRUE(c.send_all(get_req("/blob", "Range: bytes=1000000-2999999\r\n")));
  r = c.read_response(false, 20000ms);
  EXPECT_EQ(r.status, 206);
  EXPECT_TRUE(r.body == content.substr(1000000, 2000000));
  ASSERT_TRUE(f.wait_logs(2));
  EXPECT_EQ(f.logs[0].body_bytes_sent, content.size());
  EXPECT_FALSE(f.logs[0].aborted);
}

// A multipart/byteranges body (RFC 9110 §14.6): the parts in order, each with the body's type and
// its Content-Range; the boundary from the response's Content-Type. Empty on a malformed body.
std::vector<std::pair<std::string, std::string>> split_multipart(const std::string& body,
                                                                 const std::string& type) {
  std::vector<std::pair<std::string, std::string>> out;
  auto b = type.find("boundary=");
  if (type.rfind("multipart/byteranges;", 0) != 0 || b == std::string::npos) return {};
  const std::string delim = "--" + type.substr(b + 9);
  std::size_t pos = 0;
  for (;;) {
    if (body.compare(pos, delim.size(), delim) != 0) return {};
    pos += delim.size();
    if (body.compare(pos, 4, "--\r\n") == 0 && pos + 4 == body.size()) return out;
    auto end = body.find("\r\n\r\n", pos);
    if (end == std::string::npos) return {};
    std::string head = body.substr(pos, end - pos);
    auto cr = head.find("Content-Range: bytes ");
    if (cr == std::string::npos || head.find("Content-Type: text/plain") == std::string::npos)
      return {};
    std::string range = head.substr(cr + 21, head.find('/', cr) - cr - 21);
    auto dash = range.find('-');
    std::uint64_t first = std::stoull(range.substr(0, dash)),
                  last = std::stoull(range.substr(dash + 1));
    pos = end + 4;
    out.emplace_back(range, body.substr(pos, last - first + 1));
    pos += last - first + 1;
    if (body.compare(pos, 2, "\r\n") != 0) return {};
    pos += 2;
  }
}

TEST(HttpServer, SeveralRangesAreAMultipartBody) {
  const std::string content = pattern(3 << 20, 13);
  temp_file tf(content);
  server_fixture f([&](request&& req, responder resp) {
    if (req.path == "/string") return resp.send(text_ok(content.substr(0, 1000)));
    response r;
    r.headers.set("Content-Type", "text/plain");
    r.body = file_body{tf.open(), 0, content.size()};
    r.rangeable = true;
    resp.send(std::move(r));
  });
  raw_conn c(f.port());
  // Out of order, a suffix, one unsatisfiable range left out; sendfile for each part.
  ASSERT_TRUE(c.send_all(get_req("/blob", "Range: bytes=2000000-2999999,0-9,-5,99999999-\r\n")));
  auto r = c.read_response(false, 20000ms);
  ASSERT_EQ(r.status, 206);
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.header("content-range"), "");
  EXPECT_EQ(r.header("content-length"), std::to_string(r.body.size()));
  auto parts = split_multipart(r.body, r.header("content-type"));
  ASSERT_EQ(parts.size(), 3u) << r.header("content-type");
  const std::uint64_t first_body = r.body.size();
  EXPECT_EQ(parts[0].first, "2000000-2999999");
  EXPECT_TRUE(parts[0].second == content.substr(2000000, 1000000));
  EXPECT_EQ(parts[1], (std::pair<std::string, std::string>{"0-9", content.substr(0, 10)}));
  EXPECT_EQ(parts[2].second, content.substr(content.size() - 5));
  // The connection stays usable, and a string body is cut the same way.
  ASSERT_TRUE(c.send_all(get_req("/string", "Range: bytes=0-1,10-19\r\n")));
  r = c.read_response();
  ASSERT_EQ(r.status, 206);
  parts = split_multipart(r.body, r.header("content-type"));
  ASSERT_EQ(parts.size(), 2u) << r.body;
  EXPECT_EQ(parts[1].second, content.substr(10, 10));
  // 65 ranges, or overlaps: the whole body.
  std::string many = "bytes=0-0";
  for (int i = 1; i < 65; ++i) many += "," + std::to_string(i * 10) + "-" + std::to_string(i * 10);
  ASSERT_TRUE(c.send_all(get_req("/string", "Range: " + many + "\r\n")));
  r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, content.substr(0, 1000));
  ASSERT_TRUE(f.wait_logs(3));
  EXPECT_EQ(f.logs[0].body_bytes_sent, first_body);
  EXPECT_FALSE(f.logs[0].aborted);
}

TEST(HttpServer, FileShorterThanAnnouncedAbortsConnection) {
  const std::string content = pattern(100000, 12);
  temp_file tf(content);
  server_fixture f([&](request&&, responder resp) {
    response r;
    r.body = file_body{tf.open(), 0, content.size() + 5000};  // lies about the length
    resp.send(std::move(r));
  });
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/blob")));
  auto r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete);
  EXPECT_TRUE(r.closed);
  ASSERT_TRUE(f.wait_logs(1));
  EXPECT_TRUE(f.logs[0].aborted);
}

// A producer whose bytes appear over time, as a cache object still being written does.
struct growing_object {
  std::mutex mu;
  std::condition_variable cv;
  std::string data;
  bool finished = false;
  bool failed = false;

  void append(const std::string& s) {
    {
      std::lock_guard lk(mu);
      data += s;
    }
    cv.notify_all();
  }
  void finish(bool ok) {
    {
      std::lock_guard lk(mu);
      finished = true;
      failed = !ok;
    }
    cv.notify_all();
  }
};

class growing_source final : public body_source {
 public:
  growing_source(std::shared_ptr<growing_object> o, std::uint64_t off, std::uint64_t len,
                 std::optional<std::chrono::milliseconds> limit = std::nullopt)
      : obj_(std::move(o)),
        off_(off),
        end_(len == UINT64_MAX ? UINT64_MAX : off + len),
        limit_(limit) {}
  [[nodiscard]] std::optional<std::chrono::milliseconds> wait_limit() const override {
    return limit_;
  }
  ~growing_source() override {
    // A wrapping source (a multipart answer) may drop this one from inside its callback, which
    // runs on waiter_ itself.
    if (!waiter_.joinable()) return;
    if (waiter_.get_id() == std::this_thread::get_id())
      waiter_.detach();
    else
      waiter_.join();
  }
  void next(std::size_t max, std::function<void(result<chunk>)> done) override {
    if (waiter_.joinable()) waiter_.join();
    // Wait on a helper thread, as a real producer signals from its own thread.
    waiter_ = std::thread([this, max, done = std::move(done)] {
      std::unique_lock lk(obj_->mu);
      bool ok = obj_->cv.wait_for(lk, 10s, [&] {
        return cancelled_ || obj_->failed || obj_->data.size() > off_ || obj_->finished;
      });
      if (cancelled_) return done(fail(errc::cancelled, "cancelled"));
      if (!ok) return done(fail(errc::timeout, "producer stalled"));
      if (obj_->failed) return done(fail(errc::digest_mismatch, "producer failed"));
      if (off_ >= obj_->data.size() || off_ >= end_) return done(chunk::end());
      std::size_t n = static_cast<std::size_t>(
          std::min<std::uint64_t>({max, obj_->data.size() - off_, end_ - off_}));
      std::string piece = obj_->data.substr(static_cast<std::size_t>(off_), n);
      off_ += n;
      lk.unlock();
      done(chunk::bytes(std::move(piece)));
    });
  }
  void cancel() override {
    {
      std::lock_guard lk(obj_->mu);
      cancelled_ = true;
    }
    obj_->cv.notify_all();
  }

 private:
  std::shared_ptr<growing_object> obj_;
  std::uint64_t off_, end_;
  std::optional<std::chrono::milliseconds> limit_;
  bool cancelled_ = false;
  std::thread waiter_;
};

TEST(HttpServer, StreamsBytesBeforeTheProducerFinishes) {
  auto obj = std::make_shared<growing_object>();
  const std::string full = pattern(300000, 5);
  server_fixture f([&](request&&, responder resp) {
    response r;
    r.rangeable = true;
    r.body = stream_body{full.size(), [obj](std::uint64_t off, std::uint64_t len) {
                           return std::make_unique<growing_source>(obj, off, len);
                         }};
    resp.send(std::move(r));
  });
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/inflight")));
  obj->append(full.substr(0, 1000));
  // The client sees the header and the first bytes while the rest does not exist yet.
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got.find("\r\n\r\n") == std::string::npos ||
         got.size() - got.find("\r\n\r\n") - 4 < 1000) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "first bytes did not arrive";
    got += c.read_some(65536, 1000ms);
  }
  EXPECT_NE(got.find("Content-Length: 300000"), std::string::npos);
  obj->append(full.substr(1000, 150000));
  obj->append(full.substr(151000));
  obj->finish(true);
  while (got.size() - got.find("\r\n\r\n") - 4 < full.size()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline + 5s);
    std::string s = c.read_some(65536, 1000ms);
    got += s;
  }
  EXPECT_EQ(got.substr(got.find("\r\n\r\n") + 4), full);
  // Range on the stream body.
  ASSERT_TRUE(c.send_all(get_req("/inflight", "Range: bytes=299990-\r\n")));
  auto r = c.read_response();
  EXPECT_EQ(r.status, 206);
  EXPECT_EQ(r.body, full.substr(299990));
}

// A producer silent for longer than source_timeout aborts the response, unless the source says it
// may wait longer (peerd's stream of a running download, whose next piece can be late while the
// download runs and bounds itself): then the body completes.
TEST(HttpServer, SourceSilentPastSourceTimeoutAbortsUnlessItMayWaitLonger) {
  const std::string full = pattern(5000, 8);
  auto patient = std::make_shared<growing_object>();
  auto plain = std::make_shared<growing_object>();
  server_options o;
  o.source_timeout = 300ms;
  server_fixture f(
      [&](request&& req, responder resp) {
        const bool wait = req.target == "/patient";
        response r;
        r.body =
            stream_body{full.size(), [&, wait](std::uint64_t off, std::uint64_t len) {
                          return std::make_unique<growing_source>(
                              wait ? patient : plain, off, len,
                              wait ? std::optional(std::chrono::milliseconds(5000)) : std::nullopt);
                        }};
        resp.send(std::move(r));
      },
      o);
  patient->append(full.substr(0, 1000));
  plain->append(full.substr(0, 1000));
  raw_conn a(f.port()), b(f.port());
  ASSERT_TRUE(a.send_all(get_req("/patient")));
  ASSERT_TRUE(b.send_all(get_req("/plain")));
  std::this_thread::sleep_for(1000ms);  // both producers silent for > 3 × source_timeout
  patient->append(full.substr(1000));
  patient->finish(true);
  plain->append(full.substr(1000));
  plain->finish(true);
  auto r = a.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, full) << "a source allowed to wait longer was cut off";
  ASSERT_TRUE(f.wait_logs(2, 5000ms));
  std::lock_guard lk(f.mu);
  int aborted = 0;
  for (const auto& l : f.logs) aborted += l.aborted ? 1 : 0;
  EXPECT_EQ(aborted, 1) << "the plain source was not cut off after source_timeout";
}

// Several ranges of a body still arriving: one multipart/byteranges answer whose first part goes
// out as soon as its bytes exist, before the producer has the later part's bytes.
TEST(HttpServer, SeveralRangesOfAStreamedBodyAreMultipartAsBytesArrive) {
  auto obj = std::make_shared<growing_object>();
  const std::string full = pattern(300000, 6);
  server_fixture f([&](request&&, responder resp) {
    response r;
    r.rangeable = true;
    r.headers.set("Content-Type", "text/plain");
    r.body = stream_body{full.size(), [obj](std::uint64_t off, std::uint64_t len) {
                           return std::make_unique<growing_source>(obj, off, len);
                         }};
    resp.send(std::move(r));
  });
  obj->append(full.substr(0, 1000));
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/inflight", "Range: bytes=10-19,250000-250099,299990-\r\n")));
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  const std::string first_part = full.substr(10, 10);
  while (got.find(first_part) == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "the first part did not arrive: " << got;
    got += c.read_some(65536, 1000ms);
  }
  EXPECT_NE(got.find("206"), std::string::npos);
  EXPECT_EQ(got.find(full.substr(250000, 100)), std::string::npos);
  obj->append(full.substr(1000));
  obj->finish(true);
  while (true) {
    auto head_end = got.find("\r\n\r\n");
    auto cl = got.find("Content-Length: ");
    if (head_end != std::string::npos && cl != std::string::npos &&
        got.size() - head_end - 4 >= std::stoull(got.substr(cl + 16)))
      break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline + 5s) << "body incomplete";
    got += c.read_some(65536, 1000ms);
  }
  auto head_end = got.find("\r\n\r\n");
  auto ct = got.find("Content-Type: ");
  ASSERT_NE(ct, std::string::npos);
  std::string type = got.substr(ct + 14, got.find("\r\n", ct) - ct - 14);
  auto parts = split_multipart(got.substr(head_end + 4), type);
  ASSERT_EQ(parts.size(), 3u) << type;
  EXPECT_EQ(parts[0], (std::pair<std::string, std::string>{"10-19", first_part}));
  EXPECT_EQ(parts[1],
            (std::pair<std::string, std::string>{"250000-250099", full.substr(250000, 100)}));
  EXPECT_EQ(parts[2], (std::pair<std::string, std::string>{"299990-299999", full.substr(299990)}));
  ASSERT_TRUE(f.wait_logs(1));
  EXPECT_FALSE(f.logs[0].aborted);
}

TEST(HttpServer, ProducerFailureMidStreamClosesWithoutCompleteBody) {
  auto obj = std::make_shared<growing_object>();
  server_fixture f([&](request&&, responder resp) {
    response r;
    r.body = stream_body{100000, [obj](std::uint64_t off, std::uint64_t len) {
                           return std::make_unique<growing_source>(obj, off, len);
                         }};
    resp.send(std::move(r));
  });
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/bad")));
  obj->append(pattern(50000));
  std::this_thread::sleep_for(50ms);
  obj->finish(false);
  auto r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete);
  EXPECT_TRUE(r.closed);
  EXPECT_LE(r.body.size(), 50000u);
  ASSERT_TRUE(f.wait_logs(1));
  EXPECT_TRUE(f.logs[0].aborted);
  EXPECT_NE(f.logs[0].error.find("producer failed"), std::string::npos);
}

TEST(HttpServer, ChunkedWhenLengthUnknown) {
  auto obj = std::make_shared<growing_object>();
  const std::string full = pattern(70000, 9);
  obj->append(full);
  obj->finish(true);
  server_fixture f([&](request&&, responder resp) {
    response r;
    r.body = stream_body{std::nullopt, [obj](std::uint64_t off, std::uint64_t len) {
                           return std::make_unique<growing_source>(obj, off, len);
                         }};
    resp.send(std::move(r));
  });
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/chunked")));
  auto r = c.read_response();
  EXPECT_EQ(r.header("transfer-encoding"), "chunked");
  EXPECT_TRUE(r.complete);
  EXPECT_TRUE(r.body == full) << r.body.size() << " bytes";
}

TEST(HttpServer, HugeRequestLineGets431) {
  server_fixture f([&](request&&, responder resp) { resp.send(text_ok("x")); });
  raw_conn c(f.port());
  std::string target = "/" + std::string(1 << 20, 'a');
  c.send_all(get_req(target));
  auto r = c.read_response();
  EXPECT_EQ(r.status, 431);
  EXPECT_TRUE(c.wait_closed(2000ms));
}

TEST(HttpServer, BodyLimitGets413) {
  server_options o;
  o.max_body_bytes = 1000;
  server_fixture f([&](request&&, responder resp) { resp.send(text_ok("x")); }, o);
  raw_conn c(f.port());
  c.send_all("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n" +
             std::string(5000, 'b'));
  auto r = c.read_response();
  EXPECT_EQ(r.status, 413);
}

// A small answer's header and body are two writes: with Nagle on the server's socket the body
// waits for the client's ACK of the header, which a client with nothing to send delays up to
// 40 ms (every heartbeat took 44 ms through the scheduler on an idle machine). The server sets
// TCP_NODELAY: 40 requests on one keep-alive connection take far less than 40 x 40 ms.
TEST(HttpServer, SmallAnswersOnAKeptConnectionDoNotWaitForDelayedAcks) {
  server_fixture f([&](request&&, responder resp) { resp.send(text_ok("{\"resync\":false}")); });
  raw_conn c(f.port());
  ASSERT_TRUE(c.connected());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(c.send_all(get_req("/v1/heartbeat")));
    auto r = c.read_response();
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.body, "{\"resync\":false}");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 800ms);
}

TEST(HttpServer, GarbageGets400AndServerKeepsServing) {
  server_fixture f([&](request&&, responder resp) { resp.send(text_ok("fine")); });
  std::mt19937 rng(99);
  for (int i = 0; i < 200; ++i) {
    raw_conn c(f.port());
    std::string junk;
    for (int j = 0, n = 1 + static_cast<int>(rng() % 300); j < n; ++j)
      junk += static_cast<char>(rng());
    if (i % 3 == 0) junk = "GET / HTTP/1.1\r\n" + junk + "\r\n\r\n";
    c.send_all(junk + "\r\n\r\n");
    auto r = c.read_response(false, 2000ms);
    if (r.status != 0) {
      EXPECT_TRUE(r.status == 400 || r.status == 200 || r.status == 431 || r.status == 413)
          << r.status;
    }
  }
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/ok")));
  EXPECT_EQ(c.read_response().body, "fine");
}

TEST(HttpServer, IdleConnectionIsClosed) {
  server_options o;
  o.idle_timeout = 200ms;
  server_fixture f([&](request&&, responder resp) { resp.send(text_ok("x")); }, o);
  raw_conn c(f.port());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.wait_closed(3000ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2000ms);
}

TEST(HttpServer, ClientThatStopsReadingIsDroppedAfterWriteTimeout) {
  const std::string content = pattern(32 << 20, 2);
  temp_file tf(content);
  server_options o;
  o.write_timeout = 300ms;
  server_fixture f(
      [&](request&&, responder resp) {
        response r;
        r.body = file_body{tf.open(), 0, content.size()};
        resp.send(std::move(r));
      },
      o);
  raw_conn c(f.port(), 4096);
  ASSERT_TRUE(c.send_all(get_req("/big")));
  // Never read. The server must give up instead of holding the connection forever.
  ASSERT_TRUE(f.wait_logs(1, 5000ms));
  EXPECT_TRUE(f.logs[0].aborted);
  EXPECT_LT(f.logs[0].body_bytes_sent, content.size());
}

// A body of unknown length made of regions of one file, as registry-proxy's in-flight source.
class file_chunks_source final : public body_source {
 public:
  file_chunks_source(std::shared_ptr<unique_fd> fd, std::uint64_t size, std::uint64_t piece)
      : fd_(std::move(fd)), size_(size), piece_(piece) {}
  void next(std::size_t, std::function<void(result<chunk>)> done) override {
    if (off_ >= size_) return done(chunk::end());
    const std::uint64_t n = std::min(piece_, size_ - off_);
    auto c = chunk::file_region(fd_->get(), off_, n);
    off_ += n;
    done(std::move(c));
  }

 private:
  std::shared_ptr<unique_fd> fd_;
  std::uint64_t size_, piece_, off_ = 0;
};

// write_timeout is for a client that takes no bytes, not for a whole body: a 16 MiB answer to a
// client reading steadily but slower than 16 MiB per write_timeout used to be cut off (one
// deadline for the whole write), as was a chunked stream of file chunks after its first
// write_timeout (a chunk-size line written under a deadline long past).
TEST(HttpServer, AClientReadingSteadilyIsNeverCutOffByWriteTimeout) {
  const std::string content = pattern(16 << 20, 3);
  temp_file tf(content);
  server_options o;
  o.write_timeout = 1000ms;
  server_fixture f(
      [&](request&& req, responder resp) {
        if (req.path == "/string") return resp.send(text_ok(content));
        response r;  // unknown length: chunked, every chunk a region of the file
        auto fd = tf.open();
        r.body =
            stream_body{std::nullopt, [fd, &content](std::uint64_t, std::uint64_t) {
                          return std::unique_ptr<body_source>(
                              std::make_unique<file_chunks_source>(fd, content.size(), 512u << 10));
                        }};
        resp.send(std::move(r));
      },
      o);
  for (const char* path : {"/string", "/chunked"}) {
    SCOPED_TRACE(path);
    const std::size_t logs_before = f.logs.size();
    raw_conn c(f.port(), 64 << 10);
    ASSERT_TRUE(c.send_all(get_req(path)));
    std::size_t got = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      auto part = c.read_some(128 << 10, 3000ms);  // at most 12.8 MB/s: 16 MiB take > 1.3 s
      if (part.empty()) break;
      got += part.size();
      if (got >= content.size()) {
        // The rest (the last chunk's end) is small; read it without pausing.
        while (!c.read_some(1 << 20, 300ms).empty()) {
        }
        break;
      }
      // Steady, and fast enough to drain half the server's send buffer within write_timeout:
      // Linux wakes a blocked writer only then, so a much slower reader looks like one that
      // stopped.
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_GT(std::chrono::steady_clock::now() - t0, 1100ms) << "the reader was not slow enough";
    ASSERT_TRUE(f.wait_logs(logs_before + 1, 5000ms));
    const auto& log = f.logs[logs_before];
    EXPECT_FALSE(log.aborted) << log.error;
    EXPECT_EQ(log.body_bytes_sent, content.size());
  }
}

TEST(HttpServer, HandlerThatForgetsToAnswerGives500) {
  server_fixture f([&](request&&, responder) { /* drops the responder */ });
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/forgot")));
  EXPECT_EQ(c.read_response().status, 500);
}

TEST(HttpServer, HandlerThatThrowsGives500) {
  server_fixture f([&](request&&, responder) { throw std::runtime_error("boom"); });
  raw_conn c(f.port());
  ASSERT_TRUE(c.send_all(get_req("/throw")));
  EXPECT_EQ(c.read_response().status, 500);
  ASSERT_TRUE(c.send_all(get_req("/throw")));
  EXPECT_EQ(c.read_response().status, 500);
}

TEST(HttpServer, AsyncAnswerFromAnotherThread) {
  std::vector<std::thread> workers;
  std::mutex wm;
  server_fixture f([&](request&& req, responder resp) {
    std::lock_guard lk(wm);
    workers.emplace_back([resp, p = req.path] {
      std::this_thread::sleep_for(20ms);
      resp.send(text_ok("async " + p));
      resp.send(text_ok("second answer ignored"));
    });
  });
  raw_conn c(f.port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send_all(get_req("/a" + std::to_string(i))));
    EXPECT_EQ(c.read_response().body, "async /a" + std::to_string(i));
  }
  for (auto& t : workers) t.join();
}

TEST(HttpServer, GracefulStopFinishesActiveAndClosesIdle) {
  std::atomic<bool> release{false};
  std::thread worker;
  server_fixture f([&](request&& req, responder resp) {
    if (req.path == "/slow") {
      worker = std::thread([resp, &release] {
        for (int i = 0; i < 300 && !release; ++i) std::this_thread::sleep_for(10ms);
        resp.send(text_ok("done"));
      });
    } else {
      resp.send(text_ok("quick"));
    }
  });
  raw_conn idle(f.port());
  raw_conn active(f.port());
  ASSERT_TRUE(idle.send_all(get_req("/q")));
  EXPECT_EQ(idle.read_response().body, "quick");
  ASSERT_TRUE(active.send_all(get_req("/slow")));
  std::this_thread::sleep_for(50ms);
  f.srv->stop(3000ms);
  EXPECT_TRUE(idle.wait_closed(2000ms));
  release = true;
  auto r = active.read_response();
  EXPECT_EQ(r.body, "done");
  EXPECT_EQ(r.header("connection"), "close");
  worker.join();
  // No new connections are accepted.
  raw_conn late(f.port());
  if (late.connected()) {
    late.send_all(get_req("/q"));
    EXPECT_EQ(late.read_response(false, 1000ms).status, 0);
  }
}

TEST(HttpServer, ManyConcurrentClients) {
  server_fixture f([&](request&& req, responder resp) { resp.send(text_ok(req.path)); });
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 32; ++i) {
    ts.emplace_back([&, i] {
      raw_conn c(f.port());
      for (int j = 0; j < 20; ++j) {
        std::string p = "/c" + std::to_string(i) + "/" + std::to_string(j);
        if (!c.send_all(get_req(p))) return;
        if (c.read_response().body == p) ++ok;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 32 * 20);
}

TEST(HttpServer, SplitHostPort) {
  auto a = split_host_port("127.0.0.1:8080");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 8080);
  auto b = split_host_port("[::1]:9");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->first, "::1");
  EXPECT_EQ(split_host_port(":5000")->first, "0.0.0.0");
  for (const char* bad : {"nohost", "1.2.3.4:", "1.2.3.4:70000", "1.2.3.4:x1", "[::1]9", "[::1"}) {
    EXPECT_FALSE(split_host_port(bad)) << bad;
  }
  EXPECT_EQ(percent_decode("a%2Fb+c").value(), "a/b c");
  EXPECT_FALSE(percent_decode("%zz"));
  EXPECT_FALSE(percent_decode("%2"));
  EXPECT_FALSE(percent_decode("%"));
}

// sendfile(2) to a socket whose client left raises SIGPIPE, which would kill the daemon: once a
// server exists, SIGPIPE is ignored (writes see EPIPE instead).
TEST(HttpServer, IgnoresSigpipeSoALeavingClientCannotKillTheProcess) {
  boost::asio::io_context ioc;
  server srv(ioc, server_options{}, [](request&&, responder r) { r.send(text_ok("")); });
  struct sigaction sa {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &sa), 0);
  EXPECT_EQ(sa.sa_handler, SIG_IGN);
}

}  // namespace
}  // namespace shoal::http
