// The checkpoint catalog (scheduler/checkpoints.h) and its routes (api_checkpoints.cc), through
// the router without sockets: the writer rule, idempotent repeats and conflicts, latest, the
// per-job and byte bounds, hostile registrations, holders from heartbeats, and grants signed with
// the scheduler's certificate that a verifier accepts for the right node and swarm only.
#include "scheduler/checkpoints.h"

#include <gtest/gtest.h>

#include "../common/support/test_pki.h"
#include "common/base64.h"
#include "common/bencode.h"
#include "common/origin_protocol.h"
#include "scheduler/api.h"
#include "checkpoint_util.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;
using nlohmann::json;
using shoal::testing::test_pki;

constexpr std::uint64_t MiB = 1 << 20;

checkpoint::decoded_registration decoded(const checkpoint::registration& r) {
  auto d = checkpoint::decode_registration(checkpoint::encode(r));
  EXPECT_TRUE(d) << (d ? "" : d.error().message);
  return d ? std::move(*d) : checkpoint::decoded_registration{};
}

// ---- the catalog

struct Catalog : ::testing::Test {
  std::int64_t now_ms = 1'700'000'000'000;
  checkpoint_catalog cat{checkpoint_catalog_options{}, [this] { return now_ms; }};
};

TEST_F(Catalog, RegisterRepeatAndConflict) {
  auto r = cat.register_checkpoint(decoded(make_reg("train", 100, "n1")), "n1");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->what, checkpoint_catalog::outcome::created);
  EXPECT_EQ(r->rec.key(), "train@100");
  EXPECT_EQ(r->rec.writer, "n1");
  EXPECT_EQ(r->rec.files, 3u);
  EXPECT_EQ(r->rec.bytes, 14 * MiB + 100);
  EXPECT_EQ(r->rec.published_ms, now_ms);
  ASSERT_EQ(r->rec.groups, 3u);
  // The same manifest again: a repeat with the first record (its time).
  now_ms += 5000;
  auto again = cat.register_checkpoint(decoded(make_reg("train", 100, "n1")), "n1");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->what, checkpoint_catalog::outcome::repeat);
  EXPECT_EQ(again->rec.published_ms, r->rec.published_ms);
  // Another manifest for the same step: a conflict that says which manifest is published.
  auto other = cat.register_checkpoint(decoded(make_reg("train", 100, "n1", "changed")), "n1");
  ASSERT_FALSE(other);
  EXPECT_TRUE(other.error().is(errc::already_exists));
  EXPECT_NE(other.error().message.find("checkpoint train@100 is already published with manifest " +
                                       r->rec.manifest.str()),
            std::string::npos)
      << other.error().message;
  EXPECT_NE(other.error().message.find("(files changed under the same step?)"), std::string::npos);
  EXPECT_EQ(cat.stats().records, 1u);
}

TEST_F(Catalog, OnlyTheWriterRegisters) {
  auto r = cat.register_checkpoint(decoded(make_reg("train", 1, "n1")), "n2");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::unauthorized));
  EXPECT_NE(r.error().message.find("only that node may register it"), std::string::npos);
  EXPECT_EQ(cat.stats().records, 0u);
}

TEST_F(Catalog, LatestIsTheHighestStepAndLowerStepsAreAllowed) {
  for (std::uint64_t s : {100u, 200u, 150u})
    ASSERT_TRUE(cat.register_checkpoint(decoded(make_reg("train", s, "n1")), "n1"));
  ASSERT_TRUE(cat.register_checkpoint(decoded(make_reg("eval", 7, "n2")), "n2"));
  EXPECT_EQ(cat.latest("train")->step, 200u);
  EXPECT_EQ(cat.record({"train", std::nullopt})->step, 200u);
  EXPECT_EQ(cat.record({"train", 150})->step, 150u);
  auto missing = cat.record({"train", 3});
  ASSERT_FALSE(missing);
  EXPECT_TRUE(missing.error().is(errc::not_found));
  EXPECT_NE(missing.error().message.find("the latest 200"), std::string::npos);
  EXPECT_FALSE(cat.record({"nope", std::nullopt}));
  std::vector<std::uint64_t> steps;
  for (const auto& r : cat.list("train")) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<std::uint64_t>{200, 150, 100}));
  EXPECT_EQ(cat.list().size(), 4u);
  EXPECT_EQ(cat.list().front().job, "eval");  // by job name
}

