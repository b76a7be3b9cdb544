#include "common/http_client.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "http_client_test_util.h"
#include "support/test_http_server.h"
#include "support/test_tls.h"

namespace shoal::http {
namespace {

using namespace std::chrono_literals;
using namespace shoal::http::client_test;
using shoal::testing::recorded_request;
using shoal::testing::reply;
using shoal::testing::test_http_server;
using shoal::testing::test_tls_identity;
using steady = std::chrono::steady_clock;

TEST(HttpClient, StreamsBodyInSeveralChunksBeforeCompletion) {
  const std::string body = random_bytes(40'000, 1);
  test_http_server srv([&](const recorded_request&) {
    reply r;
    r.body = body;
    r.chunk_size = 10'000;
    r.chunk_delay = 40ms;
    return r;
  });
  client c;
  collector col;
  c.submit(get(srv.url("/blob")), col.make());
  ASSERT_TRUE(col.wait());
  ASSERT_TRUE(col.done->has_value()) << col.done->error().to_string();
  EXPECT_EQ(col.body, body);
  EXPECT_GE(col.chunks, 3);  // the pieces arrived 40 ms apart, so they cannot all be one chunk
  EXPECT_TRUE(col.chunk_before_complete);
  EXPECT_EQ(col.completions, 1);
  ASSERT_EQ(col.heads.size(), 1u);
  EXPECT_EQ(col.heads[0].status, 200);
  EXPECT_EQ(col.heads[0].header("content-length"), "40000");
  const completion& done = **col.done;
  EXPECT_EQ(done.status, 200);
  EXPECT_EQ(done.bytes, body.size());
  EXPECT_EQ(done.attempts, 1);
  EXPECT_EQ(done.url, srv.url("/blob"));
  EXPECT_GE(done.elapsed, 100ms);
}

TEST(HttpClient, ReusesKeepAliveConnection) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    r.body = "hello " + req.target;
    return r;
  });
  client c;
  for (int i = 0; i < 5; ++i) {
    auto r = fetch(c, get(srv.url("/k" + std::to_string(i))));
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello /k" + std::to_string(i));
  }
  EXPECT_EQ(srv.connections(), 1);
  for (const auto& req : srv.requests()) EXPECT_EQ(req.connection, 1);
}

TEST(HttpClient, ConnectRefusedFailsFastWithCause) {
  const std::uint16_t port = closed_port();
  client c;
  client_request r = get("http://127.0.0.1:" + std::to_string(port) + "/v2/");
  r.max_retries = 0;
  auto start = steady::now();
  auto res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_LT(steady::now() - start, 2s);
  EXPECT_TRUE(res.error().is(errc::unavailable)) << res.error().to_string();
  const std::string& msg = res.error().message;
  EXPECT_NE(msg.find("connect to 127.0.0.1:" + std::to_string(port) + ": Connection refused"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("curl:"), std::string::npos) << msg;  // curl's own text is kept

  // With retries, the same failure is retried with backoff and says how many attempts it took.
  r.max_retries = 2;
  start = steady::now();
  res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_NE(res.error().message.find("after 3 attempts"), std::string::npos) << res.error().message;
  // Two backoffs of at least base/2 and (2*base)/2: 50 + 100 ms.
  EXPECT_GE(steady::now() - start, 150ms);
  EXPECT_LT(steady::now() - start, 3s);
}

// A loopback listener that never accepts, with its accept queue filled: further SYNs are
// dropped, so a connect hangs until the client's connect timeout.
struct black_hole {
  int listen_fd = -1;
  std::vector<int> fillers;
  std::uint16_t port = 0;
  black_hole() {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    ::listen(listen_fd, 0);
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
    for (int i = 0; i < 4; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
      fillers.push_back(fd);
    }
    std::this_thread::sleep_for(50ms);
  }
  ~black_hole() {
    for (int fd : fillers) ::close(fd);
    ::close(listen_fd);
  }
};

TEST(HttpClient, ConnectTimeoutGovernsBeforeTheStallTimer) {
  black_hole hole;
  client c;
  client_request r = get("http://127.0.0.1:" + std::to_string(hole.port) + "/");
  r.timeouts.connect = 400ms;
  r.timeouts.stall = 100ms;  // must not fire while connecting
  r.max_retries = 0;
  auto start = steady::now();
  auto res = fetch(c, r);
  auto took = steady::now() - start;
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::timeout)) << res.error().to_string();
  EXPECT_NE(res.error().message.find("connect to 127.0.0.1:" + std::to_string(hole.port)),
            std::string::npos)
      << res.error().message;
  EXPECT_GE(took, 380ms);
  EXPECT_LT(took, 2s);
}

