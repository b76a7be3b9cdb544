#include "registry-proxy/access.h"

#include "common/log.h"
#include "common/oci.h"

namespace shoal::proxy {

access_verdict access_checker::check(const selection& sel, const digest& d,
                                     const std::string& object_path, const credential& cred) {
  auto vis = st_.get_visibility(d);
  if (vis && vis->is_public) return {true, 0, {}};
  if (cred.anonymous()) {
    std::lock_guard lk(mu_);
    ++counters_.denied;
    return {false, 401, "authentication required"};
  }
  const std::string repo_key = sel.up->cfg.name + "/" + sel.repo;
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

access_checker::counters access_checker::get_counters() const {
  std::lock_guard lk(mu_);
  return counters_;
}

}  // namespace shoal::proxy