TEST_F(Catalog, MaxPerJobDropsTheJobsEarliestRegistered) {
  checkpoint_catalog c{{.max_per_job = 3}};
  ASSERT_TRUE(c.register_checkpoint(decoded(make_reg("other", 1, "n1")), "n1"));
  for (std::uint64_t s = 1; s <= 4; ++s)
    ASSERT_TRUE(c.register_checkpoint(decoded(make_reg("train", s, "n1")), "n1"));
  std::vector<std::uint64_t> steps;
  for (const auto& r : c.list("train")) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<std::uint64_t>{4, 3, 2}));
  EXPECT_TRUE(c.record({"other", 1}));
  // A rollback's lower step is the newest registration: the earliest one goes, not it.
  ASSERT_TRUE(c.register_checkpoint(decoded(make_reg("train", 1, "n1")), "n1"));
  steps.clear();
  for (const auto& r : c.list("train")) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<std::uint64_t>{4, 3, 1}));
  EXPECT_EQ(c.stats().records, 4u);
}

TEST_F(Catalog, MaxBytesDropsTheEarliestOfAnyJobAndRefusesOneTooLarge) {
  auto one = decoded(make_reg("a", 1, "n1"));
  std::uint64_t cost = one.reg.manifest.size();
  for (const auto& g : one.reg.groups) cost += g.torrent.size();
  checkpoint_catalog c{{.max_per_job = 16, .max_bytes = 2 * cost + cost / 2}};
  ASSERT_TRUE(c.register_checkpoint(std::move(one), "n1"));
  ASSERT_TRUE(c.register_checkpoint(decoded(make_reg("b", 1, "n1")), "n1"));
  ASSERT_TRUE(c.register_checkpoint(decoded(make_reg("c", 1, "n1")), "n1"));
  EXPECT_FALSE(c.record({"a", 1}));
  EXPECT_TRUE(c.record({"b", 1}));
  EXPECT_TRUE(c.record({"c", 1}));
  EXPECT_EQ(c.stats().records, 2u);
  EXPECT_LE(c.stats().bytes, 2 * cost + cost / 2);
  checkpoint_catalog tiny{{.max_per_job = 16, .max_bytes = cost - 1}};
  auto r = tiny.register_checkpoint(decoded(make_reg("a", 1, "n1")), "n1");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::too_large));
  EXPECT_NE(r.error().message.find("checkpoints.max_bytes"), std::string::npos);
}

TEST_F(Catalog, RefusesATorrentThatIsNoneOrHasAnotherInfoHash) {
  auto reg = make_reg("train", 1, "n1");
  auto lying = reg;
  lying.groups[1].info_hash = torrent_for("something else").info_hash;
  auto r = cat.register_checkpoint(decoded(lying), "n1");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("group 1: the torrent's info-hash is"), std::string::npos)
      << r.error().message;
  auto junk = reg;
  junk.groups[0].torrent = "not bencode";
  r = cat.register_checkpoint(decoded(junk), "n1");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::invalid_argument));
  EXPECT_EQ(cat.stats().records, 0u);
}

