#include "scheduler/jobs.h"

#include <algorithm>

#include "common/checkpoint.h"
#include "common/log.h"
#include "common/text.h"
#include "scheduler/api.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

// Failed nodes remembered at once while the view is stale (the index knows at most max_nodes).
constexpr std::size_t max_pending = 100'000;

std::string utc_now() { return utc_rfc3339(std::chrono::system_clock::now()); }

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::uint64_t bytes_of(const std::vector<object_ref>& objs) {
  std::uint64_t n = 0;
  for (const auto& o : objs) n += o.size;
  return n;
}

std::size_t strings_bytes(const std::vector<std::string>& v) {
  std::size_t n = 0;
  for (const auto& x : v) n += x.size() + 32;
  return n;
}

// About what a record holds in memory (its strings, with an allowance per string).
std::size_t approx_bytes(const job_record& r) {
  std::size_t n = 1024 + r.id.size() + strings_bytes(r.spec.images) +
                  strings_bytes(r.spec.datasets) + strings_bytes(r.spec.exclude) +
                  strings_bytes(r.spec.candidates) + strings_bytes(r.members) +
                  strings_bytes(r.standbys) + strings_bytes(r.pod_nodes);
  for (const auto& [k, v] : r.spec.selector) n += k.size() + v.size() + 64;
  return n;
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

}  // namespace

namespace detail {

// A node weighed for one decision, with what the ordering needs beyond what is shown.
struct weighed {
  failover_candidate c;
  std::string platform;
  bool in_segment = true;
  bool only_segment = false;  // eligible but for the segment
  int rank = 0;
};

}  // namespace detail

using detail::weighed;

// What one decision weighs: the job's objects by kind, and every node that is not already the
// job's, eligible ones first in the order of preference.
struct job_registry::context {
  std::map<std::string, std::vector<object_ref>> images;                  // per platform
  std::vector<std::pair<std::string, std::vector<object_ref>>> datasets;  // in spec order
  std::vector<object_ref> dataset_objects;                                // all, once each
  std::string checkpoint_key;
  std::vector<object_ref> checkpoint;
  std::string segment;
  bool gang = false;
  std::vector<weighed> ranked;
  [[nodiscard]] const weighed* find(std::string_view node) const {
    for (const auto& w : ranked) {
      if (w.c.node == node) return &w;
    }
    return nullptr;
  }
};

job_registry::job_registry(job_registry_deps d, jobs_options o,
                           std::function<clock::time_point()> now)
    : d_(d),
      opts_(std::move(o)),
      now_(std::move(now)),
      failovers_(d.reg
                     .counter("shoal_scheduler_failovers_total",
                              "Failover decisions: a member of a known job failed (with or "
                              "without a replacement).")
                     .with({})),
      no_replacement_(d.reg
                          .counter("shoal_scheduler_failover_no_replacement_total",
                                   "Failover decisions that found no replacement (the reason "
                                   "is in the decision and its event).")
                          .with({})) {
  d.reg.gauge_fn("shoal_scheduler_jobs", "Jobs known (placed or prewarmed with an id).",
                 [this] { return static_cast<double>(size()); });
}

// ---- Learning jobs

void job_registry::record(const job_spec& spec, std::vector<std::string> members,
                          std::vector<std::string> standbys, std::string segment,
                          std::uint32_t standby_wanted, std::string source, std::string prewarm) {
  if (spec.id.empty()) return;
  const auto now = now_();
  const auto t = utc_now();
  std::unique_lock lk(mu_);
  auto [it, fresh] = jobs_.try_emplace(spec.id);
  auto& r = it->second;
  if (fresh) {
    r.id = spec.id;
    r.created = t;
    r.created_at = now;
  }
  r.spec = spec;
  r.members = std::move(members);
  r.standbys = std::move(standbys);
  // Nodes running its pods stay members, whatever the placement says.
  for (const auto& n : r.pod_nodes) {
    if (!contains(r.members, n)) r.members.push_back(n);
    std::erase(r.standbys, n);
  }
  r.segment = std::move(segment);
  r.standby_wanted = standby_wanted;
  r.source = std::move(source);
  if (!prewarm.empty()) r.prewarm = std::move(prewarm);
  r.updated = t;
  r.updated_at = now;
  account_locked(r);
  log::info("job recorded", log::kv("job", r.id), log::kv("source", r.source),
            log::kv("members", join(r.members, ",")), log::kv("standbys", join(r.standbys, ",")),
            log::kv("segment", r.segment));
  evict_locked();
  lk.unlock();
  shared(spec.id);
}

