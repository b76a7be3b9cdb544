// The origin protocol (common/origin_protocol.h): request targets and their parsers, the answers'
// encoders and decoders (round trips, malformed and hostile input rejected with a clear error,
// never an exception), the version rule in both directions, the OCI errors and /v2 routes.

#include "common/origin_protocol.h"

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "common/http_client.h"
#include "support/test_http_server.h"

namespace shoal::origin {
namespace {

const std::string kDigest =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const std::string kOther =
    "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

digest D(const std::string& s) { return *digest::parse(s); }

http::request make_request(std::string target,
                           std::vector<std::pair<std::string, std::string>> hdrs = {}) {
  http::request r;
  r.target = target;
  auto q = target.find('?');
  r.path = target.substr(0, q);
  r.query = q == std::string::npos ? "" : target.substr(q + 1);
  for (auto& [k, v] : hdrs) r.headers.set(k, v);
  return r;
}

// What a client would receive for an encoded answer.
http::full_response received(const http::response& r) {
  http::full_response f;
  f.status = static_cast<int>(r.status);
  for (const auto& h : r.headers)
    f.headers.emplace(std::string(h.name_string()), std::string(h.value()));
  if (auto* b = std::get_if<std::string>(&r.body)) f.body = *b;
  return f;
}

// nlohmann's strict dump throws on invalid UTF-8.
bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (...) {
    return false;
  }
}

// ---- Version

TEST(OriginVersion, ParsesMajorsAndRejectsTheRest) {
  EXPECT_EQ(parse_version("").value(), 1u);  // a peerd from before the header
  EXPECT_EQ(parse_version("1").value(), 1u);
  EXPECT_EQ(parse_version(" 2 ").value(), 2u);
  EXPECT_EQ(parse_version("9999").value(), 9999u);
  for (const char* bad : {"0", "10000", "1.0", "v1", "-1", "1 2", "\xff"}) {
    auto v = parse_version(bad);
    ASSERT_FALSE(v) << bad;
    EXPECT_TRUE(v.error().is(errc::protocol_error));
  }
}

TEST(OriginVersion, RegistryProxyServesKnownMajorsAndNamesBothSidesOtherwise) {
  EXPECT_FALSE(check_version(make_request("/shoal/v1/metainfo/x")));
  EXPECT_FALSE(check_version(make_request("/v2/", {{"Shoal-Protocol", "1"}})));
  for (std::string sent : {"2", "0", "garbage", "\x01\xff"}) {
    auto r = check_version(make_request("/shoal/v1/chunks/x", {{"Shoal-Protocol", sent}}));
    ASSERT_TRUE(r) << sent;
    EXPECT_EQ(r->status, 400u);
    EXPECT_EQ(r->headers["Shoal-Protocol"], std::to_string(protocol_version));
    const auto& body = std::get<std::string>(r->body);
    auto j = nlohmann::json::parse(body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << body;
    EXPECT_EQ(j["errors"][0]["code"], "UNSUPPORTED");
    std::string msg = j["errors"][0]["message"];
    EXPECT_NE(msg.find("speaks Shoal origin protocol 1 to 1"), std::string::npos) << msg;
    EXPECT_EQ(j["errors"][0]["detail"]["shoal_protocol"]["current"], protocol_version);
    // And the peer on the other side reads it as a version mismatch naming both versions.
    auto e = version_mismatch_of(400, body);
    ASSERT_TRUE(e);
    EXPECT_TRUE(is_version_mismatch(*e));
    EXPECT_NE(e->message.find("does not speak Shoal origin protocol 1 (it speaks 1 to 1)"),
              std::string::npos)
        << e->message;
  }
}

TEST(OriginVersion, OtherErrorsAreNotMismatches) {
  EXPECT_FALSE(version_mismatch_of(400, R"({"errors":[{"code":"NAME_INVALID","message":"x"}]})"));
  EXPECT_FALSE(version_mismatch_of(404, R"({"errors":[{"detail":{"shoal_protocol":{}}}]})"));
  EXPECT_FALSE(version_mismatch_of(400, "not json"));
  EXPECT_FALSE(version_mismatch_of(400, std::string(100 << 10, '{')));
  // Hostile numbers do not leak into the message.
  auto e = version_mismatch_of(
      400, R"({"errors":[{"detail":{"shoal_protocol":{"oldest":-1,"current":1e99}}}]})");
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("it speaks ? to ?"), std::string::npos) << e->message;
}

// peerd's side against a registry-proxy of another release, over HTTP.
TEST(OriginVersion, CallSendsTheVersionAndSurfacesAMismatch) {
  using testing::recorded_request;
  using testing::reply;
  testing::test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.target.starts_with("/old")) {
      r.body = "ok";  // a registry-proxy from before versioning ignores the header
      return r;
    }
    // A registry-proxy that dropped major 1 answers as check_version() does.
    r.status = 400;
    r.headers = {{"Content-Type", "application/json"}, {"Shoal-Protocol", "3"}};
    r.body =
        R"({"errors":[{"code":"UNSUPPORTED","message":"this registry-proxy speaks Shoal origin protocol 2 to 3",)"
        R"("detail":{"shoal_protocol":{"requested":"1","oldest":2,"current":3}}}]})";
    return r;
  });
  http::client c;
  http::client_request ok;
  ok.url = srv.url("/old");
  auto f = call(c, ok, 1 << 20);
  ASSERT_TRUE(f) << f.error().to_string();
  EXPECT_EQ(f->body, "ok");
  http::client_request bad;
  bad.url = srv.url(std::string(paths::metainfo) + kDigest);
  auto g = call(c, bad, 1 << 20);
  ASSERT_FALSE(g);
  EXPECT_TRUE(is_version_mismatch(g.error()));
  EXPECT_NE(g.error().message.find("does not speak Shoal origin protocol 1 (it speaks 2 to 3)"),
            std::string::npos)
      << g.error().message;
  for (const auto& r : srv.requests())
    EXPECT_EQ(r.header("Shoal-Protocol"), std::to_string(protocol_version));
}

