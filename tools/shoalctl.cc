// shoalctl: the operator's CLI. Talks to a node's peerd (status, pull) and to the scheduler.
//
//   shoalctl status                 cache use, downloads, rates, where bytes came from
//   shoalctl pull IMAGE             warm this node's cache with an image for this machine's
//                                   platform (--platform), with that image's progress
//   shoalctl nodes                  nodes known to the scheduler (health, GPUs, cache, network)
//   shoalctl place IMAGE...         where a job would go, every node explained
//   shoalctl prewarm IMAGE...       warm nodes (--node, --selector or --job) and follow progress
//   shoalctl prewarm status [ID]    prewarms and their progress
//   shoalctl dataset declare FILE   declare a dataset to registry-proxy (JSON declaration)
//   shoalctl dataset prefetch NAME@VERSION   fetch it onto this node, with progress, and make its
//   view shoalctl dataset ls | status NAME@VERSION | rm NAME@VERSION   this node's datasets
//   shoalctl dataset renew NAME@VERSION [--ttl SECONDS]   keep its view and pins from expiring
//   shoalctl checkpoint publish DIR --job J --step N | restore J[@N|@latest] [DIR] [--ranks R]
//            | ls [--job J] [--node] | rm J@N [--cluster]   (shoalctl_checkpoint.h)
//   shoalctl certs init|issue ...   the cluster CA and certificates (certs.h)
//
// Every command takes -o json|yaml|table (--json is -o json) and has its own --help; --version
// prints the build's version and its libraries'.
//
// Addresses: --peerd URL (default $SHOAL_PEERD or http://127.0.0.1:65001),
//            --scheduler URL (default $SHOAL_SCHEDULER or http://127.0.0.1:7070; repeat it or
//            give a comma-separated list for several replicas: a request goes to the first
//            that answers, docs/scheduler.md "Clients fail over"),
//            --registry-proxy URL (default $SHOAL_REGISTRY_PROXY or http://127.0.0.1:5050).
// TLS (https URLs): --ca FILE (the cluster CA; default $SHOAL_CA), --cert FILE and --key FILE
// (the operator's certificate, shoal://operator/<user>; default $SHOAL_CERT, $SHOAL_KEY), or
// --token-file FILE (default $SHOAL_TOKEN_FILE): its first line is sent as
// `Authorization: Bearer` to the scheduler and registry-proxy, for scripts without a certificate.
// peerd's API stays plain HTTP on loopback.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <openssl/rand.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "certs.h"
#include "common/digest.h"
#include "common/http_client.h"
#include "common/oci.h"
#include "common/origin_protocol.h"
#include "common/platform.h"
#include "common/version.h"
#include "common/json_text.h"
#include "shoalctl_checkpoint.h"
#include "shoalctl_cli.h"
#include "shoalctl_output.h"

