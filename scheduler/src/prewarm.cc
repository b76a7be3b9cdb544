#include "scheduler/prewarm.h"

#include <cmath>
#include <set>

#include "common/log.h"

namespace shoal::scheduler {

using nlohmann::json;

std::string_view to_string(part_state s) noexcept {
  switch (s) {
    case part_state::pending:
      return "pending";
    case part_state::running:
      return "running";
    case part_state::done:
      return "done";
    case part_state::failed:
      return "failed";
  }
  return "unknown";
}

heartbeat::prewarm_order image_order(const std::string& id, std::size_t k,
                                     const resolved_image& img, const std::string& plat,
                                     std::uint64_t pin) {
  heartbeat::prewarm_order o;
  o.id = id + "." + std::to_string(k);
  o.image = img.ref;
  o.platform = plat;
  o.registry = img.registry;
  o.repository = img.repository;
  o.pin_seconds = pin;
  for (const auto& x : img.objects) o.objects.push_back({x.id, x.size});
  return o;
}

heartbeat::prewarm_order dataset_order(const std::string& id, std::size_t k,
                                       const std::string& dataset,
                                       const std::vector<object_ref>& objects,
                                       const std::string& plat, std::uint64_t pin) {
  heartbeat::prewarm_order o;
  o.id = id + ".d" + std::to_string(k);
  o.dataset = dataset;
  o.platform = plat;
  o.pin_seconds = pin;
  for (const auto& x : objects) o.objects.push_back({x.id, x.size});
  return o;
}

heartbeat::prewarm_order checkpoint_order(const std::string& id, const std::string& key,
                                          const std::vector<object_ref>& objects,
                                          const std::string& plat, std::uint64_t pin) {
  heartbeat::prewarm_order o;
  o.id = id + ".c";
  o.checkpoint = key;
  o.platform = plat;
  o.pin_seconds = pin;
  for (const auto& x : objects) o.objects.push_back({x.id, x.size});
  return o;
}

prewarm_manager::prewarm_manager(cluster_index& idx, prewarm_options o,
                                 std::function<clock::time_point()> now)
    : idx_(idx), opts_(o), now_(std::move(now)) {}

status prewarm_manager::create(const std::string& id, std::vector<planned_node> nodes,
                               json summary) {
  if (!sharer_) return apply_create(id, std::move(nodes), std::move(summary));
  if (!heartbeat::valid_order_id(id)) return fail(errc::invalid_argument, "invalid prewarm id");
  {
    // Judged here first (what every replica will judge when it applies the log).
    std::lock_guard lk(mu_);
    if (records_.count(id)) return fail(errc::already_exists, "prewarm " + id + " exists");
    std::size_t active = 0;
    for (const auto& [k, r] : records_) active += r.finished ? 0 : 1;
    if (active >= opts_.max_prewarms) {
      return fail(errc::busy,
                  "too many prewarms in progress (" + std::to_string(records_.size()) + ")");
    }
  }
  return sharer_(id, nodes, summary);
}

status prewarm_manager::apply_create(const std::string& id, std::vector<planned_node> nodes,
                                     json summary) {
  if (!heartbeat::valid_order_id(id)) return fail(errc::invalid_argument, "invalid prewarm id");
  auto now = now_();
  std::lock_guard lk(mu_);
  if (records_.count(id)) return fail(errc::already_exists, "prewarm " + id + " exists");
  if (records_.size() >= opts_.max_prewarms) {
    // Make room by dropping the oldest finished prewarm.
    auto oldest = records_.end();
    for (auto it = records_.begin(); it != records_.end(); ++it) {
      if (it->second.finished &&
          (oldest == records_.end() || *it->second.finished < *oldest->second.finished)) {
        oldest = it;
      }
    }
    if (oldest == records_.end()) {
      return fail(errc::busy,
                  "too many prewarms in progress (" + std::to_string(records_.size()) + ")");
    }
    records_.erase(oldest);
  }
  record r;
  r.id = id;
  r.created = now;
  r.summary = std::move(summary);
  for (auto& n : nodes) {
    part p;
    p.node = n.node;
    p.role = n.role;
    std::set<digest> seen;
    for (auto& o : n.orders) {
      order_track t;
      for (const auto& ob : o.objects) {
        t.objects.push_back({ob.id, ob.size});
        if (seen.insert(ob.id).second) {
          p.objects.push_back({ob.id, ob.size});
          p.bytes_total += ob.size;
        }
      }
      t.order = std::move(o);
      p.orders.push_back(std::move(t));
    }
    r.parts.push_back(std::move(p));
  }
  for (auto& p : r.parts) update_part(r, p, now);
  log::info("prewarm created", log::kv("id", id), log::kv("nodes", r.parts.size()));
  records_.emplace(id, std::move(r));
  return {};
}

void prewarm_manager::update_part(record& r, part& p, clock::time_point now) {
  if (p.state == part_state::done || p.state == part_state::failed) return;
  auto held = idx_.held(p.node, p.objects);
  p.bytes_present = held.bytes;
  auto finish = [&](part_state s, std::string err) {
    p.state = s;
    p.error = std::move(err);
    log::info("prewarm node finished", log::kv("id", r.id), log::kv("node", p.node),
              log::kv("state", to_string(s)), log::kv("error", p.error));
  };
  // A dataset is ready on a node once its view exists (the node reports it in its heartbeats, or
  // reports the order done), not merely when its objects are in the cache (issue #7).
  auto views_ready = [&] {
    std::optional<node_summary> node;
    for (const auto& t : p.orders) {
      if (t.order.dataset.empty()) continue;
      if (t.report && t.report->state == heartbeat::order_state::done) continue;
      if (!node) node = idx_.node(p.node);
      bool ok = false;
      if (node) {
        for (const auto& d : node->datasets) ok = ok || (d.dataset == t.order.dataset && d.view);
      }
      if (!ok) return false;
    }
    return true;
  };
  if (held.count == p.objects.size() && views_ready()) return finish(part_state::done, "");
  for (const auto& t : p.orders) {
    if (t.report && t.report->state == heartbeat::order_state::failed) {
      std::string what = !t.order.image.empty()     ? t.order.image
                         : !t.order.dataset.empty() ? t.order.dataset
                                                    : t.order.checkpoint;
      return finish(part_state::failed,
                    what + ": " + (t.report->error.empty() ? "failed" : t.report->error));
    }
  }
  auto node = idx_.node(p.node);
  if (!node) return finish(part_state::failed, "node dropped: no heartbeat for too long");
  if (!node->healthy) {
    if (node->health == "failing") {
      std::string why =
          node->health_reasons.empty() ? std::string("failing") : node->health_reasons.front();
      return finish(part_state::failed, "node failing: " + why);
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f", node->last_seen_s);
    return finish(part_state::failed, std::string("node lost: no heartbeat for ") + buf + "s");
  }
  if (node->schema < 2)
    return finish(part_state::failed,
                  "the node's peerd does not take prewarm orders (heartbeat schema 1)");
  if (now - r.created > opts_.timeout) {
    return finish(part_state::failed,
                  "timed out after " +
                      std::to_string(
                          std::chrono::duration_cast<std::chrono::seconds>(opts_.timeout).count()) +
                      "s");
  }
  p.state = p.reported ? part_state::running : part_state::pending;
}

std::vector<heartbeat::prewarm_order> prewarm_manager::on_heartbeat(
    const std::string& node, const std::vector<heartbeat::order_report>& reports, int schema) {
  auto now = now_();
  std::map<std::string, const heartbeat::order_report*> by_id;
  for (const auto& rep : reports) by_id[rep.id] = &rep;
  std::vector<heartbeat::prewarm_order> out;
  std::lock_guard lk(mu_);
  for (auto& [id, r] : records_) {
    if (r.finished) continue;
    for (auto& p : r.parts) {
      if (p.node != node) continue;
      p.schema = schema;
      bool all = true;
      for (auto& t : p.orders) {
        auto it = by_id.find(t.order.id);
        if (it != by_id.end())
          t.report = *it->second;
        else
          all = false;
      }
      p.reported = all;
      update_part(r, p, now);
      if (p.state == part_state::done || p.state == part_state::failed) continue;
      for (const auto& t : p.orders) {
        if (!by_id.count(t.order.id)) out.push_back(t.order);
      }
    }
  }
  return out;
}

std::string prewarm_manager::overall(const record& r,
                                     std::map<std::string, std::string>* replacements) const {
  bool any_open = false, any_failed = false;
  for (const auto& p : r.parts) {
    if (p.state == part_state::pending || p.state == part_state::running) any_open = true;
    if (p.state == part_state::failed) any_failed = true;
  }
  // A failed primary is replaced by a done standby, in rank order.
  std::vector<const part*> spare;
  for (const auto& p : r.parts) {
    if (p.role == "standby" && p.state == part_state::done) spare.push_back(&p);
  }
  std::size_t next = 0;
  bool uncovered = false;
  for (const auto& p : r.parts) {
    if (p.role == "standby" || p.state != part_state::failed) continue;
    if (next < spare.size()) {
      if (replacements) (*replacements)[p.node] = spare[next]->node;
      ++next;
    } else {
      uncovered = true;
    }
  }
  bool primaries_open = false;
  for (const auto& p : r.parts) {
    if (p.role != "standby" && (p.state == part_state::pending || p.state == part_state::running))
      primaries_open = true;
  }
  if (!any_failed) return any_open ? "running" : "done";
  bool job = false;
  for (const auto& p : r.parts) job = job || p.role == "primary";
  if (job && !uncovered && !primaries_open) return "done";
  if (any_open) return "running";
  return "failed";
}

void prewarm_manager::tick() {
  auto now = now_();
  std::lock_guard lk(mu_);
  for (auto it = records_.begin(); it != records_.end();) {
    auto& r = it->second;
    if (r.finished) {
      if (now - *r.finished > opts_.retention) {
        it = records_.erase(it);
        continue;
      }
      ++it;
      continue;
    }
    for (auto& p : r.parts) update_part(r, p, now);
    bool terminal = true;
    for (const auto& p : r.parts) {
      terminal = terminal && (p.state == part_state::done || p.state == part_state::failed);
    }
    auto state = overall(r, nullptr);
    if (terminal || state == "done") {
      // A job prewarm that is done through replacements still lets its open standbys finish:
      // they are only marked finished once every part is terminal.
      if (terminal) {
        r.finished = now;
        log::info("prewarm finished", log::kv("id", r.id), log::kv("state", state));
      }
    }
    ++it;
  }
}

json prewarm_manager::to_json(const record& r, clock::time_point now) const {
  std::map<std::string, std::string> repl;
  json out;
  out["id"] = r.id;
  out["state"] = overall(r, &repl);
  out["age_s"] = std::round(std::chrono::duration<double>(now - r.created).count() * 10) / 10;
  out["request"] = r.summary;
  std::uint64_t total = 0, done = 0;
  json parts = json::array();
  for (const auto& p : r.parts) {
    std::uint64_t reported = 0;
    json orders = json::array();
    for (const auto& t : p.orders) {
      json o = {{"id", t.order.id}, {"platform", t.order.platform}};
      if (!t.order.image.empty()) o["image"] = t.order.image;
      if (!t.order.dataset.empty()) o["dataset"] = t.order.dataset;
      if (!t.order.checkpoint.empty()) o["checkpoint"] = t.order.checkpoint;
      std::uint64_t bytes = 0;
      for (const auto& x : t.objects) bytes += x.size;
      o["bytes_total"] = bytes;
      if (t.report) {
        o["state"] = heartbeat::to_string(t.report->state);
        o["bytes_done"] = t.report->bytes_done;
        if (!t.report->error.empty()) o["error"] = t.report->error;
        reported += t.report->bytes_done;
      } else {
        o["state"] = p.state == part_state::done ? "done" : "pending";
        o["bytes_done"] = p.state == part_state::done ? bytes : 0;
      }
      orders.push_back(std::move(o));
    }
    std::uint64_t shown = p.state == part_state::done
                              ? p.bytes_total
                              : std::min(p.bytes_total, std::max(reported, p.bytes_present));
    total += p.bytes_total;
    done += shown;
    json pj = {{"node", p.node},
               {"role", p.role},
               {"state", to_string(p.state)},
               {"bytes_total", p.bytes_total},
               {"bytes_present", p.bytes_present},
               {"bytes_done", shown},
               {"orders", std::move(orders)}};
    if (!p.error.empty()) pj["error"] = p.error;
    parts.push_back(std::move(pj));
  }
  out["bytes_total"] = total;
  out["bytes_done"] = done;
  out["nodes"] = std::move(parts);
  out["replacements"] = repl;
  return out;
}

std::optional<json> prewarm_manager::progress(const std::string& id) {
  auto now = now_();
  std::lock_guard lk(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return std::nullopt;
  if (!it->second.finished) {
    for (auto& p : it->second.parts) update_part(it->second, p, now);
  }
  return to_json(it->second, now);
}

json prewarm_manager::list() {
  auto now = now_();
  std::lock_guard lk(mu_);
  json out = json::array();
  for (const auto& [id, r] : records_) {
    std::size_t done = 0, failed = 0;
    for (const auto& p : r.parts) {
      done += p.state == part_state::done;
      failed += p.state == part_state::failed;
    }
    out.push_back(
        {{"id", id},
         {"state", overall(r, nullptr)},
         {"nodes", r.parts.size()},
         {"nodes_done", done},
         {"nodes_failed", failed},
         {"age_s", std::round(std::chrono::duration<double>(now - r.created).count() * 10) / 10}});
  }
  return out;
}

prewarm_counts prewarm_manager::counts() {
  std::lock_guard lk(mu_);
  prewarm_counts c;
  for (const char* s : {"pending", "queued", "running", "done", "failed"}) c.orders[s] = 0;
  for (const auto& [id, r] : records_) {
    ++(r.finished ? c.finished : c.active);
    for (const auto& p : r.parts) {
      for (const auto& t : p.orders) {
        std::string s;
        if (p.state == part_state::done)
          s = "done";
        else if (t.report && t.report->state == heartbeat::order_state::done &&
                 p.state == part_state::failed)
          s = "done";
        else if (p.state == part_state::failed)
          s = "failed";
        else if (t.report)
          s = std::string(heartbeat::to_string(t.report->state));
        else
          s = "pending";
        ++c.orders[s];
      }
    }
  }
  return c;
}

}  // namespace shoal::scheduler