// ---- Requests

TEST(OriginRequests, TargetsParseBackOnTheServer) {
  object_ref o{"registry.example:5000", "team/app"};
  auto t = metainfo_target(
      o, D(kDigest),
      {.wait = std::chrono::milliseconds(1500), .chunks = true, .parent = D(kOther)});
  EXPECT_EQ(t,
            "/shoal/v1/metainfo/" + kDigest +
                "?repo=team/app&ns=registry.example%3A5000&wait_ms=1500&chunks=1&parent=" + kOther);
  auto m = parse_metainfo_request(make_request(t));
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->object, D(kDigest));
  EXPECT_EQ(m->repo, "team/app");
  EXPECT_EQ(m->ns, "registry.example:5000");
  EXPECT_EQ(m->wait, std::chrono::milliseconds(1500));
  EXPECT_TRUE(m->chunks);
  EXPECT_EQ(m->parent, D(kOther));

  auto plain = parse_metainfo_request(make_request(metainfo_target({"", "a"}, D(kDigest), {})));
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->ns);
  EXPECT_FALSE(plain->wait);
  EXPECT_FALSE(plain->chunks);
  EXPECT_FALSE(plain->parent);

  auto c = parse_chunks_request(
      make_request(chunks_target(o, D(kDigest), 7, std::chrono::milliseconds(200))));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->parent, D(kDigest));
  EXPECT_EQ(c->have, 7u);
  EXPECT_EQ(c->wait, std::chrono::milliseconds(200));

  EXPECT_EQ(blob_target({"", "a/b"}, D(kDigest)), "/v2/a/b/blobs/" + kDigest);
  EXPECT_EQ(manifest_target({"docker.io", "library/x"}, "latest"),
            "/v2/library/x/manifests/latest?ns=docker.io");
  EXPECT_EQ(dataset_target("ds@1"), "/shoal/v1/datasets/ds@1");
  EXPECT_EQ(dataset_manifest_target("ds@1"), "/shoal/v1/datasets/ds@1/manifest");
  EXPECT_EQ(dataset_objects_base("ds@1"), "/shoal/v1/datasets/ds@1/objects/");
  EXPECT_EQ(dataset_metainfo_target("ds@1", 3, std::chrono::milliseconds(9)),
            "/shoal/v1/dataset-metainfo/ds@1/3?wait_ms=9");
  EXPECT_TRUE(has_prefix("/shoal/v1/datasets", paths::datasets));
  EXPECT_TRUE(has_prefix("/shoal/v1/datasets/x", paths::datasets));
  EXPECT_FALSE(has_prefix("/shoal/v1/datasetsx", paths::datasets));
}

