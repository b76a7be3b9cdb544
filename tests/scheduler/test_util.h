#pragma once
// GCC 12 reports a false -Wrestrict inside libstdc++ for `"literal" + std::string` at -O3
// (GCC bug 105329); the tests build names that way throughout.
#pragma GCC diagnostic ignored "-Wrestrict"
// Helpers shared by the scheduler's unit tests: a settable clock, digests from names, heartbeat
// builders, and an in-memory registry-proxy (manifests by repository and reference).

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/heartbeat.h"
#include "common/peer_identity.h"
#include "common/sha256.h"
#include "scheduler/cost.h"
#include "scheduler/dataset_catalog.h"
#include "scheduler/prewarm.h"
#include "scheduler/resolver.h"

namespace shoal::scheduler::testing {

using namespace std::chrono_literals;

// A clock tests move by hand; safe to read from several threads.
struct fake_clock {
  std::atomic<std::int64_t> ns{1'000'000'000'000};
  std::chrono::steady_clock::time_point now() const {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns.load()));
  }
  void advance(std::chrono::nanoseconds d) { ns += d.count(); }
  auto fn() {
    return [this] { return now(); };
  }
};

inline digest dg(std::string_view name) { return sha256_of(name); }

// Every byte percent-encoded (raw info-hashes and peer ids in announce queries).
inline std::string pct(std::string_view bytes) {
  static const char* hx = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : bytes) {
    out += '%';
    out += hx[c >> 4];
    out += hx[c & 15];
  }
  return out;
}

// The identity a handler sees for a caller with a verified cluster certificate (mutual TLS).
inline tls::peer_identity verified_peer(tls::peer_role role, std::string name) {
  tls::peer_identity p;
  p.tls = p.verified = true;
  p.role = role;
  p.name = std::move(name);
  return p;
}
inline object_ref obj(std::string_view name, std::uint64_t size) { return {dg(name), size}; }

inline std::string ih_of(std::string_view name) {
  return dg(std::string("ih:") + std::string(name)).hex().substr(0, 40);
}

inline heartbeat::held_object held(std::string_view name, std::uint64_t size) {
  heartbeat::held_object h;
  h.id = dg(name);
  h.size = size;
  h.info_hash = ih_of(name);
  return h;
}

// A node's part of prewarm `id`: one order "<id>.0" for app:v1 (layers l1, 100 B and l2, 300 B).
inline planned_node image_plan(const std::string& node, const std::string& id,
                               const std::string& role = "target") {
  planned_node p;
  p.node = node;
  p.role = role;
  heartbeat::prewarm_order o;
  o.id = id + ".0";
  o.image = "docker.io/library/app:v1";
  o.platform = "linux/amd64";
  o.registry = "docker.io";
  o.repository = "library/app";
  o.objects = {{dg("l1"), 100}, {dg("l2"), 300}};
  p.orders.push_back(o);
  return p;
}

// A full heartbeat from `node` holding the named objects.
inline heartbeat::message full_hb(const std::string& node, std::vector<heartbeat::held_object> objs,
                                  std::map<std::string, std::string> labels = {},
                                  std::uint64_t seq = 1, std::string epoch = "") {
  heartbeat::message m;
  m.node = node;
  m.labels = std::move(labels);
  m.ip = "10.0.0.1";
  m.bt_port = 6881;
  m.seq = seq;
  m.epoch = std::move(epoch);
  m.full = true;
  m.objects = std::move(objs);
  return m;
}

inline heartbeat::message delta_hb(const std::string& node, std::uint64_t seq,
                                   const std::string& epoch,
                                   std::vector<heartbeat::held_object> added,
                                   std::vector<digest> removed = {}) {
  heartbeat::message m;
  m.node = node;
  m.ip = "10.0.0.1";
  m.bt_port = 6881;
  m.seq = seq;
  m.epoch = epoch;
  m.full = false;
  m.objects = std::move(added);
  m.removed = std::move(removed);
  return m;
}

// OCI image manifest JSON: config then layers, each (name, size) → sha256(name).
inline std::string image_manifest(const std::vector<std::pair<std::string, std::uint64_t>>& layers,
                                  std::string config = "config", std::uint64_t config_size = 1000) {
  nlohmann::json j = {{"schemaVersion", 2},
                      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                      {"config",
                       {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                        {"digest", dg(config).str()},
                        {"size", config_size}}}};
  j["layers"] = nlohmann::json::array();
  for (const auto& [name, size] : layers) {
    j["layers"].push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
                           {"digest", dg(name).str()},
                           {"size", size}});
  }
  return j.dump();
}

inline std::string index_manifest(
    const std::vector<std::pair<std::string, std::string>>& platform_bodies) {
  nlohmann::json j = {{"schemaVersion", 2},
                      {"mediaType", "application/vnd.oci.image.index.v1+json"}};
  j["manifests"] = nlohmann::json::array();
  for (const auto& [plat, body] : platform_bodies) {
    auto s1 = plat.find('/');
    auto s2 = plat.find('/', s1 + 1);
    nlohmann::json p = {
        {"os", plat.substr(0, s1)},
        {"architecture",
         plat.substr(s1 + 1, s2 == std::string::npos ? std::string::npos : s2 - s1 - 1)}};
    if (s2 != std::string::npos) p["variant"] = plat.substr(s2 + 1);
    j["manifests"].push_back({{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                              {"digest", sha256_of(body).str()},
                              {"size", body.size()},
                              {"platform", p}});
  }
  // An attestation entry, as BuildKit adds: must be skipped.
  j["manifests"].push_back({{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                            {"digest", dg("attestation").str()},
                            {"size", 100},
                            {"platform", {{"os", "unknown"}, {"architecture", "unknown"}}}});
  return j.dump();
}

// registry-proxy in memory: (registry, repository, reference) → body. Counts fetches.
class fake_source final : public manifest_source {
 public:
  // Registers a manifest under its digest, and under `tag` when given.
  void put(const std::string& registry, const std::string& repo, const std::string& body,
           const std::string& tag = "") {
    std::lock_guard lk(mu_);
    auto d = sha256_of(body).str();
    bodies_[registry + "/" + repo + "@" + d] = body;
    if (!tag.empty()) bodies_[registry + "/" + repo + ":" + tag] = body;
  }
  void put_raw(const std::string& key, const std::string& body) {
    std::lock_guard lk(mu_);
    bodies_[key] = body;
  }
  void fail_all(bool f) { failing_ = f; }
  void delay(std::chrono::milliseconds d) { delay_ = d; }
  [[nodiscard]] int fetches() const { return fetches_.load(); }

  result<manifest> get(const std::string& registry, const std::string& repository,
                       const std::string& reference) override {
    ++fetches_;
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (failing_) return fail(errc::unavailable, "registry-proxy is down");
    std::string key =
        registry + "/" + repository + (reference.rfind("sha256:", 0) == 0 ? "@" : ":") + reference;
    std::lock_guard lk(mu_);
    auto it = bodies_.find(key);
    if (it == bodies_.end()) return fail(errc::not_found, "manifest " + key + " not found");
    return manifest{"application/vnd.oci.image.manifest.v1+json", it->second};
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> bodies_;
  std::atomic<int> fetches_{0};
  std::atomic<bool> failing_{false};
  std::chrono::milliseconds delay_{0};
};

// A catalog of datasets for tests.
using fake_datasets = static_datasets;

}  // namespace shoal::scheduler::testing
