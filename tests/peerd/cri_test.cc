// peerd's CRI client: the runtime.v1 ListPodSandboxResponse decoder on hand-encoded messages
// (the field numbers of k8s.io/cri-api api.proto), gRPC framing, and the call's errors. The
// listing against a real containerd is tests/checkpoints/cluster_test.py.
#include "peerd/cri.h"

#include <gtest/gtest.h>

#include <string>

namespace shoal::peerd::cri {
namespace {

std::string varint(std::uint64_t v) {
  std::string out;
  do {
    auto b = static_cast<unsigned char>(v & 0x7f);
    v >>= 7;
    out.push_back(static_cast<char>(b | (v ? 0x80 : 0)));
  } while (v);
  return out;
}
std::string field(std::uint32_t num, std::string_view payload) {
  return varint((std::uint64_t{num} << 3) | 2) + varint(payload.size()) + std::string(payload);
}
std::string field_varint(std::uint32_t num, std::uint64_t v) {
  return varint(std::uint64_t{num} << 3) + varint(v);
}
std::string label(std::string_view k, std::string_view v) {
  return field(5, field(1, k) + field(2, v));
}
// A PodSandbox as containerd sends it: id, metadata, state, created_at, labels, annotations.
std::string sandbox_msg(std::string_view id, std::string_view name, std::string_view ns, int state,
                        const std::string& labels) {
  std::string meta = field(1, name) + field(2, "uid-1") + field(3, ns) + field_varint(4, 0);
  std::string s = field(1, id) + field(2, meta);
  if (state != 0) s += field_varint(3, static_cast<std::uint64_t>(state));
  s += field_varint(4, 1733200000000000000ull) + labels +
       field(6, field(1, "kubernetes.io/config.source") + field(2, "api")) + field(7, "runc");
  return field(1, s);
}

TEST(CriDecode, ReadyPodsWithTheJobLabelBecomeJobPods) {
  std::string msg =
      sandbox_msg("a1", "train-worker-0", "ml", 0,
                  label("app", "x") + label("shoal.io/job", "train")) +
      sandbox_msg("a2", "train-worker-1", "ml", 1, label("shoal.io/job", "train")) +  // NOTREADY
      sandbox_msg("a3", "web", "default", 0, label("app", "web")) +                   // no job
      sandbox_msg("a4", "eval", "ml", 0, label("shoal.io/job", "eval-2"));
  auto l = decode_list_pod_sandbox(msg, "shoal.io/job");
  ASSERT_TRUE(l) << l.error().message;
  ASSERT_EQ(l->sandboxes.size(), 4u);
  EXPECT_EQ(l->skipped, 0u);
  EXPECT_EQ(l->sandboxes[0].id, "a1");
  EXPECT_TRUE(l->sandboxes[0].ready);
  EXPECT_FALSE(l->sandboxes[1].ready);
  EXPECT_EQ(l->sandboxes[2].job, "");
  auto pods = job_pods(*l);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].pod, "ml/eval");
  EXPECT_EQ(pods[0].job, "eval-2");
  EXPECT_EQ(pods[1].pod, "ml/train-worker-0");
  EXPECT_EQ(pods[1].job, "train");
  // Another label name, as node.cri_job_label may say.
  auto other = decode_list_pod_sandbox(msg, "app");
  ASSERT_TRUE(other);
  EXPECT_EQ(job_pods(*other).size(), 2u);  // "x" and "web"
}

TEST(CriDecode, SandboxesThatDoNotFitAreSkippedAndCounted) {
  std::string msg = sandbox_msg("b1", "ok", "ml", 0, label("shoal.io/job", "train")) +
                    sandbox_msg("b2", "bad", "ml", 0, label("shoal.io/job", "Train!")) +
                    sandbox_msg("b3", "has/slash", "ml", 0, label("shoal.io/job", "train")) +
                    sandbox_msg("b4", "ctl\x01", "ml", 0, label("shoal.io/job", "train")) +
                    sandbox_msg("b5", "", "ml", 0, label("shoal.io/job", "train")) +
                    sandbox_msg("b6", std::string(254, 'n'), "ml", 0, "") +
                    sandbox_msg("b7", "x", std::string(64, 's'), 0, "");
  auto l = decode_list_pod_sandbox(msg, "shoal.io/job");
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->sandboxes.size(), 1u);
  EXPECT_EQ(l->skipped, 6u);
  EXPECT_EQ(job_pods(*l).size(), 1u);
}

TEST(CriDecode, MalformedMessagesAreErrorsNotCrashes) {
  std::string good = sandbox_msg("c1", "p", "ml", 0, label("shoal.io/job", "train"));
  // Every truncation of a valid message is either a clean error or a shorter valid message.
  for (std::size_t n = 0; n < good.size(); ++n) {
    auto l = decode_list_pod_sandbox(std::string_view(good).substr(0, n), "shoal.io/job");
    if (l) {
      EXPECT_TRUE(l->sandboxes.empty()) << n;
    }
  }
  EXPECT_FALSE(decode_list_pod_sandbox(std::string("\x0b\x00", 2), "l"));  // group (wire 3)
  EXPECT_FALSE(decode_list_pod_sandbox(std::string(11, '\xff'), "l"));     // endless varint
  EXPECT_FALSE(decode_list_pod_sandbox(std::string("\x0a\xff\xff\xff\xff\x0f", 6), "l"));  // length
  EXPECT_FALSE(decode_list_pod_sandbox(std::string("\x00\x01", 2), "l"));  // field number 0
  // Unknown fields of every wire type are skipped.
  std::string extra = field_varint(9, 5) + std::string("\x51") + std::string(8, '\0') +
                      std::string("\x55") + std::string(4, '\0') + field(10, "x") + good;
  auto l = decode_list_pod_sandbox(extra, "shoal.io/job");
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->sandboxes.size(), 1u);
  // A flood of sandboxes is refused.
  std::string flood;
  for (std::size_t i = 0; i <= max_sandboxes; ++i) flood += field(1, "");
  auto f = decode_list_pod_sandbox(flood, "l");
  ASSERT_FALSE(f);
  EXPECT_TRUE(f.error().is(errc::too_large));
}

TEST(CriGrpc, FramesRoundTripAndBadFramesAreRefused) {
  std::string framed = grpc_frame("hello");
  ASSERT_EQ(framed.size(), 10u);
  EXPECT_EQ(framed[4], 5);
  auto m = grpc_unframe(framed);
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, "hello");
  EXPECT_FALSE(grpc_unframe("abc"));
  std::string compressed = framed;
  compressed[0] = 1;
  EXPECT_FALSE(grpc_unframe(compressed));
  EXPECT_FALSE(grpc_unframe(framed + "x"));
  EXPECT_FALSE(grpc_unframe(framed.substr(0, 8)));
  auto empty = grpc_unframe(grpc_frame(""));
  ASSERT_TRUE(empty);
  EXPECT_EQ(*empty, "");
}

TEST(CriGrpc, NoSocketIsAnErrorNamingIt) {
  auto l = list_pod_sandboxes("/nonexistent/shoal-cri.sock", "shoal.io/job",
                              std::chrono::milliseconds(2000));
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().message.find("/nonexistent/shoal-cri.sock"), std::string::npos)
      << l.error().message;
  EXPECT_NE(l.error().message.find("ListPodSandbox"), std::string::npos) << l.error().message;
}

}  // namespace
}  // namespace shoal::peerd::cri