void job_registry::account_locked(job_record& r) {
  bytes_ -= r.bytes;
  r.bytes = approx_bytes(r);
  bytes_ += r.bytes;
}

void job_registry::evict_locked() {
  while (jobs_.size() > opts_.max_jobs || (bytes_ > max_jobs_bytes && jobs_.size() > 1)) {
    auto oldest = jobs_.begin();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (it->second.updated_at < oldest->second.updated_at) oldest = it;
    }
    log::info("job forgotten: jobs.max_jobs (or max_jobs_bytes) reached",
              log::kv("job", oldest->first));
    bytes_ -= oldest->second.bytes;
    jobs_.erase(oldest);
  }
}

bool job_registry::forget(const std::string& id) {
  if (!get(id)) return false;
  erase(id);
  log::info("job forgotten on request", log::kv("job", id));
  shared(id);
  return true;
}

void job_registry::expire() {
  const auto now = now_();
  std::lock_guard lk(mu_);
  std::erase_if(jobs_, [&](const auto& kv) {
    if (now - kv.second.updated_at < opts_.ttl || !kv.second.pod_nodes.empty()) return false;
    log::info("job forgotten: not updated within jobs.ttl", log::kv("job", kv.first));
    bytes_ -= kv.second.bytes;
    return true;
  });
}

// ---- Reads

