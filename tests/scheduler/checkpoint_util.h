#pragma once
// Checkpoint registrations for scheduler tests (checkpoints_test, shared_state_redis_test).
#include <openssl/evp.h>

#include "common/bencode.h"
#include "common/checkpoint.h"
#include "test_util.h"

namespace shoal::scheduler::testing {

constexpr std::uint64_t ckpt_MiB = 1 << 20;

// A .torrent naming `name` and its v1 info-hash.
inline checkpoint::group_torrent torrent_for(const std::string& name) {
  bencode::dict info{
      {"length", 1234}, {"name", name}, {"piece length", 16384}, {"pieces", std::string(20, 'x')}};
  std::string info_text = bencode::encode(bencode::value(info));
  std::string t = bencode::encode(bencode::value(bencode::dict{{"info", info}}));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(info_text.data(), info_text.size(), md, &len, EVP_sha1(), nullptr);
  return {to_hex(std::span<const std::uint8_t>(md, len)), t};
}

// A registration of job@step by `writer`: two large rank files (one group each) and small
// metadata (a pack). `salt` changes the files' content (another manifest for the same step).
inline checkpoint::registration make_reg(const std::string& job, std::uint64_t step,
                                         const std::string& writer, const std::string& salt = "") {
  std::vector<dataset::file_entry> files;
  files.push_back({"rank_0/model.pt", 8 * ckpt_MiB, dg(job + "r0" + salt), {0}});
  files.push_back({"rank_1/model.pt", 6 * ckpt_MiB, dg(job + "r1" + salt), {1}});
  files.push_back({"meta.json", 100, dg(job + "meta" + salt), {}});
  auto m = checkpoint::build_manifest(job, step, writer, std::move(files));
  EXPECT_TRUE(m) << (m ? "" : m.error().message);
  checkpoint::registration r;
  r.manifest = dataset::canonical_json(*m);
  for (std::size_t g = 0; g < m->groups.size(); ++g)
    r.groups.push_back(torrent_for(job + "@" + std::to_string(step) + "/" + std::to_string(g)));
  return r;
}

}  // namespace shoal::scheduler::testing
