#include "peerd/blob_access.h"

#include "common/credential_hash.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/text.h"
#include "proxy_link.h"

namespace shoal::peerd {

namespace {

using steady = std::chrono::steady_clock;

// What a refused client is told to authenticate with when registry-proxy's answer named nothing.
constexpr std::string_view fallback_challenge = R"(Basic realm="shoal")";

}  // namespace

template <class V>
V* blob_access::lru<V>::find(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);
  return &it->second->second;
}

template <class V>
void blob_access::lru<V>::put(const std::string& key, V value) {
  if (V* v = find(key)) {
    *v = std::move(value);
    return;
  }
  order_.emplace_front(key, std::move(value));
  index_[key] = order_.begin();
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

template <class V>
void blob_access::lru<V>::erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  order_.erase(it->second);
  index_.erase(it);
}

blob_access::blob_access(deps d)
    : d_(d),
      salt_(random_salt()),
      ttl_(std::chrono::duration_cast<steady::duration>(d.cfg.access.positive_ttl.get())),
      confirmed_(static_cast<std::size_t>(d.cfg.access.cache_entries)),
      public_(static_cast<std::size_t>(d.cfg.access.public_entries)) {
  auto& checks = d_.metrics.counter(
      "shoal_peerd_access_checks_total",
      "Clients confirmed with registry-proxy before a blob held here was served to them.",
      {"result"});
  allowed_ = &checks.with({"allowed"});
  refused_ = &checks.with({"refused"});
  failed_ = &checks.with({"failed"});
  auto& known = d_.metrics.counter("shoal_peerd_access_known_total",
                                   "Clients served a blob held here without asking registry-proxy "
                                   "(public, or confirmed lately).",
                                   {"reason"});
  known_public_ = &known.with({"public"});
  known_confirmed_ = &known.with({"confirmed"});
}

std::string blob_access::key_of(const origin::object_ref& where, const digest& d,
                                const std::string& authorization) const {
  // Separators that neither a registry host, a repository name nor a hex digest contains.
  return salted_credential_hash(salt_, authorization) + "|" + where.ns + "|" + where.repo + "|" +
         d.hex();
}

void blob_access::note_public(const digest& d) {
  std::lock_guard lk(mu_);
  public_.put(d.hex(), true);
}

void blob_access::note_confirmed(const origin::object_ref& where, const digest& d,
                                 const std::string& authorization) {
  auto key = key_of(where, d, authorization);
  std::lock_guard lk(mu_);
  confirmed_.put(key, steady::now() + ttl_);
}

bool blob_access::known_allowed(const origin::object_ref& where, const digest& d,
                                const std::string& authorization) {
  auto key = key_of(where, d, authorization);
  std::lock_guard lk(mu_);
  if (public_.find(d.hex())) {
    known_public_->inc();
    return true;
  }
  auto* until = confirmed_.find(key);
  if (!until) return false;
  if (*until <= steady::now()) {
    confirmed_.erase(key);
    return false;
  }
  known_confirmed_->inc();
  return true;
}

std::optional<http::response> blob_access::check(const origin::object_ref& where, const digest& d,
                                                 const std::string& authorization) {
  if (known_allowed(where, d, authorization)) return std::nullopt;
  return confirm(where, d, authorization);
}

std::optional<http::response> blob_access::confirm(const origin::object_ref& where, const digest& d,
                                                   const std::string& authorization) {
  http::client_request r;
  r.method = "HEAD";
  r.url = origin::blob_target(where, d);
  if (!authorization.empty()) r.headers.emplace_back("Authorization", authorization);
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.request_timeout.get());
  r.max_retries = 0;
  const std::string what = d.short_str() + " in " + quote_excerpt(where.repo, 120);
  auto f = proxy_call(d_.proxy, d_.cfg.upstream, d_.http, std::move(r), 64u << 10);
  if (!f) {
    failed_->inc();
    unsigned s = f.error().is(errc::timeout) ? 504 : 502;
    log::warn("cannot confirm access", log::kv("digest", d.str()),
              log::kv("error", f.error().message));
    return origin::oci_error(
        s, oci::error_code::unsupported,
        "cannot confirm access to " + what + " with registry-proxy: " + f.error().message);
  }
  if (f->status == 200) {
    allowed_->inc();
    if (f->header(origin::headers::visibility) == origin::headers::visibility_public)
      note_public(d);
    else
      note_confirmed(where, d, authorization);
    return std::nullopt;
  }
  const auto s = static_cast<unsigned>(f->status);
  if (s == 401 || s == 403 || s == 404 || s == 429) {
    refused_->inc();
    std::string challenge(f->header("WWW-Authenticate").value_or(""));
    if (s == 401 && challenge.empty()) challenge = fallback_challenge;
    auto out = origin::oci_error(
        s, origin::code_for_status(s),
        "registry-proxy refused this client " + what + " (HTTP " + std::to_string(s) + ")",
        s == 401 ? std::string_view(challenge) : std::string_view());
    if (auto ra = f->header("Retry-After"); ra && s == 429)
      out.headers.set("Retry-After", std::string(*ra));
    return out;
  }
  failed_->inc();
  return origin::oci_error(
      502, oci::error_code::unsupported,
      "cannot confirm access to " + what + ": registry-proxy answered HTTP " + std::to_string(s));
}

}  // namespace shoal::peerd