std::optional<job_record> job_registry::get(const std::string& id) const {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

std::vector<job_record> job_registry::list() const {
  std::lock_guard lk(mu_);
  std::vector<job_record> out;
  out.reserve(jobs_.size());
  for (const auto& [id, r] : jobs_) out.push_back(r);
  return out;
}

std::size_t job_registry::size() const {
  std::lock_guard lk(mu_);
  return jobs_.size();
}

std::optional<std::string> job_registry::preferred_node(std::string_view job) const {
  const auto now = now_();
  std::lock_guard lk(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || !it->second.failover) return std::nullopt;
  const auto& f = *it->second.failover;
  if (f.replacement.empty() || now - f.at >= opts_.failover_preference_ttl) return std::nullopt;
  if (!contains(it->second.members, f.replacement)) return std::nullopt;  // placed again since
  return f.replacement;
}

std::optional<node_verdict> job_registry::verdict(std::string_view node) const {
  return d_.failures.verdict(node);
}

// ---- Failover

bool job_registry::on_node_events(const std::vector<node_event>& events, bool may_decide) {
  const bool stale = d_.failures.view_stale();
  std::lock_guard lk(mu_);
  for (const auto& e : events) {
    if (e.event != "failed" || e.node.empty()) continue;
    if (pending_.size() < max_pending || pending_.count(e.node)) pending_[e.node] = e;
  }
  if (pending_.empty() || stale || scheduled_ || !may_decide) return false;
  scheduled_ = true;
  return true;
}

std::vector<failover_decision> job_registry::decide_pending() {
  std::lock_guard run(decide_mu_);
  std::vector<failover_decision> out;
  for (;;) {
    node_event ev;
    std::vector<std::string> as_member, as_standby;
    {
      std::lock_guard lk(mu_);
      if (pending_.empty() || d_.failures.view_stale()) {
        scheduled_ = false;
        return out;
      }
      ev = std::move(pending_.begin()->second);
      pending_.erase(pending_.begin());
      for (const auto& [id, j] : jobs_) {
        if (contains(j.members, ev.node))
          as_member.push_back(id);
        else if (contains(j.standbys, ev.node))
          as_standby.push_back(id);
      }
    }
    auto v = d_.failures.verdict(ev.node);
    if (!v || v->state != node_state::failed) {
      log::info("no failover: the node is no longer failed", log::kv("node", ev.node));
      continue;
    }
    for (const auto& id : as_member) {
      if (auto d = decide(id, ev)) out.push_back(std::move(*d));
    }
    for (const auto& id : as_standby) replace_standby(id, ev.node);
  }
}

namespace {

// The fabric segment of the job's members other than `failed`, when they agree; else the one
// it was placed in.
std::string surviving_segment(const job_record& job, const std::string& failed,
                              const cluster_view& view) {
  std::string seg;
  bool agree = true, any = false;
  std::vector<std::string> alive;
  for (const auto& m : job.members) {
    if (m != failed) alive.push_back(m);
  }
  for (auto i : index_of_names(view.nodes, alive)) {
    if (i == no_node) continue;
    const auto& f = view.nodes[i].fabric;
    if (!any) seg = f;
    agree = agree && f == seg;
    any = true;
  }
  return any && agree && !seg.empty() ? seg : job.segment;
}

// Preference: eligible, in the segment, a standby, most bytes held, placement's rank.
bool preferred(const weighed& a, const weighed& b) {
  if (a.c.eligible != b.c.eligible) return a.c.eligible;
  if (!a.c.eligible) return false;
  if (a.in_segment != b.in_segment) return a.in_segment;
  if ((a.c.role == "standby") != (b.c.role == "standby")) return a.c.role == "standby";
  if (a.c.bytes_present != b.c.bytes_present) return a.c.bytes_present > b.c.bytes_present;
  return a.rank < b.rank;
}

}  // namespace

job_registry::context job_registry::weigh(const job_record& job, const std::string& failed) {
  context c;
  c.gang = job.spec.nodes > 1;
  // One more member: the job's own filters, with its members and the failed node excluded.
  job_spec one = job.spec;
  one.nodes = 1;
  one.exclude.insert(one.exclude.end(), job.members.begin(), job.members.end());
  one.exclude.push_back(failed);
  auto platforms = platforms_of(d_.index.view({}), one);
  job_spec images_only;
  images_only.images = one.images;
  images_only.platform = one.platform;
  if (auto r = d_.place.resolve(images_only, platforms, opts_.resolve_timeout, false)) {
    c.images = r->by_platform;
    for (const auto& [plat, errs] : r->errors) {
      if (!errs.empty())
        log::warn("failover: image not resolved", log::kv("job", job.id), log::kv("platform", plat),
                  log::kv("error", errs.front()));
    }
  }
  for (const auto& ds : one.datasets) {
    auto r = d_.datasets.lookup(ds);
    if (!r) {
      log::warn("failover: dataset not found", log::kv("job", job.id), log::kv("dataset", ds),
                log::kv("error", r.error().message));
      continue;
    }
    c.dataset_objects.insert(c.dataset_objects.end(), r->begin(), r->end());
    c.datasets.emplace_back(ds, std::move(*r));
  }
  c.dataset_objects = dedup(c.dataset_objects);
  latest_checkpoint_fn latest;
  {
    std::lock_guard lk(mu_);
    latest = latest_;
  }
  if (latest) {
    if (auto ck = latest(job.id)) {
      c.checkpoint_key = ck->first;
      for (const auto& [id, size] : ck->second) c.checkpoint.push_back({id, size});
      c.checkpoint = dedup(c.checkpoint);
    }
  }
  job_objects all;
  std::vector<digest> digests;
  for (const auto& plat : platforms) {
    auto list = c.images[plat];
    list.insert(list.end(), c.dataset_objects.begin(), c.dataset_objects.end());
    list.insert(list.end(), c.checkpoint.begin(), c.checkpoint.end());
    all.by_platform[plat] = dedup(list);
    for (const auto& o : all.by_platform[plat]) digests.push_back(o.id);
  }
  auto view = d_.index.view(digests);
  const auto& po = d_.place.options();
  auto evals = evaluate_nodes(view, all, one, po.cost, d_.place.network(), d_.place.reserved(),
                              {.require_validation = po.require_network_validation,
                               .strict_resolution = false,
                               .packing_seconds_per_gpu = po.packing_seconds_per_gpu});
  c.segment = surviving_segment(job, failed, view);
  for (const auto& e : evals) {
    if (e.name == failed || contains(job.members, e.name)) continue;
    weighed w;
    w.c.node = e.name;
    w.c.role = contains(job.standbys, e.name) ? "standby" : "other";
    w.c.segment = view.nodes[e.index].fabric;
    w.c.reasons = e.reasons;
    w.c.bytes_present = e.cost.present();
    w.c.bytes_total = e.cost.bytes_total;
    w.platform = e.platform;
    w.rank = e.rank;
    if (auto v = d_.failures.verdict(e.name); v && v->state != node_state::healthy) {
      w.c.reasons.push_back("failure detection: " + std::string(to_string(v->state)) +
                            (v->detail.empty() ? "" : ": " + v->detail));
    }
    w.in_segment = c.segment.empty() || w.c.segment == c.segment;
    if (c.gang && !w.in_segment) {
      w.only_segment = w.c.reasons.empty();
      w.c.reasons.push_back("fabric segment " +
                            (w.c.segment.empty() ? std::string("(none)") : w.c.segment) +
                            ", the job's is " + c.segment);
    }
    w.c.eligible = w.c.reasons.empty();
    c.ranked.push_back(std::move(w));
  }
  std::stable_sort(c.ranked.begin(), c.ranked.end(), preferred);
  return c;
}

namespace {

// Why no node can replace the failed one: each standby's reasons, and what else was there.
std::string no_replacement_reason(const job_record& job, const std::vector<weighed>& ranked,
                                  const std::string& segment, bool gang) {
  std::string r = gang && !segment.empty() ? "no healthy standby in fabric segment " + segment
                                           : "no healthy standby or other eligible node";
  std::size_t elsewhere = 0;
  for (const auto& w : ranked) elsewhere += w.only_segment ? 1 : 0;
  for (const auto& s : job.standbys) {
    const weighed* w = nullptr;
    for (const auto& x : ranked) {
      if (!w && x.c.node == s) w = &x;
    }
    r += "; standby " + s + ": " + (w ? join(w->c.reasons, ", ") : "not known (no heartbeat)");
  }
  if (job.standbys.empty()) r += "; the job has no standby";
  if (gang && !segment.empty()) {
    r += "; no other eligible node in " + segment;
    if (elsewhere > 0) r += " (" + std::to_string(elsewhere) + " eligible in other segments)";
  } else {
    r += "; no other eligible node among " + std::to_string(ranked.size()) + " other nodes known";
  }
  return r;
}

// What the decision shows of the candidates: every standby, then the best others.
std::vector<failover_candidate> shown(const std::vector<weighed>& ranked, std::size_t max) {
  std::vector<failover_candidate> out;
  for (const auto& w : ranked) {
    if (w.c.role == "standby") out.push_back(w.c);
  }
  for (const auto& w : ranked) {
    if (out.size() >= max) break;
    if (w.c.role != "standby") out.push_back(w.c);
  }
  return out;
}

// What the replacement holds of the job's image (for its platform), datasets and checkpoint.
void held_on(failover_decision& d, const cluster_index& idx, const std::vector<object_ref>& image,
             const std::vector<object_ref>& datasets, const std::vector<object_ref>& checkpoint) {
  auto held = [&](const std::vector<object_ref>& objs) {
    auto h = idx.held(d.replacement, objs);
    return std::pair{bytes_held{h.bytes, bytes_of(objs)}, h.count == objs.size()};
  };
  d.image = held(image).first;
  d.datasets = held(datasets).first;
  auto [ck, complete] = held(checkpoint);
  d.checkpoint = ck;
  d.checkpoint_complete = !checkpoint.empty() && complete;
}

// Replaces `failed` by `by` among `members` (or drops it when `by` is empty).
void swap_member(std::vector<std::string>& members, const std::string& failed,
                 const std::string& by) {
  auto it = std::find(members.begin(), members.end(), failed);
  if (it == members.end()) return;
  if (by.empty() || contains(members, by))
    members.erase(it);
  else
    *it = by;
}

}  // namespace

std::vector<std::string> job_registry::top_up(const context& c, const job_record& job,
                                              const std::vector<std::string>& members,
                                              const std::vector<std::string>& standbys) const {
  std::vector<std::string> out;
  for (const auto& w : c.ranked) {
    if (standbys.size() + out.size() >= job.standby_wanted || !w.c.eligible) break;
    if (!w.in_segment) continue;  // standbys stay in the job's segment
    if (contains(members, w.c.node) || contains(standbys, w.c.node)) continue;
    out.push_back(w.c.node);
  }
  return out;
}

std::optional<failover_decision> job_registry::decide(const std::string& id, const node_event& ev) {
  auto job = get(id);
  if (!job || !contains(job->members, ev.node)) return std::nullopt;
  const auto c = weigh(*job, ev.node);
  failover_decision d;
  d.job = id;
  d.failed_node = ev.node;
  d.failed_cause = ev.cause;
  d.failed_detail = ev.detail;
  d.time = utc_now();
  d.at = now_();
  d.segment = c.segment;
  d.checkpoint_key = c.checkpoint_key;
  const weighed* pick =
      !c.ranked.empty() && c.ranked.front().c.eligible ? &c.ranked.front() : nullptr;
  auto members = job->members;
  auto standbys = job->standbys;
  swap_member(members, ev.node, pick ? pick->c.node : std::string());
  if (pick) {
    d.replacement = pick->c.node;
    d.replacement_role = pick->c.role;
    std::erase(standbys, pick->c.node);
    auto img = c.images.find(pick->platform);
    held_on(d, d_.index, img == c.images.end() ? std::vector<object_ref>{} : img->second,
            c.dataset_objects, c.checkpoint);
  } else {
    d.reason = no_replacement_reason(*job, c.ranked, c.segment, c.gang);
  }
  d.new_standbys = top_up(c, *job, members, standbys);
  d.candidates = shown(c.ranked, opts_.max_candidates_shown);
  {
    // The job may have changed while this was weighed: apply the change to what it is now.
    std::lock_guard lk(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !contains(it->second.members, ev.node)) return std::nullopt;
    auto& r = it->second;
    swap_member(r.members, ev.node, d.replacement);
    if (!d.replacement.empty()) std::erase(r.standbys, d.replacement);
    for (const auto& s : d.new_standbys) {
      if (!contains(r.standbys, s) && !contains(r.members, s)) r.standbys.push_back(s);
    }
    d.members = r.members;
    d.standbys = r.standbys;
    r.updated = d.time;
    r.updated_at = d.at;
    r.failover = d;
  }
  std::vector<std::pair<std::string, std::string>> targets;
  const auto lacks = [](const bytes_held& b) { return b.held < b.total; };
  if (!d.replacement.empty() && (lacks(d.image) || lacks(d.datasets) || lacks(d.checkpoint)))
    targets.emplace_back(d.replacement, "primary");
  for (const auto& s : d.new_standbys) targets.emplace_back(s, "standby");
  if (!targets.empty()) d.prewarm = warm(*job, c, targets);
  if (!d.prewarm.empty()) {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(id); it != jobs_.end()) {
      it->second.prewarm = d.prewarm;
      if (it->second.failover && it->second.failover->at == d.at)
        it->second.failover->prewarm = d.prewarm;
    }
  }
  publish(d);
  return d;
}

