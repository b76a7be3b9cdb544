#include "scheduler/authz.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/sha256.h"
#include "common/json_text.h"

namespace shoal::scheduler {

namespace {

constexpr std::size_t min_token = 16;
constexpr std::size_t max_token = 1024;

bool starts_with_icase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char a = s[i], b = prefix[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

// The token of an `Authorization: Bearer <token>` header; nullopt for no header or another
// scheme (Basic credentials are not ours to judge).
std::optional<std::string_view> bearer_of(const http::request& req) {
  std::string_view h = req.header("Authorization");
  if (!starts_with_icase(h, "bearer ")) return std::nullopt;
  h.remove_prefix(7);
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
  return h;
}

// What a route needs, for error messages.
std::string needs_text(route_access need, bool token_configured) {
  std::string token = token_configured ? " or the operator bearer token" : "";
  switch (need) {
    case route_access::member:
      return "a cluster certificate with a shoal:// role" + token;
    case route_access::node:
      return "a node certificate (shoal://node/<name>)";
    case route_access::operator_:
      return "an operator certificate (shoal://operator/<user>)" + token;
    case route_access::kube_scheduler:
      return "kube-scheduler's certificate (shoal://kube-scheduler)";
    case route_access::registry_proxy:
      return "registry-proxy's certificate (shoal://registry-proxy)";
    case route_access::open:
      break;
  }
  return "nothing";
}

tls::peer_role role_of(route_access need) {
  switch (need) {
    case route_access::node:
      return tls::peer_role::node;
    case route_access::operator_:
      return tls::peer_role::operator_;
    case route_access::kube_scheduler:
      return tls::peer_role::kube_scheduler;
    case route_access::registry_proxy:
      return tls::peer_role::registry_proxy;
    default:
      return tls::peer_role::none;
  }
}

}  // namespace

std::string_view to_string(route_access a) noexcept {
  switch (a) {
    case route_access::open:
      return "open";
    case route_access::member:
      return "member";
    case route_access::node:
      return "node";
    case route_access::operator_:
      return "operator";
    case route_access::kube_scheduler:
      return "kube-scheduler";
    case route_access::registry_proxy:
      return "registry-proxy";
  }
  return "member";
}

route_access access_of(const http::request& req) noexcept {
  std::string_view p = req.path;
  if (p == "/announce") return route_access::open;  // the tracker: authorize_announce
  if (p == "/healthz" || p == "/readyz" || p == "/metrics") return route_access::open;
  if (p == "/v1/heartbeat") return route_access::node;
  if (p == "/v1/place") return route_access::operator_;
  if (p == "/v1/prewarm" && req.method == http::verb::post) return route_access::operator_;
  if (p.rfind("/v1/jobs/", 0) == 0 && req.method == http::verb::delete_)
    return route_access::operator_;
  if (p == "/v1/extender/filter" || p == "/v1/extender/prioritize")
    return route_access::kube_scheduler;
  if (p == "/v1/origins" && req.method == http::verb::post) return route_access::registry_proxy;
  if (p == "/v1/checkpoints" && req.method == http::verb::post) return route_access::node;
  if (p.starts_with("/v1/checkpoints/")) {
    if (req.method == http::verb::delete_) return route_access::operator_;
    if (p.find("/groups/") != std::string_view::npos) return route_access::node;
  }
  return route_access::member;
}

// ---- operator_token ----

result<digest> operator_token::read(const std::string& path) {
  std::string where = "auth.operator_token_file " + path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errc::config_error, where + ": " + std::strerror(errno));
  std::string text;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return fail(errc::config_error, where + ": " + std::strerror(e));
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_token + 2) {
      ::close(fd);
      return fail(errc::config_error, where + ": longer than 1024 characters");
    }
  }
  ::close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::string problem;
  if (text.size() < min_token || text.size() > max_token) {
    problem =
        "the token must be 16 to 1024 characters (it has " + std::to_string(text.size()) + ")";
  } else {
    for (char c : text) {
      if (c < 0x21 || c > 0x7e) problem = "the token must be visible ASCII characters (no spaces)";
    }
  }
  auto d = sha256_of(text);
  OPENSSL_cleanse(text.data(), text.size());
  if (!problem.empty()) return fail(errc::config_error, where + ": " + problem);
  return d;
}

result<std::unique_ptr<operator_token>> operator_token::load(std::string path) {
  std::unique_ptr<operator_token> t(new operator_token(std::move(path)));
  t->stamp_ = stamp_of(t->path_);
  auto h = read(t->path_);
  if (!h) return fail(h.error());
  t->hash_ = *h;
  log::info("operator token loaded", log::kv("file", t->path_));
  return t;
}

