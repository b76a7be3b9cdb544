#pragma once
// An HTTP/1.1 server on Boost.Beast.
//
// What it does for every daemon: async accept and keep-alive on one io_context; HEAD for every
// GET route; Range (RFC 9110) applied to any 200 response whose handler marks it rangeable;
// bodies from memory, from a file descriptor (sent with sendfile(2)), or from a producer that may
// still be writing (a cache object in flight, bytes arriving from a swarm); limits on header size,
// body size and idle time; graceful shutdown (stop accepting, close idle connections, let active
// responses finish up to a deadline).
//
// Threading: the server runs on the io_context it is given (run that context on a small pool).
// Each connection lives on its own strand; the handler is called on it. A handler may answer
// later from any thread through its responder. Handlers must not block: blocking disk or RocksDB
// work goes to a worker pool, then the answer is sent through the responder.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "common/error.h"
#include "common/fd.h"
#include "common/peer_identity.h"

namespace shoal::metrics {
class registry;
}
namespace shoal::tls {
class tls_context;
}

namespace shoal::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using fields = boost::beast::http::fields;
using verb = boost::beast::http::verb;

// A parsed request, handed to the handler by value.
struct request {
  verb method = verb::get;
  std::string method_string;  // as sent (for logs)
  std::string target;         // raw request-target, e.g. "/v2/a/b/blobs/sha256:..?ns=docker.io"
  std::string path;           // target up to '?', percent-decoding NOT applied
  std::string query;          // after '?', raw
  fields headers;
  std::string body;
  tcp::endpoint remote;
  // Who the client is, from its verified certificate on a TLS server (common/peer_identity.h);
  // on a plain server always anonymous. Authorize on this, never on what the request says.
  tls::peer_identity peer;
  unsigned version = 11;
  std::chrono::steady_clock::time_point received;

  // Value of a query parameter (percent-decoded); nullopt when absent.
  [[nodiscard]] std::optional<std::string> query_param(std::string_view name) const;
  [[nodiscard]] std::string_view header(std::string_view name) const;
  // Every line of a header the client may repeat, joined with ", " (RFC 9110 §5.3). Go clients
  // (containerd, skopeo) send one Accept line per media type.
  [[nodiscard]] std::string header_list(std::string_view name) const;
};

// One piece of a streamed body.
struct chunk {
  enum class kind { data, file, eof };
  kind type = kind::eof;
  std::string data;          // kind::data
  int fd = -1;               // kind::file: borrowed; valid until the next next() call
  std::uint64_t offset = 0;  // kind::file
  std::uint64_t length = 0;  // kind::file

  static chunk bytes(std::string d) {
    chunk c;
    c.type = kind::data;
    c.data = std::move(d);
    return c;
  }
  static chunk file_region(int fd, std::uint64_t off, std::uint64_t len) {
    chunk c;
    c.type = kind::file;
    c.fd = fd;
    c.offset = off;
    c.length = len;
    return c;
  }
  static chunk end() { return chunk{}; }
};

// Produces a body piece by piece, possibly while the bytes are still arriving.
// Lifecycle: created by stream_body::open for one response, destroyed when the response ends
// (completed, failed, or the client went away; cancel() is called first in the last two cases).
class body_source {
 public:
  virtual ~body_source() = default;
  // Requests the next piece of at most `max_bytes`. `done` must be called exactly once, from any
  // thread, possibly inline. An error aborts the response: the connection is closed without
  // completing the body so the client cannot mistake a partial body for a whole one.
  virtual void next(std::size_t max_bytes, std::function<void(result<chunk>)> done) = 0;
  // The response is being abandoned; a pending next() may still call `done` (it is ignored).
  virtual void cancel() {}
  // How long one next() may take before the response is aborted; nullopt: the server's
  // source_timeout. A source whose producer has bounds of its own (peerd's stream of a running
  // download, which fails its readers when the download fails) may wait longer.
  [[nodiscard]] virtual std::optional<std::chrono::milliseconds> wait_limit() const {
    return std::nullopt;
  }
};

// A file region sent with sendfile(2). The fd is shared so a cache can hand out one open file to
// many responses.
struct file_body {
  std::shared_ptr<unique_fd> fd;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// A streamed body. `length` is the full representation size when known (Content-Length and
// Range work then); without it the body goes out chunked and Range is not offered.
struct stream_body {
  std::optional<std::uint64_t> length;
  // Opens a source for bytes [offset, offset + len) of the representation.
  std::function<std::unique_ptr<body_source>(std::uint64_t offset, std::uint64_t len)> open;
};

struct response {
  unsigned status = 200;
  fields headers;
  std::variant<std::monostate, std::string, file_body, stream_body> body;
  // When true and status is 200 with a known length, the server honours Range / HEAD itself and
  // advertises Accept-Ranges: bytes.
  bool rangeable = false;
  // Forces Connection: close after this response.
  bool close = false;

  static response text(unsigned status, std::string body,
                       std::string content_type = "text/plain; charset=utf-8");
  static response json(unsigned status, std::string body);
};

// Hands the answer to a request back to the server. Copyable; the first send() wins, later ones
// are ignored. If every copy is destroyed without a send(), the client gets a 500 (a handler that
// forgets to answer must not hang a pull). Thread-safe.
class responder {
 public:
  struct state;
  explicit responder(std::shared_ptr<state> s) : state_(std::move(s)) {}
  void send(response r) const;
  // True once the client connection is gone (handlers doing long work may stop early).
  [[nodiscard]] bool client_gone() const;

