// deploy/: every manifest parses as YAML with an apiVersion and kind; the
// KubeSchedulerConfiguration wires the extender as docs/scheduler.md says; every daemon config
// embedded in a ConfigMap loads with that daemon's own `--print-config -c <file>`; workloads
// mount the ConfigMaps they name.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/config.h"

namespace {

namespace fs = std::filesystem;

struct doc {
  std::string file;
  YAML::Node node;
};

std::vector<doc> load_all() {
  std::vector<doc> out;
  // deploy/base, deploy/overlays/* and kube-scheduler-config.yaml; deploy/observability holds
  // Prometheus rule files, not Kubernetes objects (tests/deploy/observability_test.py checks it).
  const fs::path root = fs::path(SHOAL_SOURCE_DIR) / "deploy";
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const auto& e = *it;
    if (e.is_directory() && e.path().filename() == "observability") {
      it.disable_recursion_pending();
      continue;
    }
    if (e.path().extension() != ".yaml") continue;
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAllFromFile(e.path().string());
    } catch (const YAML::Exception& ex) {
      ADD_FAILURE() << e.path() << ": " << ex.what();
      continue;
    }
    for (auto& d : docs) {
      if (!d.IsNull()) out.push_back({fs::relative(e.path(), root).string(), d});
    }
  }
  return out;
}

std::string run(const std::string& cmd, int& code) {
  char tmpl[] = "/tmp/shoal-deploy-out-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd >= 0) ::close(fd);
  code = std::system((cmd + " > " + tmpl + " 2>&1").c_str());
  std::ifstream f(tmpl);
  std::stringstream ss;
  ss << f.rdbuf();
  ::unlink(tmpl);
  return ss.str();
}

TEST(Deploy, EveryDocumentHasApiVersionAndKind) {
  auto docs = load_all();
  ASSERT_GE(docs.size(), 10u);
  std::set<std::string> kinds;
  for (const auto& d : docs) {
    ASSERT_TRUE(d.node.IsMap()) << d.file;
    ASSERT_TRUE(d.node["apiVersion"] && d.node["kind"]) << d.file;
    kinds.insert(d.node["kind"].as<std::string>());
  }
  for (const char* k : {"KubeSchedulerConfiguration", "ConfigMap", "Deployment", "DaemonSet",
                        "Service", "Namespace"}) {
    EXPECT_TRUE(kinds.count(k)) << k;
  }
}

// Both profiles: the cluster's own kube-scheduler (deploy/kube-scheduler-config.yaml) and the
// second scheduler (deploy/overlays/second-scheduler).
TEST(Deploy, KubeSchedulerConfigurationWiresTheExtender) {
  int seen = 0;
  for (const auto& d : load_all()) {
    if (d.node["kind"].as<std::string>() != "KubeSchedulerConfiguration") continue;
    SCOPED_TRACE(d.file);
    ++seen;
    EXPECT_EQ(d.node["apiVersion"].as<std::string>(), "kubescheduler.config.k8s.io/v1");
    EXPECT_EQ(d.node["percentageOfNodesToScore"].as<int>(), 100);
    auto ext = d.node["extenders"];
    ASSERT_TRUE(ext && ext.IsSequence() && ext.size() == 1);
    auto e = ext[0];
    auto prefix = e["urlPrefix"].as<std::string>();
    EXPECT_TRUE(prefix.ends_with(":7070/v1/extender")) << prefix;
    // HTTPS to a name of at least two labels (Go matches DNS SAN `*` to any single label), with
    // kube-scheduler's client certificate: the scheduler answers the verbs for it only.
    ASSERT_TRUE(prefix.starts_with("https://")) << prefix;
    auto host = prefix.substr(8, prefix.find(':', 8) - 8);
    EXPECT_NE(host.find('.'), std::string::npos) << host;
    EXPECT_TRUE(e["enableHTTPS"].as<bool>());
    auto tls = e["tlsConfig"];
    ASSERT_TRUE(tls && tls.IsMap());
    for (const char* k : {"certFile", "keyFile", "caFile"})
      EXPECT_FALSE(tls[k].as<std::string>("").empty()) << k;
    EXPECT_FALSE(tls["insecure"] && tls["insecure"].as<bool>());
    EXPECT_EQ(e["filterVerb"].as<std::string>(), "filter");
    EXPECT_EQ(e["prioritizeVerb"].as<std::string>(), "prioritize");
    EXPECT_GE(e["weight"].as<int>(), 2);
    EXPECT_TRUE(e["nodeCacheCapable"].as<bool>());
    EXPECT_TRUE(e["ignorable"].as<bool>());
    auto timeout = shoal::config::duration::parse(e["httpTimeout"].as<std::string>());
    ASSERT_TRUE(timeout);
    EXPECT_LT(timeout->get(), std::chrono::seconds(5));
    EXPECT_GT(timeout->get(), std::chrono::seconds(2));  // above extender.resolve_timeout
  }
  EXPECT_EQ(seen, 2) << "KubeSchedulerConfigurations in deploy/";
}

