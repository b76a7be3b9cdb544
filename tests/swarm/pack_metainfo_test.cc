#include <gtest/gtest.h>

#include <libtorrent/torrent_info.hpp>

#include <map>
#include <random>

#include "swarm/metainfo.h"
#include "common/sha256.h"

namespace shoal {
namespace {

std::map<digest, std::string> make_objects(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::map<digest, std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string s(1000 + rng() % 200000, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    out[sha256_of(s)] = s;
  }
  return out;
}

result<pack_metainfo> build(const std::map<digest, std::string>& objs,
                            std::vector<std::pair<digest, std::uint64_t>> order) {
  return build_pack(
      order,
      [&](const digest& d, std::uint64_t off, char* buf, std::size_t n) -> result<std::size_t> {
        const auto& s = objs.at(d);
        std::size_t k = std::min<std::size_t>(n, s.size() - static_cast<std::size_t>(off));
        std::memcpy(buf, s.data() + off, k);
        return k;
      });
}

TEST(PackMetainfo, DeterministicLayoutAndLibtorrentAgrees) {
  auto objs = make_objects(40, 1);
  std::vector<std::pair<digest, std::uint64_t>> files;
  for (const auto& [d, s] : objs) files.emplace_back(d, s.size());
  auto reversed = files;
  std::reverse(reversed.begin(), reversed.end());
  reversed.push_back(reversed.front());  // a duplicate is removed
  auto a = build(objs, files);
  auto b = build(objs, reversed);
  ASSERT_TRUE(a) << a.error().to_string();
  ASSERT_TRUE(b);
  EXPECT_EQ(a->info_hash(), b->info_hash());
  auto t = a->torrent_file({"http://127.0.0.1:1/announce"});
  lt::error_code ec;
  lt::torrent_info ti(t.data(), static_cast<int>(t.size()), ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(hex_of(a->info_hash()),
            to_hex(std::span<const std::uint8_t>(
                reinterpret_cast<const std::uint8_t*>(ti.info_hashes().v1.data()), 20)));
  ASSERT_EQ(ti.num_files(), 40);
  const auto& fs = ti.files();
  for (int i = 0; i < ti.num_files(); ++i) {
    std::string hex = files[static_cast<std::size_t>(i)].first.hex();
    EXPECT_EQ(fs.file_path(lt::file_index_t(i)), "sha256/" + hex.substr(0, 2) + "/" + hex);
  }
  auto parsed = pack_metainfo::parse(t, reversed);
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed->info_hash(), a->info_hash());
  // A different member set is refused.
  auto fewer = files;
  fewer.pop_back();
  EXPECT_FALSE(pack_metainfo::parse(t, fewer));
}

TEST(PackMetainfo, RefusesWrongBytes) {
  auto objs = make_objects(5, 2);
  std::vector<std::pair<digest, std::uint64_t>> files;
  for (const auto& [d, s] : objs) files.emplace_back(d, s.size());
  auto broken = objs;
  broken.begin()->second[10] ^= 1;
  auto r = build(broken, files);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::digest_mismatch));
}

}  // namespace
}  // namespace shoal
