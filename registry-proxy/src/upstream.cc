#include "registry-proxy/upstream.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "registry-proxy/auth_challenge.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/credential_hash.h"
#include "common/text.h"

namespace shoal::proxy {
namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

}  // namespace

unsigned gateway_status(const error& e) {
  if (e.is(errc::unauthorized)) return 401;
  if (e.is(errc::timeout)) return 504;
  if (e.is(errc::busy)) return 429;
  return 502;
}

namespace {

struct url_parts {
  std::string scheme, host;  // lower case; host without port or brackets
  bool ok = false;
};

url_parts split_url(std::string_view url) {
  url_parts p;
  auto colon = url.find("://");
  if (colon == std::string_view::npos) return p;
  p.scheme = lower(url.substr(0, colon));
  std::string_view rest = url.substr(colon + 3);
  auto end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  if (authority.empty() || authority.find('@') != std::string_view::npos) return p;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return p;
    p.host = lower(authority.substr(1, close - 1));
  } else {
    p.host = lower(authority.substr(0, authority.find(':')));
  }
  p.ok = !p.host.empty();
  return p;
}

// A foreign string in a message: quoted, at most 200 bytes, control and non-ASCII bytes escaped.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < 200; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 200) out += "...";
  return out + "\"";
}

}  // namespace

std::optional<std::string> realm_refusal(const upstream_config& up, std::string_view realm) {
  auto r = split_url(realm);
  auto u = split_url(up.url);
  if (!r.ok || (r.scheme != "https" && r.scheme != "http"))
    return "token realm " + quoted(realm) + " is not an http(s) URL";
  if (r.scheme == "http" && u.scheme != "http")
    return "token realm " + quoted(realm) + " is plain http while the upstream is https";
  if (u.ok && r.host == u.host) return std::nullopt;
  if (up.docker_hub && r.host == "auth.docker.io") return std::nullopt;
  for (const auto& h : up.token_realm_hosts) {
    if (lower(h) == r.host) return std::nullopt;
  }
  return "token realm " + quoted(realm) + " is neither on the upstream's host nor in its " +
         "token_realm_hosts";
}