namespace {

using nlohmann::json;
namespace origin = shoal::origin;
namespace ctl = shoal::tools::ctl;
using ctl::context;
using ctl::env_or;
using ctl::get_json;
using ctl::human;
using ctl::is_array;
using ctl::is_object;
using ctl::num_of;
using ctl::pct;
using ctl::report;
using ctl::request;
using ctl::response;
using shoal::json_text;

// ---- status, pull, nodes

int cmd_status(const context& cx) {
  auto j = get_json(cx, "peerd at " + cx.peerd, cx.peerd + std::string(origin::paths::node_status),
                    is_object);
  if (!j) return 1;
  if (ctl::print_document(*j, cx.out)) return 0;
  const auto& cache = (*j)["cache"];
  double cap = num_of(cache, "capacity");
  std::printf("node        %s\n", j->value("node", "?").c_str());
  std::printf("cache       %s of %s (%.1f%%), %.0f objects, %.0f hits, %.0f evictions\n",
              human(num_of(cache, "bytes")).c_str(), human(cap).c_str(),
              cap > 0 ? 100.0 * num_of(cache, "bytes") / cap : 0.0, num_of(cache, "objects"),
              num_of(cache, "hits"), num_of(cache, "evictions"));
  const auto& b = (*j)["bytes"];
  std::printf(
      "bytes in    from peers %s, from registry-proxy %s (BitTorrent) + %s (HTTP fallback)\n",
      human(num_of(b, "from_peers")).c_str(), human(num_of(b, "from_origin")).c_str(),
      human(num_of(b, "from_http_fallback")).c_str());
  std::printf("bytes out   to local clients %s, to peers %s\n",
              human(num_of(b, "served_local")).c_str(),
              human(num_of(b, "uploaded_to_peers")).c_str());
  const auto& downloads = (*j)["downloads"];
  std::printf("swarms      %.0f torrents loaded, %zu downloading\n", num_of(*j, "torrents_loaded"),
              downloads.is_array() ? downloads.size() : 0);
  if (downloads.is_array()) {
    for (const auto& d : downloads) {
      double done = num_of(d, "pieces_done"), total = num_of(d, "pieces");
      std::printf("  %s  %5.1f%%  %s  down %s/s  up %s/s  %.0f peers\n",
                  d.value("digest", "").substr(0, 19).c_str(),
                  total > 0 ? 100.0 * done / total : 100.0, human(num_of(d, "size")).c_str(),
                  human(num_of(d, "download_rate")).c_str(),
                  human(num_of(d, "upload_rate")).c_str(), num_of(d, "peers"));
    }
  }
  return 0;
}

// The blobs (digest → size) `image` pulls for `platform`, read through peerd as the pull itself
// reads them; nullopt when they cannot be read (the pull then shows no byte progress).
std::optional<std::map<std::string, double>> image_blobs(const context& cx,
                                                         const std::string& image,
                                                         const std::string& platform) {
  auto ref = shoal::oci::parse_image_ref(image);
  if (!ref) return std::nullopt;
  const origin::object_ref where{ref->registry, ref->repository};
  auto manifest = [&](const std::string& reference) -> std::optional<json> {
    auto r =
        request(cx, "GET", cx.peerd + origin::manifest_target(where, reference), {},
                std::chrono::seconds(30), {{"Accept", std::string(shoal::oci::media::accept_all)}});
    if (!r || r->status != 200) return std::nullopt;
    auto j = json::parse(r->body, nullptr, false);
    if (!j.is_object()) return std::nullopt;
    return j;
  };
  auto m = manifest(ref->dig ? ref->dig->str() : ref->tag);
  if (!m) return std::nullopt;
  if (m->contains("manifests") && (*m)["manifests"].is_array()) {
    const std::string os = platform.substr(0, platform.find('/'));
    const std::string arch = platform.substr(platform.find('/') + 1);
    std::optional<json> chosen;
    for (const auto& e : (*m)["manifests"]) {
      if (!e.is_object() || !e.contains("platform") || !e["platform"].is_object()) continue;
      if (e["platform"].value("os", "") == os && e["platform"].value("architecture", "") == arch) {
        chosen = manifest(e.value("digest", ""));
        break;
      }
    }
    if (!chosen) return std::nullopt;
    m = std::move(chosen);
  }
  std::map<std::string, double> blobs;
  auto add = [&](const json& d) {
    if (d.is_object() && d.contains("digest")) blobs[d.value("digest", "")] = num_of(d, "size");
  };
  if (m->contains("config")) add((*m)["config"]);
  if (m->contains("layers") && (*m)["layers"].is_array()) {
    for (const auto& l : (*m)["layers"]) add(l);
  }
  return blobs;
}

// Polls peerd's status while a pull runs and draws that image's progress on stderr: its blobs
// being downloaded (partly), blobs seen downloading that have finished (fully), and the rate
// and ETA of those bytes only: other downloads on the node are not this pull's.
void pull_progress(const context& cx, const std::map<std::string, double>& blobs,
                   const std::atomic<bool>& done) {
  const bool tty = ::isatty(2);
  double total = 0;
  for (const auto& [d, size] : blobs) total += size;
  std::map<std::string, double> seen;  // digest → bytes done when last seen downloading
  ctl::rate_meter meter;
  auto last_line = std::chrono::steady_clock::now() - std::chrono::hours(1);
  while (!done.load()) {
    for (int i = 0; i < 5 && !done.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (done.load()) break;
    auto r = request(cx, "GET", cx.peerd + std::string(origin::paths::node_status), {},
                     std::chrono::seconds(5));
    if (!r || r->status != 200) continue;
    auto j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j["downloads"].is_array()) continue;
    std::map<std::string, double> now;
    double rate = 0;
    for (const auto& d : j["downloads"]) {
      auto it = blobs.find(d.value("digest", ""));
      if (it == blobs.end()) continue;
      double pieces = num_of(d, "pieces");
      now[it->first] = pieces > 0 ? it->second * num_of(d, "pieces_done") / pieces : 0;
      rate += num_of(d, "download_rate");
    }
    for (auto& [d, bytes] : seen) {
      if (!now.contains(d)) bytes = blobs.at(d);  // no longer downloading: finished
    }
    for (const auto& [d, bytes] : now) seen[d] = bytes;
    double have = 0;
    for (const auto& [d, bytes] : seen) have += bytes;
    const auto t = std::chrono::steady_clock::now();
    meter.add(t, have);
    if (total <= 0 || (!tty && t - last_line < std::chrono::seconds(5))) continue;
    last_line = t;
    std::optional<double> eta;
    if (rate > 0) eta = (total - have) / rate;
    std::fprintf(stderr, "%s%s %5.1f%%  %s / %s  %s/s  ETA %s%s", tty ? "\r\033[2K" : "",
                 ctl::bar(have / total).c_str(), 100.0 * have / total, human(have).c_str(),
                 human(total).c_str(), human(rate > 0 ? rate : meter.rate()).c_str(),
                 ctl::eta_text(eta ? eta : meter.eta(total)).c_str(), tty ? "" : "\n");
  }
  if (tty) std::fprintf(stderr, "\r\033[2K");
}

int cmd_pull(const context& cx, const std::string& image, const std::string& platform) {
  json body = {{"image", image}, {"platform", platform}};
  std::atomic<bool> done{false};
  std::thread progress;
  if (auto blobs = image_blobs(cx, image, platform)) {
    progress = std::thread([&cx, b = std::move(*blobs), &done] { pull_progress(cx, b, done); });
  }
  // peerd runs so many pulls at once (half its workers) and answers 429 beyond: wait and ask
  // again, for up to 10 minutes.
  auto r = request(cx, "POST", cx.peerd + std::string(origin::paths::node_pull), json_text(body),
                   std::chrono::minutes(30));
  for (int i = 0; i < 600 && r && r->status == 429; ++i) {
    if (i == 0)
      std::fprintf(stderr, "shoalctl: pull %s: the node is busy; waiting\n", image.c_str());
    std::this_thread::sleep_for(std::chrono::seconds(1));
    r = request(cx, "POST", cx.peerd + std::string(origin::paths::node_pull), json_text(body),
                std::chrono::minutes(30));
  }
  done = true;
  if (progress.joinable()) progress.join();
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
    std::fprintf(stderr, "shoalctl: pull %s: %s\n", image.c_str(), j.value("error", "").c_str());
    ctl::print_document(j, cx.out);
    return 1;
  }
  int cached = 0, fetched = 0, failed = 0;
  if (j.contains("blobs") && j["blobs"].is_array()) {
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
  }
  const int code = failed || r->status != 200 ? 1 : 0;
  if (ctl::print_document(j, cx.out)) return code;
  std::printf("%s: %s in %.1fs (%d blobs fetched, %d already cached%s)\n",
              j.value("image", image).c_str(), human(num_of(j, "bytes")).c_str(),
              num_of(j, "seconds"), fetched, cached,
              failed ? (", " + std::to_string(failed) + " FAILED").c_str() : "");
  return code;
}

