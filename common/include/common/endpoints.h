#pragma once
// Failover between replicas of one service (the scheduler): an ordered set of endpoints that
// remembers the one that last answered, skips a failed one for a short backoff, and a call that
// runs a request on them in turn. peerd, registry-proxy and shoalctl share it.
//
//   auto s = endpoints::endpoint_set::create({"https://sched-0:7443", "https://sched-1:7443"});
//   http::client_request r;
//   r.url = "/v1/nodes";  // a path: each attempt prefixes an endpoint's base URL
//   r.timeouts = {.connect = 1s, .stall = 2s};
//   auto f = endpoints::fetch(http, **s, std::move(r), endpoints::call_kind::idempotent);
//
// Endpoints. Each configured base URL is one endpoint, unless its host is a name that resolves
// to several addresses (a Kubernetes headless Service): then each address is one, and a request
// to it keeps the URL (Host header, TLS server name and certificate check against the name) but
// connects to that address (libcurl CURLOPT_CONNECT_TO). A name is resolved when the set is
// created and again every `resolve_interval`, each time bounded by `resolve_timeout` (a slow
// resolver never holds a call up: a re-resolution runs in the background and its answer is
// used from the next order() on). A name that resolves to one address, or not at all, stays one
// endpoint that libcurl resolves itself, exactly as before failover existed.
//
// Order. order() lists every endpoint, always: the one that last answered first, then the others
// as configured, then those in backoff (failed less than `backoff` ago), soonest-back first. So
// a healthy set sticks to one replica, a refused or hung one is passed over at once and for a
// while, and when every replica failed they are all tried anyway.
//
// Threading: every member is safe from any thread (one mutex). The set is shared by its users.
// A detached resolver thread holds only its own shared state, never the set.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/http_client.h"

namespace shoal::endpoints {

using clock = std::chrono::steady_clock;

// The addresses a host name resolves to (IP literals, no brackets), in the resolver's order.
using resolve_fn = std::function<result<std::vector<std::string>>(const std::string& host)>;

// getaddrinfo (TCP, any family), duplicates dropped.
[[nodiscard]] result<std::vector<std::string>> resolve_system(const std::string& host);

struct options {
  // A failed endpoint goes to the back of the order for this long.
  std::chrono::milliseconds backoff{5'000};
  // How often a host name is resolved again (a headless Service gains and loses pods).
  std::chrono::milliseconds resolve_interval{30'000};
  // The first resolution waits at most this long (then the name is one endpoint until a later
  // resolution answers).
  std::chrono::milliseconds resolve_timeout{1'000};
  // Addresses kept per name, at most.
  std::size_t max_addresses = 16;
  // Seams for tests: the clock and the resolver.
  std::function<clock::time_point()> now;
  resolve_fn resolver;
};

// One place to send a request to.
struct endpoint {
  std::string base;     // base URL as configured, without a trailing slash
  std::string address;  // the address to connect to; empty: libcurl resolves the URL's host

  // base + path.
  [[nodiscard]] std::string url(std::string_view path) const;
  // Points `r` (whose url is a path) at this endpoint: its base before the path and, with an
  // address, a CURLOPT_CONNECT_TO pin through client_request::customize (a customize hook the
  // request already had still runs, after the pin).
  void apply(http::client_request& r) const;
  // "https://sched:7443" or "https://sched:7443 (10.0.0.7)", for logs and errors.
  [[nodiscard]] std::string str() const;
  [[nodiscard]] bool operator==(const endpoint&) const = default;
};

class endpoint_set {
 public:
  // `bases`: base URLs (http:// or https://), in the preferred order; trailing slashes are
  // dropped, duplicates ignored. None at all, or one that does not parse, is an error.
  [[nodiscard]] static result<std::shared_ptr<endpoint_set>> create(std::vector<std::string> bases,
                                                                    options o = {});
  ~endpoint_set();
  endpoint_set(const endpoint_set&) = delete;
  endpoint_set& operator=(const endpoint_set&) = delete;

  // Every endpoint, in the order to try (see the header comment). Never empty.
  [[nodiscard]] std::vector<endpoint> order();
  // The configured base URLs, the one of the endpoint that last answered first (tracker lists).
  [[nodiscard]] std::vector<std::string> bases();
  // An attempt on `e` got an answer: it becomes the first to try.
  void succeeded(const endpoint& e);
  // An attempt on `e` failed (refused, timed out, a 5xx gateway answer): it is tried last for
  // options::backoff.
  void failed(const endpoint& e);

 private:
  struct name_state;
  endpoint_set(std::vector<std::string> bases, options o);
  void refresh_locked(clock::time_point now);
  [[nodiscard]] std::vector<endpoint> all_locked() const;

  options opts_;
  std::vector<std::string> bases_;
  std::mutex mu_;
  std::vector<std::unique_ptr<name_state>> names_;  // per base URL, same order
  std::string last_good_;                           // endpoint::str() of the last that answered
  std::vector<std::pair<std::string, clock::time_point>> down_;  // str() → back at
};

// Whether a failed attempt may be repeated on the next endpoint.
enum class call_kind {
  // Applying the request twice is harmless (a GET; a POST the server applies by key or
  // sequence number): any failure moves on, and gateway answers 502/503/504 too.
  idempotent,
  // Only failures before the request left (connection refused, connect timeout, a name that
  // does not resolve, a failed TLS handshake) move on: a request that may have been applied is
  // never sent again.
  once,
  // A read (GET, HEAD) from a service whose 502 and 504 are verdicts of its own (registry-proxy:
  // its upstream failed, and another replica would only ask the same upstream again): every
  // failure to get an answer moves on, and a 503 (a replica draining or not ready); any other
  // answer is the answer.
  read,
};

// True when `e` (from http::client) says the request never reached the server.
[[nodiscard]] bool failed_before_sending(const error& e);

// One attempt: the request (its URL already absolute) to one endpoint.
using attempt_fn = std::function<result<http::full_response>(http::client_request)>;

// Runs `req` (url: a path such as "/v1/heartbeat") on the endpoints of `s` in order until one
// answers, marking each endpoint that failed and the one that answered. With more than one
// endpoint the client's own retries are off (the next endpoint is the retry). Returns the first
// answer, or the last failure (an error, or a 502/503/504 answer) when every endpoint failed.
[[nodiscard]] result<http::full_response> run(endpoint_set& s, http::client_request req,
                                              call_kind kind, const attempt_fn& attempt);
// run() with http::fetch as the attempt.
[[nodiscard]] result<http::full_response> fetch(http::client& c, endpoint_set& s,
                                                http::client_request req, call_kind kind,
                                                std::size_t max_body = 64 * 1024 * 1024);

// Splits comma-separated lists and drops empty items: {"a,b", "c"} → {"a", "b", "c"} (a flag
// given several times, each time with one or more URLs).
[[nodiscard]] std::vector<std::string> split_list(const std::vector<std::string>& items);

}  // namespace shoal::endpoints
