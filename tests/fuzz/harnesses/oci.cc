// OCI manifests and references: registry answers the scheduler's resolver parses (manifests and
// indexes), the media type sniffed from a manifest body, image and manifest references, and the
// registry-proxy answers peerd decodes (chunk lists, progress, error bodies). Nothing crashes,
// errors are UTF-8 and bounded.
#include "common/oci.h"
#include "common/origin_protocol.h"
#include "scheduler/resolver.h"
#include "../harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shoal;
  const auto in = fuzz::text(data, size);
  (void)oci::manifest_media_type_of(in);
  auto m = scheduler::parse_manifest(in);
  fuzz::check_result(m, "scheduler::parse_manifest");
  if (m) fuzz::accepted();
  fuzz::check_result(oci::parse_manifest_ref(in), "parse_manifest_ref");
  auto ir = oci::parse_image_ref(in);
  fuzz::check_result(ir, "parse_image_ref");
  if (ir) {  // normalized references are a fixed point
    auto again = oci::parse_image_ref(ir->str());
    if (!again || again->str() != ir->str()) fuzz::check_failed("image ref round trip", ir->str());
  }
  (void)oci::valid_name(in);
  (void)oci::valid_tag(in);
  (void)oci::valid_registry_host(in);
  if (oci::valid_name(in)) (void)oci::normalize_docker_hub_name(in);
  fuzz::check_result(origin::decode_chunk_list(in), "decode_chunk_list");
  fuzz::check_result(origin::decode_progress(in), "decode_progress");
  (void)origin::error_message_of(in);
  (void)origin::version_mismatch_of(400, in);
  return 0;
}
