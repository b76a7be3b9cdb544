// The scheduler API's prewarm reads and the idempotency key of POST /v1/prewarm, beside api.cc
// (docs/scheduler.md, "Prewarm").
#include "common/heartbeat.h"
#include "common/sha256.h"
#include "common/json_text.h"
#include "scheduler/api.h"

namespace shoal::scheduler {

// The prewarm id a retried POST /v1/prewarm names with its Idempotency-Key header: the same key
// from the same caller (its certificate's identity; everyone in plain mode) is the same prewarm,
// on any replica, so a client that lost the answer may send the request again. Empty: no key.
// Refused: a key that is empty, longer than 128 bytes or not printable ASCII.
std::expected<std::string, http::response> idempotent_prewarm_id(const http::request& req) {
  auto key = req.header("Idempotency-Key");
  if (req.headers.find("Idempotency-Key") == req.headers.end()) return std::string();
  bool printable = !key.empty() && key.size() <= 128;
  for (char c : key) printable = printable && c >= 0x20 && c < 0x7f;
  if (!printable)
    return std::unexpected(
        json_error(400, "Idempotency-Key must be 1 to 128 printable ASCII characters"));
  auto d = sha256_of(req.peer.str() + "\n" + std::string(key));
  return "pw-k" + d.hex().substr(0, 24);
}

http::response api::on_prewarm_get(std::string_view rest) {
  if (rest.empty() || rest == "/") return http::response::json(200, json_text(d_.prewarm.list()));
  if (rest.front() != '/') return json_error(404, "no such endpoint");
  rest.remove_prefix(1);
  if (!heartbeat::valid_order_id(rest)) return json_error(400, "invalid prewarm id");
  auto st = d_.prewarm.progress(std::string(rest));
  if (!st) return json_error(404, "unknown prewarm " + std::string(rest));
  return http::response::json(200, json_text(*st));
}

}  // namespace shoal::scheduler
