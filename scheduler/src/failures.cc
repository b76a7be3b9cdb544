#include "scheduler/failures.h"

#include <cmath>
#include <cstdio>

#include "common/log.h"
#include "common/text.h"

namespace shoal::scheduler {

std::string_view to_string(node_state s) noexcept {
  switch (s) {
    case node_state::healthy:
      return "healthy";
    case node_state::unhealthy:
      return "unhealthy";
    case node_state::restarting:
      return "restarting";
    case node_state::failed:
      return "failed";
  }
  return "healthy";
}

std::string_view to_string(failure_cause c) noexcept {
  switch (c) {
    case failure_cause::none:
      return "";
    case failure_cause::heartbeat:
      return "heartbeat";
    case failure_cause::reported:
      return "reported";
    case failure_cause::netsetup:
      return "netsetup";
    case failure_cause::restart_grace:
      return "restart_grace";
  }
  return "";
}

namespace {

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f s", std::floor(s));
  return buf;
}

std::string secs(std::chrono::milliseconds d) {
  return secs(std::chrono::duration<double>(d).count());
}

bool silent_failure(const node_summary& n, const failover_options& o) {
  return !n.leaving && n.health != "failing" &&
         n.last_seen_s >= std::chrono::duration<double>(o.failed_after).count();
}

}  // namespace

failure_detector::failure_detector(
    failover_options opts,
    std::function<std::optional<std::string>(const node_summary&)> network_failure,
    std::function<clock::time_point()> now)
    : opts_(opts), network_failure_(std::move(network_failure)), now_(std::move(now)) {
  started_ = now_();
}

void failure_detector::serving_since(clock::time_point t) {
  std::lock_guard lk(mu_);
  if (t < started_) started_ = t;
}

node_verdict failure_detector::judge(const node_summary& n, bool stale) const {
  using std::chrono::duration;
  node_verdict v;
  const double silent = n.last_seen_s;
  if (n.health == "failing") {
    v.state = node_state::failed;
    v.cause = failure_cause::reported;
    std::string why;
    for (const auto& r : n.health_reasons) why += (why.empty() ? "" : "; ") + r;
    v.detail = "the node reports health failing: " + (why.empty() ? "no reason given" : why);
    return v;
  }
  if (network_failure_) {
    if (auto w = network_failure_(n)) {
      v.state = node_state::failed;
      v.cause = failure_cause::netsetup;
      v.detail = "netsetup validation failed: " + *w;
      return v;
    }
  }
  if (n.leaving) {
    if (silent < duration<double>(opts_.restart_grace).count() || stale) {
      v.state = node_state::restarting;
      v.detail = "peerd stopped cleanly " + secs(silent) + " ago (restart_grace " +
                 secs(opts_.restart_grace) + ")";
    } else {
      v.state = node_state::failed;
      v.cause = failure_cause::restart_grace;
      v.detail = "peerd stopped cleanly " + secs(silent) + " ago and is not back (restart_grace " +
                 secs(opts_.restart_grace) + ")";
    }
    return v;
  }
  if (!stale && silent >= duration<double>(opts_.failed_after).count()) {
    v.state = node_state::failed;
    v.cause = failure_cause::heartbeat;
    v.detail =
        "no heartbeat for " + secs(silent) + " (failed_after " + secs(opts_.failed_after) + ")";
    return v;
  }
  if (!n.healthy) {
    v.state = node_state::unhealthy;
    v.detail = "no heartbeat for " + secs(silent) + " (unhealthy_after " +
               secs(opts_.unhealthy_after) + ")";
  }
  return v;
}

void failure_detector::record(std::vector<node_event>& out, std::string node, std::string event,
                              failure_cause cause, std::string detail) {
  node_event e{utc_rfc3339(std::chrono::system_clock::now()), std::move(node), std::move(event),
               std::string(to_string(cause)), std::move(detail)};
  if (e.event == "failed" || e.event == "view_stale") {
    log::warn("node failure detection", log::kv("event", e.event), log::kv("node", e.node),
              log::kv("cause", e.cause), log::kv("detail", e.detail));
  } else {
    log::info("node failure detection", log::kv("event", e.event), log::kv("node", e.node),
              log::kv("detail", e.detail));
  }
  events_.push_back(e);
  while (events_.size() > opts_.max_events) events_.pop_front();
  out.push_back(std::move(e));
}