TEST(OriginRequests, MalformedRequestsGetTheSpecErrors) {
  struct c {
    std::string target;
    oci::error_code code;
  };
  for (const auto& k : {
           c{"/shoal/v1/metainfo/sha256:xyz?repo=a", oci::error_code::digest_invalid},
           c{"/shoal/v1/metainfo/" + kDigest, oci::error_code::name_invalid},
           c{"/shoal/v1/metainfo/" + kDigest + "?repo=UPPER", oci::error_code::name_invalid},
           c{"/shoal/v1/metainfo/" + kDigest + "?repo=a&ns=%zz", oci::error_code::name_invalid},
           c{"/shoal/v1/metainfo/" + kDigest + "?repo=a&parent=md5:00",
             oci::error_code::digest_invalid},
       }) {
    auto r = parse_metainfo_request(make_request(k.target));
    ASSERT_FALSE(r) << k.target;
    EXPECT_EQ(r.error().status, 400u);
    EXPECT_EQ(r.error().code, k.code) << k.target;
    EXPECT_FALSE(r.error().message.empty());
  }
  // wait_ms= is only a hint on the metainfo endpoint, and checked on the chunk list.
  auto lenient =
      parse_metainfo_request(make_request("/shoal/v1/metainfo/" + kDigest + "?repo=a&wait_ms=-5"));
  ASSERT_TRUE(lenient);
  EXPECT_FALSE(lenient->wait);
  for (const char* q :
       {"have=-1", "have=1000001", "have=x", "wait_ms=1s", "wait_ms=99999999999999999999"}) {
    auto r = parse_chunks_request(make_request("/shoal/v1/chunks/" + kDigest + "?repo=a&" + q));
    ASSERT_FALSE(r) << q;
    EXPECT_EQ(r.error().code, oci::error_code::unsupported) << q;
  }
}

// ---- Answers

TEST(OriginAnswers, MetainfoRoundTrip) {
  metainfo_answer a;
  a.torrent = std::string("d4:infod6:lengthi5eee\0\xff", 23);
  a.info_hash = "0123456789abcdef0123456789abcdef01234567";
  a.piece_size = 65536;
  a.object_size = 5;
  a.seed = "[::1]:6881";
  auto f = received(encode(a));
  EXPECT_EQ(f.header("Content-Type"), "application/x-bittorrent");
  auto b = decode_metainfo(f);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->torrent, a.torrent);
  EXPECT_EQ(b->info_hash, a.info_hash);
  EXPECT_EQ(b->piece_size, a.piece_size);
  EXPECT_EQ(b->object_size, a.object_size);
  EXPECT_EQ(b->seed, a.seed);
  EXPECT_FALSE(b->group_bytes);
  EXPECT_FALSE(b->is_public);  // not said: not public (a node confirms each client)
  a.is_public = true;
  EXPECT_EQ(received(encode(a)).header(headers::visibility), headers::visibility_public);
  EXPECT_TRUE(decode_metainfo(received(encode(a)))->is_public);

  metainfo_answer g;
  g.torrent = "d4:infodee";
  g.group_kind = "pack";
  g.group_bytes = 1ull << 40;
  auto h = decode_metainfo(received(encode(g)));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->group_kind, "pack");
  EXPECT_EQ(h->group_bytes, 1ull << 40);
  EXPECT_TRUE(h->seed.empty());
}

