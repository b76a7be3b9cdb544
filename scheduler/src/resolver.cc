#include "scheduler/resolver.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "common/heartbeat.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/sha256.h"
#include "common/text.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

result<object_ref> parse_descriptor(const json& d, const std::string& where) {
  if (!d.is_object()) return fail(errc::protocol_error, where + " is not an object");
  auto dg = d.find("digest");
  if (dg == d.end() || !dg->is_string())
    return fail(errc::protocol_error, where + " has no digest");
  auto parsed = digest::parse(dg->get_ref<const std::string&>());
  if (!parsed) return fail(parsed.error().wrap(where + ".digest"));
  auto sz = d.find("size");
  if (sz == d.end() || !sz->is_number_unsigned() ||
      sz->get<std::uint64_t>() > heartbeat::max_object_size) {
    return fail(errc::protocol_error, where + " has no valid size");
  }
  return object_ref{*parsed, sz->get<std::uint64_t>()};
}

}  // namespace

std::uint64_t resolved_image::bytes() const {
  std::uint64_t s = 0;
  for (const auto& o : objects) s += o.size;
  return s;
}

registry_proxy_source::registry_proxy_source(http::client& c, registry_proxy_options o)
    : client_(c), opts_(std::move(o)) {
  while (!opts_.base_url.empty() && opts_.base_url.back() == '/') opts_.base_url.pop_back();
}

result<manifest_source::manifest> registry_proxy_source::get(const std::string& registry,
                                                             const std::string& repository,
                                                             const std::string& reference) {
  http::client_request r;
  r.url = opts_.base_url + "/v2/" + repository + "/manifests/" + reference +
          "?ns=" + url_escape(registry);
  r.headers.emplace_back("Accept", std::string(oci::media::accept_all));
  r.timeouts.connect = opts_.connect_timeout;
  r.timeouts.stall = opts_.request_timeout;
  r.timeouts.total = opts_.request_timeout * 2;
  r.max_retries = 1;
  auto f = http::fetch(client_, std::move(r), 8u << 20);
  std::string what = registry + "/" + repository + ":" + reference;
  if (!f) return fail(f.error().wrap("manifest " + what + " from registry-proxy"));
  if (f->status == 404) return fail(errc::not_found, "manifest " + what + " not found");
  if (f->status == 401 || f->status == 403) {
    return fail(errc::unauthorized,
                "manifest " + what + ": registry-proxy answered " + std::to_string(f->status));
  }
  if (f->status != 200) {
    return fail(errc::upstream_error,
                "manifest " + what + ": registry-proxy answered HTTP " + std::to_string(f->status));
  }
  return manifest{std::string(f->header("Content-Type").value_or("")), std::move(f->body)};
}

result<manifest_content> parse_manifest(std::string_view body) {
  if (heartbeat::json_too_deep(body, 32))
    return fail(errc::protocol_error, "manifest nests too deep");
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::protocol_error, "manifest is not a JSON object");
  auto sv = j.find("schemaVersion");
  if (sv == j.end() || !sv->is_number_integer() || sv->get<std::int64_t>() != 2) {
    return fail(errc::protocol_error,
                "manifest schemaVersion is not 2 (Docker schema 1 is not supported)");
  }
  manifest_content out;
  if (auto ms = j.find("manifests"); ms != j.end()) {
    if (!ms->is_array()) return fail(errc::protocol_error, "index manifests is not a list");
    out.is_index = true;
    std::size_t i = 0;
    for (const auto& m : *ms) {
      std::string where = "manifests[" + std::to_string(i++) + "]";
      auto d = parse_descriptor(m, where);
      if (!d) return fail(d.error());
      auto p = m.find("platform");
      if (p == m.end() || !p->is_object()) continue;  // attestations and artifacts
      std::string os = json_string(*p, "os"), arch = json_string(*p, "architecture"),
                  variant = json_string(*p, "variant");
      if (os.empty() || arch.empty() || os == "unknown") continue;
      out.platforms.emplace_back(d->id, os + "/" + arch + (variant.empty() ? "" : "/" + variant));
    }
    return out;
  }
  auto cfg = j.find("config");
  if (cfg == j.end())
    return fail(errc::protocol_error, "manifest has neither config nor manifests");
  auto c = parse_descriptor(*cfg, "config");
  if (!c) return fail(c.error());
  out.objects.push_back(*c);
  if (auto ls = j.find("layers"); ls != j.end()) {
    if (!ls->is_array()) return fail(errc::protocol_error, "manifest layers is not a list");
    std::size_t i = 0;
    for (const auto& l : *ls) {
      auto d = parse_descriptor(l, "layers[" + std::to_string(i++) + "]");
      if (!d) return fail(d.error());
      out.objects.push_back(*d);
    }
  }
  return out;
}

