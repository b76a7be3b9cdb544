#include "shoalctl_output.h"
#include "common/json_text.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <regex>

namespace shoal::tools::ctl {

std::optional<format> parse_format(std::string_view s) {
  if (s == "json") return format::json;
  if (s == "yaml") return format::yaml;
  if (s == "table") return format::table;
  return std::nullopt;
}

namespace {

// Whether a YAML reader would take this plain text for something other than a string.
bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  std::string low(s);
  std::transform(low.begin(), low.end(), low.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* w : {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}) {
    if (low == w) return true;
  }
  static const std::regex number(R"([-+]?(\.?[0-9].*|\.inf|\.nan|0[xo].*))",
                                 std::regex::icase | std::regex::optimize);
  return std::regex_match(s, number);
}

void emit(YAML::Emitter& e, const nlohmann::json& j) {
  using t = nlohmann::json::value_t;
  switch (j.type()) {
    case t::object:
      e << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        e << YAML::Key;
        if (needs_quotes(k)) e << YAML::DoubleQuoted;
        e << k << YAML::Value;
        emit(e, v);
      }
      e << YAML::EndMap;
      break;
    case t::array:
      e << YAML::BeginSeq;
      for (const auto& v : j) emit(e, v);
      e << YAML::EndSeq;
      break;
    case t::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (needs_quotes(s)) e << YAML::DoubleQuoted;
      e << s;
      break;
    }
    case t::boolean:
      e << j.get<bool>();
      break;
    case t::number_integer:
      e << j.get<std::int64_t>();
      break;
    case t::number_unsigned:
      e << j.get<std::uint64_t>();
      break;
    case t::number_float:
      e << j.get<double>();
      break;
    default:
      e << YAML::Null;
      break;
  }
}

}  // namespace

std::string to_yaml(const nlohmann::json& j) {
  YAML::Emitter e;
  emit(e, j);
  return std::string(e.c_str()) + "\n";
}

bool print_document(const nlohmann::json& j, format f) {
  if (f == format::table) return false;
  const std::string text = f == format::json ? json_text(j, 2) + "\n" : to_yaml(j);
  std::fputs(text.c_str(), stdout);
  return true;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string bar(double frac, int width) {
  const int fill = std::clamp(static_cast<int>(frac * width + 0.5), 0, width);
  return "[" + std::string(static_cast<std::size_t>(fill), '#') +
         std::string(static_cast<std::size_t>(width - fill), '.') + "]";
}

void rate_meter::add(std::chrono::steady_clock::time_point t, double bytes_done) {
  samples_.emplace_back(t, bytes_done);
  while (samples_.size() > 2 && t - samples_.front().first > window_) samples_.pop_front();
}

double rate_meter::rate() const {
  if (samples_.size() < 2) return 0;
  const auto& [t0, b0] = samples_.front();
  const auto& [t1, b1] = samples_.back();
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  return secs > 0 && b1 > b0 ? (b1 - b0) / secs : 0;
}

std::optional<double> rate_meter::eta(double total) const {
  const double r = rate();
  if (r <= 0 || samples_.empty()) return std::nullopt;
  return std::max(0.0, total - samples_.back().second) / r;
}

std::string eta_text(std::optional<double> seconds) {
  if (!seconds) return "-";
  const long s = std::lround(*seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

}  // namespace shoal::tools::ctl
