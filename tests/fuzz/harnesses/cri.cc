// peerd's CRI client (peerd/include/peerd/cri.h): containerd's ListPodSandboxResponse, protobuf
// from a socket peerd trusts only so far. The decoder never crashes, errors are UTF-8 and
// bounded, and what it keeps is what the heartbeat may carry: valid job names, printable bounded
// pod names, at most heartbeat::max_pods of them.
#include "common/checkpoint.h"
#include "peerd/cri.h"
#include "../harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shoal;
  const auto in = fuzz::text(data, size);
  fuzz::check_result(peerd::cri::grpc_unframe(in), "cri::grpc_unframe");
  auto l = peerd::cri::decode_list_pod_sandbox(in, "shoal.io/job");
  fuzz::check_result(l, "cri::decode_list_pod_sandbox");
  if (!l) return 0;
  fuzz::accepted();
  for (const auto& s : l->sandboxes) {
    if (s.name.empty() || s.name.size() > 253 || s.ns.empty() || s.ns.size() > 63)
      fuzz::check_failed("sandbox name bounds", s.ns + "/" + s.name);
    if (!s.job.empty() && !checkpoint::valid_job(s.job)) fuzz::check_failed("sandbox job", s.job);
  }
  auto pods = peerd::cri::job_pods(*l);
  if (pods.size() > heartbeat::max_pods) fuzz::check_failed("job_pods count", "");
  for (const auto& p : pods) {
    if (p.pod.size() > heartbeat::max_pod_name_bytes) fuzz::check_failed("pod name size", p.pod);
    for (char c : p.pod) {
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
        fuzz::check_failed("pod name byte", p.pod);
    }
  }
  return 0;
}
