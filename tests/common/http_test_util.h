#pragma once
// A raw, synchronous HTTP/1.1 client for server tests: sends exact bytes and parses exactly what
// came back, so tests see framing (Content-Length, chunking, early close) as a client would.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace shoal::testing {

struct raw_response {
  int status = 0;
  std::multimap<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool complete = false;  // body fully received per its framing
  bool closed = false;    // the server closed the connection

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string{} : it->second;
  }
};

class raw_conn {
 public:
  // `source`: the local IPv4 address to connect from (host order; 0: any), e.g. 127.0.0.2.
  explicit raw_conn(std::uint16_t port, int rcvbuf = 0, std::uint32_t source = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    if (source != 0) {
      sockaddr_in b{};
      b.sin_family = AF_INET;
      b.sin_addr.s_addr = htonl(source);
      ::bind(fd_, reinterpret_cast<sockaddr*>(&b), sizeof b);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~raw_conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  raw_conn(const raw_conn&) = delete;
  raw_conn& operator=(const raw_conn&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool send_all(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads up to `n` bytes (waiting at most `timeout`); returns "" on close/timeout.
  std::string read_some(std::size_t n, std::chrono::milliseconds timeout) {
    if (!buf_.empty()) {
      std::string out = buf_.substr(0, n);
      buf_.erase(0, out.size());
      return out;
    }
    if (!wait_readable(timeout)) return {};
    std::string out(n, '\0');
    ssize_t r = ::recv(fd_, out.data(), n, 0);
    if (r <= 0) {
      closed_ = true;
      return {};
    }
    out.resize(static_cast<std::size_t>(r));
    return out;
  }

  // Reads one response. For HEAD pass head=true (no body is expected).
  raw_response read_response(bool head = false,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    raw_response r;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (buf_.find("\r\n\r\n") == std::string::npos) {
      if (!fill(deadline)) {
        r.closed = closed_;
        return r;
      }
    }
    auto end = buf_.find("\r\n\r\n");
    std::string head_block = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    auto line_end = head_block.find("\r\n");
    std::string status_line = head_block.substr(0, line_end);
    if (status_line.size() >= 12) r.status = std::stoi(status_line.substr(9, 3));
    std::size_t pos = line_end == std::string::npos ? head_block.size() : line_end + 2;
    while (pos < head_block.size()) {
      auto e = head_block.find("\r\n", pos);
      if (e == std::string::npos) e = head_block.size();
      std::string line = head_block.substr(pos, e - pos);
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string k = line.substr(0, colon);
        for (auto& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(0, 1);
        r.headers.emplace(k, v);
      }
      pos = e + 2;
    }
    if (head || r.status == 204 || r.status == 304) {
      r.complete = true;
      return r;
    }
    if (r.header("transfer-encoding") == "chunked") {
      for (;;) {
        while (buf_.find("\r\n") == std::string::npos) {
          if (!fill(deadline)) {
            r.closed = closed_;
            return r;
          }
        }
        auto le = buf_.find("\r\n");
        std::size_t sz = std::stoul(buf_.substr(0, le), nullptr, 16);
        buf_.erase(0, le + 2);
        while (buf_.size() < sz + 2) {
          if (!fill(deadline)) {
            r.body += buf_;
            buf_.clear();
            r.closed = closed_;
            return r;
          }
        }
        r.body += buf_.substr(0, sz);
        buf_.erase(0, sz + 2);
        if (sz == 0) {
          r.complete = true;
          return r;
        }
      }
    }
    std::string cl = r.header("content-length");
    if (cl.empty()) {
      while (fill(deadline)) {
      }
      r.body = buf_;
      buf_.clear();
      r.closed = closed_;
      r.complete = closed_;
      return r;
    }
    std::size_t want = std::stoull(cl);
    while (buf_.size() < want) {
      if (!fill(deadline)) break;
    }
    std::size_t take = std::min(want, buf_.size());
    r.body = buf_.substr(0, take);
    buf_.erase(0, take);
    r.complete = r.body.size() == want;
    r.closed = closed_;
    return r;
  }

  // True if the server closed the connection within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_) {
      if (!fill(deadline)) return closed_;
    }
    return true;
  }

 private:
  bool wait_readable(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
  }
  bool fill(std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (!wait_readable(left)) return false;
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string buf_;
};

inline std::string get_req(const std::string& target, const std::string& extra = "",
                           const std::string& method = "GET") {
  return method + " " + target + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

}  // namespace shoal::testing
