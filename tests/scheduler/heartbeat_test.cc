// The heartbeat schema (common/heartbeat.h): round trips, strict validation with field names,
// schema 1 compatibility, and a bounded fuzz of the decoder (mutated valid messages, random
// JSON, random bytes) that must never crash and must only accept what it can re-encode.
#include "common/heartbeat.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"

namespace shoal::heartbeat {
namespace {

using nlohmann::json;
using scheduler::testing::dg;

message sample() {
  message m;
  m.node = "node-1.rack2";
  m.labels = {
      {"zone", "z1"}, {"rack", "r2"}, {"fabric", "f1"}, {"topology.kubernetes.io/zone", "z1"}};
  m.ip = "10.1.2.3";
  m.bt_port = 6881;
  m.http_port = 65001;
  m.epoch = "0123456789abcdef";
  m.seq = 42;
  m.full = false;
  m.objects.push_back({dg("a"), std::string(40, 'a'), 1234, "blob"});
  m.objects.push_back({dg("b"), "", 99, "dataset_file"});
  m.removed.push_back(dg("c"));
  m.cache_capacity = 1ull << 40;
  m.cache_used = 1ull << 30;
  m.gpus.push_back({"H100-SXM5-80GB", 8});
  m.rdma = R"([{"name":"mlx5_0","port":1}])";
  m.netsetup = R"({"schema":1,"validation":{"passed":true}})";
  m.health = "degraded";
  m.health_reasons = {"netsetup report missing"};
  m.orders.push_back({"pw-1.0", order_state::running, 10, 100, ""});
  m.orders.push_back({"pw-1.1", order_state::failed, 0, 5, "manifest not found"});
  return m;
}

TEST(Heartbeat, RoundTripKeepsEveryField) {
  auto m = sample();
  auto d = decode(encode(m));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->schema, schema_version);
  EXPECT_EQ(d->node, m.node);
  EXPECT_EQ(d->labels, m.labels);
  EXPECT_EQ(d->ip, m.ip);
  EXPECT_EQ(d->bt_port, m.bt_port);
  EXPECT_EQ(d->http_port, m.http_port);
  EXPECT_EQ(d->epoch, m.epoch);
  EXPECT_EQ(d->seq, 42u);
  EXPECT_FALSE(d->full);
  ASSERT_EQ(d->objects.size(), 2u);
  EXPECT_EQ(d->objects[0].id, dg("a"));
  EXPECT_EQ(d->objects[0].info_hash, std::string(40, 'a'));
  EXPECT_EQ(d->objects[1].kind, "dataset_file");
  ASSERT_EQ(d->removed.size(), 1u);
  EXPECT_EQ(d->removed[0], dg("c"));
  EXPECT_EQ(d->cache_capacity, 1ull << 40);
  ASSERT_EQ(d->gpus.size(), 1u);
  EXPECT_EQ(d->gpus[0].model, "H100-SXM5-80GB");
  EXPECT_EQ(d->gpus[0].count, 8u);
  EXPECT_EQ(json::parse(d->rdma), json::parse(m.rdma));
  EXPECT_EQ(json::parse(d->netsetup), json::parse(m.netsetup));
  EXPECT_EQ(d->health, "degraded");
  EXPECT_EQ(d->health_reasons, m.health_reasons);
  ASSERT_EQ(d->orders.size(), 2u);
  EXPECT_EQ(d->orders[0].state, order_state::running);
  EXPECT_EQ(d->orders[0].bytes_done, 10u);
  EXPECT_EQ(d->orders[1].error, "manifest not found");
}

TEST(Heartbeat, ReplyRoundTripWithOrders) {
  reply r;
  r.epoch = "e1";
  r.ack_seq = 7;
  r.resync = true;
  prewarm_order o;
  o.id = "pw-abc.0";
  o.image = "docker.io/library/nginx:latest";
  o.platform = "linux/arm64";
  o.registry = "docker.io";
  o.repository = "library/nginx";
  o.objects = {{dg("l1"), 10}, {dg("l2"), 20}};
  o.pin_seconds = 3600;
  r.orders.push_back(o);
  auto d = decode_reply(encode(r));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->epoch, "e1");
  EXPECT_EQ(d->ack_seq, 7u);
  EXPECT_TRUE(d->resync);
  ASSERT_EQ(d->orders.size(), 1u);
  EXPECT_EQ(d->orders[0].image, o.image);
  EXPECT_EQ(d->orders[0].platform, "linux/arm64");
  EXPECT_EQ(d->orders[0].repository, "library/nginx");
  ASSERT_EQ(d->orders[0].objects.size(), 2u);
  EXPECT_EQ(d->orders[0].objects[1].id, dg("l2"));
  EXPECT_EQ(d->orders[0].pin_seconds, 3600u);
}

