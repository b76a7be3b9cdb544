// The heartbeat decoder's bounds: the object cap (decode_limits) and the body size derived from
// it, which must be at least what a real node with that many objects sends (encode()).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/heartbeat.h"
#include "common/sha256.h"

namespace shoal::heartbeat {
namespace {

held_object longest_object(std::size_t i) {
  held_object o;
  o.id = sha256_of(std::to_string(i));
  o.info_hash = std::string(40, 'f');
  o.size = max_object_size;
  o.kind = std::string(32, 'k');
  return o;
}

// Every list other than the objects at its bound, every string at its longest.
message fixed_parts_at_their_bounds() {
  message m;
  m.node = std::string(253, 'n');
  for (std::size_t i = 0; i < max_labels; ++i) {
    std::string k = std::to_string(i);
    m.labels[k + std::string(128 - k.size(), 'k')] = std::string(256, 'v');
  }
  m.ip = "1111:2222:3333:4444:5555:6666:7777:8888";
  m.bt_port = m.http_port = 65535;
  m.epoch = std::string(64, 'e');
  m.seq = std::uint64_t{1} << 62;
  m.cache_capacity = m.cache_used = max_object_size * 1024;
  for (std::size_t i = 0; i < max_gpu_groups; ++i)
    m.gpus.push_back({std::string(128, 'g'), max_gpus_per_group});
  // Each document just under its bound (the decoder measures it re-serialized).
  nlohmann::json doc = {{"x", std::string(max_document_bytes - 16, 'd')}};
  m.rdma = doc.dump();
  m.netsetup = doc.dump();
  m.health = "degraded";
  for (int i = 0; i < 32; ++i) m.health_reasons.push_back(std::string(512, 'r'));
  for (std::size_t i = 0; i < max_orders; ++i) {
    order_report r;
    r.id = std::to_string(i) + std::string(128 - std::to_string(i).size(), 'o');
    r.state = order_state::running;
    r.bytes_done = r.bytes_total = max_object_size * 1024;
    r.error = std::string(4096, 'x');
    m.orders.push_back(r);
  }
  for (std::size_t i = 0; i < max_datasets; ++i) {
    std::string name = std::to_string(i) + "@" + std::string(320, 'v');
    m.datasets.push_back({name, max_object_size * 1024, max_object_size * 1024, true});
  }
  for (std::size_t i = 0; i < max_checkpoints; ++i) {
    std::string name = std::string(128 - std::to_string(i).size(), 'j') + std::to_string(i) + "@" +
                       std::to_string(999'999'999'999'999'999ull - i);
    m.checkpoints.push_back({name, max_object_size * 1024, max_object_size * 1024, true});
  }
  m.pods_known = true;
  for (std::size_t i = 0; i < max_pods; ++i) {
    m.pods.push_back(
        {std::string(128 - std::to_string(i).size(), 'j') + std::to_string(i),
         std::string(max_pod_name_bytes - std::to_string(i).size(), 'p') + std::to_string(i)});
  }
  return m;
}

TEST(HeartbeatLimits, TheLongestObjectEncodesInMaxObjectJsonBytes) {
  message one, two;
  one.objects = {longest_object(1)};
  two.objects = {longest_object(1), longest_object(2)};
  // Adding one object adds exactly its encoding and a comma.
  EXPECT_EQ(encode(two).size() - encode(one).size(), max_object_json_bytes);
}

TEST(HeartbeatLimits, AMaximalMessageFitsTheSizeBoundAndDecodes) {
  auto m = fixed_parts_at_their_bounds();
  std::string fixed = encode(m);
  EXPECT_LE(fixed.size(), max_fixed_json_bytes);
  EXPECT_GE(fixed.size(), max_fixed_json_bytes * 9 / 10) << "the bound is far above the maximum";
  constexpr std::size_t cap = 2000;
  for (std::size_t i = 0; i < cap; ++i) m.objects.push_back(longest_object(i));
  std::string text = encode(m);
  EXPECT_LE(text.size(), max_message_bytes_for(cap));
  auto d = decode(text, {.max_objects = cap});
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->objects.size(), cap);
  EXPECT_EQ(d->orders.size(), max_orders);
}

TEST(HeartbeatLimits, MoreObjectsThanTheCapAreRefused) {
  message m;
  m.node = "n1";
  for (std::size_t i = 0; i < 11; ++i) m.objects.push_back(longest_object(i));
  auto d = decode(encode(m), {.max_objects = 10});
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.error().is(errc::too_large)) << d.error().message;
  EXPECT_TRUE(decode(encode(m), {.max_objects = 11}));
  // objects and removed count together in a delta.
  message delta;
  delta.node = "n1";
  delta.full = false;
  for (std::size_t i = 0; i < 6; ++i) delta.objects.push_back(longest_object(i));
  for (std::size_t i = 0; i < 5; ++i) delta.removed.push_back(sha256_of("r" + std::to_string(i)));
  d = decode(encode(delta), {.max_objects = 10});
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.error().is(errc::too_large));
  EXPECT_NE(d.error().message.find("together"), std::string::npos) << d.error().message;
}

