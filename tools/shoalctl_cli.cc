// What shoalctl's commands share (shoalctl_cli.h).
#include "shoalctl_cli.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace shoal::tools::ctl {

using nlohmann::json;

std::string env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

response request(const context& cx, const std::string& method, const std::string& url,
                 const std::string& body, std::chrono::milliseconds stall,
                 const std::vector<std::pair<std::string, std::string>>& headers) {
  shoal::http::client_request r;
  r.method = method;
  r.url = url;
  r.body = body;
  r.headers = headers;
  if (!body.empty()) r.headers.emplace_back("Content-Type", "application/json");
  // Never to peerd (loopback, plain): the token is for the cluster's authenticated services.
  if (!cx.bearer.empty() && url.starts_with("https://"))
    r.headers.emplace_back("Authorization", "Bearer " + cx.bearer);
  r.timeouts.connect = std::chrono::seconds(3);
  r.timeouts.stall = stall;
  r.max_retries = method == "GET" ? 2 : 0;
  const auto n = cx.scheduler.size();
  bool to_scheduler = cx.schedulers && n > 0 && url.starts_with(cx.scheduler) &&
                      (url.size() == n || url[n] == '/' || url[n] == '?');
  if (!to_scheduler) return shoal::http::fetch(*cx.client, std::move(r));
  // A scheduler call: a path on each replica in turn, each with a short connect timeout; a
  // GET waits at most 5 s for a replica's answer before it asks the next.
  r.url = url.substr(n);
  r.timeouts.connect = std::chrono::seconds(1);
  // A request with an Idempotency-Key (prewarm) may be sent again anywhere: the scheduler makes
  // it once.
  bool keyed = std::any_of(headers.begin(), headers.end(),
                           [](const auto& h) { return h.first == "Idempotency-Key"; });
  bool idempotent = method == "GET" || method == "HEAD" || keyed;
  if (method == "GET" || method == "HEAD")
    r.timeouts.stall = std::min(r.timeouts.stall, std::chrono::milliseconds(5000));
  auto kind =
      idempotent ? shoal::endpoints::call_kind::idempotent : shoal::endpoints::call_kind::once;
  return shoal::endpoints::fetch(*cx.client, *cx.schedulers, std::move(r), kind);
}

double num_of(const json& o, const char* k) {
  return o.is_object() && o.contains(k) && o[k].is_number() ? o[k].get<double>() : 0.0;
}

std::string pct(double part, double whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

// Prints why a request failed ("shoalctl: WHAT: cause" or "... HTTP 404: reason"); returns 1.
int report(const std::string& what, const response& r) {
  if (!r) {
    std::fprintf(stderr, "shoalctl: %s: %s\n", what.c_str(), r.error().message.c_str());
    return 1;
  }
  auto j = json::parse(r->body, nullptr, false);
  std::string why = j.is_object() ? j.value("error", "") : "";
  std::fprintf(stderr, "shoalctl: %s: HTTP %d%s\n", what.c_str(), r->status,
               why.empty() ? "" : (": " + why).c_str());
  return 1;
}

// GET `url` as a JSON document of the kind `ok` accepts; reports and returns nullopt otherwise.
std::optional<json> get_json(const context& cx, const std::string& what, const std::string& url,
                             bool (*ok)(const json&)) {
  auto r = request(cx, "GET", url);
  auto j = r ? json::parse(r->body, nullptr, false) : json();
  if (!r || r->status != 200 || j.is_discarded() || !ok(j)) {
    report(what, r);
    return std::nullopt;
  }
  return j;
}
bool is_object(const json& j) { return j.is_object(); }
bool is_array(const json& j) { return j.is_array(); }

// One progress line: bar, bytes, rate, ETA, where the bytes came from.
std::string progress_line(const json& j) {
  double done = num_of(j, "bytes_done"), total = num_of(j, "bytes");
  double frac = total > 0 ? done / total : (j.value("state", "") == "ready" ? 1.0 : 0.0);
  double peers = num_of(j, "from_peers"),
         origin = num_of(j, "from_origin") + num_of(j, "from_http");
  double moved = peers + origin;
  std::optional<double> eta;
  if (j.contains("eta_seconds") && j["eta_seconds"].is_number()) eta = num_of(j, "eta_seconds");
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s %5.1f%%  %s / %s  %s/s  ETA %s  peers %s origin %s  groups %.0f/%.0f  %s",
                ctl::bar(frac).c_str(), 100.0 * frac, human(done).c_str(), human(total).c_str(),
                human(num_of(j, "rate")).c_str(), ctl::eta_text(eta).c_str(),
                pct(peers, moved).c_str(), pct(origin, moved).c_str(), num_of(j, "groups_done"),
                num_of(j, "groups"), j.value("state", "").c_str());
  return buf;
}

void dataset_summary(const json& j) {
  double secs = num_of(j, "seconds"), total = num_of(j, "bytes");
  double peers = num_of(j, "from_peers"), bt = num_of(j, "from_origin"),
         http = num_of(j, "from_http"), local = num_of(j, "local_bytes");
  double moved = peers + bt + http;
  std::string name = j.contains("checkpoint") ? j.value("checkpoint", "") : j.value("dataset", "");
  std::printf("%s %s: %.0f files, %s in %.1fs (%s/s)\n", name.c_str(), j.value("state", "").c_str(),
              num_of(j, "files"), human(total).c_str(), secs,
              human(secs > 0 ? moved / secs : 0).c_str());
  std::printf(
      "  from peers %s (%s), from registry-proxy %s (BitTorrent) + %s (HTTP), already here %s\n",
      human(peers).c_str(), pct(peers, moved).c_str(), human(bt).c_str(), human(http).c_str(),
      human(local).c_str());
  if (j.contains("view") && j["view"].is_string())
    std::printf("  view %s\n", j["view"].get<std::string>().c_str());
  if (!j.value("error", "").empty()) std::printf("  error: %s\n", j.value("error", "").c_str());
}

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

std::string trim_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

std::optional<json> follow(const context& cx, const std::string& url, double timeout,
                           std::string (*line)(const json&),
                           std::initializer_list<std::string_view> final, const std::string& what,
                           std::chrono::milliseconds interval) {
  bool tty = ::isatty(2);
  auto t0 = std::chrono::steady_clock::now();
  auto last = t0 - std::chrono::hours(1);
  for (;;) {
    auto s = request(cx, "GET", url, {}, std::chrono::seconds(10));
    if (s && s->status == 200) {
      auto j = json::parse(s->body, nullptr, false);
      if (j.is_object()) {
        std::string st = j.value("state", "");
        bool done = std::find(final.begin(), final.end(), st) != final.end();
        auto now = std::chrono::steady_clock::now();
        // On a terminal the bar redraws in place; in a log, one line every 5 seconds.
        if (tty) {
          std::fprintf(stderr, "\r\033[2K%s", line(j).c_str());
        } else if (now - last >= std::chrono::seconds(5) || done) {
          std::fprintf(stderr, "%s\n", line(j).c_str());
          last = now;
        }
        if (done) {
          if (tty) std::fprintf(stderr, "\n");
          return j;
        }
      }
    } else if (!s) {
      std::fprintf(stderr, "%sshoalctl: peerd: %s%s", tty ? "\r\033[2K" : "",
                   s.error().message.c_str(), tty ? "" : "\n");
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout) {
      std::fprintf(stderr, "\nshoalctl: %s not ready after %.0fs\n", what.c_str(), timeout);
      return std::nullopt;
    }
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace shoal::tools::ctl
