#pragma once
// A tiny scriptable HTTP/1.1 server for client tests, header-only. It listens on
// 127.0.0.x:0, serves each connection on its own thread (keep-alive), records every request
// with the connection it came on, and answers with whatever the test's handler returns: status,
// headers, body in timed pieces, a delay before the head, no answer at all, a close or a stall
// in the middle of the body.
//
// With an SSL_CTX (see test_tls.h) it speaks HTTPS instead.
//
// Lifecycle: listening once constructed; stop() (or the destructor) wakes every connection
// thread, including those holding a stalled socket, and joins them. Every wait inside is a poll
// with a short timeout, so stop() returns within ~100 ms. Handlers run on connection threads.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace shoal::testing {

struct recorded_request {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int connection = 0;  // 1-based number of the connection it arrived on
  int index = 0;       // 0-based order of arrival on this server
  std::chrono::steady_clock::time_point at;

  std::optional<std::string> header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k.size() == name.size() &&
          std::equal(k.begin(), k.end(), name.begin(), [](unsigned char a, unsigned char b) {
            return std::tolower(a) == std::tolower(b);
          })) {
        return v;
      }
    }
    return std::nullopt;
  }
};

struct reply {
  int status = 200;
  std::string reason;  // defaults to a standard phrase
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Content-Length to announce; defaults to body.size(). Set larger to simulate truncation.
  std::optional<std::uint64_t> content_length;
  bool send_content_length = true;  // false: no length, close after the body
  std::size_t chunk_size = 0;       // write the body in pieces of this size (0: at once)
  std::chrono::milliseconds chunk_delay{0};
  std::chrono::milliseconds head_delay{0};
  bool no_response = false;                // read the request, never answer, hold the socket
  std::optional<std::size_t> close_after;  // close after this many body bytes
  std::optional<std::size_t> stall_after;  // stop after this many body bytes, hold the socket
  bool close = false;                      // close the connection after this reply
  std::optional<std::string> raw;          // send exactly this instead of a response, close
};

class test_http_server {
 public:
  using handler = std::function<reply(const recorded_request&)>;

