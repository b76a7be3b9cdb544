#include "registry-proxy/s3.h"

#include <expat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "common/text.h"

namespace shoal::s3 {

namespace {

// Bounds of one ListObjectsV2 page (S3 sends at most 1000 keys of at most 1024 bytes).
constexpr std::size_t kMaxPageBytes = 64u << 20;
constexpr std::size_t kMaxText = 64u << 10;  // one element's text
constexpr std::size_t kMaxDepth = 32;
constexpr std::size_t kMaxObjects = 100'000;

// What the expat callbacks build. Element text is collected only where it is used:
// /ListBucketResult/{IsTruncated,NextContinuationToken}, .../Contents/{Key,Size,ETag},
// /Error/{Code,Message}.
struct page_state {
  XML_Parser parser = nullptr;
  std::vector<std::string> path;  // open elements, root first
  std::string text;
  bool collect = false;
  std::optional<error> failure;  // set by a callback that stopped the parser
  std::string root;
  list_page page;
  std::optional<std::string> key, size, etag;
  std::optional<std::string> code, message;
  std::string truncated;

  void stop(error e) {
    if (!failure) failure = std::move(e);
    XML_StopParser(parser, XML_FALSE);
  }
};

bool collected(const std::vector<std::string>& path) {
  if (path.size() == 2) {
    const auto& r = path[0];
    const auto& e = path[1];
    return (r == "ListBucketResult" && (e == "IsTruncated" || e == "NextContinuationToken")) ||
           (r == "Error" && (e == "Code" || e == "Message"));
  }
  return path.size() == 3 && path[0] == "ListBucketResult" && path[1] == "Contents" &&
         (path[2] == "Key" || path[2] == "Size" || path[2] == "ETag");
}

void XMLCALL on_start(void* ud, const XML_Char* name, const XML_Char**) {
  auto& st = *static_cast<page_state*>(ud);
  if (st.path.size() >= kMaxDepth)
    return st.stop(error{make_error_code(errc::protocol_error), "S3 listing nests too deep"});
  st.path.emplace_back(name);
  if (st.path.size() == 1) st.root = name;
  if (st.path.size() == 2 && st.root == "ListBucketResult" && st.path[1] == "Contents") {
    st.key.reset();
    st.size.reset();
    st.etag.reset();
  }
  st.collect = collected(st.path);
  st.text.clear();
}

// A <Contents> block ends: one object, checked.
void end_contents(page_state& st) {
  if (!st.key || !st.size) {
    return st.stop(
        error{make_error_code(errc::protocol_error), "S3 listing: <Contents> without Key or Size"});
  }
  const std::string& sz = *st.size;
  if (sz.empty() || sz.size() > 19 || sz.find_first_not_of("0123456789") != std::string::npos) {
    return st.stop(error{make_error_code(errc::protocol_error),
                         "S3 listing: bad Size for key " + quote_excerpt(*st.key, 200)});
  }
  if (st.page.objects.size() >= kMaxObjects) {
    return st.stop(
        error{make_error_code(errc::too_large),
              "S3 listing page holds more than " + std::to_string(kMaxObjects) + " objects"});
  }
  object o;
  o.key = std::move(*st.key);
  o.size = std::stoull(sz);
  if (st.etag) {
    o.etag = std::move(*st.etag);
    if (o.etag.size() >= 2 && o.etag.front() == '"' && o.etag.back() == '"')
      o.etag = o.etag.substr(1, o.etag.size() - 2);
  }
  st.page.objects.push_back(std::move(o));
}

void XMLCALL on_end(void* ud, const XML_Char*) {
  auto& st = *static_cast<page_state*>(ud);
  if (st.collect) {
    const std::string& leaf = st.path.back();
    std::string t = std::move(st.text);
    if (st.path.size() == 3) {
      (leaf == "Key" ? st.key : leaf == "Size" ? st.size : st.etag) = std::move(t);
    } else if (leaf == "IsTruncated") {
      st.truncated = std::move(t);
    } else if (leaf == "NextContinuationToken") {
      st.page.next_token = std::move(t);
    } else {
      (leaf == "Code" ? st.code : st.message) = std::move(t);
    }
  } else if (st.path.size() == 2 && st.root == "ListBucketResult" && st.path[1] == "Contents") {
    end_contents(st);
  }
  st.path.pop_back();
  st.collect = false;
  st.text.clear();
}

void XMLCALL on_text(void* ud, const XML_Char* s, int len) {
  auto& st = *static_cast<page_state*>(ud);
  if (!st.collect) return;
  if (st.text.size() + static_cast<std::size_t>(len) > kMaxText) {
    return st.stop(error{
        make_error_code(errc::too_large),
        "S3 listing: <" + st.path.back() + "> longer than " + std::to_string(kMaxText) + " bytes"});
  }
  st.text.append(s, static_cast<std::size_t>(len));
}

// No DTD at all: nothing can declare entities (billion laughs) or pull external ones.
void XMLCALL on_doctype(void* ud, const XML_Char*, const XML_Char*, const XML_Char*, int) {
  static_cast<page_state*>(ud)->stop(
      error{make_error_code(errc::protocol_error), "S3 listing: DOCTYPE refused"});
}

struct parser_deleter {
  void operator()(XML_ParserStruct* p) const { XML_ParserFree(p); }
};

// Runs expat over the whole document into `st`; an error for what is not well-formed XML.
status parse_xml(std::string_view xml, page_state& st) {
  std::unique_ptr<XML_ParserStruct, parser_deleter> p(XML_ParserCreate(nullptr));
  if (!p) return fail(errc::internal, "cannot create an XML parser");
  st.parser = p.get();
  XML_SetUserData(p.get(), &st);
  XML_SetElementHandler(p.get(), on_start, on_end);
  XML_SetCharacterDataHandler(p.get(), on_text);
  XML_SetStartDoctypeDeclHandler(p.get(), on_doctype);
  XML_SetParamEntityParsing(p.get(), XML_PARAM_ENTITY_PARSING_NEVER);
  const auto rc = XML_Parse(p.get(), xml.data(), static_cast<int>(xml.size()), XML_TRUE);
  if (st.failure) return fail(*st.failure);
  if (rc != XML_STATUS_OK) {
    const auto code = XML_GetErrorCode(p.get());
    // S3 writes a key's control characters (and NUL) as character references XML 1.0 forbids.
    const std::string why = code == XML_ERROR_BAD_CHAR_REF
                                ? "bad XML character reference (a key with a control character?)"
                                : XML_ErrorString(code);
    return fail(errc::protocol_error, "S3 listing is not well-formed XML: " + why + " at line " +
                                          std::to_string(XML_GetCurrentLineNumber(p.get())) +
                                          " column " +
                                          std::to_string(XML_GetCurrentColumnNumber(p.get())));
  }
  return {};
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
  if (xml.size() > kMaxPageBytes)
    return fail(errc::too_large, "S3 listing page larger than 64 MiB");
  page_state st;
  if (auto ok = parse_xml(xml, st); !ok) return fail(ok.error());
  if (st.root != "ListBucketResult") {
    // The server's own words, quoted and bounded: they end up in logs and JSON answers.
    if (st.root == "Error" && st.code) {
      return fail(errc::upstream_error,
                  "S3 error " + quote_excerpt(*st.code, 100) +
                      (st.message ? ": " + quote_excerpt(*st.message, 200) : ""));
    }
    return fail(errc::protocol_error, "S3 listing is not a ListBucketResult");
  }
  st.page.truncated = st.truncated == "true";
  if (st.page.truncated && st.page.next_token.empty())
    return fail(errc::protocol_error, "S3 listing truncated without a continuation token");
  return std::move(st.page);
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
