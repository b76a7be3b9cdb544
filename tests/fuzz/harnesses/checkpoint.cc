// Checkpoints (common/checkpoint.h): what the scheduler takes from a node (a registration: the
// manifest and its group torrents; refs, rank lists and paths in URLs) and what peerd and
// shoalctl take from the scheduler (records and lists of them). Nothing crashes, errors are
// UTF-8 and bounded, and what decodes survives its encoder: a ref, a rank list, a route, a
// record or list re-encodes to what decodes to the same, and a registration keeps its manifest
// digest and group torrents.
#include <string>

#include "common/checkpoint.h"
#include "../harness.h"

namespace {

using namespace shoal;

std::string join(const std::vector<std::uint32_t>& v) {
  std::string s;
  for (auto r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = fuzz::text(data, size);

  for (bool latest : {true, false}) {
    auto r = checkpoint::parse_ref(in, latest);
    fuzz::check_result(r, "checkpoint::parse_ref");
    if (r) {
      fuzz::accepted();
      if (!latest && !r->step) fuzz::check_failed("parse_ref gave latest where refused", in);
      auto again = checkpoint::parse_ref(r->str(), latest);
      if (!again || again->str() != r->str()) fuzz::check_failed("ref round trip", r->str());
    }
  }
  auto ranks = checkpoint::parse_ranks(in);
  fuzz::check_result(ranks, "checkpoint::parse_ranks");
  if (ranks) {
    for (std::size_t i = 1; i < ranks->size(); ++i)
      if ((*ranks)[i - 1] >= (*ranks)[i]) fuzz::check_failed("ranks not sorted and unique", in);
    auto again = checkpoint::parse_ranks(join(*ranks));
    if (!again || *again != *ranks) fuzz::check_failed("ranks round trip", join(*ranks));
  }
  auto route = checkpoint::parse_scheduler_path(in);
  fuzz::check_result(route, "checkpoint::parse_scheduler_path");
  (void)checkpoint::rank_of(in);

  auto reg = checkpoint::decode_registration(in);
  fuzz::check_result(reg, "checkpoint::decode_registration");
  if (reg) {
    fuzz::accepted();
    auto again = checkpoint::decode_registration(checkpoint::encode(reg->reg));
    if (!again) fuzz::check_failed("registration re-decode", again.error().message);
    if (again->manifest_digest != reg->manifest_digest ||
        again->reg.groups.size() != reg->reg.groups.size())
      fuzz::check_failed("registration round trip", reg->reg.manifest);
    for (std::size_t i = 0; i < reg->reg.groups.size(); ++i)
      if (again->reg.groups[i].torrent != reg->reg.groups[i].torrent ||
          again->reg.groups[i].info_hash != reg->reg.groups[i].info_hash)
        fuzz::check_failed("registration group round trip", reg->reg.groups[i].info_hash);
  }
  auto rec = checkpoint::decode_record(in);
  fuzz::check_result(rec, "checkpoint::decode_record");
  if (rec) {
    fuzz::accepted();
    const std::string once = checkpoint::encode(*rec);
    auto again = checkpoint::decode_record(once);
    if (!again || checkpoint::encode(*again) != once) fuzz::check_failed("record round trip", once);
  }
  auto list = checkpoint::decode_records(in);
  fuzz::check_result(list, "checkpoint::decode_records");
  if (list) {
    fuzz::accepted();
    const std::string once = checkpoint::encode(*list);
    auto again = checkpoint::decode_records(once);
    if (!again || checkpoint::encode(*again) != once) fuzz::check_failed("list round trip", once);
  }
  return 0;
}
