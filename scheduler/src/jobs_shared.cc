// job_registry between scheduler replicas (shared_state.h): a job's record as one JSON document
// for the shared log, and what a replica does with another's.
#include "common/log.h"
#include "common/json_text.h"
#include "scheduler/jobs.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

using ms = std::chrono::milliseconds;

std::int64_t age_ms(std::chrono::steady_clock::time_point now,
                    std::chrono::steady_clock::time_point at) {
  return std::chrono::duration_cast<ms>(now - at).count();
}

json held_of(const bytes_held& b) { return {b.held, b.total}; }

bytes_held held_from(const json& j) {
  bytes_held b;
  if (j.is_array() && j.size() == 2 && j[0].is_number_unsigned() && j[1].is_number_unsigned()) {
    b.held = j[0].get<std::uint64_t>();
    b.total = j[1].get<std::uint64_t>();
  }
  return b;
}

json decision_json(const failover_decision& d, std::chrono::steady_clock::time_point now) {
  json cands = json::array();
  for (const auto& c : d.candidates) {
    cands.push_back({{"node", c.node},
                     {"role", c.role},
                     {"segment", c.segment},
                     {"eligible", c.eligible},
                     {"reasons", c.reasons},
                     {"present", c.bytes_present},
                     {"total", c.bytes_total}});
  }
  return {{"job", d.job},
          {"failed_node", d.failed_node},
          {"failed_cause", d.failed_cause},
          {"failed_detail", d.failed_detail},
          {"time", d.time},
          {"age_ms", age_ms(now, d.at)},
          {"replacement", d.replacement},
          {"replacement_role", d.replacement_role},
          {"reason", d.reason},
          {"segment", d.segment},
          {"members", d.members},
          {"standbys", d.standbys},
          {"new_standbys", d.new_standbys},
          {"prewarm", d.prewarm},
          {"image", held_of(d.image)},
          {"datasets", held_of(d.datasets)},
          {"checkpoint", held_of(d.checkpoint)},
          {"checkpoint_key", d.checkpoint_key},
          {"checkpoint_complete", d.checkpoint_complete},
          {"candidates", std::move(cands)}};
}

// Reads what decision_json wrote (from another replica of the same build: a field of the wrong
// type reads as its default rather than failing the whole record).
template <class T>
T field(const json& j, const char* k, T def = T{}) {
  auto it = j.find(k);
  if (it == j.end()) return def;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return def;
  }
}

failover_decision decision_from(const json& j, std::chrono::steady_clock::time_point now) {
  failover_decision d;
  d.job = field<std::string>(j, "job");
  d.failed_node = field<std::string>(j, "failed_node");
  d.failed_cause = field<std::string>(j, "failed_cause");
  d.failed_detail = field<std::string>(j, "failed_detail");
  d.time = field<std::string>(j, "time");
  d.at = now - ms(field<std::int64_t>(j, "age_ms"));
  d.replacement = field<std::string>(j, "replacement");
  d.replacement_role = field<std::string>(j, "replacement_role");
  d.reason = field<std::string>(j, "reason");
  d.segment = field<std::string>(j, "segment");
  d.members = field<std::vector<std::string>>(j, "members");
  d.standbys = field<std::vector<std::string>>(j, "standbys");
  d.new_standbys = field<std::vector<std::string>>(j, "new_standbys");
  d.prewarm = field<std::string>(j, "prewarm");
  d.image = held_from(j.value("image", json()));
  d.datasets = held_from(j.value("datasets", json()));
  d.checkpoint = held_from(j.value("checkpoint", json()));
  d.checkpoint_key = field<std::string>(j, "checkpoint_key");
  d.checkpoint_complete = field<bool>(j, "checkpoint_complete");
  for (const auto& c : j.value("candidates", json::array())) {
    if (!c.is_object()) continue;
    d.candidates.push_back({field<std::string>(c, "node"), field<std::string>(c, "role"),
                            field<std::string>(c, "segment"), field<bool>(c, "eligible"),
                            field<std::vector<std::string>>(c, "reasons"),
                            field<std::uint64_t>(c, "present"), field<std::uint64_t>(c, "total")});
  }
  return d;
}

}  // namespace