TEST_F(Catalog, ObjectsGroupsRemoveAndListeners) {
  std::vector<std::pair<std::string, std::string>> heard;
  cat.on_registered(
      [&](const std::string& job, const std::string& key) { heard.emplace_back(job, key); });
  auto reg = make_reg("train", 9, "n1");
  ASSERT_TRUE(cat.register_checkpoint(decoded(reg), "n1"));
  ASSERT_TRUE(cat.register_checkpoint(decoded(reg), "n1"));  // a repeat: not announced
  EXPECT_EQ(heard, (std::vector<std::pair<std::string, std::string>>{{"train", "train@9"}}));
  auto objs = cat.objects("train@9");
  ASSERT_TRUE(objs);
  EXPECT_EQ(objs->size(), 3u);
  EXPECT_TRUE(std::is_sorted(objs->begin(), objs->end()));
  auto m = cat.manifest("train@9");
  ASSERT_TRUE(m);
  EXPECT_EQ(**m, reg.manifest);
  auto parsed = checkpoint::parse_manifest(reg.manifest);
  for (std::uint32_t g = 0; g < 3; ++g) {
    auto grp = cat.group("train@9", g);
    ASSERT_TRUE(grp);
    EXPECT_EQ(grp->torrent, reg.groups[g].torrent);
    EXPECT_EQ(grp->kind, parsed->groups[g].type == dataset::group::kind::pack ? "pack" : "object");
    EXPECT_EQ(grp->bytes, parsed->groups[g].bytes);
  }
  EXPECT_TRUE(cat.group("train@9", 3).error().is(errc::not_found));
  EXPECT_TRUE(cat.remove("train@9"));
  EXPECT_FALSE(cat.remove("train@9"));
  EXPECT_FALSE(cat.objects("train@9"));
  EXPECT_EQ(cat.stats().bytes, 0u);
}

// ---- the routes

class CheckpointApi : public ::testing::Test {
 protected:
  CheckpointApi()
      : trk_(tracker_options{}, clock_.fn()),
        idx_(index_options{}, "epoch-A", clock_.fn()),
        res_(src_, resolver_options{}, clock_.fn()),
        placer_(idx_, res_, ds_, net_, placer_options{}, clock_.fn()),
        pw_(idx_, prewarm_options{}, clock_.fn()),
        ext_(placer_, extender_options{}, reg_) {
    cfg_.checkpoints.max_registration_bytes = config::byte_size::mib(1);
    register_checkpoint_metrics(reg_, cat_);
    make_api({});
  }
  void make_api(checkpoint_grant_fn grants) {
    api_deps d{cfg_, idx_, trk_, placer_, res_, ds_, pw_, ext_, reg_};
    d.checkpoints = &cat_;
    d.checkpoint_grant_for = std::move(grants);
    api_ = std::make_unique<api>(std::move(d));
  }
  http::response call(http::verb method, const std::string& target, const std::string& body = "",
                      const tls::peer_identity& peer = {}) {
    http::request r;
    r.method = method;
    r.target = target;
    auto q = target.find('?');
    r.path = target.substr(0, q);
    r.query = q == std::string::npos ? "" : target.substr(q + 1);
    r.body = body;
    r.remote = http::tcp::endpoint(http::net::ip::make_address("10.9.9.9"), 40000);
    r.peer = peer;
    return api_->serve(r);
  }
  static std::string text(const http::response& r) { return std::get<std::string>(r.body); }
  static json js(const http::response& r) { return json::parse(text(r)); }
  http::response post(const checkpoint::registration& r, const tls::peer_identity& peer = {}) {
    return call(http::verb::post, "/v1/checkpoints", checkpoint::encode(r), peer);
  }

  scheduler_config cfg_;
  fake_clock clock_;
  tracker trk_;
  cluster_index idx_;
  fake_source src_;
  resolver res_;
  fake_datasets ds_;
  document_network_model net_;
  placer placer_;
  prewarm_manager pw_;
  metrics::registry reg_;
  extender ext_;
  checkpoint_catalog cat_{checkpoint_catalog_options{}};
  std::unique_ptr<api> api_;
};

