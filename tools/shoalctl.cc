// shoalctl: the operator's CLI. Talks to a node's peerd (status, pull) and to the scheduler.
//
//   shoalctl status                 cache use, downloads, rates, where bytes came from
//   shoalctl pull IMAGE             warm this node's cache with an image (with progress)
//   shoalctl nodes                  nodes known to the scheduler (health, GPUs, cache, network)
//   shoalctl place IMAGE...         where a job would go, every node explained
//   shoalctl prewarm IMAGE...       warm nodes (--node, --selector or --job) and follow progress
//   shoalctl prewarm status [ID]    prewarms and their progress
//   shoalctl dataset declare FILE   declare a dataset to registry-proxy (JSON declaration)
//   shoalctl dataset prefetch NAME@VERSION   fetch it onto this node, with progress, and make its
//   view shoalctl dataset ls | status NAME@VERSION | rm NAME@VERSION   this node's datasets
//   shoalctl dataset renew NAME@VERSION [--ttl SECONDS]   keep its view and pins from expiring
//   shoalctl certs init|issue ...   the cluster CA and certificates (certs.h)
//
// Addresses: --peerd URL (default $SHOAL_PEERD or http://127.0.0.1:65001),
//            --scheduler URL (default $SHOAL_SCHEDULER or http://127.0.0.1:7070),
//            --registry-proxy URL (default $SHOAL_REGISTRY_PROXY or http://127.0.0.1:5050).
// TLS (https URLs): --ca FILE (the cluster CA; default $SHOAL_CA), --cert FILE and --key FILE
// (the operator's certificate, shoal://operator/<user>; default $SHOAL_CERT, $SHOAL_KEY), or
// --token-file FILE (default $SHOAL_TOKEN_FILE): its first line is sent as
// `Authorization: Bearer` to the scheduler and registry-proxy, for scripts without a certificate.
// peerd's API stays plain HTTP on loopback.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "certs.h"
#include "common/http_client.h"
#include "common/origin_protocol.h"

namespace {

using nlohmann::json;
namespace origin = shoal::origin;

std::string env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

// `Authorization: Bearer <token>` for the scheduler's and registry-proxy's operator verbs; empty
// without --token-file. Set once in main before any request.
std::string g_bearer;

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
  std::fprintf(
      code ? stderr : stdout,
      "usage: shoalctl [--peerd URL] [--scheduler URL] [--registry-proxy URL]\n"
      "                [--ca FILE] [--cert FILE --key FILE] [--token-file FILE] COMMAND\n"
      "  status             this node: cache use, downloads, rates, where bytes came from\n"
      "  pull IMAGE [--platform OS/ARCH]\n"
      "                     warm this node's cache with an image, showing progress\n"
      "  nodes              nodes known to the scheduler\n"
      "  place IMAGE... [--nodes K] [--gpus G] [--dataset NAME@VER]... [--selector K=V]...\n"
      "        [--standby N] [--dry-run] [--json]\n"
      "                     where a job would run, with bytes present/missing and time per node\n"
      "  prewarm IMAGE... (--node N... | --selector K=V... | --job [--nodes K] [--gpus G] "
      "[--standby N])\n"
      "        [--dataset NAME@VER]... [--no-wait] [--timeout SECONDS]\n"
      "                     warm nodes through the scheduler, showing progress until done\n"
      "  prewarm status [ID]  list prewarms, or show one\n"
      "  dataset declare FILE [--registry-proxy URL]\n"
      "                     declare a dataset (JSON: name, version, origin, include, exclude)\n"
      "  dataset prefetch NAME@VERSION [--no-wait] [--timeout SECONDS]\n"
      "                     fetch a dataset onto this node (progress bar, summary) and make its "
      "view\n"
      "  dataset ls         datasets on this node\n"
      "  dataset status NAME@VERSION [--json]\n"
      "  dataset rm NAME@VERSION   remove the view and unpin its objects\n"
      "  dataset renew NAME@VERSION [--ttl SECONDS]   extend the view's expiry (default:\n"
      "                     peerd's datasets.pin_ttl); unrenewed views expire and are removed\n"
      "  certs init|issue   the cluster CA and certificates (shoalctl certs --help)\n"
      "TLS: https URLs are verified against --ca ($SHOAL_CA); --cert/--key ($SHOAL_CERT,\n"
      "  $SHOAL_KEY) present an operator certificate; --token-file ($SHOAL_TOKEN_FILE) sends\n"
      "  its first line as a bearer token to the scheduler and registry-proxy\n");
  return code;
}