void job_registry::set_sharer(std::function<void(const std::string&)> fn) {
  std::lock_guard lk(mu_);
  sharer_ = std::move(fn);
}

void job_registry::shared(const std::string& id) {
  std::function<void(const std::string&)> fn;
  {
    std::lock_guard lk(mu_);
    fn = sharer_;
  }
  if (fn) fn(id);
}

std::optional<std::string> job_registry::snapshot(const std::string& id) const {
  const auto now = now_();
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  const auto& r = it->second;
  json j = {{"id", r.id},
            {"spec", spec_json(r.spec)},
            {"standby_wanted", r.standby_wanted},
            {"members", r.members},
            {"standbys", r.standbys},
            {"segment", r.segment},
            {"source", r.source},
            {"prewarm", r.prewarm},
            {"checkpoint", r.checkpoint},
            {"created", r.created},
            {"updated", r.updated},
            {"created_age_ms", age_ms(now, r.created_at)},
            {"updated_age_ms", age_ms(now, r.updated_at)},
            {"pod_nodes", r.pod_nodes}};
  if (r.failover) j["failover"] = decision_json(*r.failover, now);
  return json_text(j);
}

status job_registry::put(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(errc::protocol_error, "job: not JSON");
  auto spec = parse_job(j.value("spec", json()));
  if (!spec) return fail(spec.error().wrap("job spec"));
  if (spec->id.empty() || spec->id != field<std::string>(j, "id"))
    return fail(errc::protocol_error, "job: id missing or not the spec's");
  const auto now = now_();
  job_record r;
  r.id = spec->id;
  r.spec = std::move(*spec);
  r.standby_wanted = field<std::uint32_t>(j, "standby_wanted");
  r.members = field<std::vector<std::string>>(j, "members");
  r.standbys = field<std::vector<std::string>>(j, "standbys");
  r.segment = field<std::string>(j, "segment");
  r.source = field<std::string>(j, "source");
  r.prewarm = field<std::string>(j, "prewarm");
  r.checkpoint = field<std::string>(j, "checkpoint");
  r.created = field<std::string>(j, "created");
  r.updated = field<std::string>(j, "updated");
  r.created_at = now - ms(field<std::int64_t>(j, "created_age_ms"));
  r.updated_at = now - ms(field<std::int64_t>(j, "updated_age_ms"));
  r.pod_nodes = field<std::vector<std::string>>(j, "pod_nodes");
  if (auto f = j.find("failover"); f != j.end() && f->is_object())
    r.failover = decision_from(*f, now);
  std::optional<node_event> event;
  {
    std::lock_guard lk(mu_);
    auto [it, fresh] = jobs_.try_emplace(r.id);
    // A decision this replica has not seen yet goes to its event log too (GET /v1/events).
    if (r.failover &&
        (fresh || !it->second.failover || it->second.failover->time != r.failover->time ||
         it->second.failover->failed_node != r.failover->failed_node)) {
      node_event e;
      e.time = r.failover->time;
      e.node = r.failover->failed_node;
      e.event = "failover";
      e.job = r.id;
      e.replacement = r.failover->replacement;
      e.detail = "job " + r.id + ": " + r.failover->failed_node +
                 (r.failover->replacement.empty() ? " not replaced: " + r.failover->reason
                                                  : " replaced by " + r.failover->replacement);
      event = std::move(e);
    }
    it->second = std::move(r);
    account_locked(it->second);
    evict_locked();
  }
  if (event) d_.failures.add_event(std::move(*event));
  return {};
}

void job_registry::erase(const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  bytes_ -= it->second.bytes;
  jobs_.erase(it);
}

}  // namespace shoal::scheduler