TEST_F(CheckpointApi, RegisterReadAndDelete) {
  auto reg = make_reg("train", 100, "n1");
  auto r = post(reg);
  ASSERT_EQ(r.status, 201u) << text(r);
  auto rec = checkpoint::decode_record(text(r));
  ASSERT_TRUE(rec) << text(r);
  EXPECT_EQ(rec->key(), "train@100");
  EXPECT_EQ(post(reg).status, 200u);
  r = post(make_reg("train", 100, "n1", "changed"));
  EXPECT_EQ(r.status, 409u);
  EXPECT_NE(js(r)["error"].get<std::string>().find("already published"), std::string::npos);
  ASSERT_EQ(post(make_reg("train", 200, "n1")).status, 201u);

  r = call(http::verb::get, "/v1/checkpoints?job=train");
  ASSERT_EQ(r.status, 200u);
  auto list = checkpoint::decode_records(text(r));
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].step, 200u);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints?job=Bad!").status, 400u);
  EXPECT_EQ(checkpoint::decode_records(text(call(http::verb::get, "/v1/checkpoints")))->size(), 2u);

  for (const char* t : {"/v1/checkpoints/train", "/v1/checkpoints/train@latest"}) {
    r = call(http::verb::get, t);
    ASSERT_EQ(r.status, 200u) << t << ": " << text(r);
    EXPECT_EQ(checkpoint::decode_record(text(r))->step, 200u) << t;
  }
  r = call(http::verb::get, "/v1/checkpoints/train@5");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(js(r)["error"].get<std::string>().find("train@5 is not registered"), std::string::npos);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/nobody").status, 404u);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/Bad@1").status, 400u);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/train%40latest").status, 400u);  // as sent
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/").status, 400u);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/train@1/other").status, 404u);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/train/manifest").status, 400u);

  r = call(http::verb::get, "/v1/checkpoints/train@100/manifest");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(text(r), reg.manifest);  // the exact bytes
  EXPECT_EQ(r.headers[boost::beast::http::field::content_type], "application/json");

  EXPECT_EQ(call(http::verb::put, "/v1/checkpoints").status, 405u);
  EXPECT_EQ(call(http::verb::delete_, "/v1/checkpoints/train").status, 400u);
  r = call(http::verb::delete_, "/v1/checkpoints/train@100");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(js(r)["removed"], "train@100");
  EXPECT_EQ(call(http::verb::delete_, "/v1/checkpoints/train@100").status, 404u);

  auto m = reg_.expose();
  EXPECT_NE(m.find("shoal_scheduler_checkpoint_registrations_total{result=\"created\"} 2"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("{result=\"repeat\"} 1"), std::string::npos);
  EXPECT_NE(m.find("{result=\"conflict\"} 1"), std::string::npos);
  EXPECT_NE(m.find("shoal_scheduler_checkpoints 1"), std::string::npos);
  EXPECT_NE(m.find("shoal_scheduler_checkpoint_bytes "), std::string::npos);
}

TEST_F(CheckpointApi, GroupAnswersAreMetainfoWithoutAGrantInPlainMode) {
  auto reg = make_reg("train", 3, "n1");
  ASSERT_EQ(post(reg).status, 201u);
  auto parsed = checkpoint::parse_manifest(reg.manifest);
  for (std::uint32_t g = 0; g < reg.groups.size(); ++g) {
    auto r = call(http::verb::get, checkpoint::group_target("train@3", g));
    ASSERT_EQ(r.status, 200u) << text(r);
    http::full_response fr;
    fr.status = static_cast<int>(r.status);
    for (const auto& h : r.headers)
      fr.headers.emplace(std::string(h.name_string()), std::string(h.value()));
    fr.body = text(r);
    auto a = origin::decode_metainfo(fr);
    ASSERT_TRUE(a) << a.error().message;
    EXPECT_EQ(a->torrent, reg.groups[g].torrent);
    EXPECT_EQ(a->info_hash, reg.groups[g].info_hash);
    EXPECT_EQ(a->group_kind,
              parsed->groups[g].type == dataset::group::kind::pack ? "pack" : "object");
    EXPECT_EQ(a->group_bytes, parsed->groups[g].bytes);
    EXPECT_TRUE(a->grant.empty());
  }
  EXPECT_EQ(call(http::verb::get, checkpoint::group_target("train@3", 3)).status, 404u);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/train@3/groups/x").status, 400u);
}