TEST(OriginAnswers, MetainfoRejectsMalformedHeaders) {
  auto with = [](std::string name, std::string value) {
    http::full_response f;
    f.status = 200;
    f.body = "d4:infodee";
    f.headers.emplace(name, value);
    return decode_metainfo(f);
  };
  EXPECT_TRUE(with("Shoal-Seed", "10.0.0.1:6881"));
  for (auto [n, v] :
       std::vector<std::pair<std::string, std::string>>{{"Shoal-Seed", "a b"},
                                                        {"Shoal-Seed", std::string(400, 'a')},
                                                        {"Shoal-Seed", "\xc3\xa9"},
                                                        {"Shoal-Piece-Size", "-1"},
                                                        {"Shoal-Object-Size", "12abc"},
                                                        {"Shoal-Group-Bytes", "1e9"}}) {
    auto r = with(n, v);
    ASSERT_FALSE(r) << n << ": " << v;
    EXPECT_TRUE(r.error().is(errc::protocol_error));
    EXPECT_NE(r.error().message.find(n), std::string::npos) << r.error().message;
  }
  http::full_response empty;
  empty.status = 200;
  EXPECT_FALSE(decode_metainfo(empty));
}

TEST(OriginAnswers, ProgressRoundTripAndLayoutChecks) {
  auto r = encode(progress{12, 1000, 100, ""});
  EXPECT_EQ(r.status, 202u);
  EXPECT_EQ(r.headers["Retry-After"], "1");
  auto p = decode_progress(std::get<std::string>(r.body));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->bytes, 12u);
  EXPECT_EQ(p->size, 1000u);
  EXPECT_EQ(p->chunk_size, 100u);
  auto q = decode_progress(std::get<std::string>(encode(progress{5, 0, 0, "1"}).body));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->chunk_size, 0u);
  for (const char* bad :
       {"", "[]", "null", R"({"bytes":-1})", R"({"bytes":"5"})", R"({"size":1.5})",
        R"({"size":10,"chunk_size":0})", R"({"size":10,"chunk_size":11})",
        R"({"size":100000000,"chunk_size":1})", "{\"bytes\":1"}) {
    auto d = decode_progress(bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_TRUE(d.error().is(errc::protocol_error)) << bad;
  }
  EXPECT_FALSE(decode_progress(std::string(70 << 10, ' ') + "{}"));
}

chunk_list sample_list(std::size_t published) {
  chunk_list c;
  c.parent = D(kDigest);
  c.size = 350;
  c.chunk_size = 100;  // three chunks: 100, 100, 150
  for (std::size_t i = 0; i < published; ++i) {
    c.chunks.push_back({D(kOther), i * 100, i + 1 < 3 ? 100u : 150u});
  }
  return c;
}

TEST(OriginAnswers, ChunkListRoundTrip) {
  auto c = sample_list(3);
  c.complete = true;
  auto d = decode_chunk_list(encode(c));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->parent, c.parent);
  EXPECT_EQ(d->chunk_count(), 3u);
  EXPECT_TRUE(d->complete);
  ASSERT_EQ(d->chunks.size(), 3u);
  EXPECT_EQ(d->chunks[2].offset, 200u);
  EXPECT_EQ(d->chunks[2].size, 150u);
  auto failed = sample_list(1);
  failed.error = "upstream\x01 went away";
  auto e = decode_chunk_list(encode(failed));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->error, "upstream? went away");
}

TEST(OriginAnswers, ChunkListRejectsWrongLayouts) {
  auto mutate = [](auto fn) {
    auto j = nlohmann::json::parse(encode(sample_list(3)));
    fn(j);
    return decode_chunk_list(j.dump());
  };
  std::vector<std::function<void(nlohmann::json&)>> bad = {
      [](auto& j) { j["chunks"][1]["offset"] = 101; },
      [](auto& j) { j["chunks"][2]["size"] = 100; },
      [](auto& j) { j["chunks"][0]["digest"] = "sha256:nope"; },
      [](auto& j) { j["chunks"][0].erase("digest"); },
      [](auto& j) { j["chunks"].push_back(j["chunks"][0]); },
      [](auto& j) { j["chunk_size"] = 0; },
      [](auto& j) { j["chunk_size"] = 1000; },
      [](auto& j) { j["size"] = "350"; },
      [](auto& j) { j.erase("digest"); },
      [](auto& j) { j["chunks"] = "none"; },
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    auto r = mutate(bad[i]);
    ASSERT_FALSE(r) << "case " << i;
    EXPECT_FALSE(r.error().message.empty());
  }
}

