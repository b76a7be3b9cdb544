// peerd's GET /v1/status: the node's cache, where its bytes came from, libtorrent's wire totals,
// its running downloads and chunked fetches (mirror.h).
#include <boost/asio/post.hpp>

#include <nlohmann/json.hpp>

#include "mirror.h"
#include "common/json_text.h"

namespace shoal::peerd {

namespace net = boost::asio;

void mirror::handle_status(const http::responder& resp) {
  net::post(d_.pool, [this, resp] {
    const auto& c = d_.swarm.counters();
    auto cs = d_.store.get_stats();
    nlohmann::json j;
    j["node"] = d_.cfg.node.name;
    j["cache"] = {{"objects", cs.objects},
                  {"bytes", cs.bytes},
                  {"capacity", cs.capacity_bytes},
                  {"inflight_bytes", cs.inflight_bytes},
                  {"hits", cs.hits},
                  {"evictions", cs.evictions}};
    j["bytes"] = {{"from_origin", c.from_origin.load()},
                  {"from_peers", c.from_peers.load()},
                  {"from_http_fallback", c.from_http.load()},
                  {"served_local", c.served_local.load()},
                  {"uploaded_to_peers", c.uploaded.load()}};
    // libtorrent's own totals (every 5 s): the wire around the payload, and what was wasted.
    j["swarm"] = {{"received", c.wire_received.load()},
                  {"sent", c.wire_sent.load()},
                  {"redundant", c.redundant.load()},
                  {"redundant_why",
                   {{"timed_out", c.waste_timed_out.load()},
                    {"cancelled", c.waste_cancelled.load()},
                    {"end_game", c.waste_end_game.load()},
                    {"other", c.waste_other.load()}}},
                  {"haves_received", c.haves_received.load()}};
    j["downloads"] = nlohmann::json::array();
    for (const auto& s : d_.swarm.status()) {
      j["downloads"].push_back({{"digest", s.id.str()},
                                {"pieces_done", s.done},
                                {"pieces", s.total},
                                {"size", s.size},
                                {"peers", s.peers},
                                {"download_rate", s.download_rate},
                                {"upload_rate", s.upload_rate}});
    }
    j["torrents_loaded"] = d_.swarm.loaded_torrents();
    // Blobs being fetched as chunk objects (chunked.h): chunks complete of all.
    auto fs = d_.fetch.status_snapshot();
    auto& arr = j["chunked"] = nlohmann::json::array();
    for (const auto& cp : fs.chunked) {
      arr.push_back({{"digest", cp.id.str()},
                     {"size", cp.size},
                     {"chunks_done", cp.chunks_done},
                     {"chunks", cp.chunks}});
    }
    j["counters"] = {
        {"downloads_ok", c.downloads_ok.load()},   {"downloads_failed", c.downloads_failed.load()},
        {"hash_failures", c.hash_failures.load()}, {"quarantined", c.quarantined.load()},
        {"http_fallbacks", c.fallbacks.load()},    {"chunked_fetches", fs.chunked_fetches}};
    resp.send(http::response::json(200, json_text(j)));
  });
}

}  // namespace shoal::peerd
