#pragma once
// Who may call which scheduler route (docs/security.md, "Who may call what (scheduler)").
//
// Every request passes authorizer::check() before its route runs. The route's access class
// (access_of) says what it needs; the caller's credentials are its verified client certificate
// (req.peer, from mutual TLS) and an optional `Authorization: Bearer <token>` compared with the
// operator token file (auth.operator_token_file).
//
//   TLS on:  reads need a verified certificate with a role (or the token); operator verbs an
//            operator certificate (or the token); the extender kube-scheduler's certificate;
//            heartbeats a node certificate (the handler then checks the name).
//   TLS off: nothing is checked (the demo), except that operator verbs need the token when a
//            token file is configured.
//
// A refusal is 401 (no credentials, or a wrong token) or 403 (a certificate with the wrong role),
// with a JSON error naming what the route needs and what the caller presented; it is counted in
// shoal_scheduler_auth_refused_total{need,reason} and logged at most once per connection (the
// heartbeat handler's own refusal, a certificate naming another node, is counted there too).

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/digest.h"
#include "common/error.h"
#include "common/file.h"
#include "common/http_server.h"
#include "common/metrics.h"

namespace shoal::scheduler {

// What a route needs from its caller.
enum class route_access : std::uint8_t {
  open,            // answered without credentials (the tracker authorizes announces itself)
  member,          // reads: a verified certificate with any role, or the operator token
  node,            // POST /v1/heartbeat, POST /v1/checkpoints, GET /v1/checkpoints/*/groups/*:
                   // a node certificate (heartbeat and registration: the handler checks whose)
  operator_,       // POST /v1/place, POST /v1/prewarm, DELETE /v1/checkpoints/*,
                   // DELETE /v1/jobs/<id>: an operator
                   // certificate or the token
  kube_scheduler,  // /v1/extender/*: kube-scheduler's certificate
  registry_proxy,  // POST /v1/origins: registry-proxy's certificate (a ring member announcing)
};

// "open", "member", "node", "operator", "kube-scheduler".
[[nodiscard]] std::string_view to_string(route_access a) noexcept;

// The access class of a request, by path and method. Paths the API does not know are `member`,
// so an anonymous caller learns nothing from a 404 either. /healthz, /readyz and /metrics are
// answered before the API (app.cc) and never reach it.
[[nodiscard]] route_access access_of(const http::request& req) noexcept;

// The operator bearer token, read from a file. Only its SHA-256 is kept; the token itself is
// never logged. The file holds the token, optionally followed by a newline: 16..1024 visible
// ASCII characters (what an HTTP header carries), e.g. `openssl rand -hex 32 > token`.
//
// reload_if_changed() stats the file and reads it again when it changed (inode, size, mtime,
// ctime: an atomic rename and Kubernetes' Secret symlink swap are both seen). A file that
// becomes unreadable or invalid accepts no token until it is fixed (fail closed: a rotation
// meant to revoke a token must not leave the old one working). Thread-safe; reload_if_changed()
// does blocking file I/O and never runs on an io thread (the app calls it from its maintenance
// pool).
class operator_token {
 public:
  // Reads the file; an error (naming the key and the file) when it is missing or invalid.
  [[nodiscard]] static result<std::unique_ptr<operator_token>> load(std::string path);
  operator_token(const operator_token&) = delete;
  operator_token& operator=(const operator_token&) = delete;

  // true when the file changed and was read again (valid or not), false when unchanged.
  bool reload_if_changed();
  // Whether `presented` is the current token, in time independent of where they differ.
  [[nodiscard]] bool matches(std::string_view presented) const;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t reloads() const;

 private:
  explicit operator_token(std::string path) : path_(std::move(path)) {}
  // The token's hash, or why the file holds no valid token.
  static result<digest> read(const std::string& path);

  const std::string path_;
  mutable std::mutex mu_;
  std::optional<digest> hash_;  // under mu_; nullopt: no token accepted
  file_stamp stamp_;            // under mu_
  std::uint64_t reloads_ = 0;   // under mu_
};

// Applies the rules above to each request. Thread-safe (any io thread or pool).
class authorizer {
 public:
  // `token` may be null (no token file: a bearer token is never accepted); it must outlive this.
  authorizer(const operator_token* token, metrics::registry& reg);
  authorizer(const authorizer&) = delete;
  authorizer& operator=(const authorizer&) = delete;

  // nullopt when the request may go on; otherwise the 401/403 answer (counted, logged).
  [[nodiscard]] std::optional<http::response> check(const http::request& req);
  // A refusal a handler decided after check() (a heartbeat naming another node: reason
  // "other_node"): counted; true when the caller should log it (first on this connection).
  [[nodiscard]] bool refused_by_handler(const http::request& req, route_access need,
                                        const char* reason);

 private:
  struct refusal {
    unsigned status;
    const char* reason;  // metric label: unauthenticated, bad_token, wrong_role
    std::string error;   // the JSON error
  };
  [[nodiscard]] std::optional<refusal> decide(const http::request& req, route_access need) const;
  // Whether this connection (remote address and port) has not been logged yet.
  bool first_refusal_of(const http::request& req);

  const operator_token* token_;
  metrics::counter_family& refused_;
  std::mutex mu_;
  std::unordered_set<std::string> logged_;  // under mu_; bounded, cleared when full
};

}  // namespace shoal::scheduler