int cmd_nodes(const context& cx) {
  auto j = get_json(cx, "scheduler at " + cx.scheduler, cx.scheduler + "/v1/nodes", is_array);
  if (!j) return 1;
  if (ctl::print_document(*j, cx.out)) return 0;
  std::printf("%-16s %-10s %-12s %-10s %-8s %-7s %8s %11s %8s %-8s\n", "NODE", "STATE", "PLATFORM",
              "ZONE/RACK", "FABRIC", "GPUS", "OBJECTS", "CACHE", "SEEN", "NETWORK");
  for (const auto& n : *j) {
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
    // The failure detector's state (healthy, unhealthy, restarting, failed); older schedulers:
    // healthy.
    std::string state = n.contains("state") && n["state"].is_object()
                            ? n["state"].value("state", "")
                            : (n.value("healthy", false) ? "healthy" : "unhealthy");
    std::printf("%-16s %-10s %-12s %-10s %-8s %-7s %8zu %11s %7.1fs %-8s\n",
                n.value("node", "").c_str(), state.c_str(), n.value("platform", "").c_str(),
                zr.c_str(), fabric.c_str(), gpus.c_str(), n.value("objects", std::size_t{0}),
                human(num_of(n, "cache_used")).c_str(), num_of(n, "last_seen_s"), net.c_str());
    if (state == "failed" || state == "restarting")  // why, on the next line
      std::printf("%-16s   %s\n", "", n["state"].value("detail", "").c_str());
  }
  return 0;
}

// ---- place and prewarm