TEST(Deploy, EmbeddedDaemonConfigsLoadWithEachDaemon) {
  const std::map<std::string, std::string> binaries = {
      {"scheduler.yaml", "scheduler/shoal-scheduler"},
      {"peerd.yaml", "peerd/shoal-peerd"},
      {"registry-proxy.yaml", "registry-proxy/shoal-registry-proxy"},
  };
  // Redis's own files (deploy/base/redis.yaml): tests/deploy/redis_start_test.py runs them; the
  // scheduler's tunnel to Redis (stunnel.conf): tests/deploy/render_test.py runs stunnel4 on it.
  const std::set<std::string> redis_files = {"redis.conf", "sentinel.conf", "start.sh",
                                             "tls-reload.sh", "stunnel.conf"};
  std::set<std::string> checked;
  char dir_tmpl[] = "/tmp/shoal-deploy-XXXXXX";
  ASSERT_TRUE(::mkdtemp(dir_tmpl));
  fs::path dir(dir_tmpl);
  struct remove_at_end {
    fs::path d;
    ~remove_at_end() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  for (const auto& d : load_all()) {
    if (d.node["kind"].as<std::string>() != "ConfigMap") continue;
    for (const auto& kv : d.node["data"]) {
      auto key = kv.first.as<std::string>();
      if (redis_files.count(key)) continue;
      auto it = binaries.find(key);
      ASSERT_NE(it, binaries.end()) << d.file << ": unexpected ConfigMap key " << key;
      auto bin = fs::path(SHOAL_BINARY_DIR) / it->second;
      ASSERT_TRUE(fs::exists(bin)) << bin;
      auto path = dir / key;
      std::ofstream(path) << kv.second.as<std::string>();
      int code = 0;
      auto out = run(bin.string() + " --print-config -c " + path.string(), code);
      EXPECT_EQ(code, 0) << d.file << " " << key << ":\n" << out;
      EXPECT_NE(out.find("# Effective configuration"), std::string::npos) << out;
      checked.insert(key);
    }
  }
  EXPECT_EQ(checked.size(), binaries.size());
}

TEST(Deploy, WorkloadsMountTheirConfigMapsAndPassTheFile) {
  std::set<std::string> configmaps;
  std::map<std::string, std::set<std::string>> keys;
  auto docs = load_all();
  for (const auto& d : docs) {
    if (d.node["kind"].as<std::string>() != "ConfigMap") continue;
    auto name = d.node["metadata"]["name"].as<std::string>();
    configmaps.insert(name);
    for (const auto& kv : d.node["data"]) keys[name].insert(kv.first.as<std::string>());
  }
  int workloads = 0;
  for (const auto& d : docs) {
    auto kind = d.node["kind"].as<std::string>();
    if (kind != "Deployment" && kind != "DaemonSet" && kind != "StatefulSet") continue;
    // Shoal's own daemons (registry-proxy is a StatefulSet); the second-scheduler overlay's
    // kube-scheduler gets its ConfigMap from a generator, and Redis's StatefulSet runs Redis
    // (tests/deploy/render_test.py renders and checks both).
    if (!d.file.starts_with("base/") ||
        d.node["metadata"]["name"].as<std::string>() == "shoal-redis")
      continue;
    ++workloads;
    auto spec = d.node["spec"]["template"]["spec"];
    std::string cm;
    for (const auto& v : spec["volumes"]) {
      if (v["configMap"]) cm = v["configMap"]["name"].as<std::string>();
    }
    ASSERT_TRUE(configmaps.count(cm)) << d.file << " mounts unknown ConfigMap " << cm;
    auto args = spec["containers"][0]["args"];
    ASSERT_TRUE(args && args.size() >= 2) << d.file;
    EXPECT_EQ(args[0].as<std::string>(), "-c");
    auto file = fs::path(args[1].as<std::string>()).filename().string();
    EXPECT_TRUE(keys[cm].count(file)) << d.file << ": " << file << " not in ConfigMap " << cm;
  }
  EXPECT_EQ(workloads, 3);
}

}  // namespace
