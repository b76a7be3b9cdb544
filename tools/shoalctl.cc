// shoalctl: the operator's CLI. Talks to a node's peerd (status, pull) and to the scheduler.
//
//   shoalctl status                 cache use, downloads, rates, where bytes came from
//   shoalctl pull IMAGE             warm this node's cache with an image (with progress)
//   shoalctl nodes                  nodes known to the scheduler
//
// Addresses: --peerd URL (default $SHOAL_PEERD or http://127.0.0.1:65001),
//            --scheduler URL (default $SHOAL_SCHEDULER or http://127.0.0.1:7070).

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/http_client.h"

namespace {

using nlohmann::json;

std::string env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

int usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: shoalctl [--peerd URL] [--scheduler URL] COMMAND\n"
               "  status             this node: cache use, downloads, rates, where bytes came from\n"
               "  pull IMAGE [--platform OS/ARCH]\n"
               "                     warm this node's cache with an image, showing progress\n"
               "  nodes              nodes known to the scheduler\n");
  return code;
}

shoal::result<shoal::http::full_response> request(shoal::http::client& c, const std::string& method,
                                                  const std::string& url, const std::string& body = {},
                                                  std::chrono::milliseconds stall = std::chrono::seconds(30)) {
  shoal::http::client_request r;
  r.method = method;
  r.url = url;
  r.body = body;
  if (!body.empty()) r.headers.emplace_back("Content-Type", "application/json");
  r.timeouts.connect = std::chrono::seconds(3);
  r.timeouts.stall = stall;
  r.max_retries = method == "GET" ? 2 : 0;
  return shoal::http::fetch(c, std::move(r));
}

