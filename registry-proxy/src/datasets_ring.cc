// Datasets on the replica ring (ring.h): each dataset ref is owned by one registry-proxy replica,
// the one that resolves it, keeps its record and manifest and seeds its groups. A request about
// a ref another member owns is redirected to that member; the list merges every live member's.

#include <memory>
#include <mutex>

#include "datasets_internal.h"
#include "registry-proxy/handler.h"
#include "common/dataset.h"
#include "common/origin_protocol.h"

namespace shoal::proxy {

using datasets_detail::json_answer;
using datasets_detail::json_error;

std::string proxy_handler::ring_from(const http::request& req) const {
  if (!d_.replicas) return {};
  std::string from(req.header(ring::from_header));
  if (req.peer.tls && !req.peer.is(tls::peer_role::registry_proxy)) from.clear();
  return from;
}

namespace {

// The ref a dataset request is about: a declaration's name@version, or the ref in the path of
// the status, manifest, object and dataset-metainfo routes. Empty for the list, and for requests
// the local handler refuses anyway (it answers their 400).
std::string ref_of(const http::request& req) {
  static constexpr std::string_view base = origin::paths::datasets;
  static constexpr std::string_view meta = origin::paths::dataset_metainfo;
  std::string_view path = req.path;
  if (path == base || path == std::string(base) + "/") {
    if (req.method != http::verb::post) return {};
    auto decl = dataset::parse_declaration(req.body);
    return decl ? decl->name + "@" + decl->version : std::string();
  }
  std::string_view rest;
  if (path.starts_with(meta))
    rest = path.substr(meta.size());
  else if (path.starts_with(std::string(base) + "/"))
    rest = path.substr(base.size() + 1);
  else
    return {};
  std::string ref(rest.substr(0, rest.find('/')));
  return dataset::parse_ref(ref) ? ref : std::string();
}

// Gathers the other members' lists, then answers with every dataset once.
struct list_merge {
  std::mutex mu;
  json all = json::array();
  std::size_t pending = 0;
  std::vector<std::string> failed;
  http::responder resp;
  explicit list_merge(http::responder r) : resp(std::move(r)) {}

  void add(const std::string& body) {
    auto j = json::parse(body, nullptr, false);
    if (!j.is_array()) return;
    for (auto& d : j) all.push_back(std::move(d));
  }
  void finish() {
    auto r = json_answer(200, all);
    if (!failed.empty()) {
      std::string why;
      for (auto& f : failed) why += (why.empty() ? "" : ", ") + f;
      r.headers.set("Shoal-Partial", why.substr(0, 1024));
    }
    resp.send(std::move(r));
  }
};

}  // namespace

bool proxy_handler::route_dataset(const http::request& req, const http::responder& resp) {
  if (!ring_from(req).empty()) return false;  // a member asks: answer from here
  auto& r = *d_.replicas;
  std::string_view path = req.path;
  const bool is_list =
      (path == origin::paths::datasets || path == std::string(origin::paths::datasets) + "/") &&
      (req.method == http::verb::get || req.method == http::verb::head);
  if (is_list && d_.dataset_list) {
    auto m = std::make_shared<list_merge>(resp);
    m->add(d_.dataset_list());
    std::vector<std::string> others;
    for (const auto& s : r.members())
      if (s.up && s.url != r.self()) others.push_back(s.url);
    if (others.empty()) {
      m->finish();
      return true;
    }
    m->pending = others.size();
    for (const auto& o : others) {
      auto rq = r.request(o, std::string(origin::paths::datasets));
      rq.timeouts.total = std::chrono::seconds(10);
      auto body = std::make_shared<std::string>();
      http::callbacks cb;
      cb.on_data = [body](std::string_view c) {
        if (body->size() + c.size() > (64u << 20)) return false;
        body->append(c);
        return true;
      };
      cb.on_complete = [m, body, o](result<http::completion> c) {
        std::lock_guard lk(m->mu);
        if (c && c->status == 200)
          m->add(*body);
        else
          m->failed.push_back(o + ": " +
                              (c ? "HTTP " + std::to_string(c->status) : c.error().message));
        if (--m->pending == 0) m->finish();
      };
      r.client().submit(std::move(rq), std::move(cb));
    }
    return true;
  }
  std::string ref = ref_of(req);
  if (ref.empty()) return false;
  std::string owner = r.owner("dataset:" + ref);
  if (owner == r.self()) return false;
  // The dataset API's own error shape, so a client that does not follow redirects reads why.
  auto out = json_error(307, "dataset " + ref + " is owned by " + owner + "; follow Location");
  out.headers.set("Location", owner + req.target);
  out.headers.set("Shoal-Ring-Owner", owner);
  resp.send(std::move(out));
  return true;
}

}  // namespace shoal::proxy
