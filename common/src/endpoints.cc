#include "common/endpoints.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <optional>
#include <thread>

#include "common/log.h"
#include "common/thread_name.h"

namespace shoal::endpoints {

namespace {

bool is_ip_literal(std::string host) {
  if (host.size() > 1 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string trim_base(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// One resolution in flight: the resolver thread fills it, the set reads it.
struct pending_resolve {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  result<std::vector<std::string>> out = std::vector<std::string>{};
};

}  // namespace

result<std::vector<std::string>> resolve_system(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return fail(errc::unavailable, "resolve " + host + ": " + ::gai_strerror(rc));
  std::vector<std::string> out;
  for (addrinfo* p = res; p != nullptr; p = p->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {0};
    const void* a =
        p->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr);
    if (p->ai_family != AF_INET && p->ai_family != AF_INET6) continue;
    if (::inet_ntop(p->ai_family, a, buf, sizeof buf) == nullptr) continue;
    std::string s = buf;
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  }
  ::freeaddrinfo(res);
  return out;
}

std::string endpoint::url(std::string_view path) const { return base + std::string(path); }

std::string endpoint::str() const { return address.empty() ? base : base + " (" + address + ")"; }

void endpoint::apply(http::client_request& r) const {
  r.url = base + r.url;
  if (address.empty()) return;
  auto ep = http::parse_endpoint(base);
  if (!ep) return;  // create() parsed every base: cannot happen
  std::string to = address.find(':') != std::string::npos ? "[" + address + "]" : address;
  std::string entry = ep->host + ":" + ep->port + ":" + to + ":" + ep->port;
  std::shared_ptr<curl_slist> list(curl_slist_append(nullptr, entry.c_str()), curl_slist_free_all);
  // The list lives as long as the request (this hook holds it), so past every easy handle that
  // points at it.
  r.customize = [list, prev = std::move(r.customize)](CURL* e) {
    curl_easy_setopt(e, CURLOPT_CONNECT_TO, list.get());
    if (prev) prev(e);
  };
}

// What the set knows of one configured base URL.
struct endpoint_set::name_state {
  std::string base;
  std::string host;  // empty for an IP literal: never resolved
  std::vector<std::string> addresses;
  clock::time_point resolved_at{};
  std::shared_ptr<pending_resolve> pending;
};

endpoint_set::endpoint_set(std::vector<std::string> bases, options o)
    : opts_(std::move(o)), bases_(std::move(bases)) {
  if (!opts_.now) opts_.now = [] { return clock::now(); };
  if (!opts_.resolver) opts_.resolver = resolve_system;
}

endpoint_set::~endpoint_set() = default;

result<std::shared_ptr<endpoint_set>> endpoint_set::create(std::vector<std::string> bases,
                                                           options o) {
  std::vector<std::string> unique;
  for (auto& b : bases) {
    b = trim_base(std::move(b));
    if (b.empty()) continue;
    if (auto ep = http::parse_endpoint(b); !ep) return fail(ep.error());
    if (std::find(unique.begin(), unique.end(), b) == unique.end()) unique.push_back(b);
  }
  if (unique.empty()) return fail(errc::invalid_argument, "no endpoint given");
  std::shared_ptr<endpoint_set> s(new endpoint_set(unique, std::move(o)));
  std::lock_guard lk(s->mu_);
  for (const auto& b : s->bases_) {
    auto n = std::make_unique<name_state>();
    n->base = b;
    auto ep = http::parse_endpoint(b);
    if (!is_ip_literal(ep->host)) n->host = ep->host;
    s->names_.push_back(std::move(n));
  }
  // Every name at once, then one shared deadline for their answers.
  auto now = s->opts_.now();
  s->refresh_locked(now);
  auto deadline = clock::now() + s->opts_.resolve_timeout;
  for (auto& n : s->names_) {
    if (!n->pending) continue;
    std::unique_lock plk(n->pending->mu);
    n->pending->cv.wait_until(plk, deadline, [&] { return n->pending->done; });
  }
  s->refresh_locked(now);
  return s;
}

void endpoint_set::refresh_locked(clock::time_point now) {
  for (auto& n : names_) {
    if (n->host.empty()) continue;
    if (n->pending) {
      std::lock_guard plk(n->pending->mu);
      if (!n->pending->done) continue;
      auto& out = n->pending->out;
      if (out && !out->empty()) {
        if (out->size() > opts_.max_addresses) out->resize(opts_.max_addresses);
        if (*out != n->addresses) {
          log::info("endpoint addresses", log::kv("base", n->base),
                    log::kv("addresses", static_cast<int>(out->size())));
        }
        n->addresses = std::move(*out);
      } else if (!out) {
        // Keep what the last answer said: a resolver hiccup must not shrink the set.
        log::debug("cannot resolve an endpoint", log::kv("base", n->base),
                   log::kv("error", out.error().message));
      }
      n->resolved_at = now;
      n->pending.reset();
      continue;
    }
    if (n->resolved_at != clock::time_point{} && now - n->resolved_at < opts_.resolve_interval)
      continue;
    // The resolver may block far longer than anyone wants to wait (getaddrinfo has no timeout):
    // it runs on its own thread, which holds only the pending state.
    auto p = std::make_shared<pending_resolve>();
    n->pending = p;
    n->resolved_at = now;
    std::thread([p, host = n->host, fn = opts_.resolver] {
      name_this_thread("resolve");
      auto r = fn(host);
      {
        std::lock_guard plk(p->mu);
        p->out = std::move(r);
        p->done = true;
      }
      p->cv.notify_all();
    }).detach();
  }
}

std::vector<endpoint> endpoint_set::all_locked() const {
  std::vector<endpoint> out;
  for (const auto& n : names_) {
    if (n->addresses.size() < 2) {
      out.push_back({n->base, {}});
      continue;
    }
    for (const auto& a : n->addresses) out.push_back({n->base, a});
  }
  return out;
}

std::vector<endpoint> endpoint_set::order() {
  std::lock_guard lk(mu_);
  auto now = opts_.now();
  refresh_locked(now);
  std::erase_if(down_, [&](const auto& d) { return d.second <= now; });
  auto all = all_locked();
  auto down_at = [&](const endpoint& e) -> std::optional<clock::time_point> {
    auto s = e.str();
    for (const auto& [k, t] : down_)
      if (k == s) return t;
    return std::nullopt;
  };
  std::vector<endpoint> up, first, down;
  std::vector<std::pair<clock::time_point, std::size_t>> down_idx;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (auto t = down_at(all[i])) {
      down_idx.emplace_back(*t, i);
    } else if (all[i].str() == last_good_) {
      first.push_back(all[i]);
    } else {
      up.push_back(all[i]);
    }
  }
  std::stable_sort(down_idx.begin(), down_idx.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  first.insert(first.end(), up.begin(), up.end());
  for (const auto& [t, i] : down_idx) first.push_back(all[i]);
  return first;
}

std::vector<std::string> endpoint_set::bases() {
  auto o = order();
  std::vector<std::string> out;
  for (const auto& e : o) {
    if (std::find(out.begin(), out.end(), e.base) == out.end()) out.push_back(e.base);
  }
  return out;
}

void endpoint_set::succeeded(const endpoint& e) {
  std::lock_guard lk(mu_);
  auto s = e.str();
  std::erase_if(down_, [&](const auto& d) { return d.first == s; });
  if (last_good_ == s) return;
  if (!last_good_.empty())
    log::info("failed over to another endpoint", log::kv("from", last_good_), log::kv("to", s));
  last_good_ = s;
}

void endpoint_set::failed(const endpoint& e) {
  std::lock_guard lk(mu_);
  auto s = e.str();
  auto back = opts_.now() + opts_.backoff;
  std::erase_if(down_, [&](const auto& d) { return d.first == s; });
  down_.emplace_back(s, back);
}

bool failed_before_sending(const error& e) {
  // http::client: CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST and CURLE_SSL_CONNECT_ERROR
  // are errc::unavailable; a connect timeout is errc::timeout saying "connect to ...".
  if (e.is(errc::unavailable)) return true;
  return e.is(errc::timeout) && e.message.starts_with("connect to ");
}

result<http::full_response> run(endpoint_set& s, http::client_request req, call_kind kind,
                                const attempt_fn& attempt) {
  auto eps = s.order();
  std::optional<result<http::full_response>> last;
  std::size_t tried = 0;
  for (std::size_t i = 0; i < eps.size(); ++i) {
    tried = i;
    http::client_request r = req;
    if (eps.size() > 1) r.max_retries = 0;  // the next endpoint is the retry
    eps[i].apply(r);
    auto f = attempt(std::move(r));
    if (!f && f.error().is(errc::cancelled)) return f;  // our own stop, not the endpoint's fault
    bool gateway = f && (f->status == 503 ||
                         (kind != call_kind::read && (f->status == 502 || f->status == 504)));
    if (f && !gateway) {
      s.succeeded(eps[i]);
      return f;
    }
    s.failed(eps[i]);
    bool move_on = kind == call_kind::idempotent || kind == call_kind::read ||
                   (!f && failed_before_sending(f.error()));
    if (i + 1 < eps.size()) {
      log::debug(
          "endpoint failed", log::kv("endpoint", eps[i].str()),
          log::kv("error", f ? "HTTP " + std::to_string(f->status) : f.error().message),
          log::kv("next", move_on ? eps[i + 1].str() : std::string("none (not idempotent)")));
    }
    last = std::move(f);
    if (!move_on) break;
  }
  if (*last || eps.size() == 1) return std::move(*last);
  return fail(last->error().wrap(eps[tried].str()));
}

result<http::full_response> fetch(http::client& c, endpoint_set& s, http::client_request req,
                                  call_kind kind, std::size_t max_body) {
  return run(s, std::move(req), kind,
             [&](http::client_request r) { return http::fetch(c, std::move(r), max_body); });
}

std::vector<std::string> split_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& it : items) {
    std::size_t start = 0;
    while (start <= it.size()) {
      auto comma = it.find(',', start);
      if (comma == std::string::npos) comma = it.size();
      std::string one = it.substr(start, comma - start);
      while (!one.empty() && (one.front() == ' ' || one.front() == '\t')) one.erase(0, 1);
      while (!one.empty() && (one.back() == ' ' || one.back() == '\t')) one.pop_back();
      if (!one.empty()) out.push_back(std::move(one));
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace shoal::endpoints