TEST(HttpClient, ServerThatNeverAnswersHitsStallTimeout) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.no_response = true;
    return r;
  });
  client c;
  client_request r = get(srv.url("/hang"));
  r.timeouts.stall = 300ms;
  r.max_retries = 0;
  auto start = steady::now();
  auto res = fetch(c, r);
  auto took = steady::now() - start;
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::timeout)) << res.error().to_string();
  EXPECT_NE(res.error().message.find("stalled: no bytes for 300ms"), std::string::npos)
      << res.error().message;
  EXPECT_GE(took, 280ms);
  EXPECT_LT(took, 1500ms);
}

TEST(HttpClient, StallIsRetriedForGet) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.index == 0) r.no_response = true;
    r.body = "late but fine";
    return r;
  });
  client c;
  client_request r = get(srv.url("/x"));
  r.timeouts.stall = 200ms;
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->body, "late but fine");
  EXPECT_EQ(res->info.attempts, 2);
  EXPECT_EQ(srv.request_count(), 2u);
}

TEST(HttpClient, StallOnReusedConnectionIsDetected) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.index == 1) r.no_response = true;
    r.body = "first";
    return r;
  });
  client c;
  ASSERT_TRUE(fetch(c, get(srv.url("/1"))).has_value());
  client_request r = get(srv.url("/2"));
  r.timeouts.stall = 300ms;
  r.max_retries = 0;
  auto start = steady::now();
  auto res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::timeout)) << res.error().to_string();
  EXPECT_LT(steady::now() - start, 1500ms);
  ASSERT_EQ(srv.request_count(), 2u);
  EXPECT_EQ(srv.requests()[1].connection, 1);  // it really was the reused connection
}

TEST(HttpClient, BodyThatStallsMidwayFailsWithoutRetryOrDuplicates) {
  const std::string body = random_bytes(5000, 2);
  test_http_server srv([&](const recorded_request&) {
    reply r;
    r.body = body;
    r.stall_after = 1000;
    return r;
  });
  client c;
  collector col;
  client_request r = get(srv.url("/mid"));
  r.timeouts.stall = 300ms;
  auto start = steady::now();
  c.submit(r, col.make());
  ASSERT_TRUE(col.wait());
  EXPECT_LT(steady::now() - start, 1500ms);
  ASSERT_FALSE(col.done->has_value());
  EXPECT_TRUE(col.done->error().is(errc::timeout)) << col.done->error().to_string();
  EXPECT_EQ(col.body, body.substr(0, 1000));
  // Body bytes were delivered and resume is off: no second request.
  EXPECT_EQ(srv.request_count(), 1u);
}

TEST(HttpClient, RetriesOn503WithBackoffThenSucceeds) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.index < 2) {
      r.status = 503;
      r.body = "busy";
    } else {
      r.body = "finally";
    }
    return r;
  });
  client c;
  collector col;
  c.submit(get(srv.url("/m")), col.make());
  ASSERT_TRUE(col.wait());
  ASSERT_TRUE(col.done->has_value()) << col.done->error().to_string();
  EXPECT_EQ((*col.done)->status, 200);
  EXPECT_EQ((*col.done)->attempts, 3);
  EXPECT_EQ(col.body, "finally");   // the 503 bodies never reached on_data
  ASSERT_EQ(col.heads.size(), 1u);  // nor did their heads
  EXPECT_EQ(col.heads[0].attempt, 3);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 3u);
  // Backoff n is uniform in [d/2, d] with d = 100 ms * 2^n.
  EXPECT_GE(ms_between(reqs[0].at, reqs[1].at), 45);
  EXPECT_GE(ms_between(reqs[1].at, reqs[2].at), 95);
  EXPECT_LT(ms_between(reqs[0].at, reqs[2].at), 1500);
}

