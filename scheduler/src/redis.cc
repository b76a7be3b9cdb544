#include "scheduler/redis.h"

#include <sys/time.h>

#include <charconv>

namespace shoal::scheduler {

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

redis_reply copy_reply(const redisReply* r) {
  redis_reply out;
  if (r == nullptr) return out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = redis_reply::kind::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = redis_reply::kind::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = redis_reply::kind::error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = redis_reply::kind::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = redis_reply::kind::array;
      out.elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i)
        out.elements.push_back(copy_reply(r->element[i]));
      break;
    default:
      break;
  }
  return out;
}

// An error reply that means "this is not (or not yet) a usable primary": reconnect elsewhere.
bool failover_error(const redis_reply& r) {
  if (!r.is_error()) return false;
  for (std::string_view p : {"READONLY", "LOADING", "MASTERDOWN", "NOAUTH"}) {
    if (r.str.starts_with(p)) return true;
  }
  return false;
}

}  // namespace

bool split_host_port(std::string_view hp, std::string& host, int& port) {
  std::size_t colon;
  if (hp.starts_with('[')) {
    auto close = hp.find(']');
    if (close == std::string_view::npos || close + 1 >= hp.size() || hp[close + 1] != ':')
      return false;
    host.assign(hp.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = hp.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    host.assign(hp.substr(0, colon));
  }
  auto ps = hp.substr(colon + 1);
  int p = 0;
  auto [end, ec] = std::from_chars(ps.data(), ps.data() + ps.size(), p);
  if (ec != std::errc() || end != ps.data() + ps.size() || p <= 0 || p > 65535) return false;
  port = p;
  return !host.empty();
}

redis_conn::~redis_conn() { close(); }

void redis_conn::close() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
  peer_.clear();
}

void redis_conn::set_command_timeout(std::chrono::milliseconds t) {
  timeout_ = t;
  if (ctx_ != nullptr) redisSetTimeout(ctx_, to_timeval(t.count() > 0 ? t : opts_.command_timeout));
}

namespace {

// One connection to host:port with AUTH (when a password is set); null and why on failure.
result<redisContext*> open(const std::string& hp, const std::string& user,
                           const std::string& password, std::chrono::milliseconds connect_timeout,
                           std::chrono::milliseconds command_timeout) {
  std::string host;
  int port = 0;
  if (!split_host_port(hp, host, port)) return fail(errc::config_error, "bad address " + hp);
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, to_timeval(connect_timeout));
  if (c == nullptr) return fail(errc::unavailable, "redis " + hp + ": out of memory");
  if (c->err != 0) {
    std::string why = c->errstr;
    redisFree(c);
    return fail(errc::unavailable, "redis " + hp + ": " + why);
  }
  redisSetTimeout(c, to_timeval(command_timeout));
  redisEnableKeepAlive(c);
  if (!password.empty()) {
    redisReply* r = user.empty()
                        ? static_cast<redisReply*>(redisCommand(c, "AUTH %s", password.c_str()))
                        : static_cast<redisReply*>(
                              redisCommand(c, "AUTH %s %s", user.c_str(), password.c_str()));
    auto rep = copy_reply(r);
    if (r != nullptr) freeReplyObject(r);
    if (r == nullptr || rep.is_error()) {
      std::string why = r == nullptr ? std::string(c->errstr) : rep.str;
      redisFree(c);
      return fail(errc::unauthorized, "redis " + hp + ": AUTH as " +
                                          (user.empty() ? std::string("default") : user) + ": " +
                                          why);
    }
  }
  return c;
}

}  // namespace

