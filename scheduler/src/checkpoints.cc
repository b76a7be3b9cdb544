#include "scheduler/checkpoints.h"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "common/bencode.h"
#include "common/log.h"
#include "common/text.h"
#include "scheduler/index.h"

namespace shoal::scheduler {

namespace {

std::int64_t system_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The v1 info-hash of a .torrent (SHA-1 of its info dictionary as sent), 40 lower-case hex.
result<std::string> info_hash_of(std::string_view torrent) {
  bencode::limits lim;
  lim.max_string = checkpoint::max_torrent_bytes;
  auto v = bencode::decode(torrent, lim);
  if (!v) return fail(v.error().wrap("torrent"));
  const bencode::value* info = v->find("info");
  if (info == nullptr || !info->is_dict() || info->raw.empty())
    return fail(errc::protocol_error, "torrent has no info dictionary");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(info->raw.data(), info->raw.size(), md, &len, EVP_sha1(), nullptr) != 1 ||
      len != 20)
    return fail(errc::internal, "SHA-1 of a torrent's info dictionary failed");
  return to_hex(std::span<const std::uint8_t>(md, len));
}

// Why `reg` cannot be stored as it is, beyond what decode_registration checks (the manifest is
// canonical there): a torrent that is not one, or whose info-hash is not the one it claims (a
// grant would name another swarm).
status check_torrents(const checkpoint::decoded_registration& reg, const std::string& key) {
  for (std::size_t g = 0; g < reg.reg.groups.size(); ++g) {
    const auto& t = reg.reg.groups[g];
    auto ih = info_hash_of(t.torrent);
    if (!ih)
      return fail(errc::invalid_argument,
                  "checkpoint " + key + " group " + std::to_string(g) + ": " + ih.error().message);
    if (*ih != t.info_hash)
      return fail(errc::invalid_argument, "checkpoint " + key + " group " + std::to_string(g) +
                                              ": the torrent's info-hash is " + *ih + ", not the " +
                                              t.info_hash + " it claims");
  }
  return {};
}

std::string size_text(std::uint64_t b) { return std::to_string(b) + " bytes"; }

error conflict(const std::string& key, const digest& published, const digest& offered) {
  return error(errc::already_exists, "checkpoint " + key + " is already published with manifest " +
                                         published.str() + ", not " + offered.str() +
                                         " (files changed under the same step?)");
}

}  // namespace

checkpoint_catalog::checkpoint_catalog(checkpoint_catalog_options o, clock_ms now)
    : opts_(o), now_(now ? std::move(now) : clock_ms(system_now_ms)) {}

result<checkpoint_catalog::registered> checkpoint_catalog::register_checkpoint(
    checkpoint::decoded_registration reg, std::string_view caller, bool notify_listeners) {
  const auto& m = reg.manifest;
  auto rec_key = checkpoint::key(m.name, checkpoint::step_of(m));
  std::string writer = checkpoint::writer_of(m);
  if (caller != writer)
    return fail(errc::unauthorized, "checkpoint " + rec_key + " names writer " +
                                        quote_excerpt(writer) +
                                        "; only that node may register it (the caller is " +
                                        quote_excerpt(caller) + ")");
  auto e = std::make_shared<entry>();
  e->cost = reg.reg.manifest.size();
  for (const auto& g : reg.reg.groups) e->cost += g.torrent.size();
  if (e->cost > opts_.max_bytes)
    return fail(errc::too_large, "checkpoint " + rec_key + " takes " + size_text(e->cost) +
                                     " (manifest and torrents), more than checkpoints.max_bytes (" +
                                     size_text(opts_.max_bytes) + ")");
  {
    // A repeat or a conflict is answered before any work on the torrents.
    std::lock_guard lk(mu_);
    if (auto old = find_locked(rec_key)) {
      if (old->rec.manifest == reg.manifest_digest) return registered{old->rec, outcome::repeat};
      return fail(conflict(rec_key, old->rec.manifest, reg.manifest_digest));
    }
  }
  if (auto s = check_torrents(reg, rec_key); !s) return fail(s.error());

  auto& r = e->rec;
  r.job = m.name;
  r.step = checkpoint::step_of(m);
  r.manifest = reg.manifest_digest;
  e->objects = dataset::manifest_objects(m);
  for (const auto& o : e->objects) r.bytes += o.second;
  r.files = m.files.size();
  r.groups = static_cast<std::uint32_t>(m.groups.size());
  r.writer = writer;
  r.published_ms = now_();
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    auto& t = reg.reg.groups[g];
    e->groups.push_back({std::move(t.info_hash), std::move(t.torrent),
                         m.groups[g].type == dataset::group::kind::pack ? "pack" : "object",
                         m.groups[g].bytes});
  }
  e->manifest = std::make_shared<const std::string>(std::move(reg.reg.manifest));

  std::vector<std::string> evicted;
  std::vector<listener> notify;
  checkpoint::record out;
  {
    std::lock_guard lk(mu_);
    // Another registration of the same step may have won while the torrents were checked.
    if (auto old = find_locked(rec_key)) {
      if (old->rec.manifest == r.manifest) return registered{old->rec, outcome::repeat};
      return fail(conflict(rec_key, old->rec.manifest, r.manifest));
    }
    e->seq = next_seq_++;
    order_[e->seq] = {r.job, r.step};
    jobs_[r.job][r.step] = e;
    ++stats_.records;
    stats_.bytes += e->cost;
    evicted = evict_locked(r.job, e->seq);
    if (notify_listeners) notify = listeners_;
    out = r;
  }
  for (const auto& k : evicted)
    log::info("checkpoint record dropped (checkpoints.max_per_job or max_bytes)",
              log::kv("checkpoint", k), log::kv("for", rec_key));
  log::info("checkpoint registered", log::kv("checkpoint", rec_key),
            log::kv("manifest", out.manifest.str()), log::kv("writer", out.writer),
            log::kv("bytes", out.bytes), log::kv("groups", out.groups));
  for (const auto& l : notify) l(out.job, rec_key);
  return registered{std::move(out), outcome::created};
}

