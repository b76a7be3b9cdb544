// S3 ListObjectsV2 pages and S3 error documents (registry-proxy's S3 dataset origins): the parser
// never crashes, refuses DOCTYPEs and entity tricks, its errors (which quote the server's <Code>
// and <Message>) are UTF-8 and bounded, and every key it returns is UTF-8.
#include "registry-proxy/s3.h"
#include "../harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shoal;
  auto p = s3::parse_list_page(fuzz::text(data, size));
  fuzz::check_result(p, "s3::parse_list_page", 1024);
  if (!p) return 0;
  fuzz::accepted();
  for (const auto& o : p->objects) {
    if (!fuzz::valid_utf8(o.key)) fuzz::check_failed("S3 key is not UTF-8", o.key);
    if (!fuzz::valid_utf8(o.etag)) fuzz::check_failed("S3 ETag is not UTF-8", o.etag);
  }
  if (!fuzz::valid_utf8(p->next_token)) fuzz::check_failed("S3 token is not UTF-8", p->next_token);
  if (p->truncated && p->next_token.empty()) fuzz::check_failed("truncated without a token", "");
  return 0;
}
