// Heartbeats (scheduler's POST /v1/heartbeat body) and the scheduler's replies (peerd decodes
// them): decode never crashes, errors are UTF-8 and bounded, and what decodes encodes to a
// message that decodes again to the same encoding.
#include "common/heartbeat.h"
#include "../harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shoal;
  const auto in = fuzz::text(data, size);
  (void)heartbeat::json_too_deep(in);
  auto m = heartbeat::decode(in);
  fuzz::check_result(m, "heartbeat::decode");
  if (m) {
    fuzz::accepted();
    const std::string once = heartbeat::encode(*m);
    auto again = heartbeat::decode(once);
    if (!again) fuzz::check_failed("heartbeat re-decode", again.error().message);
    if (heartbeat::encode(*again) != once) fuzz::check_failed("heartbeat round trip", once);
  }
  auto r = heartbeat::decode_reply(in);
  fuzz::check_result(r, "heartbeat::decode_reply");
  if (r) {
    fuzz::accepted();
    const std::string once = heartbeat::encode(*r);
    auto again = heartbeat::decode_reply(once);
    if (!again) fuzz::check_failed("reply re-decode", again.error().message);
    if (heartbeat::encode(*again) != once) fuzz::check_failed("reply round trip", once);
  }
  return 0;
}