TEST(HeartbeatLimits, ABodyLargerThanTheCapAllowsIsRefusedBeforeParsing) {
  // Not even JSON: refused on its size alone, so nothing is parsed.
  std::string huge(max_message_bytes_for(10) + 1, '[');
  auto d = decode(huge, {.max_objects = 10});
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.error().is(errc::too_large)) << d.error().message;
  EXPECT_NE(d.error().message.find("10 objects"), std::string::npos) << d.error().message;
  // The default cap's bound, and that it stays below the review's 29.6 MiB flood.
  EXPECT_EQ(max_message_bytes_for(default_max_objects), (8u << 20) + (896u << 10) + 20'600'000u);
  EXPECT_LT(max_message_bytes_for(default_max_objects), 29u << 20);
}

// "pods": present (even empty) means known, absent unknown; entries are checked like the rest.
TEST(HeartbeatPods, RoundTripAndHostileEntriesAreRefused) {
  message m;
  m.node = "n1";
  EXPECT_EQ(encode(m).find("\"pods\""), std::string::npos);
  auto d = decode(encode(m));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_FALSE(d->pods_known);
  m.pods_known = true;
  d = decode(encode(m));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_TRUE(d->pods_known);
  EXPECT_TRUE(d->pods.empty());
  m.pods = {{"train", "ml/train-worker-0"}, {"eval-2", "ml/eval"}};
  d = decode(encode(m));
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->pods.size(), 2u);
  EXPECT_EQ(d->pods[1].job, "eval-2");
  EXPECT_EQ(d->pods[1].pod, "ml/eval");

  auto with_pods = [&](const nlohmann::json& pods) {
    auto j = nlohmann::json::parse(encode(m));
    j["pods"] = pods;
    return decode(j.dump());
  };
  for (const auto& bad :
       {nlohmann::json{{{"job", "Train!"}, {"pod", "a/b"}}}, nlohmann::json{{{"job", "train"}}},
        nlohmann::json{{{"job", "train"}, {"pod", std::string(321, 'p')}}},
        nlohmann::json{{{"job", "train"}, {"pod", "a/\u0001"}}}, nlohmann::json{"train"},
        nlohmann::json("train")}) {
    auto r = with_pods(bad);
    EXPECT_FALSE(r) << bad.dump();
    if (!r) {
      EXPECT_NE(r.error().message.find("pods"), std::string::npos) << r.error().message;
    }
  }
  nlohmann::json many = nlohmann::json::array();
  for (std::size_t i = 0; i <= max_pods; ++i) many.push_back({{"job", "j"}, {"pod", "p"}});
  EXPECT_FALSE(with_pods(many));
}

}  // namespace
}  // namespace shoal::heartbeat
