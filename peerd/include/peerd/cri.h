#pragma once
// The pods running on this node, from containerd's CRI (the kubelet's own view), matched to jobs
// by a pod label (node.cri_job_label, "shoal.io/job"), and reported with every heartbeat
// (common/heartbeat.h `pods`). The scheduler learns from them which nodes a job runs on, which
// its extender cannot (it has no bind verb): a job whose pods run here fails over when this node
// fails, whether or not it was placed through Shoal (scheduler/include/scheduler/jobs.h).
//
//   node.cri_socket     containerd's socket (/run/containerd/containerd.sock on a Kubernetes
//                       node); empty: no watch, and heartbeats carry no `pods`.
//   node.cri_interval   how often RuntimeService/ListPodSandbox is called.
//
// The call is gRPC (HTTP/2 without TLS over the unix socket, libcurl) with the two runtime.v1
// messages encoded and decoded here by hand (k8s.io/cri-api api.proto): the answer is bounded
// (max_response_bytes, max_sandboxes), and a sandbox whose label or name does not fit is skipped
// and counted, never trusted. Only READY sandboxes count. A failed listing leaves the pods
// unknown (the heartbeat omits them and the scheduler keeps what it knew) and is a warning on the
// first failure after a success, a metric every time.
//
// Lifecycle: start() lists once before returning (the first heartbeat carries the pods), then
// polls on a thread of its own (the call blocks up to node.cri_timeout; never on the event loop);
// stop() or the destructor ends it. Threading: current() is thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/heartbeat.h"
#include "common/metrics.h"
#include "peerd/config.h"

namespace shoal::peerd::cri {

inline constexpr std::size_t max_response_bytes = 16u << 20;
inline constexpr std::size_t max_sandboxes = 8192;

// One pod sandbox as the CRI lists it, with the job label's value ("" when absent).
struct sandbox {
  std::string id, name, ns;
  bool ready = false;
  std::string job;
};

struct listing {
  std::vector<sandbox> sandboxes;
  std::size_t skipped = 0;  // sandboxes whose name, namespace or job label does not fit
};

// Decodes a ListPodSandboxResponse (protobuf bytes, without gRPC framing), keeping of each
// sandbox's labels only `job_label`. A sandbox whose name or namespace is empty, too long or not
// printable, or whose job label is not a valid job name (checkpoint::valid_job), is skipped and
// counted. Errors: a malformed message (truncated, a bad wire type, over max_sandboxes).
[[nodiscard]] result<listing> decode_list_pod_sandbox(std::string_view msg,
                                                      std::string_view job_label);
// The ListPodSandboxRequest that asks for every sandbox (no filter): empty.
// The gRPC frame of a message: a zero compression flag, the length (4 bytes, big endian), the
// message; and the message of a framed answer (exactly one, uncompressed).
[[nodiscard]] std::string grpc_frame(std::string_view msg);
[[nodiscard]] result<std::string> grpc_unframe(std::string_view body);

// The READY sandboxes of `l` with a job, as the heartbeat carries them (at most
// heartbeat::max_pods, by namespace/name).
[[nodiscard]] std::vector<heartbeat::job_pod> job_pods(const listing& l);

// One gRPC unary call over the unix socket: the answer's message. Errors name the socket, the
// transport failure or the gRPC status and message. Blocking (at most `timeout`).
[[nodiscard]] result<std::string> grpc_call(const std::string& socket, const std::string& method,
                                            std::string_view request,
                                            std::chrono::milliseconds timeout);
// RuntimeService/ListPodSandbox on `socket`.
[[nodiscard]] result<listing> list_pod_sandboxes(const std::string& socket,
                                                 std::string_view job_label,
                                                 std::chrono::milliseconds timeout);

class pod_watcher {
 public:
  pod_watcher(const node_config& cfg, metrics::registry& reg);
  ~pod_watcher() { stop(); }
  pod_watcher(const pod_watcher&) = delete;
  pod_watcher& operator=(const pod_watcher&) = delete;

  // No-op when node.cri_socket is empty.
  void start();
  void stop();
  // The pods of the last successful listing; nullopt before one, after a failed one, or without
  // a watch.
  [[nodiscard]] std::optional<std::vector<heartbeat::job_pod>> current() const;

 private:
  void list_once();
  const node_config& cfg_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool failing_ = false;
  std::optional<std::vector<heartbeat::job_pod>> now_;
  std::thread thread_;
  metrics::counter* failures_;
  metrics::counter* skipped_;
  metrics::gauge* pods_;
};

}  // namespace shoal::peerd::cri