TEST_F(CheckpointApi, HostileRegistrationsAreRefusedWithTheReason) {
  auto good = checkpoint::encode(make_reg("train", 1, "n1"));
  auto bad = [&](const std::string& body, unsigned want, const std::string& says) {
    auto r = call(http::verb::post, "/v1/checkpoints", body);
    EXPECT_EQ(r.status, want) << says << ": " << text(r);
    EXPECT_NE(js(r)["error"].get<std::string>().find(says), std::string::npos) << text(r);
  };
  bad("{not json", 400, "not a JSON object");
  bad("[1,2]", 400, "not a JSON object");
  bad(std::string(5000, '['), 400, "nests too deeply");
  auto j = json::parse(good);
  auto fewer = j;
  fewer["groups"].erase(fewer["groups"].size() - 1);
  bad(fewer.dump(), 400, "2 group torrents for 3 groups");
  auto b64 = j;
  b64["groups"][0]["torrent"] = "%%%not base64%%%";
  bad(b64.dump(), 400, "base64");
  auto ih = j;
  ih["groups"][0]["info_hash"] = "XYZ";
  bad(ih.dump(), 400, "is not 40 lower-case hex digits");
  auto manifest = j;
  manifest["manifest"] = "{\"schema\":1}";
  bad(manifest.dump(), 400, "checkpoint manifest");
  auto spaced = j;  // the same manifest, not in canonical form: its digest would not be its own
  spaced["manifest"] = json::parse(j["manifest"].get<std::string>()).dump(1);
  bad(spaced.dump(), 400, "not in canonical form");
  bad(std::string(MiB + 1, ' '), 413, "checkpoints.max_registration_bytes");
  auto m = reg_.expose();
  EXPECT_NE(m.find("shoal_scheduler_checkpoint_registrations_total{result=\"refused\"} 9"),
            std::string::npos)
      << m;
  EXPECT_EQ(cat_.stats().records, 0u);
}

TEST_F(CheckpointApi, HoldersComeFromTheIndexMostBytesFirst) {
  auto reg = make_reg("train", 4, "n1");
  ASSERT_EQ(post(reg).status, 201u);
  // n1 (the writer) holds everything, n2 rank 1's file and the metadata, n3 nothing of it.
  std::uint16_t port = 6881;
  auto full = [&](const std::string& node, std::vector<std::pair<std::string, std::uint64_t>> o) {
    std::vector<heartbeat::held_object> held_objs;
    for (const auto& [name, size] : o) held_objs.push_back(held(name, size));
    auto m = full_hb(node, held_objs);
    m.bt_port = port++;
    auto r = call(http::verb::post, "/v1/heartbeat", heartbeat::encode(m));
    ASSERT_EQ(r.status, 200u) << text(r);
  };
  full("n2", {{"trainr1", 6 * MiB}, {"trainmeta", 100}});
  full("n1", {{"trainr0", 8 * MiB}, {"trainr1", 6 * MiB}, {"trainmeta", 100}});
  full("n3", {{"unrelated", 5}});
  auto r = call(http::verb::get, "/v1/checkpoints/train@4");
  ASSERT_EQ(r.status, 200u);
  auto rec = checkpoint::decode_record(text(r));
  ASSERT_TRUE(rec);
  ASSERT_EQ(rec->holders.size(), 2u) << text(r);
  EXPECT_EQ(rec->holders[0].node, "n1");
  EXPECT_EQ(rec->holders[0].bytes, 14 * MiB + 100);
  EXPECT_EQ(rec->holders[1].node, "n2");
  EXPECT_EQ(rec->holders[1].bytes, 6 * MiB + 100);
}

TEST_F(CheckpointApi, WithTlsTheCertificateNamesTheWriterAndRolesAreChecked) {
  auto n1 = verified_peer(tls::peer_role::node, "n1");
  auto n2 = verified_peer(tls::peer_role::node, "n2");
  auto op = verified_peer(tls::peer_role::operator_, "alice");
  auto reg = make_reg("train", 1, "n1");
  auto r = post(reg, n2);  // n2's certificate, n1's manifest
  EXPECT_EQ(r.status, 403u);
  EXPECT_NE(js(r)["error"].get<std::string>().find("only that node may register it"),
            std::string::npos);
  EXPECT_EQ(post(reg, op).status, 403u);  // the authorizer: a node certificate is needed
  EXPECT_EQ(post(reg, tls::peer_identity{.tls = true}).status, 401u);
  ASSERT_EQ(post(reg, n1).status, 201u);
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/train@1", "", op).status, 200u);
  EXPECT_EQ(call(http::verb::get, checkpoint::group_target("train@1", 0), "", op).status, 403u);
  // Paths the authorizer reads as another route are not that route here either.
  EXPECT_EQ(call(http::verb::get, "/v1/checkpoints/train@1/groups%2F0", "", op).status, 404u);
  EXPECT_EQ(call(http::verb::post, "/v1/checkpoints/", checkpoint::encode(reg), op).status, 405u);
  EXPECT_EQ(call(http::verb::delete_, "/v1/checkpoints/train@1", "", n1).status, 403u);
  EXPECT_EQ(call(http::verb::delete_, "/v1/checkpoints/train@1", "", op).status, 200u);
  EXPECT_NE(reg_.expose().find("shoal_scheduler_auth_refused_total{need=\"node\",reason=\"other_"
                               "node\"} 1"),
            std::string::npos);
}