bool platform_matches(std::string_view want, std::string_view have) {
  auto split = [](std::string_view s) {
    std::array<std::string_view, 3> p{};
    for (int i = 0; i < 3; ++i) {
      auto slash = s.find('/');
      p[static_cast<std::size_t>(i)] = s.substr(0, slash);
      if (slash == std::string_view::npos) break;
      s.remove_prefix(slash + 1);
    }
    return p;
  };
  auto w = split(want), h = split(have);
  if (w[0] != h[0] || w[1] != h[1]) return false;
  return w[2].empty() || h[2].empty() || w[2] == h[2];
}

resolver::resolver(manifest_source& src, resolver_options o, std::function<clock::time_point()> now)
    : src_(src),
      opts_(o),
      now_(std::move(now)),
      pool_(static_cast<std::size_t>(std::max(1, o.threads)), "resolver") {}

resolver::~resolver() {
  pool_.stop();
  pool_.join();
}

resolver_stats resolver::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void resolver::cache_parsed(const digest& d, std::shared_ptr<const parsed> p) {
  std::lock_guard lk(mu_);
  auto it = manifests_.find(d);
  if (it != manifests_.end()) {
    lru_.erase(it->second.second);
    manifests_.erase(it);
  }
  lru_.push_front(d);
  manifests_.emplace(d, std::make_pair(std::move(p), lru_.begin()));
  while (manifests_.size() > opts_.max_manifests && !lru_.empty()) {
    manifests_.erase(lru_.back());
    lru_.pop_back();
  }
}

result<std::shared_ptr<const resolver::parsed>> resolver::fetch_and_parse(
    const std::string& registry, const std::string& repository, const std::string& reference,
    const std::optional<digest>& expect, digest& actual) {
  auto m = src_.get(registry, repository, reference);
  if (!m) return fail(m.error());
  actual = sha256_of(m->body);
  if (expect && actual != *expect) {
    return fail(errc::digest_mismatch, "manifest " + reference + " hashes to " + actual.str());
  }
  auto c = parse_manifest(m->body);
  if (!c)
    return fail(c.error().wrap("manifest " + registry + "/" + repository + "@" + actual.str()));
  auto p = std::make_shared<parsed>();
  p->is_index = c->is_index;
  for (const auto& [d, plat] : c->platforms) {
    parsed::entry e;
    e.d = d;
    auto s1 = plat.find('/');
    auto s2 = plat.find('/', s1 + 1);
    e.os = plat.substr(0, s1);
    e.arch = plat.substr(s1 + 1, s2 == std::string::npos ? std::string::npos : s2 - s1 - 1);
    if (s2 != std::string::npos) e.variant = plat.substr(s2 + 1);
    p->entries.push_back(std::move(e));
  }
  p->objects = std::move(c->objects);
  std::shared_ptr<const parsed> cp = p;
  cache_parsed(actual, cp);
  return cp;
}

result<std::shared_ptr<const resolver::parsed>> resolver::by_digest(const std::string& registry,
                                                                    const std::string& repository,
                                                                    const digest& d) {
  {
    std::lock_guard lk(mu_);
    auto it = manifests_.find(d);
    if (it != manifests_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      ++stats_.hits;
      return it->second.first;
    }
  }
  digest actual;
  auto p = fetch_and_parse(registry, repository, d.str(), d, actual);
  std::lock_guard lk(mu_);
  ++(p ? stats_.fetches : stats_.errors);
  return p;
}