// Command options after the command word.
struct cmd_options {
  std::vector<std::string> words;
  std::vector<std::string> datasets, nodes, selectors;
  unsigned k = 1, gpus = 0, standby = 0, ttl = 0;
  bool job = false, dry_run = false, wait = true;
  double timeout = 1800;
  std::string job_id;  // --id: the job's name, so the scheduler records it (failover, standbys)
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
    double v = num_of(n["missing_by_source"], s);
    if (v <= 0) continue;
    out += (out.empty() ? "" : " ") + std::string(s) + ":" + human(v);
  }
  return out.empty() ? "-" : out;
}

int cmd_place(const context& cx, const cmd_options& o) {
  json body = {{"images", o.words},
               {"nodes", o.k},
               {"gpus", o.gpus},
               {"dry_run", o.dry_run},
               {"standby", o.standby}};
  if (!o.datasets.empty()) body["datasets"] = o.datasets;
  if (!o.job_id.empty()) body["id"] = o.job_id;
  json sel;
  if (!parse_selectors(o.selectors, sel)) return 2;
  if (!sel.empty()) body["selector"] = sel;
  auto r =
      request(cx, "POST", cx.scheduler + "/v1/place", json_text(body), std::chrono::seconds(30));
  if (!r) return report("scheduler at " + cx.scheduler, r);
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return report("scheduler at " + cx.scheduler, r);
  if (ctl::print_document(j, cx.out)) return r->status == 200 && j.value("feasible", false) ? 0 : 1;
  if (r->status != 200) return report("place", r);
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
                human(num_of(n, "bytes_present")).c_str(),
                human(num_of(n, "bytes_missing")).c_str(), num_of(n, "estimated_seconds"),
                gpus.c_str(), why.c_str());
  }
  return j.value("feasible", false) ? 0 : 1;
}

// One prewarm's progress as lines (the first: bar, bytes, rate and ETA; then one per node and
// per standby replacement). `meter`: the rate seen so far while following; null for one look.
std::vector<std::string> prewarm_lines(const json& j, const ctl::rate_meter* meter) {
  std::vector<std::string> out;
  char buf[512];
  double total = num_of(j, "bytes_total"), done = num_of(j, "bytes_done");
  const double frac = total > 0 ? done / total : (j.value("state", "") == "done" ? 1.0 : 0.0);
  std::string rate =
      meter ? "  " + human(meter->rate()) + "/s  ETA " +
                  ctl::eta_text(j.value("state", "") == "done" ? std::optional<double>(0)
                                                               : meter->eta(total))
            : "";
  std::snprintf(buf, sizeof buf, "prewarm %s  %s  %s %5.1f%%  %s / %s%s", j.value("id", "").c_str(),
                j.value("state", "").c_str(), ctl::bar(frac).c_str(), 100.0 * frac,
                human(done).c_str(), human(total).c_str(), rate.c_str());
  out.emplace_back(buf);
  if (j.contains("nodes") && j["nodes"].is_array()) {
    for (const auto& n : j["nodes"]) {
      double nt = num_of(n, "bytes_total"), nd = num_of(n, "bytes_done");
      std::snprintf(buf, sizeof buf, "  %-16s %-8s %-8s %10s / %-10s %5.1f%%  %s",
                    n.value("node", "").c_str(), n.value("role", "").c_str(),
                    n.value("state", "").c_str(), human(nd).c_str(), human(nt).c_str(),
                    nt > 0 ? 100.0 * nd / nt : 100.0, n.value("error", "").c_str());
      out.emplace_back(buf);
    }
  }
  if (j.contains("replacements") && j["replacements"].is_object()) {
    for (const auto& [failed, by] : j["replacements"].items()) {
      out.push_back("  " + failed + " replaced by standby " +
                    (by.is_string() ? by.get<std::string>() : json_text(by)));
    }
  }
  return out;
}

