#include "common/endpoints.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http_client_test_util.h"
#include "support/test_http_server.h"

namespace shoal::endpoints {
namespace {

using namespace std::chrono_literals;
using shoal::http::client_test::closed_port;
using shoal::testing::recorded_request;
using shoal::testing::reply;
using shoal::testing::test_http_server;
using steady = std::chrono::steady_clock;

// A clock the test moves by hand.
struct fake_clock {
  clock::time_point t = clock::time_point{} + 1h;
  std::function<clock::time_point()> fn() {
    return [this] { return t; };
  }
};

std::vector<std::string> strs(const std::vector<endpoint>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.str());
  return out;
}

std::string closed_base() { return "http://127.0.0.1:" + std::to_string(closed_port()); }

reply ok_reply(const std::string& body) {
  reply r;
  r.body = body;
  return r;
}

http::client_request get(const std::string& path) {
  http::client_request r;
  r.url = path;
  r.timeouts.connect = 1s;
  r.timeouts.stall = 2s;
  return r;
}

TEST(Endpoints, CreateRejectsNothingAndBadUrls) {
  EXPECT_FALSE(endpoint_set::create({}).has_value());
  EXPECT_FALSE(endpoint_set::create({"", "/"}).has_value());
  EXPECT_FALSE(endpoint_set::create({"ftp://x"}).has_value());
  auto s = endpoint_set::create({"http://127.0.0.1:1/", "http://127.0.0.1:1", "http://[::1]:2"});
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(strs((*s)->order()),
            (std::vector<std::string>{"http://127.0.0.1:1", "http://[::1]:2"}));
}

TEST(Endpoints, ConfiguredOrderThenLastGoodFirst) {
  auto s = endpoint_set::create({"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"});
  ASSERT_TRUE(s.has_value());
  auto& set = **s;
  auto o = set.order();
  EXPECT_EQ(strs(o), (std::vector<std::string>{"http://127.0.0.1:1", "http://127.0.0.1:2",
                                               "http://127.0.0.1:3"}));
  set.succeeded(o[2]);
  EXPECT_EQ(strs(set.order()), (std::vector<std::string>{"http://127.0.0.1:3", "http://127.0.0.1:1",
                                                         "http://127.0.0.1:2"}));
  EXPECT_EQ(set.bases(), (std::vector<std::string>{"http://127.0.0.1:3", "http://127.0.0.1:1",
                                                   "http://127.0.0.1:2"}));
}

TEST(Endpoints, FailedGoesLastForTheBackoffThenReturns) {
  fake_clock fc;
  options o;
  o.backoff = 5s;
  o.now = fc.fn();
  auto s =
      endpoint_set::create({"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}, o);
  ASSERT_TRUE(s.has_value());
  auto& set = **s;
  auto all = set.order();
  set.succeeded(all[0]);
  set.failed(all[0]);
  fc.t += 1s;
  set.failed(all[1]);
  // Both down: the one back sooner first, and every endpoint is still listed.
  EXPECT_EQ(strs(set.order()), (std::vector<std::string>{"http://127.0.0.1:3", "http://127.0.0.1:1",
                                                         "http://127.0.0.1:2"}));
  fc.t += 4500ms;  // the first one's backoff is over, not the second's
  EXPECT_EQ(strs(set.order()), (std::vector<std::string>{"http://127.0.0.1:1", "http://127.0.0.1:3",
                                                         "http://127.0.0.1:2"}));
  // A failed endpoint is no longer the last good one: the order is the configured one.
  fc.t += 1s;
  EXPECT_EQ(strs(set.order())[0], "http://127.0.0.1:1");
  set.succeeded(all[1]);
  EXPECT_EQ(strs(set.order())[0], "http://127.0.0.1:2");
}

TEST(Endpoints, NameWithSeveralAddressesIsSeveralEndpoints) {
  std::atomic<int> calls{0};
  std::vector<std::string> answer{"10.0.0.1", "10.0.0.2", "fd00::3"};
  std::mutex mu;
  fake_clock fc;
  options o;
  o.now = fc.fn();
  o.resolve_interval = 30s;
  o.resolver = [&](const std::string& host) -> result<std::vector<std::string>> {
    EXPECT_EQ(host, "sched.test");
    ++calls;
    std::lock_guard lk(mu);
    return answer;
  };
  auto s = endpoint_set::create({"https://sched.test:7443", "http://127.0.0.1:9"}, o);
  ASSERT_TRUE(s.has_value());
  auto& set = **s;
  EXPECT_EQ(strs(set.order()),
            (std::vector<std::string>{"https://sched.test:7443 (10.0.0.1)",
                                      "https://sched.test:7443 (10.0.0.2)",
                                      "https://sched.test:7443 (fd00::3)", "http://127.0.0.1:9"}));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(set.bases(),
            (std::vector<std::string>{"https://sched.test:7443", "http://127.0.0.1:9"}));
  // Re-resolved after the interval, in the background: the next order() after it answered
  // sees the new set.
  {
    std::lock_guard lk(mu);
    answer = {"10.0.0.2", "10.0.0.4"};
  }
  fc.t += 31s;
  (void)set.order();
  for (int i = 0; i < 200 && calls.load() < 2; ++i) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(strs(set.order()),
            (std::vector<std::string>{"https://sched.test:7443 (10.0.0.2)",
                                      "https://sched.test:7443 (10.0.0.4)", "http://127.0.0.1:9"}));
  EXPECT_EQ(calls.load(), 2);
}

TEST(Endpoints, ResolutionIsBoundedAndLeavesTheNameToLibcurl) {
  options o;
  o.resolve_timeout = 100ms;
  auto release = std::make_shared<std::atomic<bool>>(false);
  o.resolver = [release](const std::string&) -> result<std::vector<std::string>> {
    while (!release->load()) std::this_thread::sleep_for(5ms);
    return std::vector<std::string>{"10.0.0.1", "10.0.0.2"};
  };
  auto t0 = steady::now();
  auto s = endpoint_set::create({"http://slow.test:1"}, o);
  EXPECT_LT(steady::now() - t0, 1s);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(strs((*s)->order()), (std::vector<std::string>{"http://slow.test:1"}));
  release->store(true);
}

TEST(Endpoints, LocalhostResolves) {
  auto r = resolve_system("localhost");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_FALSE(r->empty());
  EXPECT_FALSE(resolve_system("no-such-host.invalid").has_value());
}

TEST(Endpoints, RefusedMovesOnAtOnceAndIsRemembered) {
  test_http_server srv([](const recorded_request&) { return ok_reply("up"); });
  auto s = endpoint_set::create({closed_base(), srv.base()});
  ASSERT_TRUE(s.has_value());
  http::client c;
  for (auto kind : {call_kind::idempotent, call_kind::once}) {
    auto t0 = steady::now();
    auto f = fetch(c, **s, get("/x"), kind);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    EXPECT_EQ(f->body, "up");
    EXPECT_LT(steady::now() - t0, 500ms);
  }
  // The server that answered is now the first to try; the refused one is last.
  EXPECT_EQ((*s)->order()[0].base, srv.base());
  EXPECT_EQ(srv.request_count(), 2u);
  EXPECT_EQ(srv.requests()[0].target, "/x");
}

TEST(Endpoints, HungEndpointMovesOnAfterTheStallOnlyWhenIdempotent) {
  test_http_server hung([](const recorded_request&) {
    reply r;
    r.no_response = true;
    return r;
  });
  test_http_server up([](const recorded_request&) { return ok_reply("up"); });
  http::client c;
  auto req = get("/hb");
  req.method = "POST";
  req.body = "{}";
  req.timeouts.stall = 300ms;
  {
    auto s = endpoint_set::create({hung.base(), up.base()});
    ASSERT_TRUE(s.has_value());
    auto t0 = steady::now();
    auto f = fetch(c, **s, req, call_kind::idempotent);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    EXPECT_EQ(f->body, "up");
    EXPECT_LT(steady::now() - t0, 1s);
    // The next call goes straight to the one that answered.
    t0 = steady::now();
    ASSERT_TRUE(fetch(c, **s, req, call_kind::idempotent).has_value());
    EXPECT_LT(steady::now() - t0, 200ms);
  }
  {
    // Not idempotent: the hung server may have applied it, so it is not sent again.
    auto s = endpoint_set::create({hung.base(), up.base()});
    ASSERT_TRUE(s.has_value());
    auto f = fetch(c, **s, req, call_kind::once);
    ASSERT_FALSE(f.has_value());
    EXPECT_TRUE(f.error().is(errc::timeout)) << f.error().message;
    EXPECT_EQ(up.request_count(), 2u);
  }
}

TEST(Endpoints, GatewayAnswersMoveOnOtherAnswersDoNot) {
  test_http_server busy([](const recorded_request&) {
    reply r;
    r.status = 503;
    return r;
  });
  test_http_server nf([](const recorded_request&) {
    reply r;
    r.status = 404;
    return r;
  });
  test_http_server up([](const recorded_request&) { return ok_reply("up"); });
  http::client c;
  auto s = endpoint_set::create({busy.base(), nf.base(), up.base()});
  ASSERT_TRUE(s.has_value());
  auto f = fetch(c, **s, get("/r"), call_kind::idempotent);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->status, 404);  // an answer, even a 404, is the replica's word
  EXPECT_EQ(up.request_count(), 0u);
  // Every endpoint failing gives the last failure.
  auto all_down = endpoint_set::create({closed_base(), closed_base()});
  ASSERT_TRUE(all_down.has_value());
  auto g = fetch(c, **all_down, get("/r"), call_kind::idempotent);
  ASSERT_FALSE(g.has_value());
  EXPECT_TRUE(failed_before_sending(g.error())) << g.error().message;
}

TEST(Endpoints, ReadsMoveOnFromRefusedHungAndDrainingButA502IsTheAnswer) {
  auto status_server = [](int status) {
    return std::make_unique<test_http_server>([status](const recorded_request&) {
      reply r;
      r.status = status;
      r.body = "status " + std::to_string(status);
      return r;
    });
  };
  auto draining = status_server(503);
  auto bad_gateway = status_server(502);
  test_http_server hung([](const recorded_request&) {
    reply r;
    r.no_response = true;
    return r;
  });
  test_http_server up([](const recorded_request&) { return ok_reply("up"); });
  http::client c;
  auto req = get("/v2/x/manifests/v1");
  req.timeouts.stall = 300ms;
  // Refused, hung (after the request left: a read may be sent again) and draining: on to `up`.
  auto s = endpoint_set::create({closed_base(), hung.base(), draining->base(), up.base()});
  ASSERT_TRUE(s.has_value());
  auto f = fetch(c, **s, req, call_kind::read);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f->body, "up");
  EXPECT_EQ((*s)->order()[0].base, up.base());
  // A 502 is registry-proxy's verdict on its upstream: returned, not retried elsewhere.
  auto t = endpoint_set::create({bad_gateway->base(), up.base()});
  ASSERT_TRUE(t.has_value());
  auto g = fetch(c, **t, req, call_kind::read);
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->status, 502);
  EXPECT_EQ(up.request_count(), 1u);
  EXPECT_EQ((*t)->order()[0].base, bad_gateway->base());  // it answered
}

