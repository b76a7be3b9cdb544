// The scheduler API's checkpoint routes (/v1/checkpoints, docs/scheduler.md "Checkpoints"),
// beside api.cc. The catalog (checkpoints.h) holds the rules; this file maps HTTP onto it. Every
// route runs on the worker pool (api::heavy): registrations decode and hash up to
// checkpoints.max_registration_bytes, records walk the index, grants may re-read the certificate.
#include "common/checkpoint.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/text.h"
#include "common/json_text.h"
#include "scheduler/api.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

// The HTTP status of a catalog or decoder error.
unsigned status_of_checkpoint(const error& e) {
  if (e.is(errc::not_found)) return 404;
  if (e.is(errc::already_exists)) return 409;
  if (e.is(errc::unauthorized)) return 403;
  if (e.is(errc::too_large)) return 413;
  if (e.is(errc::internal)) return 500;
  return 400;
}

bool is_get(const http::request& req) {
  return req.method == http::verb::get || req.method == http::verb::head;
}

// A record with its holders, as GET and POST answer it.
http::response record_answer(unsigned status, checkpoint::record rec, const api_deps& d) {
  if (auto objs = d.checkpoints->objects(rec.key())) rec.holders = holders_of(d.index, *objs);
  return http::response::json(status, checkpoint::encode(rec));
}

// GET /v1/checkpoints[?job=J]: records without holders (one record's answer has them).
http::response list_answer(const http::request& req, const api_deps& d) {
  std::string job = req.query_param("job").value_or("");
  if (!job.empty() && !checkpoint::valid_job(job))
    return json_error(
        400, "job " + quote_excerpt(job) + " is not a valid name ([a-z0-9][a-z0-9._-]{0,127})");
  return http::response::json(200, checkpoint::encode(d.checkpoints->list(job)));
}

// GET /v1/checkpoints/<J@N>/groups/<g>: the group's torrent as a metainfo answer, with the
// caller's grant for its swarm when the scheduler signs grants (TLS).
http::response group_answer(const http::request& req, const std::string& key, std::uint32_t g,
                            const api_deps& d) {
  auto grp = d.checkpoints->group(key, g);
  if (!grp) return json_error(status_of_checkpoint(grp.error()), grp.error().message);
  origin::metainfo_answer a;
  a.torrent = std::move(grp->torrent);
  a.info_hash = std::move(grp->info_hash);
  a.group_kind = std::move(grp->kind);
  a.group_bytes = grp->bytes;
  if (d.checkpoint_grant_for) a.grant = d.checkpoint_grant_for(req.peer, a.info_hash);
  return origin::encode(a);
}

}  // namespace

http::response api::on_checkpoints(const http::request& req) {
  if (!d_.checkpoints) return json_error(404, "the checkpoint catalog is not running");
  std::string_view path = req.path;
  if (path == "/v1/checkpoints") {
    if (req.method == http::verb::post) return on_checkpoint_register(req);
    if (!is_get(req)) return json_error(405, "use GET or POST");
    return list_answer(req, d_);
  }
  if (req.method != http::verb::delete_ && !is_get(req))
    return json_error(405, "use GET (or DELETE for a record)");
  // The path is read as sent, not percent-decoded: names and steps need no escapes, and the
  // authorizer (access_of) judged this same text (a "groups%2F0" must not become a group route).
  auto route =
      checkpoint::parse_scheduler_path(path.substr(std::string_view("/v1/checkpoints/").size()));
  if (!route) return json_error(status_of_checkpoint(route.error()), route.error().message);
  const auto& which = route->which;
  using kind = checkpoint::scheduler_route::kind;
  if (req.method == http::verb::delete_) {
    if (route->what != kind::record || !which.step)
      return json_error(400, "DELETE names one checkpoint: /v1/checkpoints/<job>@<step>");
    if (!d_.checkpoints->remove(which.str()))
      return json_error(404, "checkpoint " + which.str() + " is not registered");
    if (d_.shared != nullptr) d_.shared->checkpoint_removed(which.str());
    log::info("checkpoint record removed", log::kv("checkpoint", which.str()),
              log::kv("by", req.peer.str()));
    return http::response::json(200, json_text(json{{"removed", which.str()}}));
  }
  switch (route->what) {
    case kind::record: {
      auto rec = d_.checkpoints->record(which);
      if (!rec) return json_error(status_of_checkpoint(rec.error()), rec.error().message);
      return record_answer(200, std::move(*rec), d_);
    }
    case kind::manifest: {
      auto m = d_.checkpoints->manifest(which.str());
      if (!m) return json_error(status_of_checkpoint(m.error()), m.error().message);
      return http::response::json(200, **m);
    }
    case kind::group:
      return group_answer(req, which.str(), route->group, d_);
  }
  return json_error(404, "no such endpoint");
}

http::response api::on_checkpoint_register(const http::request& req) {
  auto refuse = [&](unsigned status, const std::string& msg) {
    count_checkpoint_registration(d_.reg, status == 409 ? "conflict" : "refused");
    log::warn("checkpoint registration refused", log::kv("status", status),
              log::kv("from", req.remote.address().to_string()),
              log::kv("certificate", req.peer.str()), log::kv("error", msg));
    return json_error(status, msg);
  };
  const std::uint64_t limit = d_.cfg.checkpoints.max_registration_bytes.bytes();
  if (req.body.size() > limit)
    return refuse(413,
                  "checkpoint registration is larger than checkpoints.max_registration_bytes (" +
                      std::to_string(limit) + " bytes)");
  auto reg = checkpoint::decode_registration(req.body);
  if (!reg) return refuse(status_of_checkpoint(reg.error()), reg.error().message);
  // With TLS the caller is the node its certificate names (the authorizer let only node
  // certificates through; checked again here); in plain mode nobody is authenticated and the
  // manifest's word is taken.
  if (req.peer.tls && !req.peer.is(tls::peer_role::node))
    return refuse(403,
                  "a checkpoint is registered with its writer's node certificate; the "
                  "client certificate is " +
                      req.peer.str());
  std::string caller = req.peer.tls ? req.peer.name : checkpoint::writer_of(reg->manifest);
  std::string body = d_.shared != nullptr ? req.body : std::string();  // kept in Redis below
  auto done = d_.checkpoints->register_checkpoint(std::move(*reg), caller);
  if (!done) {
    if (done.error().is(errc::unauthorized) && req.peer.tls)
      (void)auth_.refused_by_handler(req, route_access::node, "other_node");
    return refuse(status_of_checkpoint(done.error()), done.error().message);
  }
  bool created = done->what == checkpoint_catalog::outcome::created;
  if (created && d_.shared != nullptr)
    d_.shared->checkpoint_registered(done->rec.job + "@" + std::to_string(done->rec.step), body,
                                     caller);
  count_checkpoint_registration(d_.reg, created ? "created" : "repeat");
  return record_answer(created ? 201 : 200, std::move(done->rec), d_);
}

}  // namespace shoal::scheduler