// Follows a prewarm until it is done or failed. Table output redraws its lines on stdout (in
// place on a terminal); json and yaml draw the first line on stderr and print the final
// document on stdout.
int follow_prewarm(const context& cx, const std::string& id, double timeout) {
  const bool table = cx.out == ctl::format::table;
  const bool tty = ::isatty(table ? 1 : 2);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  auto last_line = std::chrono::steady_clock::now() - std::chrono::hours(1);
  ctl::rate_meter meter;
  std::size_t drawn = 0;
  for (;;) {
    auto r = request(cx, "GET", cx.scheduler + "/v1/prewarm/" + id, {}, std::chrono::seconds(10));
    auto j = r ? json::parse(r->body, nullptr, false) : json();
    if (!r || r->status != 200 || !j.is_object()) return report("prewarm " + id, r);
    const auto now = std::chrono::steady_clock::now();
    meter.add(now, num_of(j, "bytes_done"));
    const std::string st = j.value("state", "");
    const bool end = st == "done" || st == "failed";
    auto lines = prewarm_lines(j, &meter);
    if (table) {
      if (tty && drawn > 0) std::printf("\033[%zuA", drawn);
      for (const auto& l : lines) std::printf("%s%s\n", tty ? "\033[2K" : "", l.c_str());
      std::fflush(stdout);
      drawn = lines.size();
    } else if (tty) {
      std::fprintf(stderr, "\r\033[2K%s%s", lines[0].c_str(), end ? "\n" : "");
    } else if (now - last_line >= std::chrono::seconds(5) || end) {
      std::fprintf(stderr, "%s\n", lines[0].c_str());
      last_line = now;
    }
    if (end) {
      ctl::print_document(j, cx.out);
      return st == "done" ? 0 : 1;
    }
    if (now > deadline) {
      if (!table && tty) std::fprintf(stderr, "\n");
      std::fprintf(stderr, "shoalctl: prewarm %s still %s after %.0fs\n", id.c_str(), st.c_str(),
                   timeout);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  }
}

int cmd_prewarm_status(const context& cx, const std::string& id) {
  if (id.empty()) {
    auto j = get_json(cx, "scheduler at " + cx.scheduler, cx.scheduler + "/v1/prewarm", is_array);
    if (!j) return 1;
    if (ctl::print_document(*j, cx.out)) return 0;
    std::printf("%-18s %-8s %6s %6s %6s %8s\n", "ID", "STATE", "NODES", "DONE", "FAILED", "AGE");
    for (const auto& p : *j) {
      std::printf("%-18s %-8s %6zu %6zu %6zu %7.0fs\n", p.value("id", "").c_str(),
                  p.value("state", "").c_str(), p.value("nodes", std::size_t{0}),
                  p.value("nodes_done", std::size_t{0}), p.value("nodes_failed", std::size_t{0}),
                  num_of(p, "age_s"));
    }
    return 0;
  }
  auto j = get_json(cx, "prewarm " + id, cx.scheduler + "/v1/prewarm/" + id, is_object);
  if (!j) return 1;
  const int code = j->value("state", "") == "failed" ? 1 : 0;
  if (ctl::print_document(*j, cx.out)) return code;
  for (const auto& l : prewarm_lines(*j, nullptr)) std::printf("%s\n", l.c_str());
  return code;
}

int cmd_prewarm(const context& cx, const cmd_options& o) {
  json body = json::object();
  if (o.words.empty() && o.datasets.empty()) {
    std::fprintf(stderr, "shoalctl: prewarm needs an image or a --dataset\n");
    return 2;
  }
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
    if (!o.job_id.empty()) body["job"]["id"] = o.job_id;
    body["standby"] = o.standby;
  }
  // A key of its own: a retry on another replica (or after a lost answer) is the same prewarm.
  unsigned char rnd[12];
  if (RAND_bytes(rnd, sizeof rnd) != 1) {
    std::fprintf(stderr, "shoalctl: prewarm: no random bytes for the idempotency key\n");
    return 1;
  }
  std::string key = "shoalctl-" + shoal::to_hex(std::span<const std::uint8_t>(rnd, sizeof rnd));
  auto r = request(cx, "POST", cx.scheduler + "/v1/prewarm", json_text(body),
                   std::chrono::seconds(30), {{"Idempotency-Key", key}});
  auto j = r ? json::parse(r->body, nullptr, false) : json();
  if (!r || (r->status != 202 && r->status != 200) || !j.is_object()) return report("prewarm", r);
  std::string id = j.value("id", "");
  if (!o.wait) {
    if (!ctl::print_document(j, cx.out)) std::printf("%s\n", id.c_str());
    return 0;
  }
  return follow_prewarm(cx, id, o.timeout);
}

// ---- datasets

using ctl::dataset_summary;
using ctl::progress_line;

int cmd_dataset_declare(const context& cx, const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "shoalctl: cannot read %s\n", file.c_str());
    return 1;
  }
  std::string body;
  char buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) body.append(buf, n);
  std::fclose(f);
  auto r = request(cx, "POST", cx.proxy + std::string(origin::paths::datasets), body);
  if (!r || (r->status != 200 && r->status != 202)) return report("declare", r);
  auto j = json::parse(r->body, nullptr, false);
  if (ctl::print_document(j, cx.out)) return 0;
  std::printf("%s: %s\n", j.value("dataset", "").c_str(), j.value("state", "").c_str());
  return 0;
}

