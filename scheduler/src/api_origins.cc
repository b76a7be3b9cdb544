// The registry-proxy ring's membership route (/v1/origins; scheduler/origins.h), beside api.cc.
#include "scheduler/api.h"
#include "common/json_text.h"

namespace shoal::scheduler {

using nlohmann::json;

http::response api::on_origins(const http::request& req) {
  auto answer = [&](const origin_members::listing& l) {
    json j = {{"members", l.members}, {"ttl_ms", origins_.ttl().count()}, {"stale", l.stale}};
    return http::response::json(200, json_text(j));
  };
  if (req.method == http::verb::get || req.method == http::verb::head)
    return answer(origins_.list());
  if (req.method != http::verb::post) return json_error(405, "use POST (announce) or GET (list)");
  auto body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return json_error(400, "the body must be a JSON object {\"url\": \"<base URL>\"}");
  const auto u = body.find("url");
  if (u == body.end() || !u->is_string())
    return json_error(400, "\"url\" must be a string: this replica's base URL");
  const auto url = u->get<std::string>();
  if (!origin_members::valid_url(url)) {
    return json_error(400,
                      "\"url\" must be a base URL (http[s]://host[:port], at most 256 "
                      "bytes, nothing after the port)");
  }
  auto l = origins_.announce(url);
  if (!l) return json_error(429, l.error().message);
  return answer(*l);
}

}  // namespace shoal::scheduler