TEST(OriginAnswers, ErrorBodiesBothFormsBoundedAndPrintable) {
  EXPECT_EQ(error_message_of(oci::error_body(oci::error_code::denied, "no access")), "no access");
  EXPECT_EQ(error_message_of(plain_error_body("no such dataset")), "no such dataset");
  EXPECT_EQ(error_message_of("<html>"), "");
  EXPECT_EQ(error_message_of(R"({"errors":[]})"), "");
  std::string long_msg = error_message_of(plain_error_body(std::string(1000, 'x')));
  EXPECT_LE(long_msg.size(), 303u);
  EXPECT_EQ(error_message_of(R"({"error":"a\u0000b\nc"})"), "a?b?c");
  // Cut inside a multi-byte character: the cut moves back to the character's start.
  std::string e;
  for (int i = 0; i < 200; ++i) e += "\xc3\xa9";
  auto cut = error_message_of(plain_error_body(e));
  EXPECT_TRUE(valid_utf8(cut));
  // Invalid UTF-8 in a message we encode does not throw; it is replaced.
  EXPECT_NO_THROW((void)plain_error_body("bad \xff\xfe"));
  auto r = plain_error(409, "x");
  EXPECT_EQ(r.status, 409u);
}

TEST(OriginAnswers, DecodersSurviveRandomInput) {
  std::mt19937_64 rng(13);
  const std::vector<std::string> seeds = {
      encode(sample_list(2)), std::get<std::string>(encode(progress{1, 2, 0, "1"}).body),
      oci::error_body(oci::error_code::unsupported, "m", R"({"shoal_protocol":{"oldest":1}})")};
  for (int i = 0; i < 20000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n && !s.empty(); ++k) {
      s[rng() % s.size()] = static_cast<char>(rng() % 256);
    }
    EXPECT_NO_THROW({
      (void)decode_chunk_list(s);
      (void)decode_progress(s);
      (void)version_mismatch_of(400, s);
      auto m = error_message_of(s);
      EXPECT_LE(m.size(), 303u);
    });
  }
}

// ---- The OCI pull API

TEST(OriginOci, StatusMappingAndErrorAnswers) {
  EXPECT_EQ(code_for_status(401), oci::error_code::unauthorized);
  EXPECT_EQ(code_for_status(403), oci::error_code::denied);
  EXPECT_EQ(code_for_status(404), oci::error_code::blob_unknown);
  EXPECT_EQ(code_for_status(404, oci::error_code::manifest_unknown),
            oci::error_code::manifest_unknown);
  EXPECT_EQ(code_for_status(429), oci::error_code::toomanyrequests);
  EXPECT_EQ(code_for_status(500), oci::error_code::unsupported);
  auto r = oci_error(401, oci::error_code::unauthorized, "who?", "Basic realm=\"x\"");
  EXPECT_EQ(r.headers["WWW-Authenticate"], "Basic realm=\"x\"");
  EXPECT_EQ(r.headers["Docker-Distribution-API-Version"], "registry/2.0");
  EXPECT_TRUE(
      oci_error(401, oci::error_code::unauthorized, "who?").headers["WWW-Authenticate"].empty());
  EXPECT_EQ(upstream_failure(409, "m", "", oci::error_code::blob_unknown).status, 502u);
  EXPECT_EQ(upstream_failure(503, "m", "", oci::error_code::blob_unknown).status, 503u);
  auto tm = upstream_failure(429, "slow down", "7", oci::error_code::blob_unknown);
  EXPECT_EQ(tm.status, 429u);
  EXPECT_EQ(tm.headers["Retry-After"], "7");
  EXPECT_EQ(error_message_of(std::get<std::string>(tm.body)), "slow down");
  EXPECT_EQ(v2_base_ok().status, 200u);
}