int cmd_dataset_ls(const context& cx) {
  auto j = get_json(cx, "dataset ls", cx.peerd + std::string(origin::paths::datasets), is_array);
  if (!j) return 1;
  if (ctl::print_document(*j, cx.out)) return 0;
  std::printf("%-40s %-13s %9s %11s %7s %9s  %s\n", "DATASET", "STATE", "FILES", "SIZE", "PRESENT",
              "EXPIRES", "VIEW");
  for (const auto& d : *j) {
    std::string exp = "-";
    if (d.contains("expires_in_seconds") && d["expires_in_seconds"].is_number())
      exp = ctl::eta_text(num_of(d, "expires_in_seconds"));
    std::printf(
        "%-40s %-13s %9.0f %11s %7s %9s  %s\n", d.value("dataset", "").c_str(),
        d.value("state", "").c_str(), num_of(d, "files"), human(num_of(d, "bytes")).c_str(),
        pct(num_of(d, "bytes_done"), num_of(d, "bytes")).c_str(), exp.c_str(),
        d.contains("view") && d["view"].is_string() ? d["view"].get<std::string>().c_str() : "-");
  }
  return 0;
}

int cmd_dataset_status(const context& cx, const std::string& ref) {
  auto j = get_json(cx, "dataset status " + ref, cx.peerd + origin::dataset_target(ref), is_object);
  if (!j) return 1;
  if (!ctl::print_document(*j, cx.out)) {
    std::printf("%s\n", progress_line(*j).c_str());
    dataset_summary(*j);
  }
  return j->value("state", "") == "failed" ? 1 : 0;
}

int cmd_dataset_rm(const context& cx, const std::string& ref) {
  auto r =
      request(cx, "DELETE", cx.peerd + origin::dataset_target(ref), {}, std::chrono::seconds(60));
  if (!r || r->status != 200) return report("dataset rm " + ref, r);
  auto j = json::parse(r->body, nullptr, false);
  if (ctl::print_document(j, cx.out)) return 0;
  std::printf("%s removed (%.0f objects unpinned)\n", ref.c_str(), num_of(j, "unpinned"));
  return 0;
}

int cmd_dataset_renew(const context& cx, const std::string& ref, unsigned ttl) {
  json body = json::object();
  if (ttl > 0) body["ttl_seconds"] = ttl;
  auto r = request(cx, "POST", cx.peerd + origin::dataset_target(ref) + "/renew", json_text(body));
  if (!r || r->status != 200) return report("dataset renew " + ref, r);
  auto j = json::parse(r->body, nullptr, false);
  if (ctl::print_document(j, cx.out)) return 0;
  std::printf("%s renewed: expires in %.0fs\n", ref.c_str(), num_of(j, "expires_in_seconds"));
  return 0;
}

int cmd_dataset_prefetch(const context& cx, const std::string& ref, const cmd_options& o) {
  json body = {{"dataset", ref}};
  auto r =
      request(cx, "POST", cx.peerd + std::string(origin::paths::dataset_prefetch), json_text(body));
  if (!r || (r->status != 200 && r->status != 202)) return report("dataset prefetch " + ref, r);
  if (!o.wait) {
    auto j = json::parse(r->body, nullptr, false);
    if (!ctl::print_document(j, cx.out)) std::printf("%s\n", progress_line(j).c_str());
    return 0;
  }
  auto j = ctl::follow(cx, cx.peerd + origin::dataset_target(ref), o.timeout, progress_line,
                       {"ready", "failed"}, ref, std::chrono::milliseconds(500));
  if (!j) return 1;
  if (!ctl::print_document(*j, cx.out)) dataset_summary(*j);
  return j->value("state", "") == "ready" ? 0 : 1;
}

using ctl::read_token;
using ctl::trim_slashes;

// The options every command takes (before or after the command words).
struct globals {
  std::string peerd = env_or("SHOAL_PEERD", "http://127.0.0.1:65001");
  std::vector<std::string> scheduler{env_or("SHOAL_SCHEDULER", "http://127.0.0.1:7070")};
  std::string proxy = env_or("SHOAL_REGISTRY_PROXY", "http://127.0.0.1:5050");
  std::string ca = env_or("SHOAL_CA", ""), cert = env_or("SHOAL_CERT", ""),
              key = env_or("SHOAL_KEY", ""), token_file = env_or("SHOAL_TOKEN_FILE", "");
  std::string output = "table";
  bool json = false;
};