TEST_F(CheckpointApi, RoutesRunOnWorkersAndNeedTheirRole) {
  auto req = [](http::verb m, std::string path) {
    http::request r;
    r.method = m;
    r.path = std::move(path);
    return r;
  };
  using http::verb;
  for (const char* p :
       {"/v1/checkpoints", "/v1/checkpoints/train@1", "/v1/checkpoints/train@1/manifest"})
    EXPECT_TRUE(api::heavy(req(verb::get, p))) << p;
  EXPECT_TRUE(api::heavy(req(verb::post, "/v1/checkpoints")));
  EXPECT_EQ(access_of(req(verb::post, "/v1/checkpoints")), route_access::node);
  EXPECT_EQ(access_of(req(verb::get, "/v1/checkpoints")), route_access::member);
  EXPECT_EQ(access_of(req(verb::get, "/v1/checkpoints/train@1")), route_access::member);
  EXPECT_EQ(access_of(req(verb::get, "/v1/checkpoints/train@1/manifest")), route_access::member);
  EXPECT_EQ(access_of(req(verb::get, "/v1/checkpoints/train@1/groups/0")), route_access::node);
  EXPECT_EQ(access_of(req(verb::delete_, "/v1/checkpoints/train@1")), route_access::operator_);
}

TEST_F(CheckpointApi, GroupsCarryAGrantTheVerifierAcceptsForTheCallerAndSwarmOnly) {
  test_pki pki;
  pki.make_ca("ca");
  pki.issue("scheduler", "ca", "URI:shoal://scheduler,DNS:*");
  auto signer = grant::signer::load(pki.pem("scheduler"), pki.key("scheduler"));
  ASSERT_TRUE(signer) << signer.error().message;
  make_api(checkpoint_grants(*signer, std::chrono::hours(1)));
  auto reg = make_reg("train", 2, "n1");
  ASSERT_EQ(post(reg, verified_peer(tls::peer_role::node, "n1")).status, 201u);
  auto r = call(http::verb::get, checkpoint::group_target("train@2", 1), "",
                verified_peer(tls::peer_role::node, "n3"));
  ASSERT_EQ(r.status, 200u) << text(r);
  auto header = r.headers[std::string(origin::headers::grant)];
  ASSERT_FALSE(header.empty());
  auto g = grant::from_header(header);
  ASSERT_TRUE(g) << g.error().message;
  auto v = grant::verifier::load(pki.pem("ca"));
  ASSERT_TRUE(v);
  auto swarm = grant::parse_info_hash(reg.groups[1].info_hash);
  ASSERT_TRUE(swarm);
  auto ok = (*v)->verify(*g, *swarm, "n3");
  ASSERT_TRUE(ok) << ok.error().message;
  auto left = std::chrono::duration_cast<std::chrono::minutes>(ok->expires -
                                                               std::chrono::system_clock::now());
  EXPECT_GE(left.count(), 58);
  EXPECT_LE(left.count(), 60);
  EXPECT_FALSE((*v)->verify(*g, *swarm, "n4"));
  auto other = grant::parse_info_hash(reg.groups[0].info_hash);
  EXPECT_FALSE((*v)->verify(*g, *other, "n3"));
  // Without TLS (an anonymous caller): no grant.
  r = call(http::verb::get, checkpoint::group_target("train@2", 1));
  ASSERT_EQ(r.status, 200u);
  EXPECT_TRUE(r.headers[std::string(origin::headers::grant)].empty());
}

}  // namespace
}  // namespace shoal::scheduler