void job_registry::replace_standby(const std::string& id, const std::string& failed) {
  auto job = get(id);
  if (!job || !contains(job->standbys, failed)) return;
  const auto c = weigh(*job, failed);
  auto standbys = job->standbys;
  std::erase(standbys, failed);
  auto added = top_up(c, *job, job->members, standbys);
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    std::erase(it->second.standbys, failed);
    for (const auto& s : added) {
      if (!contains(it->second.standbys, s) && !contains(it->second.members, s))
        it->second.standbys.push_back(s);
    }
    it->second.updated = utc_now();
    it->second.updated_at = now_();
  }
  std::vector<std::pair<std::string, std::string>> targets;
  for (const auto& s : added) targets.emplace_back(s, "standby");
  std::string pw = targets.empty() ? std::string() : warm(*job, c, targets);
  if (!pw.empty()) {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(id); it != jobs_.end()) it->second.prewarm = pw;
  }
  shared(id);
  log::warn("standby failed and replaced", log::kv("job", id), log::kv("failed", failed),
            log::kv("new_standbys", join(added, ",")), log::kv("prewarm", pw));
}

std::string job_registry::warm(const job_record& job, const context& c,
                               const std::vector<std::pair<std::string, std::string>>& targets) {
  const std::string id = random_id("fo-");
  const auto pin = static_cast<std::uint64_t>(opts_.prewarm_pin.count());
  const auto ck_pin = static_cast<std::uint64_t>(opts_.checkpoint_pin.count());
  std::vector<planned_node> planned;
  std::vector<std::string> nodes;
  for (const auto& [node, role] : targets) {
    nodes.push_back(node);
    const weighed* w = c.find(node);
    const std::string plat = w ? w->platform : job.spec.platform;
    planned_node p{node, role, {}};
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto& img : job.spec.images) pairs.emplace_back(img, plat);
    auto resolved = d_.res.resolve_many(pairs, opts_.resolve_timeout);
    for (std::size_t k = 0; k < resolved.size(); ++k) {
      if (resolved[k]) {
        p.orders.push_back(image_order(id, k, *resolved[k], plat, pin));
      } else {
        log::warn("failover prewarm without an image", log::kv("job", job.id),
                  log::kv("image", pairs[k].first), log::kv("error", resolved[k].error().message));
      }
    }
    for (std::size_t k = 0; k < c.datasets.size(); ++k) {
      p.orders.push_back(
          dataset_order(id, k, c.datasets[k].first, c.datasets[k].second, plat, pin));
    }
    if (!c.checkpoint.empty())
      p.orders.push_back(checkpoint_order(id, c.checkpoint_key, c.checkpoint, plat, ck_pin));
    if (!p.orders.empty()) planned.push_back(std::move(p));
  }
  if (planned.empty()) return "";
  json summary = {{"job", job.id},
                  {"nodes", nodes},
                  {"images", job.spec.images},
                  {"datasets", job.spec.datasets},
                  {"checkpoint", c.checkpoint_key}};
  if (auto s = d_.prewarm.create(id, std::move(planned), std::move(summary)); !s) {
    log::warn("failover prewarm not started", log::kv("job", job.id),
              log::kv("error", s.error().message));
    return "";
  }
  return id;
}