void add_globals(CLI::App& app, globals& g) {
  app.add_option("--peerd", g.peerd, "peerd's API on this node ($SHOAL_PEERD)")
      ->capture_default_str();
  app.add_option("--scheduler", g.scheduler,
                 "The scheduler's API ($SHOAL_SCHEDULER); several replicas: repeat the flag or "
                 "separate URLs with commas")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  app.add_option("--registry-proxy", g.proxy, "registry-proxy's API ($SHOAL_REGISTRY_PROXY)")
      ->capture_default_str();
  app.add_option("--ca", g.ca, "The cluster CA that verifies https URLs ($SHOAL_CA)");
  app.add_option("--cert", g.cert, "The operator's certificate, with --key ($SHOAL_CERT)");
  app.add_option("--key", g.key, "The operator certificate's key ($SHOAL_KEY)");
  app.add_option("--token-file", g.token_file,
                 "Send this file's first line as a bearer token to the scheduler and "
                 "registry-proxy ($SHOAL_TOKEN_FILE)");
  app.add_option("-o,--output", g.output, "Output: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  app.add_flag("--json", g.json, "The same as -o json");
}

// One value per occurrence (`--node a --node b`), so a repeated flag never swallows the
// positional words after it.
CLI::Option* repeated(CLI::App* c, const std::string& name, std::vector<std::string>& out,
                      const std::string& help) {
  return c->add_option(name, out, help)->allow_extra_args(false);
}

void add_job_shape(CLI::App* c, cmd_options& o) {
  c->add_option("--nodes", o.k, "Nodes the job needs")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  c->add_option("--gpus", o.gpus, "GPUs per node")->check(CLI::Range(0u, 100000u));
  c->add_option("--standby", o.standby, "Standby nodes besides the chosen ones")
      ->check(CLI::Range(0u, 100000u));
  repeated(c, "--dataset", o.datasets, "A dataset NAME@VERSION the job reads (repeatable)");
  c->add_option("--id", o.job_id,
                "The job's name: the scheduler records the job (its members and standbys) for "
                "failover and keeps its standbys current with its checkpoints");
}

void add_wait(CLI::App* c, cmd_options& o) {
  c->add_flag("--wait,!--no-wait", o.wait, "Follow progress until done (default), or return");
  c->add_option("--timeout", o.timeout, "Give up following after this many seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "certs")
    return shoal::tools::certs::main(std::vector<std::string>(argv + 2, argv + argc));
  CLI::App app{
      "shoalctl: the operator's CLI for Shoal (this node's peerd, the scheduler, "
      "registry-proxy)",
      "shoalctl"};
  app.require_subcommand(1, 1);
  app.fallthrough();  // the global options may follow the command words
  std::string version = shoal::version::text("shoalctl", shoal::version::common_libraries());
  version.pop_back();  // CLI11 ends the text with a newline of its own
  app.set_version_flag("--version", version, "Print the version and the libraries' versions");
  globals g;
  add_globals(app, g);
  cmd_options o;
  std::string image, platform = shoal::oci::host_platform(), ref, file, prewarm_id;

  auto* status = app.add_subcommand("status", "This node: cache use, downloads, rates, sources");
  auto* pull = app.add_subcommand("pull", "Warm this node's cache with an image, with progress");
  pull->add_option("image", image, "Image reference (docker.io/library/nginx:1.27, ...)")
      ->required();
  pull->add_option("--platform", platform, "OS/ARCH picked from an image index")
      ->capture_default_str();
  auto* nodes = app.add_subcommand("nodes", "Nodes known to the scheduler");
  auto* place = app.add_subcommand(
      "place", "Where a job would run, with bytes present and missing and time per node");
  place->add_option("images", o.words, "Images the job runs")->required();
  add_job_shape(place, o);
  repeated(place, "--selector", o.selectors, "Only nodes with this label KEY=VALUE (repeatable)");
  place->add_flag("--dry-run", o.dry_run, "Reserve nothing");
  auto* prewarm = app.add_subcommand(
      "prewarm", "Warm nodes (--node, --selector or --job) through the scheduler, with progress");
  prewarm->add_option("images", o.words, "Images to warm");
  add_job_shape(prewarm, o);
  repeated(prewarm, "--node", o.nodes, "Warm this node (repeatable)");
  repeated(prewarm, "--selector", o.selectors, "Warm the nodes with this label KEY=VALUE");
  prewarm->add_flag("--job", o.job, "Warm the nodes a job of this shape would be placed on");
  add_wait(prewarm, o);
  auto* prewarm_status = prewarm->add_subcommand("status", "List prewarms, or show one");
  prewarm_status->add_option("id", prewarm_id, "The prewarm to show");
  auto* dataset = app.add_subcommand("dataset", "Datasets: declare, prefetch onto this node, ...");
  dataset->require_subcommand(1, 1);
  auto* declare = dataset->add_subcommand("declare", "Declare a dataset to registry-proxy");
  declare->add_option("file", file, "JSON: name, version, origin, include, exclude")->required();
  auto* prefetch = dataset->add_subcommand(
      "prefetch", "Fetch a dataset onto this node (progress, summary) and make its view");
  prefetch->add_option("ref", ref, "NAME@VERSION")->required();
  add_wait(prefetch, o);
  auto* ls = dataset->add_subcommand("ls", "Datasets on this node");
  auto* dstatus = dataset->add_subcommand("status", "One dataset's state and progress");
  dstatus->add_option("ref", ref, "NAME@VERSION")->required();
  auto* rm = dataset->add_subcommand("rm", "Remove a dataset's view and unpin its objects");
  rm->add_option("ref", ref, "NAME@VERSION")->required();
  auto* renew = dataset->add_subcommand(
      "renew", "Extend the view's expiry; unrenewed views expire and are removed");
  renew->add_option("ref", ref, "NAME@VERSION")->required();
  renew->add_option("--ttl", o.ttl, "Seconds from now (default: peerd's datasets.pin_ttl)")
      ->check(CLI::Range(1u, 365u * 24 * 3600));
  ctl::checkpoint_options co;
  auto ckpt = ctl::add_checkpoint_commands(app, co);
  auto* certs =
      app.add_subcommand("certs", "The cluster CA and certificates (shoalctl certs --help)");
  certs->prefix_command();
  certs->set_help_flag();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (certs->parsed()) return shoal::tools::certs::main(certs->remaining());

  context cx;
  cx.peerd = trim_slashes(g.peerd);
  auto schedulers = shoal::endpoints::split_list(g.scheduler);
  for (auto& u : schedulers) u = trim_slashes(u);
  auto set = shoal::endpoints::endpoint_set::create(schedulers);
  if (!set) {
    std::fprintf(stderr, "shoalctl: --scheduler: %s\n", set.error().message.c_str());
    return 2;
  }
  cx.scheduler = schedulers.front();
  cx.schedulers = std::move(*set);
  cx.proxy = trim_slashes(g.proxy);
  cx.out = g.json ? ctl::format::json : *ctl::parse_format(g.output);
  if (g.cert.empty() != g.key.empty()) {
    std::fprintf(stderr, "shoalctl: --cert and --key go together\n");
    return 2;
  }
  if (!g.token_file.empty()) {
    auto t = read_token(g.token_file);
    if (!t) {
      std::fprintf(stderr, "shoalctl: --token-file: %s\n", t.error().message.c_str());
      return 2;
    }
    cx.bearer = *t;
  }
  shoal::http::client_options copts;
  copts.ca_file = g.ca;
  copts.cert_file = g.cert;
  copts.key_file = g.key;
  cx.client = std::make_unique<shoal::http::client>(copts);

  if (status->parsed()) return cmd_status(cx);
  if (pull->parsed()) return cmd_pull(cx, image, platform);
  if (nodes->parsed()) return cmd_nodes(cx);
  if (place->parsed()) return cmd_place(cx, o);
  if (prewarm_status->parsed()) return cmd_prewarm_status(cx, prewarm_id);
  if (prewarm->parsed()) return cmd_prewarm(cx, o);
  if (declare->parsed()) return cmd_dataset_declare(cx, file);
  if (prefetch->parsed()) return cmd_dataset_prefetch(cx, ref, o);
  if (ls->parsed()) return cmd_dataset_ls(cx);
  if (dstatus->parsed()) return cmd_dataset_status(cx, ref);
  if (rm->parsed()) return cmd_dataset_rm(cx, ref);
  if (renew->parsed()) return cmd_dataset_renew(cx, ref, o.ttl);
  if (int rc = ctl::run_checkpoint(ckpt, cx, co); rc >= 0) return rc;
  std::fputs(app.help().c_str(), stderr);
  return 2;
}
