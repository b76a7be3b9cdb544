#include "proxy_link.h"

#include <chrono>

#include "common/origin_protocol.h"

namespace shoal::peerd {

namespace {
std::chrono::milliseconds ms(const config::duration& d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d.get());
}
std::string trimmed(std::string u) {
  while (!u.empty() && u.back() == '/') u.pop_back();
  return u;
}
}  // namespace

result<std::unique_ptr<proxy_link>> proxy_link::create(const upstream_config& c,
                                                       http::client& http) {
  auto urls = registry_proxy_urls(c);
  if (urls.empty())
    return fail(errc::config_error, "upstream.registry_proxy: no registry-proxy URL is set");
  endpoints::options o;
  o.backoff = ms(c.registry_proxy_backoff);
  o.resolve_interval = ms(c.scheduler_resolve_interval);
  o.resolve_timeout = ms(c.connect_timeout);
  auto s = endpoints::endpoint_set::create(urls, o);
  if (!s) return fail(s.error().wrap("upstream.registry_proxy(ies)"));
  return std::unique_ptr<proxy_link>(new proxy_link(http, std::move(*s), std::move(urls)));
}

proxy_link::proxy_link(http::client& http, std::shared_ptr<endpoints::endpoint_set> s,
                       std::vector<std::string> urls)
    : http_(http), set_(std::move(s)), urls_(std::move(urls)) {}

std::string proxy_link::base() {
  auto b = set_->bases();
  return b.empty() ? std::string() : b.front();
}

result<http::full_response> proxy_link::call(http::client_request req, std::size_t max_body) {
  return endpoints::run(
      *set_, std::move(req), endpoints::call_kind::read,
      [&](http::client_request r) { return origin::call(http_, std::move(r), max_body); });
}

std::string proxy_url(proxy_link* link, const upstream_config& c, std::string_view path) {
  return (link != nullptr ? link->base() : trimmed(c.registry_proxy)) + std::string(path);
}

result<http::full_response> proxy_call(proxy_link* link, const upstream_config& c,
                                       http::client& http, http::client_request req,
                                       std::size_t max_body) {
  if (link != nullptr) return link->call(std::move(req), max_body);
  req.url = trimmed(c.registry_proxy) + req.url;
  return origin::call(http, std::move(req), max_body);
}

}  // namespace shoal::peerd
