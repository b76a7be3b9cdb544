// The message side of common/http_server.h, apart from the connection machinery: query and
// header access on a request, response builders, percent-decoding and host:port parsing.
#include "common/http_server.h"

#include <charconv>
#include <string>

namespace shoal::http {

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  auto hv = [](char h) -> int {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int a = hv(s[i + 1]);
      int b = hv(s[i + 2]);
      if (a < 0 || b < 0) return std::nullopt;
      out += static_cast<char>(a * 16 + b);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> request::query_param(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    auto eq = kv.find('=');
    std::string_view k = kv.substr(0, eq);
    std::string_view v = eq == std::string_view::npos ? std::string_view{} : kv.substr(eq + 1);
    auto dk = percent_decode(k);
    if (dk && *dk == name) {
      auto dv = percent_decode(v);
      if (dv) return dv;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::string_view request::header(std::string_view name) const {
  auto it = headers.find(name);
  if (it == headers.end()) return {};
  return it->value();
}

std::string request::header_list(std::string_view name) const {
  std::string out;
  auto [b, e] = headers.equal_range(name);
  for (auto it = b; it != e; ++it) {
    std::string_view v = it->value();
    if (v.empty()) continue;
    if (!out.empty()) out += ", ";
    out += v;
  }
  return out;
}

response response::text(unsigned status, std::string body, std::string content_type) {
  response r;
  r.status = status;
  r.headers.set(boost::beast::http::field::content_type, content_type);
  r.body = std::move(body);
  return r;
}

response response::json(unsigned status, std::string body) {
  return text(status, std::move(body), "application/json");
}

result<std::pair<std::string, std::uint16_t>> split_host_port(std::string_view s) {
  std::string host;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return fail(errc::invalid_argument,
                  "bad address \"" + std::string(s) + "\": expected [v6]:port");
    }
    host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) {
      return fail(errc::invalid_argument,
                  "bad address \"" + std::string(s) + "\": expected host:port");
    }
    host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
  }
  unsigned long p = 0;
  if (port.empty() || port.size() > 5) {
    return fail(errc::invalid_argument, "bad port in \"" + std::string(s) + "\"");
  }
  for (char c : port) {
    if (c < '0' || c > '9')
      return fail(errc::invalid_argument, "bad port in \"" + std::string(s) + "\"");
    p = p * 10 + static_cast<unsigned long>(c - '0');
  }
  if (p > 65535)
    return fail(errc::invalid_argument, "port out of range in \"" + std::string(s) + "\"");
  if (host.empty()) host = "0.0.0.0";
  return std::pair<std::string, std::uint16_t>{host, static_cast<std::uint16_t>(p)};
}

}  // namespace shoal::http