TEST(Heartbeat, AcceptsSchemaOneFullLists) {
  json j = {
      {"schema", 1}, {"node", "n1"}, {"full", true}, {"objects", json::array()}, {"health", "ok"}};
  auto d = decode(j.dump());
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->schema, 1);
  j["full"] = false;
  auto bad = decode(j.dump());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("schema 1"), std::string::npos);
}

// Each malformed message names what is wrong.
TEST(Heartbeat, RefusesMalformedFieldsByName) {
  auto base = json::parse(encode(sample()));
  struct tc {
    const char* what;
    std::function<void(json&)> mutate;
    const char* needle;
  };
  std::vector<tc> cases = {
      {"schema 3", [](json& j) { j["schema"] = 3; }, "schema 3"},
      {"schema string", [](json& j) { j["schema"] = "2"; }, "schema"},
      {"no node", [](json& j) { j.erase("node"); }, "node name"},
      {"bad node", [](json& j) { j["node"] = "a b"; }, "node name"},
      {"label key", [](json& j) { j["labels"]["bad key!"] = "x"; }, "label key"},
      {"label value", [](json& j) { j["labels"]["zone"] = 5; }, "labels.zone"},
      {"too many labels",
       [](json& j) {
         for (int i = 0; i < 70; ++i) j["labels"][std::to_string(i) + "k"] = "v";
       },
       "labels"},
      {"ip", [](json& j) { j["ip"] = "not-an-ip"; }, "ip"},
      {"port", [](json& j) { j["bt_port"] = 70000; }, "bt_port"},
      {"negative port", [](json& j) { j["http_port"] = -1; }, "http_port"},
      {"seq float", [](json& j) { j["seq"] = 1.5; }, "seq"},
      {"full string", [](json& j) { j["full"] = "yes"; }, "full"},
      {"objects not list", [](json& j) { j["objects"] = json::object(); }, "objects"},
      {"digest", [](json& j) { j["objects"][0]["digest"] = "sha256:XYZ"; }, "objects[0].digest"},
      {"info hash", [](json& j) { j["objects"][1]["info_hash"] = "abc"; }, "objects[1].info_hash"},
      {"absurd size", [](json& j) { j["objects"][0]["size"] = std::uint64_t{1} << 60; },
       "objects[0].size"},
      {"kind", [](json& j) { j["objects"][0]["kind"] = "Blob!"; }, "objects[0].kind"},
      {"removed entry", [](json& j) { j["removed"][0] = 7; }, "removed[0]"},
      {"removed in full", [](json& j) { j["full"] = true; }, "removed must be empty"},
      {"gpus count", [](json& j) { j["gpus"][0]["count"] = 100000; }, "gpus[0].count"},
      {"netsetup array", [](json& j) { j["netsetup"] = json::array(); }, "netsetup"},
      {"rdma string", [](json& j) { j["rdma"] = "x"; }, "rdma"},
      {"health", [](json& j) { j["health"] = "great"; }, "health"},
      {"order id", [](json& j) { j["orders"][0]["id"] = "a b"; }, "orders[0].id"},
      {"order state", [](json& j) { j["orders"][0]["state"] = "paused"; }, "orders[0].state"},
      {"order bytes", [](json& j) { j["orders"][0]["bytes_done"] = "1"; }, "orders[0].bytes_done"},
      {"node control char",
       [](json& j) {
         j["epoch"] = std::string{'a', '\x01', 'b'};
       },
       "epoch"},
  };
  for (const auto& c : cases) {
    json j = base;
    c.mutate(j);
    auto d = decode(j.dump());
    ASSERT_FALSE(d) << c.what << " was accepted";
    EXPECT_NE(d.error().message.find(c.needle), std::string::npos)
        << c.what << ": " << d.error().message;
  }
}

