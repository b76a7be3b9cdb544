#include "registry-proxy/s3.h"
#include "common/text.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace shoal::s3 {

namespace {

// Decodes the five XML entities and numeric character references.
result<std::string> xml_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    auto semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10)
      return fail(errc::protocol_error, "bad XML entity");
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      unsigned long cp = 0;
      char* end = nullptr;
      std::string num(ent.substr(1));
      if (!num.empty() && (num[0] == 'x' || num[0] == 'X'))
        cp = std::strtoul(num.c_str() + 1, &end, 16);
      else
        cp = std::strtoul(num.c_str(), &end, 10);
      if (!end || *end != '\0' || cp == 0 || cp > 0x10ffff)
        return fail(errc::protocol_error, "bad XML character reference");
      // UTF-8 encode.
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      }
    } else {
      return fail(errc::protocol_error, "unknown XML entity &" + std::string(ent) + ";");
    }
    i = semi;
  }
  return out;
}

// The text of the first <tag>...</tag> inside [from, to) of `xml`, or nullopt.
std::optional<std::string_view> element(std::string_view xml, std::string_view tag) {
  std::string open = "<" + std::string(tag) + ">";
  std::string close = "</" + std::string(tag) + ">";
  auto a = xml.find(open);
  if (a == std::string_view::npos) return std::nullopt;
  auto b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) return std::nullopt;
  return xml.substr(a + open.size(), b - a - open.size());
}

}  // namespace

std::string uri_encode(std::string_view s, bool keep_slash) { return url_escape(s, keep_slash); }

result<credentials> load_credentials(const std::string& file) {
  credentials c;
  if (!file.empty()) {
    std::ifstream f(file);
    if (!f) return fail(errc::config_error, "cannot read S3 credentials file " + file);
    std::string line;
    std::getline(f, line);
    line = trim(line);
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= line.size()) {
      return fail(errc::config_error,
                  "S3 credentials file " + file + " must hold ACCESS_KEY:SECRET");
    }
    c.access_key = line.substr(0, colon);
    c.secret_key = line.substr(colon + 1);
    return c;
  }
  const char* ak = std::getenv("AWS_ACCESS_KEY_ID");
  const char* sk = std::getenv("AWS_SECRET_ACCESS_KEY");
  if (!ak || !*ak)
    return fail(errc::config_error,
                "no S3 credentials: set AWS_ACCESS_KEY_ID or a credentials file");
  if (!sk || !*sk)
    return fail(errc::config_error,
                "no S3 credentials: set AWS_SECRET_ACCESS_KEY or a credentials file");
  c.access_key = ak;
  c.secret_key = sk;
  if (const char* t = std::getenv("AWS_SESSION_TOKEN")) c.session_token = t;
  return c;
}

result<list_page> parse_list_page(std::string_view xml) {
  if (xml.size() > (64u << 20)) return fail(errc::too_large, "S3 listing page larger than 64 MiB");
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    if (auto code = element(xml, "Code")) {
      auto msg = element(xml, "Message");
      return fail(errc::upstream_error,
                  "S3 error " + std::string(*code) + (msg ? ": " + std::string(*msg) : ""));
    }
    return fail(errc::protocol_error, "S3 listing is not a ListBucketResult");
  }
  list_page p;
  std::size_t pos = 0;
  while (true) {
    auto a = xml.find("<Contents>", pos);
    if (a == std::string_view::npos) break;
    auto b = xml.find("</Contents>", a);
    if (b == std::string_view::npos)
      return fail(errc::protocol_error, "S3 listing: unterminated <Contents>");
    std::string_view block = xml.substr(a, b - a);
    auto key = element(block, "Key");
    auto size = element(block, "Size");
    if (!key || !size)
      return fail(errc::protocol_error, "S3 listing: <Contents> without Key or Size");
    object o;
    auto k = xml_unescape(*key);
    if (!k) return fail(k.error());
    o.key = std::move(*k);
    std::string sz(*size);
    if (sz.empty() || sz.size() > 20 || sz.find_first_not_of("0123456789") != std::string::npos) {
      return fail(errc::protocol_error, "S3 listing: bad Size for key " + o.key.substr(0, 200));
    }
    o.size = std::stoull(sz);
    if (auto e = element(block, "ETag")) {
      auto et = xml_unescape(*e);
      if (et) {
        o.etag = *et;
        if (o.etag.size() >= 2 && o.etag.front() == '"' && o.etag.back() == '"')
          o.etag = o.etag.substr(1, o.etag.size() - 2);
      }
    }
    p.objects.push_back(std::move(o));
    pos = b + 11;
  }
  if (auto t = element(xml, "IsTruncated")) p.truncated = *t == "true";
  if (auto n = element(xml, "NextContinuationToken")) {
    auto tok = xml_unescape(*n);
    if (!tok) return fail(tok.error());
    p.next_token = std::move(*tok);
  }
  if (p.truncated && p.next_token.empty())
    return fail(errc::protocol_error, "S3 listing truncated without a continuation token");
  return p;
}

