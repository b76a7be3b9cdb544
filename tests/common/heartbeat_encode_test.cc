// heartbeat::encode writes its JSON directly (a full list of 100,000 objects in one message); it
// must give byte for byte what the document built as nlohmann::json and dumped gives, which is
// what encode() was before and what every decoder (the scheduler's, older replicas' reading the
// shared log) reads. The reference below is that former encoder, kept here only to compare.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "common/heartbeat.h"
#include "common/sha256.h"

namespace shoal::heartbeat {
namespace {

using nlohmann::json;

std::string reference_encode(const message& m) {
  json j;
  j["schema"] = m.schema;
  j["node"] = m.node;
  j["labels"] = m.labels;
  j["ip"] = m.ip;
  j["bt_port"] = m.bt_port;
  j["http_port"] = m.http_port;
  j["epoch"] = m.epoch;
  j["seq"] = m.seq;
  j["full"] = m.full;
  json objs = json::array();
  for (const auto& o : m.objects) {
    objs.push_back(
        {{"digest", o.id.str()}, {"info_hash", o.info_hash}, {"size", o.size}, {"kind", o.kind}});
  }
  j["objects"] = std::move(objs);
  json rm = json::array();
  for (const auto& d : m.removed) rm.push_back(d.str());
  j["removed"] = std::move(rm);
  j["cache"] = {{"capacity", m.cache_capacity}, {"used", m.cache_used}};
  json gpus = json::array();
  for (const auto& g : m.gpus) gpus.push_back({{"model", g.model}, {"count", g.count}});
  j["gpus"] = std::move(gpus);
  for (auto [key, text] : {std::pair{"rdma", &m.rdma}, std::pair{"netsetup", &m.netsetup}}) {
    if (text->empty()) continue;
    auto doc = json::parse(*text, nullptr, false);
    if (!doc.is_discarded()) j[key] = std::move(doc);
  }
  j["health"] = m.health;
  j["health_reasons"] = m.health_reasons;
  if (m.leaving) j["leaving"] = true;
  if (m.netsetup_unchanged) j["netsetup_unchanged"] = true;
  json orders = json::array();
  for (const auto& o : m.orders) {
    json x = {{"id", o.id},
              {"state", to_string(o.state)},
              {"bytes_done", o.bytes_done},
              {"bytes_total", o.bytes_total}};
    if (!o.error.empty()) x["error"] = o.error;
    orders.push_back(std::move(x));
  }
  j["orders"] = std::move(orders);
  for (const auto& [key, list] :
       {std::pair{"datasets", &m.datasets}, std::pair{"checkpoints", &m.checkpoints}}) {
    if (list->empty()) continue;
    json ds = json::array();
    for (const auto& d : *list) {
      ds.push_back(
          {{"dataset", d.dataset}, {"bytes", d.bytes}, {"total", d.total}, {"view", d.view}});
    }
    j[key] = std::move(ds);
  }
  if (m.pods_known) {
    json pods = json::array();
    for (const auto& p : m.pods) pods.push_back({{"job", p.job}, {"pod", p.pod}});
    j["pods"] = std::move(pods);
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Strings of every kind the writer must treat like nlohmann: plain, quotes and backslashes,
// control bytes, DEL, UTF-8 of 2-4 bytes, invalid UTF-8 (replaced), empty.
std::string any_string(std::mt19937_64& rnd) {
  static const std::vector<std::string> pieces = {
      "a",    "zone-1",       "\"",   "\\", "\n",           "\t", std::string(1, '\0'),
      "\x01", "\x1f",         "\x7f", "é",  "\xe2\x82\xac", "😀",  "\xff",
      "\xc3", "\xed\xa0\x80", " ",    "/",  "{}",           "",
  };
  std::string s;
  const auto n = rnd() % 6;
  for (std::uint64_t i = 0; i < n; ++i) s += pieces[rnd() % pieces.size()];
  return s;
}

message random_message(std::mt19937_64& rnd) {
  message m;
  m.schema = static_cast<int>(rnd() % 3);
  m.node = any_string(rnd);
  for (auto i = rnd() % 4; i > 0; --i) m.labels[any_string(rnd)] = any_string(rnd);
  m.ip = any_string(rnd);
  m.bt_port = static_cast<std::uint16_t>(rnd());
  m.http_port = static_cast<std::uint16_t>(rnd());
  m.epoch = any_string(rnd);
  m.seq = rnd();
  m.full = rnd() % 2 == 0;
  for (auto i = rnd() % 5; i > 0; --i) {
    m.objects.push_back({sha256_of(std::to_string(rnd())), any_string(rnd), rnd(),
                         rnd() % 2 ? std::string("blob") : any_string(rnd)});
  }
  for (auto i = rnd() % 3; i > 0; --i) m.removed.push_back(sha256_of(std::to_string(rnd())));
  m.cache_capacity = rnd();
  m.cache_used = rnd() % 7;
  for (auto i = rnd() % 3; i > 0; --i)
    m.gpus.push_back({any_string(rnd), static_cast<std::uint32_t>(rnd())});
  static const std::vector<std::string> docs = {"",
                                                R"({"b":1,"a":[true,null,1.5e3,"x"]})",
                                                "[1,2]",
                                                "not json",
                                                R"({"s":"\u00e9\n"})",
                                                "{\"unterminated\":"};
  m.rdma = docs[rnd() % docs.size()];
  m.netsetup = docs[rnd() % docs.size()];
  m.health = any_string(rnd);
  for (auto i = rnd() % 3; i > 0; --i) m.health_reasons.push_back(any_string(rnd));
  for (auto i = rnd() % 3; i > 0; --i) {
    m.orders.push_back({any_string(rnd), static_cast<order_state>(rnd() % 4), rnd(), rnd(),
                        rnd() % 2 ? std::string() : any_string(rnd)});
  }
  for (auto* list : {&m.datasets, &m.checkpoints}) {
    for (auto i = rnd() % 3; i > 0; --i)
      list->push_back({any_string(rnd), rnd(), rnd(), rnd() % 2 == 0});
  }
  m.leaving = rnd() % 2 == 0;
  m.netsetup_unchanged = rnd() % 2 == 0;
  m.pods_known = rnd() % 2 == 0;
  for (auto i = rnd() % 3; i > 0; --i) m.pods.push_back({any_string(rnd), any_string(rnd)});
  return m;
}

TEST(HeartbeatEncode, RandomMessagesEncodeByteForByteAsTheDocumentDump) {
  std::mt19937_64 rnd(20261205);
  for (int i = 0; i < 5000; ++i) {
    auto m = random_message(rnd);
    ASSERT_EQ(encode(m), reference_encode(m)) << "message " << i;
  }
}

TEST(HeartbeatEncode, DefaultAndRealisticMessagesRoundTrip) {
  message empty;
  EXPECT_EQ(encode(empty), reference_encode(empty));
  message m;
  m.node = "gpu-node-17";
  m.labels = {{"zone", "z1"}, {"rack", "r4"}, {"fabric", "roce-a"}};
  m.ip = "10.1.2.3";
  m.bt_port = 6881;
  m.http_port = 5001;
  m.epoch = "0123456789abcdef";
  m.seq = 42;
  m.full = false;
  for (int i = 0; i < 3; ++i)
    m.objects.push_back({sha256_of(std::to_string(i)), std::string(40, 'a'), 1000u + i, "blob"});
  m.removed.push_back(sha256_of("gone"));
  m.gpus.push_back({"H100", 8});
  m.rdma = R"([{"name":"mlx5_0","port":1}])";
  ASSERT_EQ(encode(m), reference_encode(m));
  auto back = decode(encode(m));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->node, m.node);
  EXPECT_EQ(back->labels, m.labels);
  EXPECT_EQ(back->objects.size(), 3u);
  EXPECT_EQ(back->removed.size(), 1u);
  EXPECT_EQ(back->seq, 42u);
  EXPECT_FALSE(back->full);
}

// encode(m, parts) is encode() of a copy with those parts cleared (what the scheduler's Redis
// path did before: a copy of a full list to clear its document).
TEST(HeartbeatEncode, PartsLeftOutAreTheMessageWithThemCleared) {
  std::mt19937_64 rnd(20261207);
  for (int i = 0; i < 2000; ++i) {
    auto m = random_message(rnd);
    auto no_doc = m;
    no_doc.netsetup.clear();
    no_doc.netsetup_unchanged = false;
    ASSERT_EQ(encode(m, {.netsetup = false}), encode(no_doc)) << "message " << i;
    auto neither = no_doc;
    neither.objects.clear();
    neither.removed.clear();
    ASSERT_EQ(encode(m, {.netsetup = false, .holdings = false}), encode(neither)) << i;
    ASSERT_EQ(encode(m, encode_parts{}), encode(m)) << i;
  }
}

}  // namespace
}  // namespace shoal::heartbeat
