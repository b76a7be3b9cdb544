// Datasets on the replica ring (ring.h): each dataset ref is owned by one registry-proxy replica,
// the one that resolves it, keeps its record and manifest and seeds its groups. A request about
// a ref another member owns is redirected to that member; the list merges every live member's.

#include <map>
#include <memory>
#include <mutex>

#include "dataset_copies.h"
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

// Gathers the other members' lists, then answers with every dataset once: the entry of the
// member that owns its ref when that member answered (the others hold copies, dataset_copies.h),
// else the first one seen.
struct list_merge {
  std::mutex mu;
  const ring& r;
  std::vector<std::string> order;                     // refs, first seen first
  std::map<std::string, std::pair<json, bool>> seen;  // ref → (entry, from its owner)
  std::size_t pending = 0;
  std::vector<std::string> failed;
  http::responder resp;
  list_merge(const ring& rg, http::responder rs) : r(rg), resp(std::move(rs)) {}

  void add(const std::string& body, const std::string& member) {
    auto j = json::parse(body, nullptr, false);
    if (!j.is_array()) return;
    for (auto& d : j) {
      if (!d.is_object() || !d.contains("dataset") || !d["dataset"].is_string()) continue;
      std::string ref = d["dataset"];
      const bool owner = r.owner("dataset:" + ref) == member;
      auto it = seen.find(ref);
      if (it == seen.end()) {
        order.push_back(ref);
        seen.emplace(ref, std::make_pair(std::move(d), owner));
      } else if (owner && !it->second.second) {
        it->second = {std::move(d), true};
      }
    }
  }
  void finish() {
    json all = json::array();
    for (const auto& ref : order) all.push_back(std::move(seen[ref].first));
    auto a = json_answer(200, all);
    if (!failed.empty()) {
      std::string why;
      for (auto& f : failed) why += (why.empty() ? "" : ", ") + f;
      a.headers.set("Shoal-Partial", why.substr(0, 1024));
    }
    resp.send(std::move(a));
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
    auto m = std::make_shared<list_merge>(r, resp);
    m->add(d_.dataset_list(), r.self());
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
          m->add(*body, o);
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

void proxy_handler::accept_dataset_copy(const http::request& req, const http::responder& resp) {
  if (!d_.replicas || !d_.dataset_copy) {
    return resp.send(json_error(405, "dataset record copies need a replica ring (ring.members)"));
  }
  auto& r = *d_.replicas;
  const std::string from = ring_from(req);
  if (from.empty() || from == r.self() || !r.is_member(from)) {
    return resp.send(
        json_error(403, "dataset record copies are accepted only from another ring member (" +
                            std::string(ring::from_header) + " naming one of ring.members)"));
  }
  static const std::string base = std::string(origin::paths::datasets) + "/";
  std::string_view path = req.path;
  std::string_view rest = path.substr(std::min(path.size(), base.size()));
  if (!path.starts_with(base) || !rest.ends_with(dataset_copies::suffix)) {
    auto a = json_error(405, "only GET here; PUT takes " + base + "<name>@<version>" +
                                 std::string(dataset_copies::suffix) + " from ring members");
    a.headers.set("Allow", "GET");
    return resp.send(std::move(a));
  }
  std::string ref(rest.substr(0, rest.size() - dataset_copies::suffix.size()));
  if (auto p = dataset::parse_ref(ref); !p) return resp.send(json_error(400, p.error().message));
  auto j = json::parse(req.body, nullptr, false);
  if (!j.is_object() || !j.contains("state") || !j["state"].is_string())
    return resp.send(json_error(400, "a dataset record copy is the record's JSON object"));
  auto keep = [this, ref, body = req.body, resp](const std::string& manifest) {
    auto got = d_.dataset_copy(ref, body, manifest);
    if (!got) {
      log::warn("dataset copy refused", log::kv("dataset", ref),
                log::kv("error", got.error().message));
      return resp.send(
          json_error(got.error().is(errc::invalid_argument) ? 400 : 500, got.error().message));
    }
    resp.send(json_answer(200, json{{"dataset", ref}, {"result", *got}}));
  };
  if (j["state"] != "ready") return keep({});
  const auto m = j.find("manifest");  // (value() would throw on a non-string)
  auto md = digest::parse(m != j.end() && m->is_string() ? m->get<std::string>() : std::string());
  if (!md) return resp.send(json_error(400, "a ready dataset record names its manifest digest"));
  if (d_.dataset_has_manifest(*md)) return keep({});
  // The manifest from the sender, which holds it (the owner answers a member itself).
  auto rq = r.request(from, base + ref + "/manifest");
  rq.timeouts.total = std::chrono::minutes(4);
  auto text = std::make_shared<std::string>();
  http::callbacks cb;
  cb.on_data = [text](std::string_view c) {
    if (text->size() + c.size() > (512u << 20)) return false;  // a manifest that large: refused
    text->append(c);
    return true;
  };
  cb.on_complete = [keep, text, from, ref, resp](result<http::completion> c) {
    if (!c || c->status != 200) {
      return resp.send(
          json_error(502, "manifest of " + ref + " from " + from + ": " +
                              (c ? "HTTP " + std::to_string(c->status) : c.error().message)));
    }
    datasets_detail::answer_guarded(resp, [&] { keep(*text); });
  };
  r.client().submit(std::move(rq), std::move(cb));
}

}  // namespace shoal::proxy