TEST(HttpClient, RetriesExhaustedDeliverTheLastAnswer) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.status = 502;
    r.body = "bad gateway";
    return r;
  });
  client c;
  client_request r = get(srv.url("/x"));
  r.max_retries = 1;
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->status, 502);
  EXPECT_EQ(res->body, "bad gateway");
  EXPECT_EQ(res->info.attempts, 2);
  EXPECT_EQ(srv.request_count(), 2u);
}

TEST(HttpClient, NoRetryForPost) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.status = 503;
    r.body = "busy";
    return r;
  });
  client c;
  client_request r = get(srv.url("/upload"));
  r.method = "POST";
  r.body = "payload";
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->info.attempts, 1);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].body, "payload");

  // A connection failure is not retried for POST either.
  client_request refused = get("http://127.0.0.1:" + std::to_string(closed_port()) + "/");
  refused.method = "POST";
  auto res2 = fetch(c, refused);
  ASSERT_FALSE(res2.has_value());
  EXPECT_EQ(res2.error().message.find("attempts"), std::string::npos) << res2.error().message;
}

TEST(HttpClient, Honours429RetryAfter) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.index == 0) {
      r.status = 429;
      r.headers.emplace_back("Retry-After", "1");
    } else {
      r.body = "ok";
    }
    return r;
  });
  client c;
  auto res = fetch(c, get(srv.url("/limited")));
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->info.attempts, 2);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_GE(ms_between(reqs[0].at, reqs[1].at), 950);
  EXPECT_LT(ms_between(reqs[0].at, reqs[1].at), 3000);
}

TEST(HttpClient, RetryAfterIsCapped) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.index == 0) {
      r.status = 503;
      r.headers.emplace_back("Retry-After", "3600");
    }
    return r;
  });
  client_options o;
  o.max_retry_after = 200ms;
  client c(o);
  auto res = fetch(c, get(srv.url("/")));
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_GE(ms_between(reqs[0].at, reqs[1].at), 190);
  EXPECT_LT(ms_between(reqs[0].at, reqs[1].at), 2000);
}

// Obsolete line folding continues the header just read. The headers are kept sorted by name, and
// the continuation used to go to the last of them ("X-Z: 1 b" instead of "Location: /a b").
TEST(HttpClient, AFoldedHeaderLineContinuesItsOwnHeader) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.body = "ok";
    r.headers.emplace_back("Location", "/a\r\n b");  // a folded line after Location
    r.headers.emplace_back("X-Z", "1");
    return r;
  });
  client c;
  auto res = fetch(c, get(srv.url("/folded")));
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->header("Location"), "/a b");
  EXPECT_EQ(res->header("X-Z"), "1");
}

// Serves `body` honouring Range; the first answer is cut after `cut` bytes.
TEST(HttpClient, HeadRequest) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.body = std::string(1234, 'x');
    r.headers.emplace_back("Docker-Content-Digest", "sha256:abc");
    return r;
  });
  client c;
  client_request r = get(srv.url("/v2/x/manifests/latest"));
  r.method = "HEAD";
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->header("Content-Length"), "1234");
  EXPECT_EQ(res->header("docker-content-digest"), "sha256:abc");
  EXPECT_EQ(res->body, "");
  EXPECT_EQ(srv.requests().at(0).method, "HEAD");
  // The connection stays usable after a HEAD.
  auto again = fetch(c, get(srv.url("/x")));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->body.size(), 1234u);
  EXPECT_EQ(srv.connections(), 1);
}