std::vector<std::string> checkpoint_catalog::evict_locked(const std::string& job,
                                                          std::uint64_t keep_seq) {
  std::vector<std::string> gone;
  // The job's own bound first: its earliest registered records.
  for (auto it = jobs_.find(job); it != jobs_.end() && it->second.size() > opts_.max_per_job;
       it = jobs_.find(job)) {
    const entry_ptr* oldest = nullptr;
    for (const auto& [step, e] : it->second) {
      if (e->seq != keep_seq && (oldest == nullptr || e->seq < (*oldest)->seq)) oldest = &e;
    }
    if (oldest == nullptr) break;
    gone.push_back((*oldest)->rec.key());
    erase_locked(job, (*oldest)->rec.step);
  }
  // Then the byte budget: the earliest registered records of any job.
  for (auto it = order_.begin(); stats_.bytes > opts_.max_bytes && it != order_.end();) {
    if (it->first == keep_seq) {
      ++it;
      continue;
    }
    auto [j, step] = it->second;
    ++it;  // erase_locked removes the current element
    gone.push_back(checkpoint::key(j, step));
    erase_locked(j, step);
  }
  return gone;
}

void checkpoint_catalog::erase_locked(const std::string& job, std::uint64_t step) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;
  auto s = j->second.find(step);
  if (s == j->second.end()) return;
  order_.erase(s->second->seq);
  stats_.bytes -= s->second->cost;
  --stats_.records;
  j->second.erase(s);
  if (j->second.empty()) jobs_.erase(j);
}

checkpoint_catalog::entry_ptr checkpoint_catalog::find_locked(std::string_view key) const {
  auto r = checkpoint::parse_ref(key, false);
  if (!r) return nullptr;
  auto j = jobs_.find(r->job);
  if (j == jobs_.end()) return nullptr;
  auto s = j->second.find(*r->step);
  return s == j->second.end() ? nullptr : s->second;
}

result<checkpoint::record> checkpoint_catalog::record(const checkpoint::ref& r) const {
  std::lock_guard lk(mu_);
  auto j = jobs_.find(r.job);
  if (j == jobs_.end() || j->second.empty())
    return fail(errc::not_found, "no checkpoint of job " + quote_excerpt(r.job) + " is registered");
  if (!r.step) return j->second.rbegin()->second->rec;
  auto s = j->second.find(*r.step);
  if (s == j->second.end())
    return fail(errc::not_found, "checkpoint " + r.str() + " is not registered (job " + r.job +
                                     " has " + std::to_string(j->second.size()) +
                                     " steps, the latest " +
                                     std::to_string(j->second.rbegin()->first) + ")");
  return s->second->rec;
}

std::optional<checkpoint::record> checkpoint_catalog::latest(std::string_view job) const {
  auto r = record(checkpoint::ref{std::string(job), std::nullopt});
  if (!r) return std::nullopt;
  return std::move(*r);
}

std::vector<checkpoint::record> checkpoint_catalog::list(std::string_view job) const {
  std::vector<checkpoint::record> out;
  std::lock_guard lk(mu_);
  auto add = [&](const std::map<std::uint64_t, entry_ptr>& steps) {
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) out.push_back(it->second->rec);
  };
  if (!job.empty()) {
    if (auto j = jobs_.find(job); j != jobs_.end()) add(j->second);
    return out;
  }
  for (const auto& [name, steps] : jobs_) add(steps);
  return out;
}

