#pragma once
// Upstream registries: which one a request goes to, and how to talk to it with the right
// credentials (anonymous, basic from a file, or the client's own), including the Bearer token
// flow (challenge → token realm → token cached per scope and credential until it expires).

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/http_client.h"
#include "registry-proxy/config.h"
#include "registry-proxy/credential_gate.h"
#include "registry-proxy/lru.h"

namespace shoal::proxy {

// A client's credential as it arrived (the Authorization header). Only used for the request at
// hand; what outlives the request is `hash` (salted sha256), never the credential.
struct credential {
  std::string header;  // full Authorization value; empty = anonymous
  std::string hash;    // hex of sha256(salt || header); empty = anonymous
  std::optional<std::pair<std::string, std::string>> basic;  // user, password when Basic
  std::string peer;  // the client's address (rate limits of unseen credentials)
  [[nodiscard]] bool anonymous() const { return header.empty(); }
};
[[nodiscard]] credential credential_from(std::string_view authorization, std::string_view salt);

// One configured upstream, resolved at start-up.
struct upstream {
  upstream_config cfg;
  std::string base;                                              // url without a trailing '/'
  std::optional<std::pair<std::string, std::string>> own_basic;  // from credentials_file
};

struct selection {
  const upstream* up = nullptr;
  std::string repo;  // repository name as the upstream knows it (prefix stripped, library/ added)
};

class upstream_set {
 public:
  // Validates and resolves the configs (reads credential files). Errors name the upstream.
  [[nodiscard]] static result<upstream_set> build(const std::vector<upstream_config>& cfgs,
                                                  const std::string& default_name);
  // ns (containerd's ?ns=) wins; else a path prefix; else the default upstream.
  [[nodiscard]] result<selection> select(const std::optional<std::string>& ns,
                                         std::string_view name) const;
  [[nodiscard]] const std::vector<std::unique_ptr<upstream>>& all() const { return ups_; }
  [[nodiscard]] const upstream* find(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<upstream>> ups_;
  const upstream* default_ = nullptr;
};

// Who the request to upstream acts for.
enum class acting_as { proxy, client };

// Talks to upstreams with authentication. Thread-safe. The blocking calls must run on worker
// threads (never on an event loop).
class upstream_client {
 public:
  explicit upstream_client(http::client& c, credential_gate_limits gate = {},
                           std::size_t token_entries = 10000)
      : http_(c), gate_(gate), tokens_(token_entries) {}

  // Builds an upstream request (URL, timeouts, TLS options, credential header rules).
  [[nodiscard]] http::client_request make_request(const upstream& up, std::string method,
                                                  const std::string& path) const;

  // The Authorization value for (up, repo) acting as the proxy (`cred` null) or as the client,
  // fetching a Bearer token when the upstream is known to want one (blocking). nullopt: send none.
  [[nodiscard]] result<std::optional<std::string>> authorization(const upstream& up,
                                                                 const std::string& repo,
                                                                 const credential* cred,
                                                                 bool refresh);
  // Remembers a WWW-Authenticate challenge from a 401 so the next authorization() gets a token.
  // Returns true when the challenge asked for something we can answer (a retry may succeed);
  // `bearer` (when given) tells whether that is a token realm. A realm realm_refusal() refuses
  // is not remembered (the client's credentials never go there).
  bool note_challenge(const upstream& up, const http::header_map& headers, const credential* cred,
                      bool* bearer = nullptr);

  // A whole (small) response with the auth dance: at most one retry after a challenge. Blocking.
  // With a client credential upstream has not accepted lately, the call first passes the
  // credential gate (credential_gate.h): refused with errc::busy (429) when over its limits.
  // With a `deadline`, every request of the call must end by then (no retries beyond the auth
  // dance): errc::timeout otherwise.
  [[nodiscard]] result<http::full_response> call(
      const upstream& up, const std::string& repo, const credential* cred, std::string method,
      const std::string& path, std::vector<std::pair<std::string, std::string>> headers,
      std::size_t max_body,
      std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

  [[nodiscard]] http::client& http() { return http_; }

  struct counters {
    std::uint64_t token_fetches = 0, token_failures = 0;
  };
  [[nodiscard]] counters get_counters() const;
  [[nodiscard]] credential_gate& gate() { return gate_; }
  // Why the last token realm `up` named was not followed ("" when none was refused): for the
  // client's error message.
  [[nodiscard]] std::string realm_refused(const upstream& up) const;

 private:
  struct challenge {
    std::string realm, service;
  };
  struct token {
    std::string value;
    std::chrono::steady_clock::time_point expires;
  };
  [[nodiscard]] result<token> fetch_token(
      const upstream& up, const challenge& ch, const std::string& scope,
      const std::optional<std::pair<std::string, std::string>>& basic);

  http::client& http_;
  mutable std::mutex mu_;
  std::map<std::string, challenge> challenges_;        // upstream name → bearer realm
  std::map<std::string, std::string> refused_realms_;  // upstream name → why its realm was not
  credential_gate gate_;
  lru_map<token> tokens_;  // upstream|scope|who → token (bounded: who is a client's choice)
  counters counters_;
};

// Why a token realm named by upstream `up`'s challenge is not followed (nullopt: it may be). A
// realm must be on the upstream's own host (any port), on a host of its token_realm_hosts, or
// auth.docker.io for a docker_hub upstream; over https unless the upstream itself is http.
[[nodiscard]] std::optional<std::string> realm_refusal(const upstream_config& up,
                                                       std::string_view realm);

// The status a client gets when talking to an upstream failed without an HTTP answer: 401 when
// the token realm refused the credentials (the client's own, or ours), 504 on a timeout, 429
// when the credential gate refused (errc::busy), 502 for anything else (refused connection, TLS,
// protocol).
[[nodiscard]] unsigned gateway_status(const error& e);

[[nodiscard]] std::string base64_encode(std::string_view in);
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view in);

}  // namespace shoal::proxy