result<std::string> redis_conn::primary_from_sentinels() {
  std::string errors;
  for (const auto& s : opts_.sentinels) {
    auto c = open(s, opts_.sentinel_user, opts_.sentinel_password, opts_.connect_timeout,
                  opts_.command_timeout);
    if (!c) {
      errors += (errors.empty() ? "" : "; ") + c.error().message;
      continue;
    }
    auto* r = static_cast<redisReply*>(
        redisCommand(*c, "SENTINEL get-master-addr-by-name %s", opts_.master_name.c_str()));
    auto rep = copy_reply(r);
    if (r != nullptr) freeReplyObject(r);
    redisFree(*c);
    if (rep.type == redis_reply::kind::array && rep.elements.size() == 2) {
      const auto& host = rep.elements[0].str;
      std::string hp = host.find(':') != std::string::npos ? "[" + host + "]" : host;
      return hp + ":" + rep.elements[1].str;
    }
    errors += (errors.empty() ? "" : "; ") +
              ("sentinel " + s + ": " +
               (rep.is_error() ? rep.str : "no primary known for " + opts_.master_name));
  }
  return fail(errc::unavailable, "no sentinel named a primary: " + errors);
}

result<std::string> through_tunnel(const std::map<std::string, std::string>& tunnels,
                                   const std::string& named) {
  if (tunnels.empty()) return named;
  auto it = tunnels.find(named);
  if (it == tunnels.end()) {
    return fail(
        errc::unavailable,
        "redis " + named + " has no entry in redis.tunnels (it would be reached in plain text)");
  }
  return it->second;
}

status redis_conn::connect() {
  std::string hp = opts_.address;
  if (!opts_.sentinels.empty()) {
    auto p = primary_from_sentinels();
    if (!p) return fail(p.error());
    hp = *p;
  }
  auto via = through_tunnel(opts_.tunnels, hp);
  if (!via) return fail(via.error());
  auto c = open(*via, opts_.user, opts_.password, opts_.connect_timeout,
                timeout_.count() > 0 ? timeout_ : opts_.command_timeout);
  if (!c) return fail(c.error());
  ctx_ = *c;
  peer_ = hp;
  if (!opts_.sentinels.empty()) {
    // A sentinel can name the old primary for a moment after a failover: check the role.
    auto role = command({"ROLE"});
    if (!role) return fail(role.error());
    if (role->type != redis_reply::kind::array || role->elements.empty() ||
        role->elements[0].str != "master") {
      close();
      return fail(errc::unavailable, "redis " + hp + " is not a primary (a failover under way)");
    }
  }
  return {};
}

status redis_conn::send_args(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
      REDIS_OK) {
    std::string why = ctx_->errstr;
    close();
    return fail(errc::unavailable, "redis: " + why);
  }
  return {};
}

result<redis_reply> redis_conn::read_reply() {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK) {
    std::string why = ctx_->errstr;
    bool timed_out = ctx_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    close();
    return fail(timed_out ? errc::timeout : errc::unavailable,
                "redis: " + (timed_out ? std::string("no answer in time") : why));
  }
  auto* r = static_cast<redisReply*>(raw);
  auto rep = copy_reply(r);
  freeReplyObject(r);
  return rep;
}

result<std::vector<redis_reply>> redis_conn::pipeline(
    const std::vector<std::vector<std::string>>& cmds) {
  if (ctx_ == nullptr) {
    if (auto s = connect(); !s) return fail(s.error());
  }
  for (const auto& c : cmds) {
    if (auto s = send_args(c); !s) return fail(s.error());
  }
  std::vector<redis_reply> out;
  out.reserve(cmds.size());
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    auto r = read_reply();
    if (!r) return fail(r.error());
    if (failover_error(*r)) {
      std::string why = r->str;
      close();
      return fail(errc::unavailable, "redis: " + why);
    }
    out.push_back(std::move(*r));
  }
  return out;
}

result<redis_reply> redis_conn::command(const std::vector<std::string>& args) {
  auto r = pipeline({args});
  if (!r) return fail(r.error());
  return std::move(r->front());
}

result<redis_reply> redis_conn::command(std::initializer_list<std::string_view> args) {
  std::vector<std::string> v;
  v.reserve(args.size());
  for (auto a : args) v.emplace_back(a);
  return command(v);
}

redis_pool::lease::~lease() {
  if (pool_ == nullptr || !conn_) return;
  std::lock_guard lk(pool_->mu_);
  pool_->idle_.push_back(std::move(conn_));
}

redis_pool::lease redis_pool::get() {
  {
    std::lock_guard lk(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return lease(*this, std::move(c));
    }
  }
  return lease(*this, std::make_unique<redis_conn>(opts_));
}

}  // namespace shoal::scheduler