std::string base64_encode(std::string_view in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  while (i + 2 < in.size()) {
    unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                 (static_cast<unsigned char>(in[i + 1]) << 8) |
                 static_cast<unsigned char>(in[i + 2]);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += tbl[v & 63];
    i += 3;
  }
  if (i + 1 == in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    unsigned v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  unsigned acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = val(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

credential credential_from(std::string_view authorization, std::string_view salt) {
  credential c;
  if (authorization.empty()) return c;
  c.header = std::string(authorization);
  c.hash = salted_credential_hash(salt, authorization);
  auto sp = authorization.find(' ');
  if (sp != std::string_view::npos && lower(authorization.substr(0, sp)) == "basic") {
    auto dec = base64_decode(trim(std::string(authorization.substr(sp + 1))));
    if (dec) {
      auto colon = dec->find(':');
      if (colon != std::string::npos)
        c.basic = std::make_pair(dec->substr(0, colon), dec->substr(colon + 1));
    }
  }
  return c;
}

result<upstream_set> upstream_set::build(const std::vector<upstream_config>& cfgs,
                                         const std::string& default_name) {
  upstream_set s;
  if (cfgs.empty()) return fail(errc::config_error, "no upstreams configured");
  for (const auto& c : cfgs) {
    auto u = std::make_unique<upstream>();
    u->cfg = c;
    u->base = c.url;
    while (!u->base.empty() && u->base.back() == '/') u->base.pop_back();
    if (u->cfg.prefix.empty()) u->cfg.prefix = c.name;
    if (c.auth == "basic") {
      std::ifstream f(c.credentials_file);
      if (!f)
        return fail(errc::config_error,
                    "upstream " + c.name + ": cannot read credentials_file " + c.credentials_file);
      std::stringstream ss;
      ss << f.rdbuf();
      std::string line = trim(ss.str());
      auto nl = line.find('\n');
      if (nl != std::string::npos) line = trim(line.substr(0, nl));
      auto colon = line.find(':');
      if (colon == std::string::npos || colon == 0) {
        return fail(errc::config_error,
                    "upstream " + c.name + ": credentials_file must hold user:password");
      }
      u->own_basic = std::make_pair(line.substr(0, colon), line.substr(colon + 1));
    }
    for (const auto& other : s.ups_) {
      if (other->cfg.name == c.name)
        return fail(errc::config_error, "upstream " + c.name + " is configured twice");
    }
    s.ups_.push_back(std::move(u));
  }
  if (default_name.empty()) {
    s.default_ = s.ups_.front().get();
  } else {
    s.default_ = s.find(default_name);
    if (!s.default_)
      return fail(errc::config_error,
                  "default_upstream " + default_name + " is not a configured upstream");
  }
  return s;
}

const upstream* upstream_set::find(std::string_view name) const {
  for (const auto& u : ups_) {
    if (u->cfg.name == name) return u.get();
    for (const auto& a : u->cfg.aliases) {
      if (a == name) return u.get();
    }
  }
  return nullptr;
}

result<selection> upstream_set::select(const std::optional<std::string>& ns,
                                       std::string_view name) const {
  selection sel;
  std::string repo(name);
  if (ns) {
    if (!oci::valid_registry_host(*ns))
      return fail(errc::invalid_argument, "ns is not a registry host");
    sel.up = find(*ns);
    if (!sel.up) return fail(errc::not_found, "no upstream is configured for registry " + *ns);
  } else {
    for (const auto& u : ups_) {
      const std::string& p = u->cfg.prefix;
      if (repo.size() > p.size() + 1 && repo.compare(0, p.size(), p) == 0 &&
          repo[p.size()] == '/') {
        sel.up = u.get();
        repo = repo.substr(p.size() + 1);
        break;
      }
    }
    if (!sel.up) sel.up = default_;
  }
  if (sel.up->cfg.docker_hub) repo = oci::normalize_docker_hub_name(repo);
  if (!oci::valid_name(repo))
    return fail(errc::invalid_argument, "invalid repository name after prefix removal");
  sel.repo = std::move(repo);
  return sel;
}

http::client_request upstream_client::make_request(const upstream& up, std::string method,
                                                   const std::string& path) const {
  http::client_request r;
  r.method = std::move(method);
  r.url = up.base + path;
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(up.cfg.connect_timeout.get());
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(up.cfg.stall_timeout.get());
  r.max_retries = up.cfg.max_retries;
  if (up.cfg.insecure_tls || !up.cfg.ca_file.empty()) {
    bool insecure = up.cfg.insecure_tls;
    std::string ca = up.cfg.ca_file;
    r.customize = [insecure, ca](CURL* h) {
      if (insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
      }
      if (!ca.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, ca.c_str());
    };
    r.redirects.customize_on_other_origin = false;
  }
  return r;
}

bool upstream_client::note_challenge(const upstream& up, const http::header_map& headers,
                                     const credential* cred, bool* bearer) {
  bool actionable = false;
  if (bearer) *bearer = false;
  auto [b, e] = headers.equal_range("www-authenticate");
  for (auto it = b; it != e; ++it) {
    for (const auto& ch : parse_www_authenticate(it->second)) {
      if (ch.scheme == "bearer" && !ch.param("realm").empty()) {
        if (auto why = realm_refusal(up.cfg, ch.param("realm"))) {
          log::warn("token realm refused", log::kv("upstream", up.cfg.name),
                    log::kv("reason", *why));
          std::lock_guard lk(mu_);
          refused_realms_[up.cfg.name] = *why;
          continue;
        }
        std::lock_guard lk(mu_);
        auto& c = challenges_[up.cfg.name];
        if (c.realm != ch.param("realm") || c.service != ch.param("service")) {
          c.realm = ch.param("realm");
          c.service = ch.param("service");
        }
        actionable = true;
        if (bearer) *bearer = true;
      } else if (ch.scheme == "basic") {
        // Basic helps only if we have Basic credentials for whom we act.
        bool have = cred ? cred->basic.has_value() : up.own_basic.has_value();
        actionable = actionable || have;
      }
    }
  }
  return actionable;
}

result<upstream_client::token> upstream_client::fetch_token(
    const upstream& up, const challenge& ch, const std::string& scope,
    const std::optional<std::pair<std::string, std::string>>& basic) {
  std::string url = ch.realm;
  url += (url.find('?') == std::string::npos ? "?" : "&");
  if (!ch.service.empty()) url += "service=" + url_escape(ch.service) + "&";
  url += "scope=" + url_escape(scope);
  http::client_request r;
  r.url = url;
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(up.cfg.connect_timeout.get());
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(up.cfg.stall_timeout.get());
  r.max_retries = up.cfg.max_retries;
  if (basic)
    r.headers.emplace_back("Authorization",
                           "Basic " + base64_encode(basic->first + ":" + basic->second));
  if (up.cfg.insecure_tls) {
    r.customize = [](CURL* h) {
      curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    };
  }
  auto resp = http::fetch(http_, std::move(r), 1 << 20);
  auto bump_fail = [&] {
    std::lock_guard lk(mu_);
    ++counters_.token_failures;
  };
  {
    std::lock_guard lk(mu_);
    ++counters_.token_fetches;
  }
  if (!resp) {
    bump_fail();
    return fail(resp.error().wrap("token request to " + ch.realm));
  }
  if (resp->status == 401 || resp->status == 403) {
    bump_fail();
    return fail(errc::unauthorized, "token realm " + ch.realm + " refused the credentials (HTTP " +
                                        std::to_string(resp->status) + ")");
  }
  if (resp->status != 200) {
    bump_fail();
    return fail(errc::upstream_error,
                "token realm " + ch.realm + " answered HTTP " + std::to_string(resp->status));
  }
  auto j = nlohmann::json::parse(resp->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    bump_fail();
    return fail(errc::protocol_error,
                "token realm " + ch.realm + " answered something that is not JSON");
  }
  token t;
  if (j.contains("token") && j["token"].is_string())
    t.value = j["token"].get<std::string>();
  else if (j.contains("access_token") && j["access_token"].is_string())
    t.value = j["access_token"].get<std::string>();
  if (t.value.empty()) {
    bump_fail();
    return fail(errc::protocol_error, "token realm " + ch.realm + " answered no token");
  }
  long long expires = 60;
  if (j.contains("expires_in") && j["expires_in"].is_number_integer())
    expires = j["expires_in"].get<long long>();
  if (expires < 60) expires = 60;  // the spec's minimum
  // A day at most: a realm's 1e18 would overflow the clock and put the expiry in the past.
  expires = std::min(expires, 86400LL);
  // Renew a little early so a token never expires in flight.
  t.expires = std::chrono::steady_clock::now() + std::chrono::seconds(expires) -
              std::chrono::seconds(std::min(expires / 5, 30LL));
  return t;
}

result<std::optional<std::string>> upstream_client::authorization(const upstream& up,
                                                                  const std::string& repo,
                                                                  const credential* cred,
                                                                  bool refresh) {
  // A client Bearer (or other opaque scheme) token is passed through as is.
  if (cred && !cred->anonymous() && !cred->basic) return std::optional<std::string>(cred->header);
  const auto& basic = cred ? cred->basic : up.own_basic;
  std::optional<challenge> ch;
  {
    std::lock_guard lk(mu_);
    auto it = challenges_.find(up.cfg.name);
    if (it != challenges_.end()) ch = it->second;
  }
  if (!ch) {
    if (basic)
      return std::optional<std::string>("Basic " +
                                        base64_encode(basic->first + ":" + basic->second));
    return std::optional<std::string>();
  }
  std::string scope = "repository:" + repo + ":pull";
  std::string key = up.cfg.name + "|" + scope + "|" + (cred ? cred->hash : std::string("proxy"));
  if (!refresh) {
    std::lock_guard lk(mu_);
    auto* t = tokens_.find(key);
    if (t && t->expires > std::chrono::steady_clock::now()) {
      return std::optional<std::string>("Bearer " + t->value);
    }
  }
  auto t = fetch_token(up, *ch, scope, basic);
  if (!t) return fail(t.error());
  std::lock_guard lk(mu_);
  tokens_.put(key, *t);
  return std::optional<std::string>("Bearer " + t->value);
}

result<http::full_response> upstream_client::call(
    const upstream& up, const std::string& repo, const credential* cred, std::string method,
    const std::string& path, std::vector<std::pair<std::string, std::string>> headers,
    std::size_t max_body, std::optional<std::chrono::steady_clock::time_point> deadline) {
  credential_gate::pass held;
  if (cred && !cred->anonymous()) {
    auto p = gate_.admit(cred->peer, cred->hash);
    if (!p) return fail(p.error());
    held = std::move(*p);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto auth = authorization(up, repo, cred, attempt > 0);
    if (!auth) return fail(auth.error());
    auto r = make_request(up, method, path);
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left <= std::chrono::milliseconds(0))
        return fail(errc::timeout, "no time left for " + method + " " + path);
      r.timeouts.total = left;
      r.max_retries = 0;
    }
    r.headers = headers;
    if (*auth) r.headers.emplace_back("Authorization", **auth);
    auto resp = http::fetch(http_, std::move(r), max_body);
    if (!resp) return resp;
    if (resp->status >= 200 && resp->status < 300 && cred && !cred->anonymous())
      gate_.note_accepted(cred->hash);
    bool bearer = false;
    if (resp->status == 401 && attempt == 0 && note_challenge(up, resp->headers, cred, &bearer)) {
      // Sending the same Basic credentials again cannot change a Basic refusal.
      bool sent_basic = *auth && (*auth)->rfind("Basic ", 0) == 0;
      if (bearer || !sent_basic) continue;
    }
    return resp;
  }
  return fail(errc::internal, "unreachable");
}

std::string upstream_client::realm_refused(const upstream& up) const {
  std::lock_guard lk(mu_);
  auto it = refused_realms_.find(up.cfg.name);
  return it == refused_realms_.end() ? std::string() : it->second;
}

upstream_client::counters upstream_client::get_counters() const {
  std::lock_guard lk(mu_);
  return counters_;
}

}  // namespace shoal::proxy
