#pragma once
// What shoalctl's commands share: the context every command gets, requests with the operator's
// credentials, error reports, and the progress line of a transfer followed by polling.

#include <chrono>
#include <initializer_list>
#include <string_view>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/endpoints.h"
#include "common/error.h"
#include "common/http_client.h"
#include "shoalctl_output.h"

namespace shoal::tools::ctl {

using response = shoal::result<shoal::http::full_response>;

// $name, or `def` when it is unset or empty.
[[nodiscard]] std::string env_or(const char* name, const char* def);

// What every command shares, set up in main before the first request.
struct context {
  // `scheduler` is the first scheduler URL; request() sends a URL under it to the replicas of
  // `schedulers` in turn (common/endpoints.h).
  std::string peerd, scheduler, proxy;
  std::shared_ptr<shoal::endpoints::endpoint_set> schedulers;
  std::string bearer;  // `Authorization: Bearer` for the scheduler and registry-proxy; may be empty
  format out = format::table;
  std::unique_ptr<shoal::http::client> client;
};

// One request; the bearer token goes to https URLs only (never to peerd's loopback API, which
// has its own token: `headers`). A URL under cx.scheduler fails over between the scheduler
// replicas: a GET, or a request with an Idempotency-Key header (prewarm), on any failure; other
// methods (place, rm) only when the replica was never reached, since one that timed out may have
// applied the request.
response request(const context& cx, const std::string& method, const std::string& url,
                 const std::string& body = {},
                 std::chrono::milliseconds stall = std::chrono::seconds(30),
                 const std::vector<std::pair<std::string, std::string>>& headers = {});

[[nodiscard]] double num_of(const nlohmann::json& o, const char* k);
[[nodiscard]] std::string pct(double part, double whole);
// Prints why a request failed ("shoalctl: WHAT: cause" or "... HTTP 404: reason"); returns 1.
int report(const std::string& what, const response& r);
// GET `url` as a JSON document of the kind `ok` accepts; reports and returns nullopt otherwise.
std::optional<nlohmann::json> get_json(const context& cx, const std::string& what,
                                       const std::string& url, bool (*ok)(const nlohmann::json&));
[[nodiscard]] bool is_object(const nlohmann::json& j);
[[nodiscard]] bool is_array(const nlohmann::json& j);

// One progress line of a dataset prefetch or checkpoint restore: bar, bytes, rate, ETA, where
// the bytes came from.
[[nodiscard]] std::string progress_line(const nlohmann::json& j);
// The closing summary of a prefetch or restore.
void dataset_summary(const nlohmann::json& j);

// Polls `url` (peerd's status of a prefetch, restore or publish) until the document's state is
// one of `final`, every `interval`; redraws `line` of it on a terminal, one line every 5 s in a
// log. Returns the last document, or nullopt (after saying "<what> not ready") past `timeout`
// seconds.
std::optional<nlohmann::json> follow(const context& cx, const std::string& url, double timeout,
                                     std::string (*line)(const nlohmann::json&),
                                     std::initializer_list<std::string_view> final,
                                     const std::string& what, std::chrono::milliseconds interval);

// The first line of a token file, without surrounding whitespace; an error names the file.
[[nodiscard]] shoal::result<std::string> read_token(const std::string& path);
[[nodiscard]] std::string trim_slashes(std::string s);

}  // namespace shoal::tools::ctl
