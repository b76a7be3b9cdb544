// registry-proxy's single flight (blobs.h) when a fetch's bytes are wrong. The in-flight object
// fails (its readers are cut off) a moment before the fetch records its failure and leaves the
// table of fetches; a request arriving in that moment must get a fetch of its own, never a 200
// head for a body that is already cut off (hostile_test.py's unverified-bytes case, made
// deterministic: the request is sent from inside the in-flight object's failure).

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "test_util.h"
#include "../common/http_server_fixture.h"
#include "../common/http_test_util.h"
#include "../common/support/test_http_server.h"
#include "cache/store.h"
#include "common/sha256.h"
#include "registry-proxy/access.h"
#include "registry-proxy/blobs.h"
#include "registry-proxy/state_db.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kAlice = "Basic YWxpY2U6YWxpY2UtcHc=";  // alice:alice-pw

using testing_util::bytes;

// A temporary directory of this test's own.
struct temp_dir : testing_util::temp_dir {
  temp_dir() : testing_util::temp_dir("shoal-flight") {}
};

testing::raw_response get(std::uint16_t port, const std::string& target,
                          const std::string& extra = "") {
  testing::raw_conn c(port);
  EXPECT_TRUE(c.connected());
  c.send_all(testing::get_req(target, extra));
  return c.read_response(false, 20s);
}

TEST(BlobFlight, ARequestArrivingAsTheBytesFailGetsItsOwnFetch) {
  temp_dir tmp;
  const std::string good = bytes(200'000, 1);
  std::string wrong = good;
  wrong[100] = static_cast<char>(wrong[100] ^ 1);
  const digest d = sha256_of(good);
  const std::string path = "/v2/team/priv/blobs/" + d.str();

  // The upstream: the first anonymous GET gets 200 and wrong bytes, slowly; then the blob is
  // alice's only (others 401).
  std::atomic<int> anonymous_gets{0}, gets{0};
  testing::test_http_server up([&](const testing::recorded_request& r) {
    if (r.method == "GET") ++gets;
    testing::reply rep;
    if (r.header("Authorization") == kAlice) {
      rep.body = good;
    } else if (r.method == "GET" && anonymous_gets++ == 0) {
      rep.body = wrong;
      rep.chunk_size = 50'000;
      rep.chunk_delay = 200ms;
    } else {
      rep.status = 401;
      rep.headers.emplace_back("WWW-Authenticate", "Basic realm=\"stub\"");
    }
    return rep;
  });

  cache::options co;
  co.root = (tmp.path / "cache").string();
  co.quota_bytes = 64u << 20;
  co.scrub_bytes_per_sec = 0;
  auto store = cache::store::open(co);
  ASSERT_TRUE(store) << store.error().message;
  auto st = state_db::open((tmp.path / "state").string());
  ASSERT_TRUE(st) << st.error().message;
  upstream_config uc;
  uc.name = "stub.test";
  uc.url = up.base();
  uc.stall_timeout = 10s;
  auto ups = upstream_set::build({uc}, "stub.test");
  ASSERT_TRUE(ups) << ups.error().message;
  const selection sel{ups->find("stub.test"), "team/priv"};
  http::client hc;
  upstream_client ucl(hc);
  access_checker access(ucl, **st, 60s);
  boost::asio::io_context io;
  boost::asio::thread_pool pool(4);
  blob_service svc(io, pool, **store, **st, ucl, access, {});
  testing::server_fixture front([&](http::request&& r, http::responder resp) {
    svc.serve(sel, d, credential_from(r.header("Authorization"), "salt"),
              r.method == http::verb::head, resp);
  });

  // An anonymous client starts the fetch; its in-flight object appears with the response head.
  auto anon = std::async(std::launch::async, [&] { return get(front.port(), path); });
  std::shared_ptr<cache::inflight_object> in;
  for (auto end = std::chrono::steady_clock::now() + 10s;
       !in && std::chrono::steady_clock::now() < end; std::this_thread::sleep_for(1ms))
    in = (*store)->find_inflight(d);
  ASSERT_TRUE(in) << "the fetch never began writing";
  // Alice asks at the moment the bytes fail: her request is served while the failure is being
  // delivered, before the failed fetch goes on to record it.
  std::promise<testing::raw_response> alice;
  const auto registered_by = std::this_thread::get_id();
  std::atomic<bool> too_late{false};
  in->wait_verified([&](const cache::progress& p) {
    if (std::this_thread::get_id() == registered_by) too_late = true;
    if (p.state != cache::write_state::failed) {
      alice.set_value({});
      return;
    }
    alice.set_value(get(front.port(), path, std::string("Authorization: ") + kAlice + "\r\n"));
  });
  ASSERT_FALSE(too_late) << "the transfer ended before the test could watch it";

  auto a = anon.get();
  EXPECT_FALSE(a.status == 200 && a.complete && a.body == good);
  auto fut = alice.get_future();
  ASSERT_EQ(fut.wait_for(30s), std::future_status::ready);
  auto b = fut.get();
  EXPECT_EQ(b.status, 200);
  EXPECT_TRUE(b.complete) << "alice got a 200 head and then " << b.body.size()
                          << " bytes: she joined the fetch whose bytes had failed";
  EXPECT_TRUE(b.body == good);
  EXPECT_GE(gets.load(), 2) << "alice's answer came from no fetch of her own";
  svc.shutdown();
  pool.join();
}

}  // namespace
}  // namespace shoal::proxy
