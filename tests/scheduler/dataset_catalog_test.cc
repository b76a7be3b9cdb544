// The dataset catalog against a registry-proxy stand-in on loopback: one fetch per dataset however
// many ask at once, placement's time limit held while a manifest is slow to come, and the answer
// kept for the next request.
#include "scheduler/dataset_catalog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "../common/http_server_fixture.h"
#include "common/dataset.h"
#include "common/origin_protocol.h"
#include "common/sha256.h"

namespace shoal::scheduler {
namespace {

using namespace std::chrono_literals;

dataset::manifest sample() {
  std::vector<dataset::file_entry> files;
  for (int i = 0; i < 3; ++i) {
    std::string p = "f" + std::to_string(i);
    files.push_back({p, 10u + static_cast<std::uint64_t>(i), sha256_of(p), {}});
  }
  auto m = dataset::build_manifest("ds", "v1", "s3://b/p/", files);
  EXPECT_TRUE(m);
  return *m;
}

TEST(DatasetCatalog, OneFetchPerDatasetAndTheWaitIsBounded) {
  const auto m = sample();
  const std::string text = dataset::canonical_json(m);
  const std::string state =
      R"({"state":"ready","manifest":")" + dataset::manifest_digest(m).str() + R"("})";
  std::atomic<int> state_gets{0}, manifest_gets{0};
  std::mutex mu;
  std::vector<std::thread> late;  // answers sent after a delay, joined at the end
  testing::server_fixture srv([&](http::request&& req, http::responder resp) {
    if (req.path == origin::dataset_target("ds@v1")) {
      ++state_gets;
      return resp.send(http::response::json(200, state));
    }
    if (req.path == origin::dataset_manifest_target("ds@v1")) {
      ++manifest_gets;
      std::lock_guard lk(mu);
      late.emplace_back([resp, text] {
        std::this_thread::sleep_for(800ms);  // a large manifest, slow to come
        resp.send(http::response::json(200, text));
      });
      return;
    }
    resp.send(http::response::json(404, R"({"error":"unknown dataset"})"));
  });
  http::client client;
  dataset_catalog_options o;
  o.registry_proxy = "http://127.0.0.1:" + std::to_string(srv.port()) + "/";
  o.request_timeout = 5000ms;
  {
    registry_proxy_datasets cat(client, o);
    // Eight at once, each willing to wait 100 ms: each gets a timeout with the cause at about
    // that time, and registry-proxy sees one request for the state and one for the manifest.
    std::vector<std::thread> ts;
    std::atomic<int> timeouts{0};
    std::atomic<long> slowest_ms{0};
    for (int i = 0; i < 8; ++i) {
      ts.emplace_back([&] {
        auto t0 = std::chrono::steady_clock::now();
        auto r = cat.lookup_within("ds@v1", 100ms);
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
        long prev = slowest_ms.load();
        while (ms > prev && !slowest_ms.compare_exchange_weak(prev, ms)) {
        }
        if (!r && r.error().is(errc::timeout)) {
          ++timeouts;
          EXPECT_NE(r.error().message.find("has not answered within 100 ms"), std::string::npos)
              << r.error().message;
        }
      });
    }
    for (auto& t : ts) t.join();
    EXPECT_EQ(timeouts.load(), 8);
    EXPECT_LT(slowest_ms.load(), 600);
    // The fetch went on; lookup() waits for it, and the answer is kept.
    auto r = cat.lookup("ds@v1");
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->size(), 3u);
    auto again = cat.lookup_within("ds@v1", 0ms);
    ASSERT_TRUE(again) << again.error().to_string();
    EXPECT_EQ(again->size(), 3u);
    EXPECT_EQ(state_gets.load(), 1);
    EXPECT_EQ(manifest_gets.load(), 1);
    // Errors are answers too, with their cause, and are not kept.
    auto unknown = cat.lookup_within("other@v1", 2s);
    ASSERT_FALSE(unknown);
    EXPECT_TRUE(unknown.error().is(errc::not_found)) << unknown.error().to_string();
    EXPECT_FALSE(cat.lookup_within("NOT A REF", 2s));
  }
  std::lock_guard lk(mu);
  for (auto& t : late) t.join();
}

}  // namespace
}  // namespace shoal::scheduler
