// The checkpoint wire (common/checkpoint.h): refs, rank rules, manifests grouped per rank set,
// registrations and records, scheduler paths; hostile inputs refused with a cause.
#include "common/checkpoint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/sha256.h"

namespace shoal {
namespace {

dataset::file_entry file(std::string path, std::uint64_t size, std::string content = {}) {
  dataset::file_entry f;
  f.path = std::move(path);
  f.size = size;
  f.id = sha256_of(content.empty() ? f.path : content);
  if (auto r = checkpoint::rank_of(f.path)) f.ranks = {*r};
  return f;
}

TEST(Checkpoint, Refs) {
  auto r = checkpoint::parse_ref("llama-70b@1200");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->job, "llama-70b");
  EXPECT_EQ(r->step, 1200u);
  EXPECT_EQ(r->str(), "llama-70b@1200");
  auto latest = checkpoint::parse_ref("llama-70b@latest");
  ASSERT_TRUE(latest);
  EXPECT_FALSE(latest->step);
  EXPECT_EQ(checkpoint::parse_ref("llama-70b")->str(), "llama-70b@latest");
  EXPECT_EQ(checkpoint::parse_ref("j@0")->step, 0u);
  EXPECT_FALSE(checkpoint::parse_ref("j@latest", false));
  EXPECT_FALSE(checkpoint::parse_ref("j", false));
  for (std::string_view bad : {"", "@1", "J@1", "j@01", "j@-1", "j@1x", "j@", "j@1@2",
                               "j@9999999999999999999", "../x@1", "j@ 1"}) {
    auto b = checkpoint::parse_ref(bad);
    EXPECT_FALSE(b) << bad;
    if (!b) {
      EXPECT_FALSE(b.error().message.empty());
    }
  }
}

TEST(Checkpoint, RankOfPaths) {
  EXPECT_EQ(checkpoint::rank_of("rank_3/model.pt"), 3u);
  EXPECT_EQ(checkpoint::rank_of("mp_rank_00_model_states.pt"), 0u);
  EXPECT_EQ(checkpoint::rank_of("shard-rank7.bin"), 7u);
  EXPECT_EQ(checkpoint::rank_of("a/RANK-12/b"), 12u);
  // The last rank-like word wins ("zero_pp_rank_3_mp_rank_01" is model-parallel rank 1).
  EXPECT_EQ(checkpoint::rank_of("zero_pp_rank_3_mp_rank_01_optim_states.pt"), 1u);
  EXPECT_FALSE(checkpoint::rank_of("config.json"));
  EXPECT_FALSE(checkpoint::rank_of("frank_1.txt"));     // "rank" inside a word
  EXPECT_FALSE(checkpoint::rank_of("rank_1234567.x"));  // 7 digits
  EXPECT_FALSE(checkpoint::rank_of("ranking.txt"));
}

TEST(Checkpoint, ParseRanks) {
  auto r = checkpoint::parse_ranks("3, 0,3,5");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, (std::vector<std::uint32_t>{0, 3, 5}));
  EXPECT_TRUE(checkpoint::parse_ranks("")->empty());
  EXPECT_FALSE(checkpoint::parse_ranks("1,,2"));
  EXPECT_FALSE(checkpoint::parse_ranks("a"));
  EXPECT_FALSE(checkpoint::parse_ranks("-1"));
  EXPECT_FALSE(checkpoint::parse_ranks("99999999"));
}

// Packs hold one rank set each: a restore of some ranks takes whole groups.
TEST(Checkpoint, ManifestGroupsPerRankSet) {
  std::vector<dataset::file_entry> files = {
      file("rank_0/shard.bin", 8u << 20), file("rank_1/shard.bin", 8u << 20),
      file("rank_0/optim.bin", 1000),     file("rank_1/optim.bin", 2000),
      file("rank_0/extra.bin", 3000),     file("config.json", 100),
      file("tokenizer.json", 200),        file("empty", 0)};
  auto m = checkpoint::build_manifest("job-a", 42, "node3", files);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->name, "job-a");
  EXPECT_EQ(m->version, "42");
  EXPECT_EQ(checkpoint::step_of(*m), 42u);
  EXPECT_EQ(checkpoint::writer_of(*m), "node3");
  // 2 singles, packs for rank 0, rank 1 and the shared files.
  EXPECT_EQ(m->groups.size(), 5u);
  for (const auto& g : m->groups) {
    for (auto i : g.files) EXPECT_EQ(m->files[i].ranks, m->files[g.files.front()].ranks);
  }
  auto text = dataset::canonical_json(*m);
  auto parsed = checkpoint::parse_manifest(text, sha256_of(text));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(dataset::canonical_json(*parsed), text);
  EXPECT_NE(text.find("\"ranks\":[0]"), std::string::npos);

  auto take = checkpoint::files_for_ranks(*m, {1});
  std::vector<std::string> names;
  for (auto i : take) names.push_back(m->files[i].path);
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "empty", "rank_1/optim.bin",
                                             "rank_1/shard.bin", "tokenizer.json"}));
  EXPECT_EQ(checkpoint::files_for_ranks(*m, {}).size(), files.size());

  // A dataset manifest is not a checkpoint's (origin), nor is a bad step.
  auto ds = dataset::build_manifest("job-a", "42", "s3://b/", files);
  ASSERT_TRUE(ds);
  auto refused = checkpoint::parse_manifest(dataset::canonical_json(*ds));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("node:"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(checkpoint::build_manifest("Job", 1, "n", files));
  EXPECT_FALSE(checkpoint::build_manifest("job", 1, "bad node!", files));
}

