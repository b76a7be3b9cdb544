// Where dataset origin requests may go (dataset_origin.h): the allowlist of scheme+host+port,
// and the address check run on every connection (libcurl's open-socket hook, after DNS).

#include <arpa/inet.h>

#include <array>
#include <cstring>

#include "registry-proxy/dataset_origin.h"

namespace shoal::proxy {

namespace {

std::string strip_brackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

// The 16 bytes of an IPv6 address, IPv4 as ::ffff:a.b.c.d; nullopt if `ip` is not an address.
std::optional<std::array<unsigned char, 16>> ip_bytes(const std::string& ip) {
  std::array<unsigned char, 16> b{};
  in_addr v4{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
    b[10] = b[11] = 0xff;
    std::memcpy(b.data() + 12, &v4, 4);
    return b;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, strip_brackets(ip).c_str(), &v6) == 1) {
    std::memcpy(b.data(), &v6, 16);
    return b;
  }
  return std::nullopt;
}

bool public_v4(const unsigned char* a) {
  const unsigned x = a[0], y = a[1];
  if (x == 0 || x == 10 || x == 127) return false;    // this network, private, loopback
  if (x == 100 && (y & 0xc0) == 64) return false;     // shared address space 100.64/10
  if (x == 169 && y == 254) return false;             // link-local (cloud metadata)
  if (x == 172 && (y & 0xf0) == 16) return false;     // private 172.16/12
  if (x == 192 && y == 168) return false;             // private
  if (x == 192 && y == 0 && a[2] == 0) return false;  // IETF protocol assignments
  if (x == 198 && (y & 0xfe) == 18) return false;     // benchmarking 198.18/15
  if (x >= 224) return false;                         // multicast, reserved, broadcast
  return true;
}

}  // namespace

bool public_address(const std::string& ip) {
  auto b = ip_bytes(ip);
  if (!b) return false;
  const unsigned char* a = b->data();
  static constexpr unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a, mapped, 12) == 0) return public_v4(a + 12);
  static constexpr unsigned char zero[12] = {};
  if (std::memcmp(a, zero, 12) == 0) return false;            // ::, ::1, IPv4-compatible
  if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) return false;    // link-local fe80::/10
  if ((a[0] & 0xfe) == 0xfc) return false;                    // unique local fc00::/7
  if (a[0] == 0xff) return false;                             // multicast
  if (a[0] == 0x20 && a[1] == 0x02) return public_v4(a + 2);  // 6to4 of a v4 address
  if (a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b)
    return public_v4(a + 12);  // NAT64 64:ff9b::/96
  return true;
}

const allowed_origin* find_allowed(const std::vector<allowed_origin>& allowed,
                                   const http::endpoint& e) {
  for (const auto& a : allowed) {
    if (a.at.scheme == e.scheme && a.at.host == e.host && a.at.port == e.port) return &a;
  }
  return nullptr;
}

http::connect_policy dataset_connect_policy(
    std::shared_ptr<const std::vector<allowed_origin>> allowed) {
  http::connect_policy p;
  p.origin = [allowed](const http::endpoint& hop) -> status {
    if (find_allowed(*allowed, hop)) return {};
    return fail(errc::unauthorized, hop.scheme + "://" + hop.host + ":" + hop.port +
                                        " is not in datasets.allowed_origins (refused)");
  };
  p.address = [allowed](const http::endpoint& hop, const std::string& ip) -> status {
    const allowed_origin* a = find_allowed(*allowed, hop);
    if (a == nullptr) {
      return fail(errc::unauthorized, hop.scheme + "://" + hop.host + ":" + hop.port +
                                          " is not in datasets.allowed_origins (refused)");
    }
    if (public_address(ip) || a->private_addresses) return {};
    // An IP literal in the configuration names its own address.
    auto want = ip_bytes(hop.host), got = ip_bytes(ip);
    if (want && got && *want == *got) return {};
    return fail(errc::unauthorized, "connect to " + ip + " for " + hop.host + ":" + hop.port +
                                        " refused: a loopback, link-local or private address that "
                                        "datasets.allowed_origins does not name");
  };
  return p;
}

}  // namespace shoal::proxy
