#pragma once
// The outbound HTTP client of Shoal, on libcurl's multi interface. Every outbound call goes
// through it: registry-proxy fetching manifests and multi-GB blobs from upstream registries
// (token auth, 307 redirects to blob storage), peerd fetching from registry-proxy, S3 later
// (SigV4 through `client_request::customize`).
//
//   http::client c;
//   http::client_request r;
//   r.url = "https://registry-1.docker.io/v2/library/alpine/blobs/sha256:...";
//   r.headers.emplace_back("Authorization", "Bearer " + token);
//   r.resume = true;  // a broken transfer continues with a Range request
//   c.submit(std::move(r), {
//       .on_response = [](const http::response_head& h) { return h.status == 200; },
//       .on_data = [&](std::string_view chunk) { return hasher_and_file.write(chunk); },
//       .on_complete = [&](result<http::completion> r) { post_to_my_executor(std::move(r)); },
//   });
//
// What the client guarantees, whatever the network does:
//  - on_complete runs exactly once per submit(), with the delivered status or an error whose
//    message carries the cause ("connect to 127.0.0.1:5000: Connection refused",
//    "stalled: no bytes for 10s", "too many redirects (5)") and curl's own error text.
//  - The body streams: it is never buffered whole inside the client; fetch() buffers on purpose.
//  - Bytes handed to on_data are never handed again: a retry happens only before the first body
//    byte, and a resume continues exactly where the delivery stopped or fails.
//  - Redirects are followed by the client itself (curl's FOLLOWLOCATION is off) and never carry
//    Authorization, or a header the caller marks as a credential, to another scheme+host+port.
//  - With a connect_policy, every hop and every address connected to is checked first.
//  - A transfer never hangs: connect timeout, stall timeout (no bytes for N, including a server
//    that accepts and never answers), optional total timeout, cancel(), stop().

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <curl/curl.h>

#include "common/error.h"

namespace shoal::tls {
struct tls_config;
}