void job_registry::publish(const failover_decision& d) {
  failovers_.inc();
  node_event e;
  e.time = d.time;
  e.node = d.failed_node;
  e.event = "failover";
  e.job = d.job;
  e.replacement = d.replacement;
  if (d.replacement.empty()) {
    no_replacement_.inc();
    e.detail = "job " + d.job + ": no replacement for " + d.failed_node + ": " + d.reason;
    log::warn("failover: no replacement", log::kv("job", d.job), log::kv("failed", d.failed_node),
              log::kv("reason", d.reason));
  } else {
    e.detail = "job " + d.job + ": " + d.failed_node + " replaced by " + d.replacement_role + " " +
               d.replacement + (d.segment.empty() ? "" : " in fabric segment " + d.segment) +
               (d.checkpoint_key.empty() ? "" : "; resume from " + d.checkpoint_key);
    log::warn("failover", log::kv("job", d.job), log::kv("failed", d.failed_node),
              log::kv("replacement", d.replacement), log::kv("role", d.replacement_role),
              log::kv("segment", d.segment), log::kv("checkpoint", d.checkpoint_key),
              log::kv("checkpoint_complete", d.checkpoint_complete),
              log::kv("new_standbys", join(d.new_standbys, ",")));
  }
  d_.failures.add_event(std::move(e));
  shared(d.job);
}