TEST(Routes, ParsesPullApi) {
  route_error err;
  auto base = parse_v2_path("/v2/", err);
  ASSERT_TRUE(base);
  EXPECT_EQ(base->kind, route_kind::base);
  auto m = parse_v2_path("/v2/library/nginx/manifests/latest", err);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, route_kind::manifest);
  EXPECT_EQ(m->name, "library/nginx");
  EXPECT_EQ(m->manifest.str(), "latest");
  auto md = parse_v2_path("/v2/a/manifests/" + kDigest, err);
  ASSERT_TRUE(md);
  EXPECT_TRUE(md->manifest.is_digest());
  auto b = parse_v2_path("/v2/a/blobs/b/blobs/" + kDigest, err);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->kind, route_kind::blob);
  EXPECT_EQ(b->name, "a/blobs/b");
  EXPECT_EQ(b->blob.str(), kDigest);
  EXPECT_FALSE(parse_v2_path("/metrics", err));
}

TEST(Routes, RejectsMalformedWithSpecErrors) {
  struct c {
    std::string path;
    unsigned status;
    oci::error_code code;
  };
  for (const auto& k : {
           c{"/v2/UPPER/manifests/latest", 400, oci::error_code::name_invalid},
           c{"/v2/../etc/manifests/latest", 400, oci::error_code::name_invalid},
           c{"/v2/a/../b/blobs/" + kDigest, 400, oci::error_code::name_invalid},
           c{"/v2//a/manifests/latest", 400, oci::error_code::name_invalid},
           c{"/v2/a/blobs/sha256:xyz", 400, oci::error_code::digest_invalid},
           c{"/v2/a/blobs/md5:d41d8cd98f00b204e9800998ecf8427e", 400,
             oci::error_code::digest_invalid},
           c{"/v2/a/blobs/latest", 400, oci::error_code::digest_invalid},
           c{"/v2/a/manifests/-bad", 400, oci::error_code::manifest_invalid},
           c{"/v2/a/manifests/sha256:ABC", 400, oci::error_code::digest_invalid},
           c{"/v2/a/manifests/", 400, oci::error_code::manifest_invalid},
           c{"/v2/a/tags/list", 404, oci::error_code::unsupported},
           c{"/v2/" + std::string(300, 'a') + "/manifests/x", 400, oci::error_code::name_invalid},
       }) {
    route_error err;
    EXPECT_FALSE(parse_v2_path(k.path, err)) << k.path;
    EXPECT_EQ(err.status, k.status) << k.path;
    EXPECT_EQ(err.code, k.code) << k.path;
    EXPECT_FALSE(err.message.empty());
  }
}

TEST(Routes, RandomPathsNeverCrash) {
  std::mt19937_64 rng(11);
  const std::string alpha = "/v2abc:sha256manifestsblobs.-_%\x01";
  for (int i = 0; i < 100000; ++i) {
    std::string p = "/v2/";
    for (std::size_t j = 0, n = rng() % 60; j < n; ++j) p += alpha[rng() % alpha.size()];
    route_error err;
    auto r = parse_v2_path(p, err);
    if (r && r->kind != route_kind::base) {
      EXPECT_TRUE(oci::valid_name(r->name)) << p;
    }
  }
}

TEST(Routes, ErrorsKnowTheRouteTheyNamed) {
  route_error err;
  EXPECT_FALSE(parse_v2_path("/v2/a/blobs/latest", err));
  EXPECT_EQ(err.kind, route_kind::blob);
  EXPECT_FALSE(parse_v2_path("/v2/UP/manifests/latest", err));
  EXPECT_EQ(err.kind, route_kind::manifest);
  EXPECT_FALSE(parse_v2_path("/v2/_catalog", err));
  EXPECT_FALSE(err.kind);
}

}  // namespace
}  // namespace shoal::origin