TEST(Checkpoint, ManifestRanksAreCheckedOnParse) {
  auto m = checkpoint::build_manifest("j", 1, "n1", {file("rank_2/a.bin", 10)});
  ASSERT_TRUE(m);
  auto text = dataset::canonical_json(*m);
  for (auto [from, to] :
       {std::pair{"\"ranks\":[2]", "\"ranks\":[2,2]"}, std::pair{"\"ranks\":[2]", "\"ranks\":[]"},
        std::pair{"\"ranks\":[2]", "\"ranks\":[3,2]"},
        std::pair{"\"ranks\":[2]", "\"ranks\":[\"2\"]"},
        std::pair{"\"ranks\":[2]", "\"ranks\":[99999999]"}}) {
    std::string bad = text;
    bad.replace(bad.find(from), std::string_view(from).size(), to);
    EXPECT_FALSE(checkpoint::parse_manifest(bad)) << bad;
  }
}

checkpoint::registration sample_registration() {
  auto m = checkpoint::build_manifest("j", 7, "n1",
                                      {file("rank_0/a.bin", 5u << 20), file("meta.json", 10)});
  checkpoint::registration r;
  r.manifest = dataset::canonical_json(*m);
  for (std::size_t g = 0; g < m->groups.size(); ++g)
    r.groups.push_back(
        {std::string(40, 'a'), "d8:announce0:4:infod4:name1:xee" + std::to_string(g)});
  return r;
}

TEST(Checkpoint, RegistrationRoundTrip) {
  auto r = sample_registration();
  auto d = checkpoint::decode_registration(checkpoint::encode(r));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->reg.manifest, r.manifest);
  EXPECT_EQ(d->manifest_digest, sha256_of(r.manifest));
  ASSERT_EQ(d->reg.groups.size(), r.groups.size());
  EXPECT_EQ(d->reg.groups[1].torrent, r.groups[1].torrent);
  EXPECT_EQ(checkpoint::key(d->manifest.name, checkpoint::step_of(d->manifest)), "j@7");
}

TEST(Checkpoint, HostileRegistrationsAreRefused) {
  auto good = nlohmann::json::parse(checkpoint::encode(sample_registration()));
  auto refused = [](const nlohmann::json& j, std::string_view why) {
    auto d = checkpoint::decode_registration(j.dump());
    EXPECT_FALSE(d) << j.dump();
    if (!d) {
      EXPECT_NE(d.error().message.find(why), std::string::npos) << d.error().message;
    }
  };
  auto j = good;
  j["groups"].erase(0);
  refused(j, "group torrents for");
  j = good;
  j["groups"][0]["info_hash"] = "XYZ";
  refused(j, "40 lower-case hex");
  j = good;
  j["groups"][0]["torrent"] = "not base64!";
  refused(j, "base64");
  j = good;
  j["groups"][0]["torrent"] = "";
  refused(j, "empty");
  j = good;
  j["manifest"] = "{}";
  refused(j, "checkpoint manifest");
  j = good;
  j["groups"][0]["torrent"] = base64_encode(std::string(checkpoint::max_torrent_bytes + 1, 'x'));
  refused(j, "at most");
  EXPECT_FALSE(checkpoint::decode_registration("[]"));
  EXPECT_FALSE(checkpoint::decode_registration("not json"));
  EXPECT_FALSE(checkpoint::decode_registration(std::string(100000, '[')));
}

TEST(Checkpoint, RecordsRoundTrip) {
  checkpoint::record r{"j", 9, sha256_of("m"), 1000, 3, 2, "n1", 1700000000000, {{"n2", 500}}};
  auto back = checkpoint::decode_record(checkpoint::encode(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->key(), "j@9");
  EXPECT_EQ(back->manifest, r.manifest);
  ASSERT_EQ(back->holders.size(), 1u);
  EXPECT_EQ(back->holders[0].bytes, 500u);
  auto list = checkpoint::decode_records(checkpoint::encode(std::vector{r, r}));
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), 2u);
  EXPECT_FALSE(checkpoint::decode_record("{\"job\":\"j\"}"));
  EXPECT_FALSE(checkpoint::decode_records("{\"checkpoints\":[{}]}"));
}

TEST(Checkpoint, SchedulerPaths) {
  EXPECT_EQ(checkpoint::manifest_target("j@3"), "/v1/checkpoints/j@3/manifest");
  EXPECT_EQ(checkpoint::group_target("j@3", 4), "/v1/checkpoints/j@3/groups/4");
  auto p = checkpoint::parse_scheduler_path("j@3/groups/4");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->what, checkpoint::scheduler_route::kind::group);
  EXPECT_EQ(p->group, 4u);
  EXPECT_EQ(checkpoint::parse_scheduler_path("j@3/manifest")->what,
            checkpoint::scheduler_route::kind::manifest);
  EXPECT_EQ(checkpoint::parse_scheduler_path("j@latest")->what,
            checkpoint::scheduler_route::kind::record);
  EXPECT_FALSE(checkpoint::parse_scheduler_path("j@latest/manifest"));
  EXPECT_FALSE(checkpoint::parse_scheduler_path("j@3/groups/x"));
  EXPECT_FALSE(checkpoint::parse_scheduler_path("j@3/groups/"));
  EXPECT_FALSE(checkpoint::parse_scheduler_path("j@3/other"));
}

}  // namespace
}  // namespace shoal