std::string client::object_url(const std::string& key) const {
  std::string base = cfg_.endpoint;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + "/" + cfg_.bucket + "/" + uri_encode(key, true);
}

void client::sign(http::client_request& r, const std::string& service) const {
  // libcurl 7.88's signer takes the query string as written, but SigV4's canonical query string
  // is sorted by parameter: sort it here so the request and its signature agree.
  auto q = r.url.find('?');
  if (q != std::string::npos) {
    std::vector<std::string> params;
    std::string_view rest = std::string_view(r.url).substr(q + 1);
    while (!rest.empty()) {
      auto amp = rest.find('&');
      if (amp != 0) params.emplace_back(rest.substr(0, amp));
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
    std::sort(params.begin(), params.end());
    std::string sorted;
    for (const auto& p : params) sorted += (sorted.empty() ? "" : "&") + p;
    r.url = r.url.substr(0, q + 1) + sorted;
  }
  std::string provider = "aws:amz:" + cfg_.region + ":" + service;
  std::string userpwd = cfg_.creds.access_key + ":" + cfg_.creds.secret_key;
  if (!cfg_.creds.session_token.empty())
    r.headers.emplace_back("x-amz-security-token", cfg_.creds.session_token);
  bool has_sha = false;
  for (const auto& [k, v] : r.headers) {
    if (k == "x-amz-content-sha256") has_sha = true;
  }
  if (!has_sha && service == "s3") {
    // GETs carry no body: the hash of the empty string (s3rver and S3 require the header).
    r.headers.emplace_back("x-amz-content-sha256",
                           "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  }
  auto prev = r.customize;
  r.customize = [prev, provider, userpwd](CURL* h) {
    if (prev) prev(h);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, provider.c_str());
    curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
  };
  // Credentials must never follow a redirect to another host.
  r.redirects.customize_on_other_origin = false;
}

http::client_request client::get(
    const std::string& key, std::optional<std::pair<std::uint64_t, std::uint64_t>> range) const {
  http::client_request r;
  r.url = object_url(key);
  r.timeouts = cfg_.timeouts;
  if (range)
    r.headers.emplace_back(
        "Range", "bytes=" + std::to_string(range->first) + "-" + std::to_string(range->second));
  sign(r);
  return r;
}

result<std::vector<object>> client::list(const std::string& prefix, std::size_t max_objects) {
  std::vector<object> out;
  std::string token;
  for (int page = 0; page < 1'000'000; ++page) {
    std::string base = cfg_.endpoint;
    while (!base.empty() && base.back() == '/') base.pop_back();
    // Parameters in sorted order: the SigV4 canonical query string.
    std::string q;
    if (!token.empty()) q += "continuation-token=" + uri_encode(token, false) + "&";
    q += "list-type=2&max-keys=1000";
    if (!prefix.empty()) q += "&prefix=" + uri_encode(prefix, false);
    http::client_request r;
    r.url = base + "/" + cfg_.bucket + "?" + q;
    r.timeouts = cfg_.timeouts;
    sign(r);
    auto f = http::fetch(http_, std::move(r), 64u << 20);
    if (!f) return fail(f.error().wrap("list s3://" + cfg_.bucket + "/" + prefix));
    if (f->status != 200) {
      auto p = parse_list_page(f->body);
      std::string why = p ? "" : ": " + p.error().message;
      return fail(
          f->status == 403 || f->status == 401 ? errc::unauthorized : errc::upstream_error,
          "list s3://" + cfg_.bucket + "/" + prefix + ": HTTP " + std::to_string(f->status) + why);
    }
    auto p = parse_list_page(f->body);
    if (!p) return fail(p.error().wrap("list s3://" + cfg_.bucket + "/" + prefix));
    for (auto& o : p->objects) {
      if (out.size() >= max_objects)
        return fail(errc::too_large,
                    "more than " + std::to_string(max_objects) + " objects under the prefix");
      out.push_back(std::move(o));
    }
    if (!p->truncated) return out;
    token = p->next_token;
  }
  return fail(errc::too_large, "S3 listing did not end");
}

}  // namespace shoal::s3
