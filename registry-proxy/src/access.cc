#include "registry-proxy/access.h"

#include "common/log.h"
#include "common/oci.h"

namespace shoal::proxy {

access_verdict access_checker::check(const selection& sel, const digest& d,
                                     const std::string& object_path, const credential& cred) {
  auto vis = st_.get_visibility(d);
  if (vis && vis->is_public) return {true, 0, {}};
  const std::string repo_key = sel.up->cfg.name + "/" + sel.repo;
  if (cred.anonymous()) return check_anonymous(sel, d, object_path, cred, vis, repo_key);
  const std::string key = cred.hash + "|" + repo_key + "|" + d.hex();
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(mu_);
    auto* until = positive_.find(key);
    if (until && *until > now) {
      ++counters_.cached_allow;
      return {true, 0, {}};
    }
  }
  // A manifest HEAD must list the manifest media types: registries answer 404 for an OCI
  // manifest or index the client does not say it accepts, which would deny everyone.
  const bool manifest = object_path.find("/manifests/") != std::string::npos;
  const std::string accept = manifest ? std::string(oci::media::accept_all) : std::string("*/*");
  auto resp = uc_.call(*sel.up, sel.repo, &cred, "HEAD", object_path, {{"Accept", accept}}, 0);
  if (!resp) {
    unsigned s = gateway_status(resp.error());
    if (s == 429) {
      std::lock_guard lk(mu_);
      ++counters_.denied;
      return {false, 429, "credential check refused: " + resp.error().message, "1"};
    }
    log::warn("access check failed", log::kv("repo", repo_key),
              log::kv("error", resp.error().message));
    return {false, s, "upstream access check failed: " + resp.error().message};
  }
  if (resp->status == 200) {
    std::lock_guard lk(mu_);
    positive_.put(key, now + ttl_);
    ++counters_.upstream_allow;
    (void)st_.add_visibility(d, false, repo_key);
    return {true, 0, {}};
  }
  std::lock_guard lk(mu_);
  ++counters_.denied;
  unsigned s = resp->status == 401 || resp->status == 403 || resp->status == 404
                   ? static_cast<unsigned>(resp->status)
                   : 502u;
  return {false, s,
          "upstream refused this credential for " + repo_key + " (HTTP " +
              std::to_string(resp->status) + ")"};
}

access_verdict access_checker::check_anonymous(const selection& sel, const digest& d,
                                               const std::string& object_path,
                                               const credential& cred,
                                               const std::optional<visibility>& vis,
                                               const std::string& repo_key) {
  auto refuse = [&] {
    std::lock_guard lk(mu_);
    ++counters_.denied;
    return access_verdict{false, 401, "authentication required"};
  };
  // Asked in a repository it was fetched from with a client's credential, or not known at all:
  // refused without asking upstream, as before.
  if (!vis || object_path.find("/blobs/") == std::string::npos) return refuse();
  for (const auto& r : vis->repos) {
    if (r == repo_key) return refuse();
  }
  // Held as private content of other repositories, asked anonymously in this one (a base layer
  // shared by a private image and a public one): upstream says whether this repository serves
  // it anonymously. Once per repository and object for a while (either answer is kept), and
  // through the credential gate under one key for every anonymous client (credential_gate.h),
  // so anonymous requests naming made-up repositories cost upstream little.
  const std::string key = "anon|" + repo_key + "|" + d.hex();
  const auto now = std::chrono::steady_clock::now();
  bool refused_lately;
  {
    std::lock_guard lk(mu_);
    auto* until = anonymous_refused_.find(key);
    refused_lately = until && *until > now;
  }
  if (refused_lately) return refuse();
  auto pass = uc_.gate().admit(cred.peer, "anonymous");
  if (!pass) {
    std::lock_guard lk(mu_);
    ++counters_.denied;
    return {false, 429, "anonymous access check refused: " + pass.error().message, "1"};
  }
  auto resp = uc_.call(*sel.up, sel.repo, nullptr, "HEAD", object_path, {{"Accept", "*/*"}}, 0);
  if (!resp) {
    log::warn("anonymous access check failed", log::kv("repo", repo_key),
              log::kv("error", resp.error().message));
    return {false, gateway_status(resp.error()),
            "upstream access check failed: " + resp.error().message};
  }
  if (resp->status == 200) {
    (void)st_.add_visibility(d, true, {});
    std::lock_guard lk(mu_);
    ++counters_.upstream_allow;
    return {true, 0, {}};
  }
  {
    std::lock_guard lk(mu_);
    anonymous_refused_.put(key, now + ttl_);
  }
  return refuse();
}

access_checker::counters access_checker::get_counters() const {
  std::lock_guard lk(mu_);
  return counters_;
}

}  // namespace shoal::proxy
