#pragma once
// registry-proxy sheds load with 429 + Retry-After when its fetch queue is full. peerd's requests
// to it (the fetcher's metainfo, the chunked fetch's chunk list and chunk metainfo) wait as told
// and ask again, never past their deadline; at the deadline the client hears 503 with the
// Retry-After and this cause. One place for the parsing and the bounds, shared by fetcher.cc and
// chunked.cc.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/http_client.h"
#include "common/origin_protocol.h"

namespace shoal::peerd::shed {

// How long to wait before asking again after a 429: its Retry-After in seconds (an HTTP date or
// nonsense counts as 1 s), at least 100 ms and at most 5 s.
inline std::chrono::steady_clock::duration retry_wait(const http::full_response& r) {
  using namespace std::chrono_literals;
  std::string_view v = r.header("Retry-After").value_or("");
  std::uint64_t secs = 0;
  bool digits = !v.empty() && v.size() <= 6;
  for (char c : v) digits = digits && c >= '0' && c <= '9';
  if (digits) {
    for (char c : v) secs = secs * 10 + static_cast<std::uint64_t>(c - '0');
  } else {
    secs = 1;
  }
  return std::clamp<std::chrono::steady_clock::duration>(std::chrono::seconds(secs), 100ms, 5s);
}

// The Retry-After to pass on to the client: registry-proxy's when it is a number of seconds
// (bounded), else "1".
inline std::string retry_after(const http::full_response& r) {
  std::string_view v = r.header("Retry-After").value_or("");
  bool digits = !v.empty() && v.size() <= 6;
  for (char c : v) digits = digits && c >= '0' && c <= '9';
  return digits ? std::string(v) : std::string("1");
}

// The cause at the deadline: "registry-proxy is busy (HTTP 429: <its message>); gave up after N s".
inline std::string gave_up(const http::full_response& r,
                           std::chrono::steady_clock::duration after) {
  std::string msg = "registry-proxy is busy (HTTP 429";
  if (auto why = origin::error_message_of(r.body); !why.empty()) msg += ": " + why;
  msg += "); gave up after " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(after).count()) + " s";
  return msg;
}

}  // namespace shoal::peerd::shed