// ---- Checkpoints

void job_registry::on_checkpoint(const std::string& job, const std::string& key,
                                 checkpoint_objects objects) {
  auto ref = checkpoint::parse_ref(key, false);
  if (!ref || ref->job != job || objects.size() > heartbeat::max_order_objects) {
    log::warn("checkpoint not prewarmed: malformed", log::kv("job", job.substr(0, 128)),
              log::kv("checkpoint", key.substr(0, 256)), log::kv("objects", objects.size()));
    return;
  }
  std::vector<std::string> standbys;
  std::string platform;
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(job);
    if (it == jobs_.end()) return;  // a job the scheduler did not place: nothing to keep warm
    it->second.checkpoint = key;
    standbys = it->second.standbys;
    platform = it->second.spec.platform;
  }
  if (standbys.empty()) return;
  std::vector<object_ref> objs;
  objs.reserve(objects.size());
  for (const auto& [id, size] : objects) objs.push_back({id, size});
  objs = dedup(objs);
  const std::string id = random_id("ck-");
  const auto pin = static_cast<std::uint64_t>(opts_.checkpoint_pin.count());
  std::vector<planned_node> planned;
  for (const auto& s : standbys) {
    std::string plat = platform;
    if (plat.empty()) {
      if (auto n = d_.index.node(s)) plat = n->platform;
    }
    planned.push_back({s, "standby", {checkpoint_order(id, key, objs, plat, pin)}});
  }
  json summary = {{"job", job}, {"checkpoint", key}, {"standbys", standbys}};
  if (auto s = d_.prewarm.create(id, std::move(planned), std::move(summary)); !s) {
    log::warn("checkpoint not prewarmed on standbys", log::kv("job", job),
              log::kv("checkpoint", key), log::kv("error", s.error().message));
    return;
  }
  log::info("checkpoint prewarmed on standbys", log::kv("job", job), log::kv("checkpoint", key),
            log::kv("standbys", join(standbys, ",")), log::kv("prewarm", id));
}

checkpoint_listener job_registry::listener() {
  return [this](const std::string& job, const std::string& key, checkpoint_objects objects) {
    on_checkpoint(job, key, std::move(objects));
  };
}

void job_registry::set_latest_checkpoint(latest_checkpoint_fn fn) {
  std::lock_guard lk(mu_);
  latest_ = std::move(fn);
}

}  // namespace shoal::scheduler