TEST(HttpClient, CancelInFlight) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.body = std::string(100'000, 'y');
    r.chunk_size = 1000;
    r.chunk_delay = 50ms;
    return r;
  });
  client c;
  collector col;
  request_id id = c.submit(get(srv.url("/slow")), col.make());
  ASSERT_TRUE(col.wait_for_bytes(1));
  auto start = steady::now();
  c.cancel(id);
  ASSERT_TRUE(col.wait(2s));
  EXPECT_LT(steady::now() - start, 1s);
  ASSERT_FALSE(col.done->has_value());
  EXPECT_TRUE(col.done->error().is(errc::cancelled)) << col.done->error().to_string();
  c.cancel(id);  // cancelling a finished request is harmless
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(col.completions, 1);
  EXPECT_EQ(srv.request_count(), 1u);  // no retry after a cancel
}

TEST(HttpClient, OnDataAbortIsNotRetried) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.body = std::string(50'000, 'z');
    r.chunk_size = 5000;
    r.chunk_delay = 10ms;
    return r;
  });
  client c;
  collector col;
  col.data_hook = [](std::string_view) { return false; };
  c.submit(get(srv.url("/")), col.make());
  ASSERT_TRUE(col.wait());
  ASSERT_FALSE(col.done->has_value());
  EXPECT_TRUE(col.done->error().is(errc::cancelled));
  EXPECT_NE(col.done->error().message.find("aborted by on_data"), std::string::npos);
  EXPECT_EQ(srv.request_count(), 1u);
}

TEST(HttpClient, ManyConcurrentRequestsComplete) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    r.body = "body of " + req.target;
    r.head_delay = 2ms;
    return r;
  });
  client_options o;
  o.max_connections_per_host = 16;
  client c(o);
  constexpr int kN = 250;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, ok = 0;
  std::vector<std::string> bodies(kN);
  for (int i = 0; i < kN; ++i) {
    callbacks cb;
    cb.on_data = [&bodies, i](std::string_view d) {
      bodies[i].append(d);
      return true;
    };
    cb.on_complete = [&, i](result<completion> r) {
      std::lock_guard lock(mu);
      if (r && r->status == 200 && bodies[i] == "body of /r" + std::to_string(i)) ok++;
      done++;
      cv.notify_all();
    };
    c.submit(get(srv.url("/r" + std::to_string(i))), std::move(cb));
  }
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return done == kN; })) << done << " of " << kN;
  EXPECT_EQ(ok, kN);
  EXPECT_LE(srv.max_concurrent_connections(), 16);
  EXPECT_LE(srv.connections(), 32);  // connections were reused, not one per request
  EXPECT_EQ(srv.request_count(), static_cast<std::size_t>(kN));
}

TEST(HttpClient, QueuedRequestsDoNotStallWhileWaitingForASlot) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.body = std::string(6, 'q');
    r.chunk_size = 1;
    r.chunk_delay = 100ms;  // each request takes ~500 ms but never stalls 300 ms
    return r;
  });
  client_options o;
  o.max_connections_per_host = 1;
  client c(o);
  collector a, b;
  client_request r = get(srv.url("/q"));
  r.timeouts.stall = 300ms;
  r.max_retries = 0;
  c.submit(r, a.make());
  c.submit(r, b.make());
  ASSERT_TRUE(a.wait());
  ASSERT_TRUE(b.wait());
  ASSERT_TRUE(a.done->has_value()) << a.done->error().to_string();
  ASSERT_TRUE(b.done->has_value()) << b.done->error().to_string();
  EXPECT_EQ(srv.max_concurrent_connections(), 1);
}

