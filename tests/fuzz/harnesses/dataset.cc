// Dataset declarations (POST /shoal/v1/datasets), dataset manifests (what peerd fetches from
// registry-proxy), HTTP origins' nginx JSON listings, references, paths and include/exclude
// globs, and checkpoints' wire (registrations, records, refs, ranks). Every input goes through
// every parser: none crashes, errors are UTF-8 and bounded, a declaration that parses round-trips
// through to_json, a manifest that parses has a canonical form that parses again.
#include <string>
#include <string_view>
#include <vector>

#include "common/checkpoint.h"
#include "common/dataset.h"
#include "../harness.h"

namespace {

using namespace shoal;

void declarations(std::string_view in) {
  auto d = dataset::parse_declaration(in);
  fuzz::check_result(d, "parse_declaration");
  if (!d) return;
  fuzz::accepted();
  const std::string j = dataset::to_json(*d);
  auto again = dataset::parse_declaration(j);
  if (!again) fuzz::check_failed("declaration re-parse", again.error().message + " of " + j);
  if (dataset::to_json(*again) != j) fuzz::check_failed("declaration round trip", j);
  for (std::string_view p : {"a", "a/b.txt", "train/shard-00001.tar", "x/y/z/w.bin"})
    (void)dataset::selected(*d, p);
}

void manifests(std::string_view in) {
  auto m = dataset::parse_manifest(in);
  fuzz::check_result(m, "parse_manifest");
  if (!m) return;
  fuzz::accepted();
  const std::string c = dataset::canonical_json(*m);
  auto again = dataset::parse_manifest(c, dataset::manifest_digest(*m));
  if (!again) fuzz::check_failed("manifest re-parse", again.error().message);
  (void)dataset::manifest_objects(*m);
}

void listings(std::string_view in) {
  auto l = dataset::parse_autoindex(in, 100'000);
  fuzz::check_result(l, "parse_autoindex");
  if (!l) return;
  fuzz::accepted();
  for (const auto& e : *l) {
    auto c = dataset::check_path(e.name);
    if (!c) fuzz::check_error(c.error(), "check_path");
    (void)dataset::url_path_escape(e.name);
  }
}

void names(std::string_view in) {
  fuzz::check_result(dataset::parse_ref(in), "parse_ref");
  (void)dataset::valid_name(in);
  (void)dataset::valid_version(in);
  auto c = dataset::check_path(in);
  if (!c) fuzz::check_error(c.error(), "check_path");
  (void)dataset::url_path_escape(in);
  // "pattern\npath": globs as a declaration's include/exclude (bounded as the parser bounds them).
  auto nl = in.find('\n');
  if (nl != std::string_view::npos && nl <= 256 && in.size() - nl <= 1024)
    (void)dataset::glob_match(in.substr(0, nl), in.substr(nl + 1));
}

// Checkpoints (common/checkpoint.h) share the manifest format and the JSON shapes: registrations
// (a node's POST to the scheduler), records and lists (the scheduler's answers), refs, rank
// lists, scheduler paths and rank-bearing paths. What decodes survives its encoder: a
// registration keeps its manifest digest and group torrents, a record or list encodes to text
// that decodes and encodes to the same, a ref to one that parses to itself (latest refused
// where asked), a rank list stays sorted and unique.
std::string join(const std::vector<std::uint32_t>& v) {
  std::string s;
  for (auto r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

template <class Decode>
void round_trip(Decode decode, std::string_view in, const char* what) {
  auto r = decode(in);
  fuzz::check_result(r, what);
  if (!r) return;
  fuzz::accepted();
  const std::string once = checkpoint::encode(*r);
  auto again = decode(once);
  if (!again || checkpoint::encode(*again) != once) fuzz::check_failed(what, once);
}

void checkpoints(std::string_view in) {
  auto r = checkpoint::decode_registration(in);
  fuzz::check_result(r, "decode_registration");
  if (r) {
    fuzz::accepted();
    auto again = checkpoint::decode_registration(checkpoint::encode(r->reg));
    if (!again) fuzz::check_failed("registration re-decode", again.error().message);
    if (again->manifest_digest != r->manifest_digest ||
        again->reg.groups.size() != r->reg.groups.size())
      fuzz::check_failed("registration round trip", r->reg.manifest);
    for (std::size_t i = 0; i < r->reg.groups.size(); ++i)
      if (again->reg.groups[i].torrent != r->reg.groups[i].torrent ||
          again->reg.groups[i].info_hash != r->reg.groups[i].info_hash)
        fuzz::check_failed("registration group round trip", r->reg.groups[i].info_hash);
  }
  round_trip([](std::string_view t) { return checkpoint::decode_record(t); }, in, "decode_record");
  round_trip([](std::string_view t) { return checkpoint::decode_records(t); }, in,
             "decode_records");
  fuzz::check_result(checkpoint::parse_manifest(in), "checkpoint parse_manifest");
  for (bool latest : {true, false}) {
    auto ref = checkpoint::parse_ref(in, latest);
    fuzz::check_result(ref, "checkpoint parse_ref");
    if (!ref) continue;
    if (!latest && !ref->step) fuzz::check_failed("parse_ref gave latest where refused", in);
    auto again = checkpoint::parse_ref(ref->str(), latest);
    if (!again || again->str() != ref->str()) fuzz::check_failed("ref round trip", ref->str());
  }
  auto ranks = checkpoint::parse_ranks(in);
  fuzz::check_result(ranks, "parse_ranks");
  if (ranks) {
    for (std::size_t i = 1; i < ranks->size(); ++i)
      if ((*ranks)[i - 1] >= (*ranks)[i]) fuzz::check_failed("ranks not sorted and unique", in);
    auto again = checkpoint::parse_ranks(join(*ranks));
    if (!again || *again != *ranks) fuzz::check_failed("ranks round trip", join(*ranks));
  }
  fuzz::check_result(checkpoint::parse_scheduler_path(in), "parse_scheduler_path");
  (void)checkpoint::rank_of(in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = fuzz::text(data, size);
  declarations(in);
  manifests(in);
  listings(in);
  names(in);
  checkpoints(in);
  return 0;
}