shoal::result<shoal::http::full_response> request(
    shoal::http::client& c, const std::string& method, const std::string& url,
    const std::string& body = {}, std::chrono::milliseconds stall = std::chrono::seconds(30)) {
  shoal::http::client_request r;
  r.method = method;
  r.url = url;
  r.body = body;
  if (!body.empty()) r.headers.emplace_back("Content-Type", "application/json");
  // Never to peerd (loopback, plain): the token is for the cluster's authenticated services.
  if (!g_bearer.empty() && url.starts_with("https://"))
    r.headers.emplace_back("Authorization", "Bearer " + g_bearer);
  r.timeouts.connect = std::chrono::seconds(3);
  r.timeouts.stall = stall;
  r.max_retries = method == "GET" ? 2 : 0;
  return shoal::http::fetch(c, std::move(r));
}

int cmd_status(shoal::http::client& c, const std::string& peerd) {
  auto r = request(c, "GET", peerd + std::string(origin::paths::node_status));
  if (!r) {
    std::fprintf(stderr, "shoalctl: peerd at %s: %s\n", peerd.c_str(), r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded()) {
    std::fprintf(stderr, "shoalctl: peerd answered HTTP %d\n", r->status);
    return 1;
  }
  auto num = [](const json& o, const char* k) {
    return o.contains(k) && o[k].is_number() ? o[k].get<double>() : 0.0;
  };
  const auto& cache = j["cache"];
  double cap = num(cache, "capacity");
  std::printf("node        %s\n", j.value("node", "?").c_str());
  std::printf("cache       %s of %s (%.1f%%), %.0f objects, %.0f hits, %.0f evictions\n",
              human(num(cache, "bytes")).c_str(), human(cap).c_str(),
              cap > 0 ? 100.0 * num(cache, "bytes") / cap : 0.0, num(cache, "objects"),
              num(cache, "hits"), num(cache, "evictions"));
  const auto& b = j["bytes"];
  std::printf(
      "bytes in    from peers %s, from registry-proxy %s (BitTorrent) + %s (HTTP fallback)\n",
      human(num(b, "from_peers")).c_str(), human(num(b, "from_origin")).c_str(),
      human(num(b, "from_http_fallback")).c_str());
  std::printf("bytes out   to local clients %s, to peers %s\n",
              human(num(b, "served_local")).c_str(), human(num(b, "uploaded_to_peers")).c_str());
  std::printf("swarms      %.0f torrents loaded, %zu downloading\n", num(j, "torrents_loaded"),
              j["downloads"].is_array() ? j["downloads"].size() : 0);
  if (j["downloads"].is_array()) {
    for (const auto& d : j["downloads"]) {
      double done = num(d, "pieces_done"), total = num(d, "pieces");
      std::printf("  %s  %5.1f%%  %s  down %s/s  up %s/s  %.0f peers\n",
                  d.value("digest", "").substr(0, 19).c_str(),
                  total > 0 ? 100.0 * done / total : 100.0, human(num(d, "size")).c_str(),
                  human(num(d, "download_rate")).c_str(), human(num(d, "upload_rate")).c_str(),
                  num(d, "peers"));
    }
  }
  return 0;
}

int cmd_pull(shoal::http::client& c, const std::string& peerd, const std::string& image,
             const std::string& platform) {
  json body = {{"image", image}, {"platform", platform}};
  std::atomic<bool> done{false};
  // Progress: poll the node's status while the pull runs.
  std::thread progress([&] {
    bool tty = ::isatty(2);
    while (!done.load()) {
      for (int i = 0; i < 5 && !done.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (done.load()) break;
      auto r = request(c, "GET", peerd + std::string(origin::paths::node_status), {},
                       std::chrono::seconds(5));
      if (!r || r->status != 200) continue;
      auto j = json::parse(r->body, nullptr, false);
      if (j.is_discarded() || !j["downloads"].is_array()) continue;
      double have = 0, total = 0, rate = 0;
      for (const auto& d : j["downloads"]) {
        double size = d.value("size", 0.0), pieces = d.value("pieces", 0.0),
               done_p = d.value("pieces_done", 0.0);
        total += size;
        have += pieces > 0 ? size * done_p / pieces : size;
        rate += d.value("download_rate", 0.0);
      }
      if (total <= 0) continue;
      double eta = rate > 0 ? (total - have) / rate : 0;
      std::fprintf(stderr, "%s  %s / %s  %5.1f%%  %s/s  ETA %.0fs%s", tty ? "\r" : "",
                   human(have).c_str(), human(total).c_str(), 100.0 * have / total,
                   human(rate).c_str(), eta, tty ? "   " : "\n");
    }
  });
  auto r = request(c, "POST", peerd + std::string(origin::paths::node_pull), body.dump(),
                   std::chrono::minutes(30));
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
    std::fprintf(stderr, "shoalctl: pull %s: %s\n", image.c_str(),
                 j["error"].get<std::string>().c_str());
    return 1;
  }
  int cached = 0, fetched = 0, failed = 0;
  for (const auto& b : j["blobs"]) {
    if (!b.value("ok", false)) {
      ++failed;
      std::fprintf(stderr, "  %s: %s\n", b.value("digest", "").c_str(),
                   b.value("error", "").c_str());
    } else if (b.value("cached_before", false)) {
      ++cached;
    } else {
      ++fetched;
    }
  }
  std::printf("%s: %s in %.1fs (%d blobs fetched, %d already cached%s)\n",
              j.value("image", image).c_str(), human(j.value("bytes", 0.0)).c_str(),
              j.value("seconds", 0.0), fetched, cached,
              failed ? (", " + std::to_string(failed) + " FAILED").c_str() : "");
  return failed || r->status != 200 ? 1 : 0;
}

int cmd_nodes(shoal::http::client& c, const std::string& scheduler) {
  auto r = request(c, "GET", scheduler + "/v1/nodes");
  if (!r) {
    std::fprintf(stderr, "shoalctl: scheduler at %s: %s\n", scheduler.c_str(),
                 r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || !j.is_array()) {
    std::fprintf(stderr, "shoalctl: scheduler answered HTTP %d\n", r->status);
    return 1;
  }
  std::printf("%-16s %-8s %-12s %-10s %-8s %-7s %8s %11s %8s %-8s\n", "NODE", "HEALTHY", "PLATFORM",
              "ZONE/RACK", "FABRIC", "GPUS", "OBJECTS", "CACHE", "SEEN", "NETWORK");
  for (const auto& n : j) {
    if (!n.is_object()) continue;
    std::string zr, fabric;
    if (n.contains("labels") && n["labels"].is_object()) {
      const auto& l = n["labels"];
      zr = l.value("zone", "-") + "/" + l.value("rack", "-");
      fabric = l.value("fabric", "-");
    }
    std::string gpus =
        std::to_string(n.value("gpus_total", 0u) -
                       std::min(n.value("gpus_total", 0u), n.value("gpus_reserved", 0u))) +
        "/" + std::to_string(n.value("gpus_total", 0u));
    std::string net = n.contains("network") && n["network"].is_object()
                          ? n["network"].value("validation", "")
                          : "";
    std::printf("%-16s %-8s %-12s %-10s %-8s %-7s %8zu %11s %7.1fs %-8s\n",
                n.value("node", "").c_str(), n.value("healthy", false) ? "yes" : "no",
                n.value("platform", "").c_str(), zr.c_str(), fabric.c_str(), gpus.c_str(),
                n.value("objects", std::size_t{0}), human(n.value("cache_used", 0.0)).c_str(),
                n.value("last_seen_s", 0.0), net.c_str());
  }
  return 0;
}

// Command options after the command word: flags with values, repeatable ones collected in order.
struct cmd_options {
  std::vector<std::string> words;
  std::vector<std::string> datasets, nodes, selectors;
  unsigned k = 1, gpus = 0, standby = 0, ttl = 0;
  bool job = false, dry_run = false, as_json = false, wait = true;
  double timeout = 1800;
};

bool parse_selectors(const std::vector<std::string>& in, json& out) {
  out = json::object();
  for (const auto& s : in) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "shoalctl: --selector wants KEY=VALUE, got %s\n", s.c_str());
      return false;
    }
    out[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return true;
}

std::string missing_summary(const json& n) {
  std::string out;
  if (!n.contains("missing_by_source") || !n["missing_by_source"].is_object()) return out;
  for (const char* s : {"rack", "zone", "cluster", "origin", "upstream"}) {
    double v = n["missing_by_source"].value(s, 0.0);
    if (v <= 0) continue;
    out += (out.empty() ? "" : " ") + std::string(s) + ":" + human(v);
  }
  return out.empty() ? "-" : out;
}

int cmd_place(shoal::http::client& c, const std::string& scheduler, const cmd_options& o) {
  json body = {{"images", o.words},
               {"nodes", o.k},
               {"gpus", o.gpus},
               {"dry_run", o.dry_run},
               {"standby", o.standby}};
  if (!o.datasets.empty()) body["datasets"] = o.datasets;
  json sel;
  if (!parse_selectors(o.selectors, sel)) return 2;
  if (!sel.empty()) body["selector"] = sel;
  auto r = request(c, "POST", scheduler + "/v1/place", body.dump(), std::chrono::seconds(30));
  if (!r) {
    std::fprintf(stderr, "shoalctl: scheduler at %s: %s\n", scheduler.c_str(),
                 r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "shoalctl: scheduler answered HTTP %d\n", r->status);
    return 1;
  }
  if (o.as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return r->status == 200 && j.value("feasible", false) ? 0 : 1;
  }
  if (r->status != 200) {
    std::fprintf(stderr, "shoalctl: place: %s\n",
                 j.value("error", "HTTP " + std::to_string(r->status)).c_str());
    return 1;
  }
  if (!j.value("feasible", false)) {
    std::printf("not placeable: %s\n", j.value("reason", "").c_str());
  } else {
    std::string chosen;
    for (const auto& n : j["chosen"]) chosen += (chosen.empty() ? "" : ", ") + n.get<std::string>();
    std::printf("chosen: %s%s%s\n", chosen.c_str(),
                j.value("segment", "").empty() ? "" : "  (fabric ",
                j.value("segment", "").empty() ? "" : (j.value("segment", "") + ")").c_str());
    if (j.contains("standby") && !j["standby"].empty()) {
      std::string sb;
      for (const auto& n : j["standby"]) sb += (sb.empty() ? "" : ", ") + n.get<std::string>();
      std::printf("standby: %s\n", sb.c_str());
    }
  }
  std::printf("%-5s %-16s %-8s %10s %10s %9s %-6s %s\n", "RANK", "NODE", "ROLE", "PRESENT",
              "MISSING", "EST", "GPUS", "FROM / WHY NOT");
  for (const auto& n : j["nodes"]) {
    std::string rank = n.value("rank", 0) ? std::to_string(n.value("rank", 0)) : "-";
    std::string gpus = n.contains("gpus") ? std::to_string(n["gpus"].value("free", 0u)) + "/" +
                                                std::to_string(n["gpus"].value("capacity", 0u))
                                          : "";
    std::string why;
    if (n.value("eligible", false)) {
      why = missing_summary(n);
    } else if (n.contains("reasons") && n["reasons"].is_array() && !n["reasons"].empty()) {
      why = n["reasons"][0].get<std::string>();
    }
    std::printf("%-5s %-16s %-8s %10s %10s %8.1fs %-6s %s\n", rank.c_str(),
                n.value("node", "").c_str(), n.value("role", "").c_str(),
                human(n.value("bytes_present", 0.0)).c_str(),
                human(n.value("bytes_missing", 0.0)).c_str(), n.value("estimated_seconds", 0.0),
                gpus.c_str(), why.c_str());
  }
  return j.value("feasible", false) ? 0 : 1;
}

// Prints one prewarm's progress; returns its state.
std::string show_prewarm(const json& j, bool tty) {
  double total = j.value("bytes_total", 0.0), done = j.value("bytes_done", 0.0);
  std::printf("%sprewarm %s  %s  %s / %s  %5.1f%%\n", tty ? "\033[2K" : "",
              j.value("id", "").c_str(), j.value("state", "").c_str(), human(done).c_str(),
              human(total).c_str(), total > 0 ? 100.0 * done / total : 100.0);
  if (j.contains("nodes") && j["nodes"].is_array()) {
    for (const auto& n : j["nodes"]) {
      double nt = n.value("bytes_total", 0.0), nd = n.value("bytes_done", 0.0);
      std::printf("%s  %-16s %-8s %-8s %10s / %-10s %5.1f%%  %s\n", tty ? "\033[2K" : "",
                  n.value("node", "").c_str(), n.value("role", "").c_str(),
                  n.value("state", "").c_str(), human(nd).c_str(), human(nt).c_str(),
                  nt > 0 ? 100.0 * nd / nt : 100.0, n.value("error", "").c_str());
    }
  }
  if (j.contains("replacements") && j["replacements"].is_object()) {
    for (const auto& [failed, by] : j["replacements"].items()) {
      std::printf("%s  %s replaced by standby %s\n", tty ? "\033[2K" : "", failed.c_str(),
                  by.get<std::string>().c_str());
    }
  }
  return j.value("state", "");
}

int follow_prewarm(shoal::http::client& c, const std::string& scheduler, const std::string& id,
                   double timeout) {
  bool tty = ::isatty(1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  int lines = 0;
  for (;;) {
    auto r = request(c, "GET", scheduler + "/v1/prewarm/" + id, {}, std::chrono::seconds(10));
    if (!r || r->status != 200) {
      std::fprintf(stderr, "shoalctl: prewarm %s: %s\n", id.c_str(),
                   r ? ("HTTP " + std::to_string(r->status)).c_str() : r.error().message.c_str());
      return 1;
    }
    auto j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return 1;
    if (tty && lines > 0) std::printf("\033[%dA", lines);
    std::string st = show_prewarm(j, tty);
    std::fflush(stdout);
    lines =
        1 +
        (j.contains("nodes") && j["nodes"].is_array() ? static_cast<int>(j["nodes"].size()) : 0) +
        (j.contains("replacements") && j["replacements"].is_object()
             ? static_cast<int>(j["replacements"].size())
             : 0);
    if (st == "done") return 0;
    if (st == "failed") return 1;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "shoalctl: prewarm %s still %s after %.0fs\n", id.c_str(), st.c_str(),
                   timeout);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  }
}

int cmd_prewarm(shoal::http::client& c, const std::string& scheduler, const cmd_options& o) {
  if (!o.words.empty() && o.words[0] == "status") {
    if (o.words.size() == 1) {
      auto r = request(c, "GET", scheduler + "/v1/prewarm");
      auto j = r ? json::parse(r->body, nullptr, false) : json();
      if (!r || r->status != 200 || !j.is_array()) {
        std::fprintf(stderr, "shoalctl: scheduler at %s: %s\n", scheduler.c_str(),
                     r ? ("HTTP " + std::to_string(r->status)).c_str() : r.error().message.c_str());
        return 1;
      }
      std::printf("%-18s %-8s %6s %6s %6s %8s\n", "ID", "STATE", "NODES", "DONE", "FAILED", "AGE");
      for (const auto& p : j) {
        std::printf("%-18s %-8s %6zu %6zu %6zu %7.0fs\n", p.value("id", "").c_str(),
                    p.value("state", "").c_str(), p.value("nodes", std::size_t{0}),
                    p.value("nodes_done", std::size_t{0}), p.value("nodes_failed", std::size_t{0}),
                    p.value("age_s", 0.0));
      }
      return 0;
    }
    auto r = request(c, "GET", scheduler + "/v1/prewarm/" + o.words[1]);
    auto j = r ? json::parse(r->body, nullptr, false) : json();
    if (!r || r->status != 200 || !j.is_object()) {
      std::fprintf(
          stderr, "shoalctl: prewarm %s: %s\n", o.words[1].c_str(),
          r ? (j.is_object() ? j.value("error", "") : "HTTP " + std::to_string(r->status)).c_str()
            : r.error().message.c_str());
      return 1;
    }
    return show_prewarm(j, false) == "failed" ? 1 : 0;
  }
  json body = json::object();
  if (!o.words.empty()) body["images"] = o.words;
  if (!o.datasets.empty()) body["datasets"] = o.datasets;
  int targets = (o.nodes.empty() ? 0 : 1) + (o.selectors.empty() ? 0 : 1) + (o.job ? 1 : 0);
  if (targets != 1) {
    std::fprintf(stderr, "shoalctl: prewarm needs exactly one of --node, --selector and --job\n");
    return 2;
  }
  if (!o.nodes.empty()) body["nodes"] = o.nodes;
  if (!o.selectors.empty()) {
    json sel;
    if (!parse_selectors(o.selectors, sel)) return 2;
    body["selector"] = sel;
  }
  if (o.job) {
    body["job"] = {{"images", o.words}, {"nodes", o.k}, {"gpus", o.gpus}};
    if (!o.datasets.empty()) body["job"]["datasets"] = o.datasets;
    body["standby"] = o.standby;
  }
  auto r = request(c, "POST", scheduler + "/v1/prewarm", body.dump(), std::chrono::seconds(30));
  if (!r) {
    std::fprintf(stderr, "shoalctl: scheduler at %s: %s\n", scheduler.c_str(),
                 r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (r->status != 202 || !j.is_object()) {
    std::fprintf(stderr, "shoalctl: prewarm: %s\n",
                 j.is_object() ? j.value("error", "HTTP " + std::to_string(r->status)).c_str()
                               : ("HTTP " + std::to_string(r->status)).c_str());
    return 1;
  }
  std::string id = j.value("id", "");
  if (!o.wait) {
    std::printf("%s\n", id.c_str());
    return 0;
  }
  return follow_prewarm(c, scheduler, id, o.timeout);
}

// ---- datasets

double num_of(const json& o, const char* k) {
  return o.contains(k) && o[k].is_number() ? o[k].get<double>() : 0.0;
}

std::string pct(double part, double whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

// One progress line: bar, bytes, rate, ETA, where the bytes came from.
std::string progress_line(const json& j) {
  double done = num_of(j, "bytes_done"), total = num_of(j, "bytes");
  double frac = total > 0 ? done / total : (j.value("state", "") == "ready" ? 1.0 : 0.0);
  int width = 24, fill = static_cast<int>(frac * width + 0.5);
  std::string bar = "[" + std::string(static_cast<std::size_t>(std::clamp(fill, 0, width)), '#') +
                    std::string(static_cast<std::size_t>(width - std::clamp(fill, 0, width)), '.') +
                    "]";
  double peers = num_of(j, "from_peers"),
         origin = num_of(j, "from_origin") + num_of(j, "from_http");
  double moved = peers + origin;
  std::string eta = j.contains("eta_seconds") && j["eta_seconds"].is_number()
                        ? std::to_string(static_cast<long>(j["eta_seconds"].get<double>())) + "s"
                        : "-";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s %5.1f%%  %s / %s  %s/s  ETA %s  peers %s origin %s  groups %.0f/%.0f  %s",
                bar.c_str(), 100.0 * frac, human(done).c_str(), human(total).c_str(),
                human(num_of(j, "rate")).c_str(), eta.c_str(), pct(peers, moved).c_str(),
                pct(origin, moved).c_str(), num_of(j, "groups_done"), num_of(j, "groups"),
                j.value("state", "").c_str());
  return buf;
}

void dataset_summary(const json& j) {
  double secs = num_of(j, "seconds"), total = num_of(j, "bytes");
  double peers = num_of(j, "from_peers"), bt = num_of(j, "from_origin"),
         http = num_of(j, "from_http"), local = num_of(j, "local_bytes");
  double moved = peers + bt + http;
  std::printf("%s %s: %.0f files, %s in %.1fs (%s/s)\n", j.value("dataset", "").c_str(),
              j.value("state", "").c_str(), num_of(j, "files"), human(total).c_str(), secs,
              human(secs > 0 ? moved / secs : 0).c_str());
  std::printf(
      "  from peers %s (%s), from registry-proxy %s (BitTorrent) + %s (HTTP), already here %s\n",
      human(peers).c_str(), pct(peers, moved).c_str(), human(bt).c_str(), human(http).c_str(),
      human(local).c_str());
  if (j.contains("view") && j["view"].is_string())
    std::printf("  view %s\n", j["view"].get<std::string>().c_str());
  if (!j.value("error", "").empty()) std::printf("  error: %s\n", j.value("error", "").c_str());
}

int cmd_dataset(shoal::http::client& c, const std::string& peerd, const std::string& proxy,
                const cmd_options& o) {
  const auto& w = o.words;
  if (w.empty()) return usage(2);
  auto fail_with = [](const std::string& what, const shoal::result<shoal::http::full_response>& r) {
    if (!r) {
      std::fprintf(stderr, "shoalctl: %s: %s\n", what.c_str(), r.error().message.c_str());
      return 1;
    }
    auto j = json::parse(r->body, nullptr, false);
    std::string why = j.is_object() ? j.value("error", "") : "";
    std::fprintf(stderr, "shoalctl: %s: HTTP %d%s\n", what.c_str(), r->status,
                 why.empty() ? "" : (": " + why).c_str());
    return 1;
  };
  if (w[0] == "declare" && w.size() == 2) {
    std::FILE* f = std::fopen(w[1].c_str(), "rb");
    if (!f) {
      std::fprintf(stderr, "shoalctl: cannot read %s\n", w[1].c_str());
      return 1;
    }
    std::string body;
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) body.append(buf, n);
    std::fclose(f);
    auto r = request(c, "POST", proxy + std::string(origin::paths::datasets), body);
    if (!r || (r->status != 200 && r->status != 202)) return fail_with("declare", r);
    auto j = json::parse(r->body, nullptr, false);
    std::printf("%s: %s\n", j.value("dataset", "").c_str(), j.value("state", "").c_str());
    return 0;
  }
  if (w[0] == "ls" && w.size() == 1) {
    auto r = request(c, "GET", peerd + std::string(origin::paths::datasets));
    auto j = r ? json::parse(r->body, nullptr, false) : json();
    if (!r || r->status != 200 || !j.is_array()) return fail_with("dataset ls", r);
    if (o.as_json) {
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    std::printf("%-40s %-13s %9s %11s %7s %9s  %s\n", "DATASET", "STATE", "FILES", "SIZE",
                "PRESENT", "EXPIRES", "VIEW");
    for (const auto& d : j) {
      std::string exp = "-";
      if (d.contains("expires_in_seconds") && d["expires_in_seconds"].is_number()) {
        double s = num_of(d, "expires_in_seconds");
        char b[32];
        std::snprintf(b, sizeof b, s >= 3600 ? "%.0fh%02.0fm" : "%.0fm%02.0fs",
                      std::floor(s / (s >= 3600 ? 3600 : 60)),
                      std::fmod(std::floor(s / (s >= 3600 ? 60 : 1)), 60));
        exp = b;
      }
      std::printf(
          "%-40s %-13s %9.0f %11s %7s %9s  %s\n", d.value("dataset", "").c_str(),
          d.value("state", "").c_str(), num_of(d, "files"), human(num_of(d, "bytes")).c_str(),
          pct(num_of(d, "bytes_done"), num_of(d, "bytes")).c_str(), exp.c_str(),
          d.contains("view") && d["view"].is_string() ? d["view"].get<std::string>().c_str() : "-");
    }
    return 0;
  }
  if (w.size() != 2) return usage(2);
  const std::string& ref = w[1];
  if (w[0] == "status") {
    auto r = request(c, "GET", peerd + origin::dataset_target(ref));
    auto j = r ? json::parse(r->body, nullptr, false) : json();
    if (!r || r->status != 200 || !j.is_object()) return fail_with("dataset status " + ref, r);
    if (o.as_json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s\n", progress_line(j).c_str());
      dataset_summary(j);
    }
    return j.value("state", "") == "failed" ? 1 : 0;
  }
  if (w[0] == "rm") {
    auto r =
        request(c, "DELETE", peerd + origin::dataset_target(ref), {}, std::chrono::seconds(60));
    if (!r || r->status != 200) return fail_with("dataset rm " + ref, r);
    auto j = json::parse(r->body, nullptr, false);
    std::printf("%s removed (%.0f objects unpinned)\n", ref.c_str(), num_of(j, "unpinned"));
    return 0;
  }
  if (w[0] == "renew") {
    json body = json::object();
    if (o.ttl > 0) body["ttl_seconds"] = o.ttl;
    auto r = request(c, "POST", peerd + origin::dataset_target(ref) + "/renew", body.dump());
    if (!r || r->status != 200) return fail_with("dataset renew " + ref, r);
    auto j = json::parse(r->body, nullptr, false);
    std::printf("%s renewed: expires in %.0fs\n", ref.c_str(), num_of(j, "expires_in_seconds"));
    return 0;
  }
  if (w[0] != "prefetch") return usage(2);
  json body = {{"dataset", ref}};
  auto r = request(c, "POST", peerd + std::string(origin::paths::dataset_prefetch), body.dump());
  if (!r || (r->status != 200 && r->status != 202)) return fail_with("dataset prefetch " + ref, r);
  if (!o.wait) {
    std::printf("%s\n", progress_line(json::parse(r->body, nullptr, false)).c_str());
    return 0;
  }
  bool tty = ::isatty(2);
  auto t0 = std::chrono::steady_clock::now();
  auto last_line = t0 - std::chrono::hours(1);
  json j;
  for (;;) {
    auto s = request(c, "GET", peerd + origin::dataset_target(ref), {}, std::chrono::seconds(10));
    if (s && s->status == 200) {
      j = json::parse(s->body, nullptr, false);
      if (j.is_object()) {
        std::string st = j.value("state", "");
        auto now = std::chrono::steady_clock::now();
        // On a terminal the bar redraws in place; in a log, one line every 5 seconds.
        if (tty) {
          std::fprintf(stderr, "\r\033[2K%s", progress_line(j).c_str());
        } else if (now - last_line >= std::chrono::seconds(5) || st == "ready" || st == "failed") {
          std::fprintf(stderr, "%s\n", progress_line(j).c_str());
          last_line = now;
        }
        if (st == "ready" || st == "failed") break;
      }
    } else if (!s) {
      std::fprintf(stderr, "%sshoalctl: peerd: %s%s", tty ? "\r\033[2K" : "",
                   s.error().message.c_str(), tty ? "" : "\n");
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > o.timeout) {
      std::fprintf(stderr, "\nshoalctl: %s not ready after %.0fs\n", ref.c_str(), o.timeout);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (tty) std::fprintf(stderr, "\n");
  dataset_summary(j);
  return j.value("state", "") == "ready" ? 0 : 1;
}

}  // namespace

// The first line of a token file, without surrounding whitespace; an error names the file.
shoal::result<std::string> read_token(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return shoal::fail_errno(errno, "open " + path);
  char buf[4096];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string t(buf, n);
  t = t.substr(0, t.find('\n'));
  while (!t.empty() && (t.back() == '\r' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.erase(0, 1);
  if (t.empty())
    return shoal::fail(shoal::errc::invalid_argument, path + ": no token on its first line");
  for (char c : t) {
    if (c < 0x21 || c > 0x7e)
      return shoal::fail(shoal::errc::invalid_argument,
                         path + ": the token has a non-printable character");
  }
  return t;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "certs")
    return shoal::tools::certs::main(std::vector<std::string>(argv + 2, argv + argc));
  std::string peerd = env_or("SHOAL_PEERD", "http://127.0.0.1:65001");
  std::string scheduler = env_or("SHOAL_SCHEDULER", "http://127.0.0.1:7070");
  std::string proxy = env_or("SHOAL_REGISTRY_PROXY", "http://127.0.0.1:5050");
  std::string platform = "linux/amd64";
  std::string ca_file = env_or("SHOAL_CA", ""), cert_file = env_or("SHOAL_CERT", ""),
              key_file = env_or("SHOAL_KEY", ""), token_file = env_or("SHOAL_TOKEN_FILE", "");
  std::vector<std::string> args;
  cmd_options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    auto number = [&](unsigned& out) {
      std::string v;
      if (!value(v)) return false;
      char* end = nullptr;
      unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n > 100000) return false;
      out = static_cast<unsigned>(n);
      return true;
    };
    auto push = [&](std::vector<std::string>& list) {
      std::string v;
      if (!value(v)) return false;
      list.push_back(v);
      return true;
    };
    bool ok = true;
    if (a == "-h" || a == "--help") return usage(0);
    if (a == "--peerd")
      ok = value(peerd);
    else if (a == "--scheduler")
      ok = value(scheduler);
    else if (a == "--registry-proxy")
      ok = value(proxy);
    else if (a == "--platform")
      ok = value(platform);
    else if (a == "--ca")
      ok = value(ca_file);
    else if (a == "--cert")
      ok = value(cert_file);
    else if (a == "--key")
      ok = value(key_file);
    else if (a == "--token-file")
      ok = value(token_file);
    else if (a == "--nodes")
      ok = number(o.k);
    else if (a == "--gpus")
      ok = number(o.gpus);
    else if (a == "--standby")
      ok = number(o.standby);
    else if (a == "--ttl") {
      std::string v;
      ok = value(v);
      char* end = nullptr;
      unsigned long n = ok ? std::strtoul(v.c_str(), &end, 10) : 0;
      ok = ok && !v.empty() && *end == '\0' && n > 0 && n <= 365ul * 24 * 3600;
      o.ttl = static_cast<unsigned>(n);
    } else if (a == "--dataset")
      ok = push(o.datasets);
    else if (a == "--node")
      ok = push(o.nodes);
    else if (a == "--selector")
      ok = push(o.selectors);
    else if (a == "--job")
      o.job = true;
    else if (a == "--dry-run")
      o.dry_run = true;
    else if (a == "--json")
      o.as_json = true;
    else if (a == "--no-wait")
      o.wait = false;
    else if (a == "--timeout") {
      std::string v;
      ok = value(v);
      if (ok) {
        char* end = nullptr;
        o.timeout = std::strtod(v.c_str(), &end);
        ok = !v.empty() && *end == '\0' && o.timeout > 0;
      }
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "shoalctl: unknown option %s\n", a.c_str());
      return usage(2);
    } else {
      args.push_back(a);
    }
    if (!ok) {
      std::fprintf(stderr, "shoalctl: %s needs a valid value\n", a.c_str());
      return usage(2);
    }
  }
  if (args.empty()) return usage(2);
  while (!scheduler.empty() && scheduler.back() == '/') scheduler.pop_back();
  if (cert_file.empty() != key_file.empty()) {
    std::fprintf(stderr, "shoalctl: --cert and --key go together\n");
    return 2;
  }
  if (!token_file.empty()) {
    auto t = read_token(token_file);
    if (!t) {
      std::fprintf(stderr, "shoalctl: --token-file: %s\n", t.error().message.c_str());
      return 2;
    }
    g_bearer = *t;
  }
  shoal::http::client_options copts;
  copts.ca_file = ca_file;
  copts.cert_file = cert_file;
  copts.key_file = key_file;
  shoal::http::client c(copts);
  o.words.assign(args.begin() + 1, args.end());
  if (args[0] == "status" && args.size() == 1) return cmd_status(c, peerd);
  if (args[0] == "pull" && args.size() == 2) return cmd_pull(c, peerd, args[1], platform);
  if (args[0] == "nodes" && args.size() == 1) return cmd_nodes(c, scheduler);
  if (args[0] == "place" && args.size() >= 1) return cmd_place(c, scheduler, o);
  if (args[0] == "prewarm" && (args.size() >= 2 || !o.datasets.empty()))
    return cmd_prewarm(c, scheduler, o);
  if (args[0] == "dataset") {
    while (!proxy.empty() && proxy.back() == '/') proxy.pop_back();
    while (!peerd.empty() && peerd.back() == '/') peerd.pop_back();
    return cmd_dataset(c, peerd, proxy, o);
  }
  return usage(2);
}