  explicit test_http_server(handler h, const std::string& address = "127.0.0.1",
                            SSL_CTX* tls = nullptr)
      : handler_(std::move(h)), address_(address), tls_(tls) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("socket failed");
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    if (::inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) {
      throw std::runtime_error("bad address");
    }
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        ::listen(listen_fd_, 512) != 0) {
      ::close(listen_fd_);
      throw std::runtime_error("bind/listen failed");
    }
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~test_http_server() { stop(); }
  test_http_server(const test_http_server&) = delete;
  test_http_server& operator=(const test_http_server&) = delete;

  void stop() {
    if (stopped_.exchange(true)) return;
    if (accept_thread_.joinable()) accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(conn_threads_);
    }
    for (auto& th : threads) th.join();
    ::close(listen_fd_);
  }

  std::uint16_t port() const { return port_; }
  std::string base() const {
    return (tls_ != nullptr ? "https://" : "http://") + address_ + ":" + std::to_string(port_);
  }
  std::string url(std::string_view path) const { return base() + std::string(path); }

  std::vector<recorded_request> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::size_t request_count() const {
    std::lock_guard lock(mu_);
    return requests_.size();
  }
  int connections() const { return accepted_.load(); }
  int max_concurrent_connections() const { return max_open_.load(); }

 private:
  // One accepted connection, plain or TLS. Reads and writes poll with short timeouts so that
  // stop() is noticed quickly.
  struct conn {
    int fd = -1;
    SSL* ssl = nullptr;
  };

  // >0: bytes read; 0: peer closed (or error); -1: nothing within `wait_ms`.
  static ssize_t recv_some(conn& c, char* buf, std::size_t n, int wait_ms) {
    if (c.ssl == nullptr || SSL_pending(c.ssl) == 0) {
      pollfd p{c.fd, POLLIN, 0};
      if (::poll(&p, 1, wait_ms) <= 0) return -1;
    }
    if (c.ssl == nullptr) {
      ssize_t r = ::recv(c.fd, buf, n, 0);
      return r < 0 ? 0 : r;
    }
    int r = SSL_read(c.ssl, buf, static_cast<int>(n));
    if (r > 0) return r;
    int err = SSL_get_error(c.ssl, r);
    return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ? -1 : 0;
  }

  void accept_loop() {
    while (!stopped_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      int conn_no = ++accepted_;
      int open = ++open_;
      int prev = max_open_.load();
      while (open > prev && !max_open_.compare_exchange_weak(prev, open)) {
      }
      std::lock_guard lock(mu_);
      conn_threads_.emplace_back([this, fd, conn_no] {
        conn c{fd, nullptr};
        if (tls_ == nullptr || handshake(c)) serve(c, conn_no);
        if (c.ssl != nullptr) SSL_free(c.ssl);
        ::close(fd);
        --open_;
      });
    }
  }

  bool handshake(conn& c) {
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    c.ssl = SSL_new(tls_);
    if (c.ssl == nullptr) return false;
    SSL_set_fd(c.ssl, c.fd);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!stopped_.load() && std::chrono::steady_clock::now() < end) {
      int r = SSL_accept(c.ssl);
      if (r == 1) return true;
      int err = SSL_get_error(c.ssl, r);
      if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) return false;
      pollfd p{c.fd, static_cast<short>(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
      ::poll(&p, 1, 50);
    }
    return false;
  }

  // Waits until the peer closes or the server stops.
  void hold(conn& c) {
    char buf[4096];
    while (!stopped_.load()) {
      if (recv_some(c, buf, sizeof buf, 20) == 0) return;
    }
  }

  void sleep_for(std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (!stopped_.load() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  bool send_all(conn& c, std::string_view data) {
    while (!data.empty()) {
      if (stopped_.load()) return false;
      pollfd p{c.fd, POLLOUT, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      if (c.ssl == nullptr) {
        ssize_t n = ::send(c.fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n <= 0) return false;
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      int n = SSL_write(c.ssl, data.data(), static_cast<int>(data.size()));
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      int err = SSL_get_error(c.ssl, n);
      if (err == SSL_ERROR_WANT_READ) {
        pollfd pr{c.fd, POLLIN, 0};
        ::poll(&pr, 1, 50);
      } else if (err != SSL_ERROR_WANT_WRITE) {
        return false;
      }
    }
    return true;
  }

  // Reads one request from `buf` + the connection; false when the peer closed or on stop.
  bool read_request(conn& c, std::string& buf, recorded_request& req) {
    std::size_t head_end;
    char tmp[16384];
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (stopped_.load() || buf.size() > 256 * 1024) return false;
      ssize_t n = recv_some(c, tmp, sizeof tmp, 50);
      if (n == 0) return false;
      if (n > 0) buf.append(tmp, static_cast<std::size_t>(n));
    }
    std::string head = buf.substr(0, head_end);
    buf.erase(0, head_end + 4);
    std::size_t line_end = head.find("\r\n");
    std::string first = head.substr(0, line_end);
    auto sp1 = first.find(' ');
    auto sp2 = first.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) return false;
    req.method = first.substr(0, sp1);
    req.target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      std::size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      pos = e + 2;
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      req.headers.emplace_back(line.substr(0, colon), v);
    }
    std::size_t clen = 0;
    if (auto v = req.header("Content-Length")) {
      try {
        clen = std::stoul(*v);
      } catch (...) {
        return false;
      }
    }
    while (buf.size() < clen) {
      if (stopped_.load()) return false;
      ssize_t n = recv_some(c, tmp, sizeof tmp, 50);
      if (n == 0) return false;
      if (n > 0) buf.append(tmp, static_cast<std::size_t>(n));
    }
    req.body = buf.substr(0, clen);
    buf.erase(0, clen);
    return true;
  }

  static std::string phrase(int s) {
    switch (s) {
      case 200:
        return "OK";
      case 206:
        return "Partial Content";
      case 301:
        return "Moved Permanently";
      case 302:
        return "Found";
      case 303:
        return "See Other";
      case 307:
        return "Temporary Redirect";
      case 308:
        return "Permanent Redirect";
      case 404:
        return "Not Found";
      case 429:
        return "Too Many Requests";
      case 500:
        return "Internal Server Error";
      case 502:
        return "Bad Gateway";
      case 503:
        return "Service Unavailable";
      case 504:
        return "Gateway Timeout";
      default:
        return "Status";
    }
  }

  void serve(conn& c, int conn_no) {
    std::string buf;
    while (!stopped_.load()) {
      recorded_request req;
      if (!read_request(c, buf, req)) return;
      req.connection = conn_no;
      req.at = std::chrono::steady_clock::now();
      {
        std::lock_guard lock(mu_);
        req.index = static_cast<int>(requests_.size());
        requests_.push_back(req);
      }
      reply r = handler_(req);
      if (r.no_response) return hold(c);
      if (r.raw) {
        send_all(c, *r.raw);
        return;
      }
      sleep_for(r.head_delay);
      const bool head = req.method == "HEAD";
      std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " +
                        (r.reason.empty() ? phrase(r.status) : r.reason) + "\r\n";
      for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
      if (r.send_content_length) {
        out +=
            "Content-Length: " + std::to_string(r.content_length.value_or(r.body.size())) + "\r\n";
      }
      const bool close = r.close || !r.send_content_length;
      if (close) out += "Connection: close\r\n";
      out += "\r\n";
      if (!send_all(c, out)) return;
      if (!head) {
        std::string_view body = r.body;
        std::size_t limit = body.size();
        if (r.close_after) limit = std::min(limit, *r.close_after);
        if (r.stall_after) limit = std::min(limit, *r.stall_after);
        std::size_t sent = 0;
        const std::size_t piece = r.chunk_size == 0 ? limit : r.chunk_size;
        while (sent < limit) {
          if (sent > 0) sleep_for(r.chunk_delay);
          std::size_t n = std::min(piece, limit - sent);
          if (!send_all(c, body.substr(sent, n))) return;
          sent += n;
        }
        if (r.stall_after && sent == *r.stall_after) return hold(c);
        // Fewer bytes than announced (close_after, or a larger content_length): close.
        if (sent < r.content_length.value_or(r.body.size())) return;
      }
      if (close) return;
    }
  }

  handler handler_;
  std::string address_;
  SSL_CTX* tls_ = nullptr;  // not owned
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> open_{0};
  std::atomic<int> max_open_{0};
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::vector<std::thread> conn_threads_;
  std::vector<recorded_request> requests_;
};

}  // namespace shoal::testing
