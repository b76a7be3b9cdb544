// Bencode (tracker answers, .torrent files, grants) and the swarm's metainfo parsers (object and
// pack torrents from registry-proxy): the decoder never crashes, is strict (what it accepts encodes
// back to the same bytes), errors are UTF-8 and bounded; a torrent that parses for the digest
// its own name claims builds back into a torrent with the same info-hash.
#include "common/bencode.h"
#include "common/grant.h"
#include "swarm/metainfo.h"
#include "../harness.h"

namespace {

using namespace shoal;

// The digests a torrent claims: its name (object torrents) or its files' paths (packs).
void metainfo(const bencode::value& v, std::string_view in) {
  const bencode::value* info = v.find("info");
  if (!info) return;
  if (const bencode::value* name = info->find("name"); name && name->is_string()) {
    if (auto d = digest::from_hex(name->as_string())) {
      std::vector<std::string> trackers;
      auto om = object_metainfo::parse(in, *d, &trackers);
      fuzz::check_result(om, "object_metainfo::parse");
      if (om && om->info_hash() != sha1_of(info->raw))
        fuzz::check_failed("object torrent info-hash", om->info_hash_hex());
    }
  }
  const bencode::value* files = info->find("files");
  if (!files || !files->is_list()) return;
  std::vector<std::pair<digest, std::uint64_t>> expected;
  for (const auto& f : files->as_list()) {
    const bencode::value* path = f.find("path");
    const bencode::value* len = f.find("length");
    if (!path || !path->is_list() || path->as_list().empty() || !len || !len->is_int()) continue;
    const auto& last = path->as_list().back();
    if (!last.is_string()) continue;
    if (auto d = digest::from_hex(last.as_string()))
      expected.emplace_back(*d, static_cast<std::uint64_t>(len->as_int()));
  }
  auto pm = pack_metainfo::parse(in, expected);
  fuzz::check_result(pm, "pack_metainfo::parse");
  if (pm && pm->info_hash() != sha1_of(info->raw))
    fuzz::check_failed("pack torrent info-hash", pm->info_hash_hex());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = fuzz::text(data, size);
  bencode::limits lim;
  lim.max_items = 100'000;
  lim.max_string = 1u << 20;
  // Grants arrive from peers (extension handshake) and from registry-proxy (Shoal-Grant): the
  // parsers refuse garbage with a bounded error and never crash.
  fuzz::check_result(grant::peek(in), "grant::peek");
  fuzz::check_result(grant::from_header(in), "grant::from_header");
  auto v = bencode::decode(in, lim);
  fuzz::check_result(v, "bencode::decode");
  if (!v) return 0;
  fuzz::accepted();
  if (bencode::encode(*v) != in) fuzz::check_failed("bencode round trip", in);
  metainfo(*v, in);
  return 0;
}