 private:
  std::shared_ptr<state> state_;
};

using handler = std::function<void(request&& req, responder resp)>;

// What happened on one request, for access logs and metrics.
struct request_log {
  std::string method;
  std::string target;
  unsigned status = 0;
  std::uint64_t body_bytes_sent = 0;
  bool aborted = false;  // body not completed (client gone, source error, timeout)
  std::string error;     // why it was aborted
  std::chrono::nanoseconds duration{0};
  tcp::endpoint remote;
  tls::peer_identity peer;
};

struct server_options {
  std::string name = "shoal";                       // Server header
  std::size_t max_header_bytes = 64 * 1024;         // request line + headers
  std::uint64_t max_body_bytes = 1 << 20;           // request body
  std::chrono::milliseconds idle_timeout{60000};    // no request on a keep-alive connection
  std::chrono::milliseconds read_timeout{30000};    // a request that does not finish arriving
  std::chrono::milliseconds write_timeout{60000};   // the client does not take any bytes
  std::chrono::milliseconds source_timeout{60000};  // a body_source produces nothing
  std::size_t stream_chunk_bytes = 1 << 20;         // max piece requested from a body_source
  // A request header must be complete this long after the connection was accepted, or after
  // the first byte of a later request on a keep-alive connection arrived (slow or half-sent
  // headers: slowloris). Waiting for that first byte is bounded by idle_timeout instead; a fresh
  // connection that sends nothing is closed after the shorter of the two.
  std::chrono::milliseconds header_timeout{10000};
  // Shedding (docs/design.md, "HTTP server"). Over max_connections_per_address (0: no cap) a new
  // connection is closed at once; at max_connections the server closes the oldest connection
  // waiting for a request of the address holding the most, so that an address holding fewer
  // (a new client) is still served. The accept loop never stops. IPv6 addresses count per /64.
  std::size_t max_connections = 10000;
  std::size_t max_connections_per_address = 256;
  // Slots of max_connections that anonymous connections may not take. Every connection is
  // anonymous today; once peers authenticate (mTLS, the identity work), admission in
  // server::impl::admit() lets authenticated nodes use these. 0 until then.
  std::size_t reserved_connections = 0;
  std::function<void(const request_log&)> on_request_done;  // called on the connection strand
  // TLS (common/tls.h): when set, the server speaks only TLS, each new connection with the
  // context's current certificate (rotations apply to new connections). The handshake must be
  // done within header_timeout (bounded by idle_timeout) of the accept, or the connection is
  // closed; until then it counts as waiting (sheddable) against the per-address and total caps.
  // A plaintext HTTP request gets a 400 that says the port speaks TLS. Failed handshakes (no
  // client certificate where one is required, another CA, an expired certificate) are closed by
  // OpenSSL's alert and logged with the reason (at most 20 lines per 10 s; the rest counted).
  // Files are sent by pread and TLS writes (no kTLS here) instead of sendfile.
  std::shared_ptr<tls::tls_context> tls;
};

// Lifecycle: construct → listen() → (serve) → stop(). Non-copyable, non-movable.
class server {
 public:
  server(net::io_context& ioc, server_options opts, handler h);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds and starts accepting. "127.0.0.1:0" picks a free port; see port().
  [[nodiscard]] status listen(const std::string& host, std::uint16_t port);
  [[nodiscard]] std::uint16_t port() const;
  [[nodiscard]] tcp::endpoint local_endpoint() const;

  // Stops accepting and closes idle connections at once; active responses may finish until
  // `grace` has passed, then their connections are closed. Safe from any thread; returns at once.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  // Number of open client connections.
  [[nodiscard]] std::size_t connections() const;
  // Connections closed by shedding since start: refused at accept (per-address cap, or at
  // max_connections when no waiting connection of a bigger holder could go) and evicted (a
  // waiting connection closed to make room).
  struct shed_counts {
    std::uint64_t refused = 0;
    std::uint64_t evicted = 0;
  };
  [[nodiscard]] shed_counts shed() const;
  // TLS connections refused since start: a plaintext request, a failed or timed-out handshake.
  struct tls_counts {
    std::uint64_t plaintext = 0;
    std::uint64_t handshake_failed = 0;
  };
  [[nodiscard]] tls_counts tls_refused() const;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

// Registers <prefix>_tls_plaintext_refused_total and <prefix>_tls_handshakes_failed_total from
// server::tls_refused() of the server `get` returns at scrape time (nullptr counts 0: a daemon
// makes its server after its metrics). tls::register_metrics covers the certificate itself.
void register_tls_refusal_metrics(metrics::registry& reg, std::string_view prefix,
                                  std::function<const server*()> get);

// "host:port" → (host, port); accepts "[v6]:port". Errors name the input.
[[nodiscard]] result<std::pair<std::string, std::uint16_t>> split_host_port(std::string_view s);
// Percent-decoding of a query component ('+' is a space); nullopt on malformed escapes.
[[nodiscard]] std::optional<std::string> percent_decode(std::string_view s,
                                                        bool plus_is_space = true);

}  // namespace shoal::http