namespace shoal::http {

// Orders header names case-insensitively (ASCII), so header_map::find("content-length") works
// whatever case the server used.
struct ci_less {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept;
};

// Response headers in arrival order per name; names compare case-insensitively.
using header_map = std::multimap<std::string, std::string, ci_less>;

// Identifies one submitted request for cancel(). Never 0.
using request_id = std::uint64_t;

struct timeouts {
  // TCP (and TLS) connect, per attempt. 0 means curl's default (300 s).
  std::chrono::milliseconds connect{10'000};
  // Longest time without receiving a byte (headers or body) once connected, per attempt; this
  // also catches a server that accepts and never answers. 0 disables it (not recommended).
  std::chrono::milliseconds stall{30'000};
  // Deadline for the whole request from submit(): queueing, redirects, retries, backoff and the
  // body. 0 means none (a multi-GB blob may take long; the stall timeout bounds a dead peer).
  std::chrono::milliseconds total{0};
};

struct redirect_policy {
  // Hops followed per attempt; 0 hands 3xx responses to the caller as they are.
  int max_redirects = 5;
  // Headers dropped, besides Authorization and Cookie (always dropped), as soon as a hop
  // changes scheme+host+port. Once dropped they stay dropped for the rest of the chain, even if
  // it comes back to the first origin.
  std::vector<std::string> credential_headers;
  // Whether client_request::customize also runs for hops to another origin. Off by default because
  // a customize hook may set credentials (SigV4, user:password) that must not follow redirects.
  bool customize_on_other_origin = false;
};

// One scheme+host+port a request goes to (the request's URL or a redirect hop). host is
// lower-case; an IPv6 literal keeps its brackets; port is decimal (the scheme's default if the URL
// has none).
struct endpoint {
  std::string scheme;
  std::string host;
  std::string port;
};

// The endpoint of an absolute http:// or https:// URL (lower-case host, default port filled in),
// as connect_policy sees it; anything else is errc::invalid_argument.
[[nodiscard]] result<endpoint> parse_endpoint(const std::string& url);

// Where a request may go. `origin` is asked before the request's URL and before every redirect
// hop is followed; `address` is asked for every address libcurl is about to connect to (from
// libcurl's open-socket hook, after DNS: the address checked is the one connected to, so DNS
// cannot change the answer in between). A refusal ends the request at once (no retry) with the
// refusal's error (dataset origins use errc::unauthorized); nothing of the refused hop is fetched.
// With a policy the request never goes through a proxy (the proxy would make the connect address
// meaningless).
struct connect_policy {
  std::function<status(const endpoint& hop)> origin;
  std::function<status(const endpoint& hop, const std::string& ip)> address;
  [[nodiscard]] explicit operator bool() const { return origin || address; }
};

// One HTTP request, a plain value: the same request may be submitted again.
struct client_request {
  std::string method = "GET";
  // http:// or https:// only. User info and query strings are redacted in error messages.
  std::string url;
  // Sent as given (no CR/LF allowed). A header with an empty value is sent empty.
  std::vector<std::pair<std::string, std::string>> headers;
  // Request body (POST, PUT, ...); sent from memory.
  std::string body;
  http::timeouts timeouts;
  // Retries of an idempotent request (GET, HEAD) after a connection failure, a timeout, or a
  // 429/502/503/504 answer, before any body byte reached on_data; with `resume`, also resumes
  // of a broken body. The budget counts consecutive failures: an attempt that delivers body
  // bytes resets it, so a long download survives several breaks. Never after the caller aborted.
  int max_retries = 3;
  // GET only. When the transfer breaks after body bytes were delivered and the first delivered
  // response had a Content-Length (200) or a Content-Range (206), re-request the rest with
  // `Range: bytes=<next>-` (plus If-Range with a strong ETag or Last-Modified when the first
  // response had one) and, on a 206 whose Content-Range starts exactly at <next>, keep feeding
  // on_data as if nothing happened (on_response is not called again). Any other answer is an
  // error: bytes are never delivered twice. A caller's own Range is honoured.
  bool resume = false;
  redirect_policy redirects;
  // Unset: the client's (client_options::policy), if any. A request's own policy never reuses a
  // kept-alive connection (another request may have opened it without the policy).
  std::optional<connect_policy> policy;
  // Runs on the client thread on every attempt's easy handle after the client has set its own
  // options: the hook for extra curl options (CURLOPT_AWS_SIGV4 + CURLOPT_USERPWD, a proxy).
  // Must not replace the callbacks, URL, method or headers the client set.
  std::function<void(CURL*)> customize;
};

// The head of a response handed to the caller: the final answer after redirects.
struct response_head {
  int status = 0;
  std::string reason;
  header_map headers;
  // URL after redirects (not redacted: the caller may need it).
  std::string url;
  // 1 for the first attempt; a retry that happens before any body byte calls on_response again
  // with a higher number, and the caller must drop what it kept from the previous head.
  int attempt = 1;

  // First value of a header, if present.
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const;
};

// How a request ended when it got a response (whatever its status).
struct completion {
  int status = 0;
  // Body bytes handed to on_data.
  std::uint64_t bytes = 0;
  // Requests sent for this transfer, not counting redirect hops: 1 + retries + resumes.
  int attempts = 0;
  int redirects = 0;
  int resumes = 0;
  std::string url;
  std::chrono::milliseconds elapsed{0};
};

// All callbacks are optional and run on the client thread; they must be quick (post heavy work
// to your own executor) and must not block on the client (fetch(), stop(), destructor).
// Exceptions thrown by a callback abort the request with errc::internal.
struct callbacks {
  // Called for the response whose body follows: not for redirects the client follows, nor for
  // statuses it retries, nor for the 206 of a resume. Called again only when an attempt failed
  // before its first body byte and a retry follows (response_head::attempt tells). Return
  // false to abort (errc::cancelled, no retry).
  std::function<bool(const response_head&)> on_response;
  // Called with each body chunk in order. Return false to abort (errc::cancelled, no retry).
  std::function<bool(std::string_view chunk)> on_data;
  // Called exactly once, last. A non-2xx status is a completion, not an error; errors are
  // transport failures, timeouts, limits, cancellation and policy violations.
  std::function<void(result<completion>)> on_complete;
};

struct client_options {
  // Concurrent attempts per scheme+host+port; further ones wait in a FIFO inside the client
  // (their stall timer does not run while waiting). Connections are kept alive and reused.
  std::size_t max_connections_per_host = 8;
  // Idle connections kept in the cache across all hosts.
  long max_idle_connections = 64;
  // Response headers larger than this abort the request with errc::too_large.
  std::size_t max_header_bytes = 64 * 1024;
  // Backoff before retry n (0-based): uniform in [d/2, d] with d = min(cap, base * 2^n).
  std::chrono::milliseconds retry_base{100};
  std::chrono::milliseconds retry_cap{5'000};
  // A Retry-After (seconds or HTTP date) on 429/503 is honoured up to this long.
  std::chrono::milliseconds max_retry_after{10'000};
  // TLS: the system CA store unless ca_file is set (then only that file's CAs: the cluster CA
  // for calls between Shoal's daemons); insecure disables peer and host checks (tests with
  // self-signed certificates only). The server's certificate must name the host of the URL
  // (a DNS or IP SAN). ca_file is re-read at most every 10 s for new connections (a rotated CA).
  std::string ca_file;
  bool insecure = false;
  // Client certificate and its unencrypted private key (PEM), presented to servers that ask for
  // one (mutual TLS). An empty key_file reads the key from cert_file. libcurl reads them for each
  // new connection, so a rotated pair is used from the next connection on; kept-alive connections
  // keep the old one.
  std::string cert_file;
  std::string key_file;
  std::string user_agent = "shoal/0.1";
  // Outbound proxy. Unset: curl's default, which honours http_proxy, https_proxy and no_proxy
  // from the environment. Empty: never use a proxy. Otherwise the proxy's URL.
  std::optional<std::string> proxy;
  // Applies to every request that sets none of its own (client_request::policy); a client whose
  // every request is checked keeps only checked connections alive. Unset: requests go anywhere
  // (the behaviour of every client but the dataset origins').
  std::optional<connect_policy> policy;
};

// These options with a daemon's `tls` config section applied (its CA, certificate and key),
// when the section is enabled; unchanged otherwise.
[[nodiscard]] client_options client_options_with_tls(client_options o, const tls::tls_config& t);

// The client: owns one background thread running a curl_multi loop, and every transfer on it.
// Lifecycle: constructed running; stop() (or the destructor) cancels every request in flight or
// queued, each completing with errc::cancelled, and joins the thread. submit() after stop()
// completes the request with errc::cancelled on the calling thread.
// Threading: submit(), cancel() and stop() are safe from any thread; every callback runs on the
// client thread. Do not destroy the client from one of its own callbacks. Not movable.
class client {
 public:
  explicit client(client_options opts = {});
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  // Queues a request; the client takes ownership of both arguments.
  request_id submit(client_request req, callbacks cb);
  // Aborts one request: it completes with errc::cancelled unless it already completed.
  void cancel(request_id id);
  void stop();
  // True on the client thread (inside a callback).
  [[nodiscard]] bool on_client_thread() const noexcept;

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

// A whole response, for fetch().
struct full_response {
  int status = 0;
  std::string reason;
  header_map headers;
  std::string body;
  completion info;

  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const;
};

// Blocking convenience for tools and tests: runs `req` on `c`, buffers the body up to max_body
// bytes (beyond: errc::too_large), and returns the last delivered response. Must not be called
// on the client thread (returns errc::internal). Bounded by the request's timeouts.
[[nodiscard]] result<full_response> fetch(client& c, client_request req,
                                          std::size_t max_body = 64 * 1024 * 1024);

}  // namespace shoal::http