TEST(Endpoints, AddressPinKeepsTheHostName) {
  // The name resolves to two loopback addresses; nothing listens on the first (refused), the
  // server is on the second, and it sees the name, not the address, in Host.
  test_http_server srv([](const recorded_request&) { return ok_reply("pinned"); });
  options o;
  o.resolver = [](const std::string&) -> result<std::vector<std::string>> {
    return std::vector<std::string>{"127.0.0.2", "127.0.0.1"};
  };
  auto base = "http://sched.invalid:" + std::to_string(srv.port());
  auto s = endpoint_set::create({base}, o);
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ((*s)->order().size(), 2u);
  http::client c;
  auto f = fetch(c, **s, get("/v1/nodes"), call_kind::idempotent);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f->body, "pinned");
  ASSERT_EQ(srv.request_count(), 1u);
  EXPECT_EQ(srv.requests()[0].header("host").value_or(""),
            "sched.invalid:" + std::to_string(srv.port()));
  EXPECT_EQ((*s)->order()[0].str(), base + " (127.0.0.1)");
}

TEST(Endpoints, SplitList) {
  EXPECT_EQ(split_list({"a, b", "", "c,,"}), (std::vector<std::string>{"a", "b", "c"}));
}

}  // namespace
}  // namespace shoal::endpoints