int cmd_status(shoal::http::client& c, const std::string& peerd) {
  auto r = request(c, "GET", peerd + "/shoal/v1/status");
  if (!r) {
    std::fprintf(stderr, "shoalctl: peerd at %s: %s\n", peerd.c_str(), r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded()) {
    std::fprintf(stderr, "shoalctl: peerd answered HTTP %d\n", r->status);
    return 1;
  }
  auto num = [](const json& o, const char* k) { return o.contains(k) && o[k].is_number() ? o[k].get<double>() : 0.0; };
  const auto& cache = j["cache"];
  double cap = num(cache, "capacity");
  std::printf("node        %s\n", j.value("node", "?").c_str());
  std::printf("cache       %s of %s (%.1f%%), %.0f objects, %.0f hits, %.0f evictions\n",
              human(num(cache, "bytes")).c_str(), human(cap).c_str(), cap > 0 ? 100.0 * num(cache, "bytes") / cap : 0.0,
              num(cache, "objects"), num(cache, "hits"), num(cache, "evictions"));
  const auto& b = j["bytes"];
  std::printf("bytes in    from peers %s, from registry-proxy %s (BitTorrent) + %s (HTTP fallback)\n",
              human(num(b, "from_peers")).c_str(), human(num(b, "from_origin")).c_str(),
              human(num(b, "from_http_fallback")).c_str());
  std::printf("bytes out   to local clients %s, to peers %s\n", human(num(b, "served_local")).c_str(),
              human(num(b, "uploaded_to_peers")).c_str());
  std::printf("swarms      %.0f torrents loaded, %zu downloading\n", num(j, "torrents_loaded"),
              j["downloads"].is_array() ? j["downloads"].size() : 0);
  if (j["downloads"].is_array()) {
    for (const auto& d : j["downloads"]) {
      double done = num(d, "pieces_done"), total = num(d, "pieces");
      std::printf("  %s  %5.1f%%  %s  down %s/s  up %s/s  %.0f peers\n", d.value("digest", "").substr(0, 19).c_str(),
                  total > 0 ? 100.0 * done / total : 100.0, human(num(d, "size")).c_str(),
                  human(num(d, "download_rate")).c_str(), human(num(d, "upload_rate")).c_str(), num(d, "peers"));
    }
  }
  return 0;
}

int cmd_pull(shoal::http::client& c, const std::string& peerd, const std::string& image, const std::string& platform) {
  json body = {{"image", image}, {"platform", platform}};
  std::atomic<bool> done{false};
  // Progress: poll the node's status while the pull runs.
  std::thread progress([&] {
    bool tty = ::isatty(2);
    while (!done.load()) {
      for (int i = 0; i < 5 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (done.load()) break;
      auto r = request(c, "GET", peerd + "/shoal/v1/status", {}, std::chrono::seconds(5));
      if (!r || r->status != 200) continue;
      auto j = json::parse(r->body, nullptr, false);
      if (j.is_discarded() || !j["downloads"].is_array()) continue;
      double have = 0, total = 0, rate = 0;
      for (const auto& d : j["downloads"]) {
        double size = d.value("size", 0.0), pieces = d.value("pieces", 0.0), done_p = d.value("pieces_done", 0.0);
        total += size;
        have += pieces > 0 ? size * done_p / pieces : size;
        rate += d.value("download_rate", 0.0);
      }
      if (total <= 0) continue;
      double eta = rate > 0 ? (total - have) / rate : 0;
      std::fprintf(stderr, "%s  %s / %s  %5.1f%%  %s/s  ETA %.0fs%s", tty ? "\r" : "", human(have).c_str(),
                   human(total).c_str(), 100.0 * have / total, human(rate).c_str(), eta, tty ? "   " : "\n");
    }
  });
  auto r = request(c, "POST", peerd + "/shoal/v1/pull", body.dump(), std::chrono::minutes(30));
  done = true;
  progress.join();
  std::fprintf(stderr, "\n");
  if (!r) {
    std::fprintf(stderr, "shoalctl: pull %s: %s\n", image.c_str(), r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "shoalctl: pull %s: HTTP %d\n", image.c_str(), r->status);
    return 1;
  }
  if (j.contains("error")) {
    std::fprintf(stderr, "shoalctl: pull %s: %s\n", image.c_str(), j["error"].get<std::string>().c_str());
    return 1;
  }
  int cached = 0, fetched = 0, failed = 0;
  for (const auto& b : j["blobs"]) {
    if (!b.value("ok", false)) {
      ++failed;
      std::fprintf(stderr, "  %s: %s\n", b.value("digest", "").c_str(), b.value("error", "").c_str());
    } else if (b.value("cached_before", false)) {
      ++cached;
    } else {
      ++fetched;
    }
  }
  std::printf("%s: %s in %.1fs (%d blobs fetched, %d already cached%s)\n", j.value("image", image).c_str(),
              human(j.value("bytes", 0.0)).c_str(), j.value("seconds", 0.0), fetched, cached,
              failed ? (", " + std::to_string(failed) + " FAILED").c_str() : "");
  return failed || r->status != 200 ? 1 : 0;
}

int cmd_nodes(shoal::http::client& c, const std::string& scheduler) {
  auto r = request(c, "GET", scheduler + "/v1/nodes");
  if (!r) {
    std::fprintf(stderr, "shoalctl: scheduler at %s: %s\n", scheduler.c_str(), r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || !j.is_array()) {
    std::fprintf(stderr, "shoalctl: scheduler answered HTTP %d\n", r->status);
    return 1;
  }
  std::printf("%-20s %-8s %-16s %8s %12s %10s\n", "NODE", "HEALTHY", "ADDRESS", "OBJECTS", "CACHE", "SEEN");
  for (const auto& n : j) {
    std::printf("%-20s %-8s %-16s %8zu %12s %9.1fs\n", n.value("node", "").c_str(), n.value("healthy", false) ? "yes" : "no",
                n.value("ip", "").c_str(), n.value("objects", std::size_t{0}), human(n.value("cache_used", 0.0)).c_str(),
                n.value("last_seen_s", 0.0));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string peerd = env_or("SHOAL_PEERD", "http://127.0.0.1:65001");
  std::string scheduler = env_or("SHOAL_SCHEDULER", "http://127.0.0.1:7070");
  std::string platform = "linux/amd64";
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    if (a == "-h" || a == "--help") return usage(0);
    if (a == "--peerd") {
      if (!value(peerd)) return usage(2);
    } else if (a == "--scheduler") {
      if (!value(scheduler)) return usage(2);
    } else if (a == "--platform") {
      if (!value(platform)) return usage(2);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "shoalctl: unknown option %s\n", a.c_str());
      return usage(2);
    } else {
      args.push_back(a);
    }
  }
  if (args.empty()) return usage(2);
  shoal::http::client c;
  if (args[0] == "status" && args.size() == 1) return cmd_status(c, peerd);
  if (args[0] == "pull" && args.size() == 2) return cmd_pull(c, peerd, args[1], platform);
  if (args[0] == "nodes" && args.size() == 1) return cmd_nodes(c, scheduler);
  return usage(2);
}
