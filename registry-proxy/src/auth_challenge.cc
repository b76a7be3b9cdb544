#include "registry-proxy/auth_challenge.h"

#include <cctype>

namespace shoal::proxy {
namespace {

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

class scanner {
 public:
  explicit scanner(std::string_view s) : s_(s) {}
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  bool done() const { return i_ >= s_.size(); }
  char peek() const { return done() ? '\0' : s_[i_]; }
  void advance() { ++i_; }
  std::size_t pos() const { return i_; }
  void seek(std::size_t p) { i_ = p; }
  std::string_view token() {
    std::size_t start = i_;
    while (i_ < s_.size() && is_token_char(s_[i_])) ++i_;
    return s_.substr(start, i_ - start);
  }
  // A quoted-string with backslash escapes; false if unterminated.
  bool quoted(std::string& out) {
    if (peek() != '"') return false;
    ++i_;
    while (i_ < s_.size()) {
      char c = s_[i_++];
      if (c == '"') return true;
      if (c == '\\' && i_ < s_.size()) c = s_[i_++];
      out += c;
    }
    return false;
  }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::vector<auth_challenge> parse_www_authenticate(std::string_view header) {
  std::vector<auth_challenge> out;
  scanner sc(header);
  std::size_t guard = 0;
  while (!sc.done() && ++guard < 1000) {
    sc.skip_ws();
    while (sc.peek() == ',') {
      sc.advance();
      sc.skip_ws();
    }
    std::string_view scheme = sc.token();
    if (scheme.empty()) {
      if (!sc.done()) sc.advance();  // skip a byte we cannot use
      continue;
    }
    auth_challenge ch;
    ch.scheme = lower(scheme);
    sc.skip_ws();
    // auth-params: key=value pairs separated by commas, until the next scheme token.
    for (std::size_t g2 = 0; !sc.done() && g2 < 1000; ++g2) {
      sc.skip_ws();
      std::size_t mark = sc.pos();
      std::string_view key = sc.token();
      sc.skip_ws();
      if (key.empty() || sc.peek() != '=') {
        sc.seek(mark);
        break;  // a new challenge starts here (or garbage)
      }
      sc.advance();
      sc.skip_ws();
      std::string value;
      if (sc.peek() == '"') {
        if (!sc.quoted(value)) break;
      } else {
        value = std::string(sc.token());
      }
      ch.params[lower(key)] = value;
      sc.skip_ws();
      if (sc.peek() == ',') sc.advance();
    }
    out.push_back(std::move(ch));
  }
  return out;
}

}  // namespace shoal::proxy