std::string resolver::parsed::entry::platform() const {
  return os + "/" + arch + (variant.empty() ? "" : "/" + variant);
}

const resolver::parsed::entry* resolver::parsed::entry_for(const std::string& platform) const {
  for (const auto& e : entries) {
    if (platform_matches(platform, e.platform())) return &e;
  }
  return nullptr;
}

std::string resolver::tag_key(const std::string& registry, const std::string& repository,
                              const std::string& tag) {
  return registry + "/" + repository + ":" + tag;
}

result<digest> resolver::by_tag(const std::string& registry, const std::string& repository,
                                const std::string& tag) {
  std::string key = tag_key(registry, repository, tag);
  auto now = now_();
  std::optional<digest> stale;
  {
    std::lock_guard lk(mu_);
    auto it = tags_.find(key);
    if (it != tags_.end()) {
      if (now - it->second.fetched < opts_.tag_ttl && manifests_.count(it->second.d)) {
        ++stats_.hits;
        return it->second.d;
      }
      stale = it->second.d;
    }
  }
  digest actual;
  auto p = fetch_and_parse(registry, repository, tag, std::nullopt, actual);
  std::lock_guard lk(mu_);
  if (!p) {
    ++stats_.errors;
    if (stale && !p.error().is(errc::not_found)) {
      ++stats_.stale;
      log::warn("using a stale tag resolution", log::kv("ref", key),
                log::kv("error", p.error().message));
      return *stale;
    }
    return fail(p.error());
  }
  ++stats_.fetches;
  tags_[key] = {actual, now};
  // Tags are bounded by the manifests they point to.
  if (tags_.size() > opts_.max_manifests * 2) tags_.erase(tags_.begin());
  return actual;
}

result<resolved_image> resolver::resolve(const std::string& ref_text, const std::string& platform) {
  auto ref = oci::parse_image_ref(ref_text);
  if (!ref) return fail(ref.error());
  std::string key = ref->str() + "|" + platform;
  std::shared_ptr<std::promise<result<resolved_image>>> mine;
  std::shared_future<result<resolved_image>> theirs;
  {
    std::lock_guard lk(mu_);
    auto it = inflight_.find(key);
    if (it != inflight_.end()) {
      theirs = it->second;
    } else {
      mine = std::make_shared<std::promise<result<resolved_image>>>();
      inflight_.emplace(key, mine->get_future().share());
    }
  }
  if (!mine) return theirs.get();

  auto work = [&]() -> result<resolved_image> {
    resolved_image out;
    out.ref = ref->str();
    out.registry = ref->registry;
    out.repository = ref->repository;
    out.platform = platform;
    digest top;
    if (ref->dig) {
      top = *ref->dig;
    } else {
      auto t = by_tag(ref->registry, ref->repository, ref->tag);
      if (!t) return fail(t.error());
      top = *t;
    }
    auto p = by_digest(ref->registry, ref->repository, top);
    if (!p) return fail(p.error());
    if ((*p)->is_index) {
      out.index = top;
      const parsed::entry* chosen = (*p)->entry_for(platform);
      if (!chosen) {
        std::string have;
        for (const auto& e : (*p)->entries) have += (have.empty() ? "" : ", ") + e.platform();
        return fail(errc::not_found,
                    out.ref + " has no image for " + platform + " (index has: " + have + ")");
      }
      auto child = by_digest(ref->registry, ref->repository, chosen->d);
      if (!child) return fail(child.error());
      if ((*child)->is_index)
        return fail(errc::protocol_error, out.ref + ": an index inside an index");
      out.manifest = chosen->d;
      out.objects = (*child)->objects;
    } else {
      out.manifest = top;
      out.objects = (*p)->objects;
    }
    return out;
  };
  auto r = work();
  mine->set_value(r);
  std::lock_guard lk(mu_);
  inflight_.erase(key);
  return r;
}

