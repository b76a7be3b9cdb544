#pragma once
// A small synchronous Redis client over hiredis (Debian's 0.14: no TLS, so Redis is reached only
// inside the trust boundary: loopback, a pod-local port, or stunnel4), for the scheduler's shared
// state (shared_state.h). It finds the primary through Sentinel when sentinels are configured
// (SENTINEL get-master-addr-by-name, then ROLE must say master: a sentinel can lag a failover),
// authenticates with an ACL user, and reconnects on the next command after any I/O error, so a
// Sentinel failover costs one failed command per connection.
//
// With TLS on Redis, the scheduler reaches every data node and sentinel through a local stunnel4
// tunnel (redis_options::tunnels maps what the sentinels name to the tunnels; docs/ha.md).
//
// Lifecycle: a redis_conn is one connection, opened lazily; a redis_pool lends connections to
// threads. Threading: a redis_conn is used by one thread at a time (the pool guarantees it);
// redis_pool is thread-safe. Every call is bounded by connect_timeout and command_timeout.

#include <hiredis.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace shoal::scheduler {

struct redis_options {
  // Either a primary's host:port ...
  std::string address;
  // ... or the sentinels (host:port each) that know the primary of `master_name`.
  std::vector<std::string> sentinels;
  std::string master_name = "shoal";
  std::string user, password;                    // ACL user on the data nodes ("": no AUTH)
  std::string sentinel_user, sentinel_password;  // on the sentinels ("": no AUTH)
  // Redis with TLS behind local tunnels (stunnel4; hiredis 0.14 has no TLS): the host:port a
  // sentinel names → the local host:port of the tunnel to it. Non-empty: a primary the sentinels
  // name that has no tunnel here is not connected to (plain text would leave this host).
  std::map<std::string, std::string> tunnels;
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds command_timeout{1000};
  [[nodiscard]] bool enabled() const { return !address.empty() || !sentinels.empty(); }
};

// A reply, copied out of hiredis's.
struct redis_reply {
  enum class kind { nil, string, status, integer, array, error };
  kind type = kind::nil;
  std::string str;  // string, status, error
  long long integer = 0;
  std::vector<redis_reply> elements;
  [[nodiscard]] bool is_nil() const { return type == kind::nil; }
  [[nodiscard]] bool is_error() const { return type == kind::error; }
};

class redis_conn {
 public:
  explicit redis_conn(const redis_options& opts) : opts_(opts) {}
  redis_conn(const redis_conn&) = delete;
  redis_conn& operator=(const redis_conn&) = delete;
  ~redis_conn();

  // Runs one command (connecting first when needed). An I/O error or timeout closes the
  // connection (the next call reconnects) and fails with unavailable; a Redis error reply is
  // returned as a reply of kind error, except READONLY/LOADING/MASTERDOWN (a failover under way),
  // which close the connection and fail with unavailable too.
  [[nodiscard]] result<redis_reply> command(const std::vector<std::string>& args);
  [[nodiscard]] result<redis_reply> command(std::initializer_list<std::string_view> args);
  // Commands sent in one round trip (pipelined); replies in order. Any I/O error fails them all.
  [[nodiscard]] result<std::vector<redis_reply>> pipeline(
      const std::vector<std::vector<std::string>>& cmds);
  // The same timeout for this connection's next commands (blocking reads: XREAD BLOCK).
  void set_command_timeout(std::chrono::milliseconds t);
  [[nodiscard]] bool connected() const { return ctx_ != nullptr; }
  // host:port of the primary this connection talks to ("" when closed).
  [[nodiscard]] const std::string& peer() const { return peer_; }
  void close();

 private:
  [[nodiscard]] status connect();
  [[nodiscard]] result<std::string> primary_from_sentinels();
  [[nodiscard]] status send_args(const std::vector<std::string>& args);
  [[nodiscard]] result<redis_reply> read_reply();

  redis_options opts_;
  redisContext* ctx_ = nullptr;
  std::string peer_;
  std::chrono::milliseconds timeout_{0};  // 0: opts_.command_timeout
};

// Connections lent to threads: lease() hands one out (opening a new one when none is idle, up
// to no limit: callers are the scheduler's bounded pools) and it returns on destruction.
class redis_pool {
 public:
  explicit redis_pool(redis_options opts) : opts_(std::move(opts)) {}
  class lease {
   public:
    lease(redis_pool& p, std::unique_ptr<redis_conn> c) : pool_(&p), conn_(std::move(c)) {}
    lease(lease&&) = default;
    lease& operator=(lease&&) = default;
    ~lease();
    redis_conn* operator->() { return conn_.get(); }
    redis_conn& operator*() { return *conn_; }

   private:
    redis_pool* pool_;
    std::unique_ptr<redis_conn> conn_;
  };
  [[nodiscard]] lease get();
  [[nodiscard]] const redis_options& options() const { return opts_; }

 private:
  redis_options opts_;
  std::mutex mu_;
  std::vector<std::unique_ptr<redis_conn>> idle_;
};

// Where a Redis named `named` (host:port, as a sentinel names it) is connected to: itself
// without tunnels, else its tunnel's local address; unavailable when tunnels has none for it.
[[nodiscard]] result<std::string> through_tunnel(const std::map<std::string, std::string>& tunnels,
                                                 const std::string& named);

// "host:port" → host and port; false when malformed (IPv6 as [addr]:port).
[[nodiscard]] bool split_host_port(std::string_view hp, std::string& host, int& port);

}  // namespace shoal::scheduler
