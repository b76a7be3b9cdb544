#pragma once
// WWW-Authenticate challenges (RFC 9110 §11.6.1) as registries send them:
//   Bearer
//   realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:x:pull"
//   Basic realm="Registry Realm"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::proxy {

struct auth_challenge {
  std::string scheme;                         // lower case: "bearer", "basic"
  std::map<std::string, std::string> params;  // lower-case keys, unquoted values
  [[nodiscard]] std::string param(const std::string& k) const {
    auto it = params.find(k);
    return it == params.end() ? std::string{} : it->second;
  }
};

// Parses one header value into its challenges; malformed parts are skipped, never fatal.
[[nodiscard]] std::vector<auth_challenge> parse_www_authenticate(std::string_view header);

}  // namespace shoal::proxy
