#include "scheduler_link.h"

#include <chrono>

namespace shoal::peerd {

namespace {
std::chrono::milliseconds ms(const config::duration& d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d.get());
}
}  // namespace

result<std::unique_ptr<scheduler_link>> scheduler_link::create(const upstream_config& c,
                                                               http::client& http) {
  auto urls = scheduler_urls(c);
  if (urls.empty()) return std::unique_ptr<scheduler_link>();
  endpoints::options o;
  o.backoff = ms(c.scheduler_backoff);
  o.resolve_interval = ms(c.scheduler_resolve_interval);
  o.resolve_timeout = ms(c.scheduler_connect_timeout);
  auto s = endpoints::endpoint_set::create(urls, o);
  if (!s) return fail(s.error().wrap("upstream.scheduler(s)"));
  return std::unique_ptr<scheduler_link>(new scheduler_link(c, http, std::move(*s), urls));
}

scheduler_link::scheduler_link(const upstream_config& c, http::client& http,
                               std::shared_ptr<endpoints::endpoint_set> s,
                               std::vector<std::string> urls)
    : cfg_(c), http_(http), set_(std::move(s)), urls_(std::move(urls)) {}

http::client_request scheduler_link::request(std::string method, std::string path) const {
  http::client_request r;
  r.method = std::move(method);
  r.url = std::move(path);
  r.timeouts.connect = ms(cfg_.scheduler_connect_timeout);
  r.timeouts.stall = ms(cfg_.scheduler_timeout);
  r.max_retries = 0;
  return r;
}

result<http::full_response> scheduler_link::call(http::client_request req, std::size_t max_body) {
  return endpoints::fetch(http_, *set_, std::move(req), endpoints::call_kind::idempotent, max_body);
}

result<http::full_response> scheduler_link::run(http::client_request req,
                                                const endpoints::attempt_fn& attempt) {
  if (req.timeouts.connect > ms(cfg_.scheduler_connect_timeout))
    req.timeouts.connect = ms(cfg_.scheduler_connect_timeout);
  return endpoints::run(*set_, std::move(req), endpoints::call_kind::idempotent, attempt);
}

}  // namespace shoal::peerd