std::optional<resolved_image> resolver::cached(const std::string& ref_text,
                                               const std::string& platform) {
  auto ref = oci::parse_image_ref(ref_text);
  if (!ref) return std::nullopt;
  resolved_image out;
  out.ref = ref->str();
  out.registry = ref->registry;
  out.repository = ref->repository;
  out.platform = platform;
  auto now = now_();
  std::lock_guard lk(mu_);
  std::uint64_t hits = 0;
  digest top;
  if (ref->dig) {
    top = *ref->dig;
  } else {
    auto it = tags_.find(tag_key(ref->registry, ref->repository, ref->tag));
    if (it == tags_.end() || now - it->second.fetched >= opts_.tag_ttl) return std::nullopt;
    top = it->second.d;
    ++hits;
  }
  auto found = [&](const digest& d) -> const parsed* {
    auto it = manifests_.find(d);
    if (it == manifests_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.second);
    ++hits;
    return it->second.first.get();
  };
  const parsed* p = found(top);
  if (!p) return std::nullopt;
  if (p->is_index) {
    const parsed::entry* chosen = p->entry_for(platform);
    if (!chosen) return std::nullopt;  // the full path words the error
    const parsed* child = found(chosen->d);
    if (!child || child->is_index) return std::nullopt;
    out.index = top;
    out.manifest = chosen->d;
    out.objects = child->objects;
  } else {
    out.manifest = top;
    out.objects = p->objects;
  }
  stats_.hits += hits;
  return out;
}

std::vector<result<resolved_image>> resolver::resolve_many(
    const std::vector<std::pair<std::string, std::string>>& ref_platforms,
    std::chrono::milliseconds wait) {
  // What the caches answer is answered here: a decision whose images are all known does not wait
  // for a pool thread (two hand-offs per image, and on a busy machine a wait for a core that
  // made the extender's p99). Only the rest goes to the pool, in parallel.
  std::vector<std::optional<resolved_image>> hit(ref_platforms.size());
  std::vector<std::shared_future<result<resolved_image>>> futs(ref_platforms.size());
  for (std::size_t i = 0; i < ref_platforms.size(); ++i) {
    const auto& [ref, platform] = ref_platforms[i];
    hit[i] = cached(ref, platform);
    if (hit[i]) continue;
    auto p = std::make_shared<std::promise<result<resolved_image>>>();
    futs[i] = p->get_future().share();
    boost::asio::post(
        pool_, [this, p, ref = ref, platform = platform] { p->set_value(resolve(ref, platform)); });
  }
  auto deadline = clock::now() + wait;
  std::vector<result<resolved_image>> out;
  out.reserve(futs.size());
  for (std::size_t i = 0; i < futs.size(); ++i) {
    if (hit[i]) {
      out.push_back(std::move(*hit[i]));
      continue;
    }
    if (futs[i].wait_until(deadline) != std::future_status::ready) {
      out.push_back(fail(errc::timeout, "resolving " + ref_platforms[i].first +
                                            " takes longer than " + std::to_string(wait.count()) +
                                            "ms (still running)"));
      continue;
    }
    try {
      out.push_back(futs[i].get());
    } catch (const std::future_error&) {
      out.push_back(fail(errc::cancelled, "resolver stopped"));
    }
  }
  return out;
}

result<std::vector<object_ref>> no_datasets::lookup(const std::string& name_at_version) {
  return fail(errc::not_found,
              "unknown dataset " + name_at_version + " (this catalog holds no datasets)");
}

bool valid_dataset_ref(std::string_view s) {
  auto at = s.rfind('@');
  if (at == std::string_view::npos || at == 0 || at > 200 || s.size() - at - 1 > 128 ||
      at + 1 == s.size()) {
    return false;
  }
  for (char c : s.substr(0, at)) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
          c == '/')) {
      return false;
    }
  }
  for (char c : s.substr(at + 1)) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return false;
  }
  return true;
}

}  // namespace shoal::scheduler