TEST(Heartbeat, RefusesNonObjectsDeepNestingAndHugeDocuments) {
  EXPECT_FALSE(decode(""));
  EXPECT_FALSE(decode("[]"));
  EXPECT_FALSE(decode("null"));
  EXPECT_FALSE(decode("{\"schema\":2,\"node\":\"n\""));
  std::string deep = R"({"schema":2,"node":"n","labels":)" + std::string(10000, '[') +
                     std::string(10000, ']') + "}";
  auto d = decode(deep);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("deeper"), std::string::npos);
  json j = {{"schema", 2}, {"node", "n"}, {"netsetup", {{"blob", std::string(2u << 20, 'x')}}}};
  auto big = decode(j.dump());
  ASSERT_FALSE(big);
  EXPECT_TRUE(big.error().is(errc::too_large)) << big.error().message;
}

TEST(Heartbeat, UnknownKeysAreIgnoredForForwardCompatibility) {
  auto j = json::parse(encode(sample()));
  j["future_field"] = {{"x", 1}};
  EXPECT_TRUE(decode(j.dump()));
}

TEST(Heartbeat, ReplyDecoderIsStrictToo) {
  EXPECT_FALSE(decode_reply("[]"));
  EXPECT_FALSE(decode_reply(R"({"epoch":5})"));
  auto r = decode_reply(R"({"epoch":"e","orders":[{"id":"x","objects":[]}]})");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("exactly one of image, dataset and checkpoint"),
            std::string::npos);
  auto r2 = decode_reply(
      R"({"epoch":"e","orders":[{"id":"x","image":"a","objects":[{"digest":"sha256:1","size":1}]}]})");
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message.find("objects[0].digest"), std::string::npos);
}

// A document is kept as the text it came in (not parsed and dumped again: 0.45 ms for 22 KB),
// whatever its spacing; what reads it parses it, and encode() writes it canonical again.
TEST(Heartbeat, DocumentsAreKeptAsWritten) {
  auto j = json::parse(encode(sample()));
  j.erase("netsetup");
  const std::string doc = R"({ "validation" : {"passed": true},  "nics":[1, 2,3] })";
  auto text = j.dump();
  text.insert(text.size() - 1, R"(,"netsetup":)" + doc);
  auto d = decode(text);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->netsetup, doc);
  EXPECT_EQ(json::parse(d->netsetup), json::parse(doc));
  auto again = decode(encode(*d));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->netsetup, json::parse(doc).dump());
  // Malformed inside a well-formed message cannot happen (the message would not parse); a
  // document with bad UTF-8 or too deep is refused with the message.
  auto bad = text;
  bad.replace(bad.find("nics"), 4, std::string("n\xff") + "cs");
  EXPECT_FALSE(decode(bad));
}