TEST(HttpClient, DestroyWithRequestsInFlightCancelsEach) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.index % 2 == 0) {
      r.no_response = true;
    } else {
      r.body = std::string(10'000, 'd');
      r.stall_after = 100;
    }
    return r;
  });
  constexpr int kN = 20;
  std::atomic<int> completions{0}, cancelled{0};
  {
    client_options o;
    o.max_connections_per_host = 4;  // some requests are still queued at destruction
    client c(o);
    for (int i = 0; i < kN; ++i) {
      callbacks cb;
      cb.on_complete = [&](result<completion> r) {
        completions++;
        if (!r && r.error().is(errc::cancelled)) cancelled++;
      };
      c.submit(get(srv.url("/d" + std::to_string(i))), std::move(cb));
    }
    auto until = steady::now() + 2s;
    while (srv.request_count() < 4 && steady::now() < until) std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(completions.load(), kN);
  EXPECT_EQ(cancelled.load(), kN);
}

TEST(HttpClient, SubmitAfterStopCompletesWithCancelled) {
  client c;
  c.stop();
  collector col;
  c.submit(get("http://127.0.0.1:1/"), col.make());
  ASSERT_TRUE(col.wait(1s));
  ASSERT_FALSE(col.done->has_value());
  EXPECT_TRUE(col.done->error().is(errc::cancelled));
}

TEST(HttpClient, TotalTimeout) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.body = std::string(100, 't');
    r.chunk_size = 1;
    r.chunk_delay = 50ms;
    return r;
  });
  client c;
  client_request r = get(srv.url("/"));
  r.timeouts.total = 300ms;
  auto start = steady::now();
  auto res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::timeout));
  EXPECT_NE(res.error().message.find("total timeout of 300ms exceeded"), std::string::npos)
      << res.error().message;
  EXPECT_LT(steady::now() - start, 1s);
  EXPECT_EQ(srv.request_count(), 1u);
}

TEST(HttpClient, LimitsOnHeadersAndBody) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.target == "/fat-head") r.headers.emplace_back("X-Huge", std::string(100'000, 'h'));
    r.body = std::string(5000, 'b');
    return r;
  });
  client c;
  auto res = fetch(c, get(srv.url("/fat-head")));
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::too_large)) << res.error().to_string();

  res = fetch(c, get(srv.url("/body")), 4096);
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::too_large)) << res.error().to_string();
  res = fetch(c, get(srv.url("/body")), 5000);
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->body.size(), 5000u);
}

TEST(HttpClient, GarbageFromTheServerIsAProtocolError) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.target == "/junk") r.raw = "SSH-2.0-OpenSSH_9.2\r\n\r\n";
    if (req.target == "/bad-status") r.raw = "HTTP/1.1 abc Whatever\r\n\r\n";
    if (req.target == "/short") r.raw = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    return r;
  });
  client c;
  client_request r = get(srv.url("/junk"));
  r.max_retries = 0;
  auto res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::protocol_error)) << res.error().to_string();
  r.url = srv.url("/bad-status");
  res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::protocol_error)) << res.error().to_string();
  r.url = srv.url("/short");
  res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::io_error)) << res.error().to_string();
}

TEST(HttpClient, BadRequestsAreErrorsNotCrashes) {
  client c;
  auto res = fetch(c, get("not a url"));
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::invalid_argument)) << res.error().to_string();
  res = fetch(c, get("file:///etc/passwd"));
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::invalid_argument)) << res.error().to_string();
  client_request r = get("http://127.0.0.1:1/");
  r.headers.emplace_back("X-Evil", "a\r\nInjected: yes");
  res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::invalid_argument)) << res.error().to_string();
}

TEST(HttpClient, ErrorMessagesRedactQueryAndUserInfo) {
  client c;
  client_request r = get("http://user:pw@127.0.0.1:" + std::to_string(closed_port()) +
                         "/b?X-Amz-Signature=secret");
  r.max_retries = 0;
  auto res = fetch(c, r);
  ASSERT_FALSE(res.has_value());
  EXPECT_EQ(res.error().message.find("secret"), std::string::npos) << res.error().message;
  EXPECT_EQ(res.error().message.find("pw"), std::string::npos) << res.error().message;
}

}  // namespace
}  // namespace shoal::http