std::vector<node_event> failure_detector::evaluate(const std::vector<node_summary>& nodes) {
  const auto now = now_();
  std::vector<node_event> out;
  std::lock_guard lk(mu_);
  // Is the scheduler's own view good enough to call silence a failure?
  std::string why_stale;
  if (now - started_ < opts_.failed_after) {
    why_stale =
        "the scheduler started " + secs(std::chrono::duration<double>(now - started_).count()) +
        " ago; nodes may not all have reported (failed_after " + secs(opts_.failed_after) + ")";
  } else {
    std::size_t silent = 0;
    for (const auto& n : nodes) silent += silent_failure(n, opts_) ? 1 : 0;
    if (nodes.size() >= 2 && static_cast<double>(silent) >
                                 opts_.max_failed_fraction * static_cast<double>(nodes.size())) {
      why_stale = std::to_string(silent) + " of " + std::to_string(nodes.size()) +
                  " nodes went silent at once: the scheduler is more likely cut off than they "
                  "failed (max_failed_fraction)";
    }
  }
  const bool stale = !why_stale.empty();
  // The start-up window is expected: only a change after it is an event.
  if (stale != stale_ && now - started_ >= opts_.failed_after) {
    record(out, "", stale ? "view_stale" : "view_fresh", failure_cause::none,
           stale ? why_stale : "heartbeats arrive again; failure decisions resume");
  }
  stale_ = stale;

  std::map<std::string, tracked, std::less<>> next;
  for (const auto& n : nodes) {
    node_verdict v = judge(n, stale);
    auto it = nodes_.find(n.name);
    const bool known = it != nodes_.end();
    const node_state before = known ? it->second.v.state : node_state::healthy;
    tracked t{v, now};
    if (known && before == v.state && it->second.v.cause == v.cause) t.since = it->second.since;
    if (!known || before != v.state || it->second.v.cause != v.cause) {
      if (v.state == node_state::failed) {
        ++failures_[v.cause];
        record(out, n.name, "failed", v.cause, v.detail);
      } else if (v.state == node_state::restarting) {
        record(out, n.name, "restarting", failure_cause::none, v.detail);
      } else if (known && (before == node_state::failed || before == node_state::restarting)) {
        record(out, n.name, "recovered", failure_cause::none,
               "heartbeats again after being " + std::string(to_string(before)));
      }
    }
    next.emplace(n.name, std::move(t));
  }
  nodes_ = std::move(next);  // nodes the index dropped are forgotten here too
  return out;
}

std::optional<node_verdict> failure_detector::verdict(std::string_view node) const {
  std::lock_guard lk(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  node_verdict v = it->second.v;
  v.since_s = std::chrono::duration<double>(now_() - it->second.since).count();
  return v;
}

std::vector<node_event> failure_detector::events(std::string_view node, std::size_t limit) const {
  std::lock_guard lk(mu_);
  std::vector<node_event> out;
  for (auto it = events_.rbegin(); it != events_.rend() && out.size() < limit; ++it) {
    if (node.empty() || it->node == node) out.push_back(*it);
  }
  return out;
}

void failure_detector::add_event(node_event e) {
  std::lock_guard lk(mu_);
  events_.push_back(std::move(e));
  while (events_.size() > opts_.max_events) events_.pop_front();
}

bool failure_detector::view_stale() const {
  std::lock_guard lk(mu_);
  return stale_;
}

std::size_t failure_detector::failed_nodes() const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& [name, t] : nodes_) n += t.v.state == node_state::failed ? 1 : 0;
  return n;
}

std::map<failure_cause, std::uint64_t> failure_detector::failures() const {
  std::lock_guard lk(mu_);
  return failures_;
}

std::function<std::optional<std::string>(const node_summary&)> netsetup_failures(
    const network_model& net) {
  return [&net](const node_summary& n) -> std::optional<std::string> {
    if (n.netsetup.empty()) return std::nullopt;
    node_view nv;
    nv.name = n.name;
    nv.netsetup = n.netsetup;
    nv.netsetup_rev = n.netsetup_rev;
    auto v = net.verdict(nv);
    if (v.state != validation::failed) return std::nullopt;
    return v.detail.empty() ? std::string("the node's validation failed") : v.detail;
  };
}

}  // namespace shoal::scheduler