bool operator_token::reload_if_changed() {
  auto now = stamp_of(path_);
  {
    std::lock_guard lk(mu_);
    if (now == stamp_) return false;
  }
  auto h = read(path_);
  std::lock_guard lk(mu_);
  stamp_ = now;
  ++reloads_;
  if (h) {
    hash_ = *h;
    log::info("operator token reloaded", log::kv("file", path_));
  } else {
    hash_.reset();
    log::error("operator token file unusable: no bearer token is accepted until it is fixed",
               log::kv("error", h.error().message));
  }
  return true;
}

bool operator_token::matches(std::string_view presented) const {
  auto got = sha256_of(presented);
  std::lock_guard lk(mu_);
  if (!hash_) return false;
  return CRYPTO_memcmp(got.bytes().data(), hash_->bytes().data(), got.bytes().size()) == 0;
}

std::uint64_t operator_token::reloads() const {
  std::lock_guard lk(mu_);
  return reloads_;
}

// ---- authorizer ----

authorizer::authorizer(const operator_token* token, metrics::registry& reg)
    : token_(token),
      refused_(reg.counter("shoal_scheduler_auth_refused_total",
                           "API requests refused by authorization, by what the route needs "
                           "(member, node, operator, kube-scheduler) and why (unauthenticated: "
                           "401 without credentials; bad_token: 401, a wrong bearer token; "
                           "wrong_role: 403, a certificate of another role; other_node: 403, "
                           "a heartbeat for a node the certificate does not name).",
                           {"need", "reason"})) {
  for (auto need : {route_access::member, route_access::node, route_access::operator_,
                    route_access::kube_scheduler}) {
    for (const char* why : {"unauthenticated", "bad_token", "wrong_role"})
      (void)refused_.with({std::string(to_string(need)), why});
  }
  (void)refused_.with({"node", "other_node"});
}

bool authorizer::refused_by_handler(const http::request& req, route_access need,
                                    const char* reason) {
  refused_.with({std::string(to_string(need)), reason}).inc();
  return first_refusal_of(req);
}

std::optional<authorizer::refusal> authorizer::decide(const http::request& req,
                                                      route_access need) const {
  if (need == route_access::open) return std::nullopt;
  const bool configured = token_ != nullptr;
  const auto bearer = bearer_of(req);
  bool token_ok = false;
  if (bearer && configured) {
    token_ok = token_->matches(*bearer);
    // A token that is presented and wrong is refused even where a certificate would do: the
    // caller meant to use it.
    if (!token_ok) return refusal{401, "bad_token", "the bearer token is not the operator token"};
  }
  const bool token_grants = need == route_access::member || need == route_access::operator_;
  if (!req.peer.tls) {
    // Plain mode: only operator verbs, and only once a token file is configured.
    if (need != route_access::operator_ || !configured || token_ok) return std::nullopt;
    return refusal{401, "unauthenticated",
                   "this route needs the operator bearer token (Authorization: Bearer <token>); "
                   "none was presented"};
  }
  if (token_ok && token_grants) return std::nullopt;
  const auto& p = req.peer;
  const bool ok = need == route_access::member ? p.verified && p.role != tls::peer_role::none
                                               : p.is(role_of(need));
  if (ok) return std::nullopt;
  std::string presented = "the client certificate is " + p.str();
  if (bearer && !configured) presented += "; a bearer token was ignored (no token is configured)";
  std::string error = "this route needs " + needs_text(need, configured) + "; " + presented;
  if (p.verified) return refusal{403, "wrong_role", std::move(error)};
  return refusal{401, "unauthenticated", std::move(error)};
}

bool authorizer::first_refusal_of(const http::request& req) {
  std::string key = req.remote.address().to_string() + " " + std::to_string(req.remote.port());
  std::lock_guard lk(mu_);
  if (logged_.size() >= 4096) logged_.clear();
  return logged_.insert(std::move(key)).second;
}

std::optional<http::response> authorizer::check(const http::request& req) {
  const route_access need = access_of(req);
  auto r = decide(req, need);
  if (!r) return std::nullopt;
  refused_.with({std::string(to_string(need)), r->reason}).inc();
  if (first_refusal_of(req)) {
    log::warn("request refused", log::kv("status", r->status),
              log::kv("path", req.path.substr(0, 256)),
              log::kv("from", req.remote.address().to_string()),
              log::kv("certificate", req.peer.str()), log::kv("reason", r->error));
  }
  nlohmann::json j = {{"error", r->error},
                      {"required", needs_text(need, token_ != nullptr)},
                      {"presented", req.peer.str()}};
  auto resp = http::response::json(r->status, json_text(j));
  if (r->status == 401) resp.headers.set("WWW-Authenticate", "Bearer realm=\"shoal-scheduler\"");
  return resp;
}

}  // namespace shoal::scheduler
