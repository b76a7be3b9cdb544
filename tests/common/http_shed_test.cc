// Connection shedding and the header deadline of common/http_server.h, on a server in this process
// (tests/registry-proxy/conn_shed_test.py floods the real daemon).
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <memory>
#include <thread>
#include <vector>

#include "common/http_server.h"
#include "http_server_fixture.h"
#include "http_test_util.h"

namespace shoal::http {
namespace {

using namespace std::chrono_literals;
using shoal::testing::get_req;
using shoal::testing::raw_conn;

constexpr std::uint32_t k_lo1 = 0x7f000001;  // 127.0.0.1
constexpr std::uint32_t k_lo2 = 0x7f000002;  // 127.0.0.2
constexpr std::uint32_t k_lo3 = 0x7f000003;  // 127.0.0.3

// A server answering 200 "ok" to everything, with the options under test.
class shed_fixture : public shoal::testing::server_fixture {
 public:
  explicit shed_fixture(server_options o)
      : server_fixture([](request&&, responder r) { r.send(response::text(200, "ok")); },
                       std::move(o)) {}
};

bool served(std::uint16_t port, std::uint32_t source) {
  raw_conn c(port, 0, source);
  if (!c.send_all(get_req("/x"))) return false;
  return c.read_response(false, 3000ms).status == 200;
}

std::vector<std::unique_ptr<raw_conn>> half_open(std::uint16_t port, std::uint32_t source, int n) {
  std::vector<std::unique_ptr<raw_conn>> v;
  for (int i = 0; i < n; ++i) {
    v.push_back(std::make_unique<raw_conn>(port, 0, source));
    v.back()->send_all("GET /x HTTP/1.1\r\nX-Slow: ");
  }
  return v;
}

TEST(HttpShed, PerAddressCapClosesTheExcessAtOnce) {
  server_options o;
  o.max_connections_per_address = 3;
  shed_fixture f(o);
  auto flood = half_open(f.port(), k_lo1, 3);
  ASSERT_TRUE(f.wait_connections(3));
  auto extra = half_open(f.port(), k_lo1, 2);
  for (auto& c : extra) EXPECT_TRUE(c->wait_closed(2000ms));
  EXPECT_EQ(f.srv->connections(), 3u);
  EXPECT_TRUE(served(f.port(), k_lo2));
  EXPECT_GE(f.srv->shed().refused, 2u);
}

TEST(HttpShed, AtTheCapTheBiggestHolderMakesRoom) {
  server_options o;
  o.max_connections = 4;
  o.max_connections_per_address = 0;
  shed_fixture f(o);
  auto a = half_open(f.port(), k_lo1, 3);
  ASSERT_TRUE(f.wait_connections(3));
  auto b = half_open(f.port(), k_lo2, 1);
  ASSERT_TRUE(f.wait_connections(4));
  // Full. A new address is served; the oldest connection of 127.0.0.1 (the biggest) goes.
  EXPECT_TRUE(served(f.port(), k_lo3));
  EXPECT_TRUE(a[0]->wait_closed(2000ms));
  EXPECT_FALSE(a[1]->wait_closed(100ms));
  EXPECT_FALSE(b[0]->wait_closed(100ms));
  EXPECT_GE(f.srv->shed().evicted, 1u);
  // The biggest holder itself gets no more: its new connection is the one refused.
  ASSERT_TRUE(f.wait_connections(3));  // 2 of lo1 and 1 of lo2 (lo3's request is done)
  auto b2 = half_open(f.port(), k_lo2, 1);
  ASSERT_TRUE(f.wait_connections(4));
  auto a2 = half_open(f.port(), k_lo1, 1);
  EXPECT_TRUE(a2[0]->wait_closed(2000ms));
  EXPECT_FALSE(a[1]->wait_closed(100ms));
}

TEST(HttpShed, HeaderDeadlineApartFromIdleTimeout) {
  server_options o;
  o.header_timeout = 300ms;
  o.idle_timeout = 1500ms;
  shed_fixture f(o);
  raw_conn slow(f.port());
  ASSERT_TRUE(slow.send_all("GET /x HTTP/1.1\r\nX-Slow: "));
  raw_conn keep(f.port());
  ASSERT_TRUE(keep.send_all(get_req("/x")));
  EXPECT_EQ(keep.read_response().status, 200);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(slow.wait_closed(1000ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);
  // The idle keep-alive connection outlives the header deadline; its next header gets one too.
  std::this_thread::sleep_for(600ms);
  ASSERT_TRUE(keep.send_all("GET /x HTTP/1.1\r\n"));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(keep.send_all("Host: t\r\n\r\n"));
  EXPECT_EQ(keep.read_response().status, 200);
  ASSERT_TRUE(keep.send_all("GET /x HTTP/1.1\r\nX-Slow: "));
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(keep.wait_closed(1200ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);
}

TEST(HttpShed, FreshSilentConnectionClosedAtTheShorterTimeout) {
  server_options o;
  o.header_timeout = 5000ms;
  o.idle_timeout = 200ms;
  shed_fixture f(o);
  raw_conn c(f.port());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.wait_closed(3000ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
}

}  // namespace
}  // namespace shoal::http
