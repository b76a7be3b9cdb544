// The HTTP request path every daemon shares: bytes from a client socket into the Boost.Beast
// server (common/src/http_server.cc, http_connection.cc): request line and header parsing, body
// limits, keep-alive and pipelining, Range on a rangeable answer, HEAD, and what the routes read
// from a request (query parameters, repeated headers, /v2 paths, metainfo and chunks requests).
// One real server on 127.0.0.1 for the whole run; each input is written on a fresh connection,
// the write side closed, and the answer read to the end. Nothing crashes, every answer starts
// with a status line, and the server still accepts afterwards.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/http_server.h"
#include "common/origin_protocol.h"
#include "../harness.h"

namespace {

using namespace shoal;
namespace net = boost::asio;

void routes_read(const http::request& req) {
  fuzz::accepted();
  (void)req.query_param("ns");
  (void)req.query_param("repo");
  (void)req.header_list("Accept");
  (void)req.header("Authorization");
  origin::route_error err;
  (void)origin::parse_v2_path(req.path, err);
  (void)origin::check_version(req);
  fuzz::check_result(origin::ns_param(req), "ns_param");
  (void)origin::lenient_wait(req);
  if (req.path.starts_with("/shoal/v1/metainfo/")) {
    (void)origin::parse_metainfo_request(req);
    (void)origin::parse_chunks_request(req);
  }
}

struct server_env {
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work{ioc.get_executor()};
  std::unique_ptr<http::server> srv;
  std::vector<std::thread> threads;

  server_env() {
    http::server_options o;
    o.max_header_bytes = 16 * 1024;
    o.max_body_bytes = 64 * 1024;
    o.idle_timeout = std::chrono::milliseconds(2000);
    o.read_timeout = std::chrono::milliseconds(2000);
    o.write_timeout = std::chrono::milliseconds(2000);
    srv = std::make_unique<http::server>(ioc, o, [](http::request&& req, http::responder r) {
      routes_read(req);
      auto res = http::response::text(200, std::string(1000, 'x'));
      res.rangeable = true;
      r.send(std::move(res));
    });
    auto st = srv->listen("127.0.0.1", 0);
    if (!st) fuzz::check_failed("listen", st.error().message);
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { ioc.run(); });
  }
  void stop() {
    srv->stop(std::chrono::milliseconds(0));
    work.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ioc.stop();
    for (auto& t : threads) t.join();
    srv.reset();
  }
};

server_env* g_env = nullptr;

int connect_to(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  linger l{1, 0};  // close with RST: no TIME_WAIT pile-up over thousands of connections
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_env = new server_env;
  std::atexit([] {
    g_env->stop();
    delete g_env;
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int fd = connect_to(g_env->srv->port());
  if (fd < 0) fuzz::check_failed("the server no longer accepts connections", "");
  std::size_t sent = 0;
  while (sent < size) {
    ssize_t w = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (w <= 0) break;  // the server may close early (limits): fine
    sent += static_cast<std::size_t>(w);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[16384];
  for (int i = 0; i < 1000; ++i) {
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    answer.append(buf, static_cast<std::size_t>(r));
  }
  ::close(fd);
  if (!answer.empty() && !answer.starts_with("HTTP/1."))
    fuzz::check_failed("answer without a status line", answer);
  return 0;
}