// A delta may leave its netsetup document out when it is the one the scheduler holds; the
// scheduler's reply says whether it keeps documents (older ones do not: false when absent).
TEST(Heartbeat, NetsetupUnchangedTravelsOnlyInDeltasAndKeepsNetsetupInReplies) {
  auto m = sample();
  m.netsetup.clear();
  m.netsetup_unchanged = true;
  auto text = encode(m);
  EXPECT_EQ(text.find("\"schema\":1,\"validation\""), std::string::npos);
  auto d = decode(text);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_TRUE(d->netsetup_unchanged);
  EXPECT_TRUE(d->netsetup.empty());
  EXPECT_FALSE(json::parse(encode(sample())).contains("netsetup_unchanged"));
  EXPECT_FALSE(decode(encode(sample()))->netsetup_unchanged);

  auto j = json::parse(encode(sample()));
  j["netsetup_unchanged"] = true;  // beside the document itself
  auto both = decode(j.dump());
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("netsetup_unchanged beside a netsetup document"),
            std::string::npos);
  m.full = true;
  m.removed.clear();
  auto full = decode(encode(m));
  ASSERT_FALSE(full);
  EXPECT_NE(full.error().message.find("netsetup_unchanged in a full heartbeat"), std::string::npos);
  j.erase("netsetup");
  j["netsetup_unchanged"] = "yes";
  auto typed = decode(j.dump());
  ASSERT_FALSE(typed);
  EXPECT_NE(typed.error().message.find("netsetup_unchanged must be true or false"),
            std::string::npos);

  reply r;
  r.epoch = "e";
  EXPECT_FALSE(json::parse(encode(r)).contains("keeps_netsetup"));
  EXPECT_FALSE(decode_reply(encode(r))->keeps_netsetup);
  r.keeps_netsetup = true;
  EXPECT_TRUE(decode_reply(encode(r))->keeps_netsetup);
  EXPECT_FALSE(decode_reply(R"({"epoch":"e","keeps_netsetup":1})"));
}

// Bounded fuzz: 3000 mutated valid messages, 1000 random JSON documents, 1000 random byte
// strings. Nothing may crash; every accepted message must re-encode and decode to the same.
TEST(Heartbeat, FuzzDecoderWithBoundedRandomInputs) {
  std::mt19937_64 rng(12345);
  auto base = encode(sample());
  auto check_accepted = [](const result<message>& d) {
    if (!d) return;
    auto again = decode(encode(*d));
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(again->node, d->node);
    EXPECT_EQ(again->objects.size(), d->objects.size());
    EXPECT_EQ(again->orders.size(), d->orders.size());
  };
  const std::string alphabet = "{}[]\":,0123456789-.eEtrufalsn \\u\x01\xff";
  for (int i = 0; i < 3000; ++i) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      std::size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          s.erase(pos, 1 + rng() % 4);
          break;
        default:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
      }
    }
    check_accepted(decode(s));
  }
  // Random JSON values of bounded size placed at every known key.
  std::function<json(int)> random_json = [&](int depth) -> json {
    switch (rng() % (depth > 3 ? 5 : 7)) {
      case 0:
        return nullptr;
      case 1:
        return static_cast<bool>(rng() % 2);
      case 2:
        return static_cast<std::int64_t>(rng()) >> (rng() % 64);
      case 3:
        return std::string(rng() % 5, static_cast<char>('a' + rng() % 26));
      case 4:
        return static_cast<double>(rng() % 1000) / 7.0;
      case 5: {
        json a = json::array();
        for (int k = 0; k < static_cast<int>(rng() % 4); ++k) a.push_back(random_json(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int k = 0; k < static_cast<int>(rng() % 4); ++k)
          o["k" + std::to_string(rng() % 5)] = random_json(depth + 1);
        return o;
      }
    }
  };
  const std::vector<std::string> keys = {
      "schema", "node", "labels",   "ip",      "bt_port",        "http_port",
      "epoch",  "seq",  "full",     "objects", "removed",        "cache",
      "gpus",   "rdma", "netsetup", "health",  "health_reasons", "orders"};
  auto basej = json::parse(base);
  for (int i = 0; i < 1000; ++i) {
    json j = basej;
    j[keys[rng() % keys.size()]] = random_json(0);
    check_accepted(decode(j.dump()));
    if (j["objects"].is_array() && !j["objects"].empty() && j["objects"][0].is_object()) {
      j["objects"][0][std::vector<std::string>{"digest", "size", "kind", "info_hash"}[rng() % 4]] =
          random_json(0);
      check_accepted(decode(j.dump()));
    }
  }
  for (int i = 0; i < 1000; ++i) {
    std::string s(rng() % 256, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    check_accepted(decode(s));
    (void)decode_reply(s);
  }
}

}  // namespace
}  // namespace shoal::heartbeat