result<std::shared_ptr<const std::string>> checkpoint_catalog::manifest(
    std::string_view key) const {
  std::lock_guard lk(mu_);
  auto e = find_locked(key);
  if (!e) return fail(errc::not_found, "checkpoint " + quote_excerpt(key) + " is not registered");
  return e->manifest;
}

result<checkpoint_group> checkpoint_catalog::group(std::string_view key, std::uint32_t g) const {
  entry_ptr e;
  {
    std::lock_guard lk(mu_);
    e = find_locked(key);
  }
  if (!e) return fail(errc::not_found, "checkpoint " + quote_excerpt(key) + " is not registered");
  if (g >= e->groups.size())
    return fail(errc::not_found, "checkpoint " + std::string(key) + " has " +
                                     std::to_string(e->groups.size()) + " groups, no group " +
                                     std::to_string(g));
  return e->groups[g];
}

result<object_sizes> checkpoint_catalog::objects(std::string_view key) const {
  entry_ptr e;
  {
    std::lock_guard lk(mu_);
    e = find_locked(key);
  }
  if (!e) return fail(errc::not_found, "checkpoint " + quote_excerpt(key) + " is not registered");
  return e->objects;
}

bool checkpoint_catalog::remove(std::string_view key) {
  std::lock_guard lk(mu_);
  auto e = find_locked(key);
  if (!e) return false;
  erase_locked(e->rec.job, e->rec.step);
  return true;
}

void checkpoint_catalog::on_registered(listener l) {
  std::lock_guard lk(mu_);
  listeners_.push_back(std::move(l));
}

checkpoint_catalog::stats_t checkpoint_catalog::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

std::vector<checkpoint::holder> holders_of(
    const cluster_index& index, std::span<const std::pair<digest, std::uint64_t>> objects) {
  std::vector<digest> ids;
  ids.reserve(objects.size());
  for (const auto& o : objects) ids.push_back(o.first);
  auto view = index.view(ids);
  std::vector<std::uint64_t> bytes(view.nodes.size(), 0);
  for (const auto& [d, size] : objects) {
    auto it = view.objects.find(d);
    if (it == view.objects.end()) continue;
    for (auto n : it->second.holders) {
      if (n < bytes.size()) bytes[n] += size;
    }
  }
  std::vector<checkpoint::holder> out;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    if (bytes[n] != 0) out.push_back({view.nodes[n].name, bytes[n]});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.node < b.node;
  });
  return out;
}

checkpoint_grant_fn checkpoint_grants(std::shared_ptr<grant::signer> signer,
                                      std::chrono::seconds ttl) {
  return [signer = std::move(signer), ttl](const tls::peer_identity& caller,
                                           const std::string& info_hash) -> std::string {
    if (!signer || !caller.is(tls::peer_role::node)) return {};
    auto ih = grant::parse_info_hash(info_hash);
    if (!ih) return {};
    auto g = signer->sign(grant::claims{*ih, caller.name, std::chrono::system_clock::now() + ttl});
    if (!g) {
      log::error("checkpoint grant not signed", log::kv("node", caller.name),
                 log::kv("swarm", info_hash), log::kv("error", g.error().message));
      return {};
    }
    return std::move(*g);
  };
}

namespace {

metrics::counter_family& registrations(metrics::registry& reg) {
  return reg.counter("shoal_scheduler_checkpoint_registrations_total",
                     "Checkpoint registrations (POST /v1/checkpoints) by result: created, repeat "
                     "(the same manifest again), conflict (another manifest for a published "
                     "step), refused (malformed, not the writer, too large).",
                     {"result"});
}

}  // namespace

void register_checkpoint_metrics(metrics::registry& reg, const checkpoint_catalog& c) {
  reg.gauge_fn("shoal_scheduler_checkpoints", "Checkpoint records held by the catalog.",
               [&c] { return static_cast<double>(c.stats().records); });
  reg.gauge_fn("shoal_scheduler_checkpoint_bytes",
               "Bytes of checkpoint manifests and torrents held (checkpoints.max_bytes bounds it).",
               [&c] { return static_cast<double>(c.stats().bytes); });
  auto& f = registrations(reg);
  for (const char* r : {"created", "repeat", "conflict", "refused"}) f.with({r}).inc(0);
}

void count_checkpoint_registration(metrics::registry& reg, std::string_view result) {
  registrations(reg).with({std::string(result)}).inc();
}

}  // namespace shoal::scheduler
