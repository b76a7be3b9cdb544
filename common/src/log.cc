#include "common/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>

namespace shoal::log {
namespace {

struct state {
  std::mutex mu;
  std::shared_ptr<spdlog::logger> logger;
  format fmt = format::text;
  std::string component = "shoal";
};

state& st() {
  static state s;
  return s;
}
std::atomic<int> g_min_level{static_cast<int>(level::info)};

const char* level_name(level l) {
  switch (l) {
    case level::trace:
      return "trace";
    case level::debug:
      return "debug";
    case level::info:
      return "info";
    case level::warn:
      return "warn";
    case level::error:
      return "error";
    case level::critical:
      return "critical";
    case level::off:
      return "off";
  }
  return "info";
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          static const char* hx = "0123456789abcdef";
          out += "\\u00";
          out += hx[c >> 4];
          out += hx[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Text values with spaces, quotes or control characters are quoted and escaped like JSON.
void append_text_value(std::string& out, std::string_view v) {
  bool plain = !v.empty();
  for (unsigned char c : v) {
    if (c <= 0x20 || c == '"' || c == '=' || c == 0x7f) {
      plain = false;
      break;
    }
  }
  if (plain)
    out += v;
  else
    append_json_string(out, v);
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::shared_ptr<spdlog::logger> make_stderr_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto lg = std::make_shared<spdlog::logger>("shoal", sink);
  lg->set_pattern("%v");
  lg->set_level(spdlog::level::trace);
  return lg;
}

}  // namespace

bool parse_level(std::string_view s, level& out) {
  static const std::pair<std::string_view, level> names[] = {
      {"trace", level::trace}, {"debug", level::debug}, {"info", level::info},
      {"warn", level::warn},   {"error", level::error}, {"critical", level::critical},
      {"off", level::off}};
  for (auto& [n, l] : names) {
    if (n == s) {
      out = l;
      return true;
    }
  }
  return false;
}

bool parse_format(std::string_view s, format& out) {
  if (s == "text") {
    out = format::text;
    return true;
  }
  if (s == "json") {
    out = format::json;
    return true;
  }
  return false;
}

void init(format f, level min_level, std::string_view component, const std::string& path) {
  auto& s = st();
  std::lock_guard lk(s.mu);
  if (path.empty()) {
    s.logger = make_stderr_logger();
  } else {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    s.logger = std::make_shared<spdlog::logger>("shoal", sink);
    s.logger->set_pattern("%v");
    s.logger->set_level(spdlog::level::trace);
    s.logger->flush_on(spdlog::level::trace);
  }
  s.fmt = f;
  s.component = std::string(component);
  g_min_level.store(static_cast<int>(min_level));
}

bool enabled(level l) {
  return l != level::off && static_cast<int>(l) >= g_min_level.load(std::memory_order_relaxed);
}

std::string render(format f, level l, std::string_view component, std::string_view msg,
                   const field* fields, std::size_t n) {
  std::string out;
  out.reserve(128 + msg.size());
  if (f == format::json) {
    out += "{\"ts\":\"";
    out += timestamp();
    out += "\",\"level\":\"";
    out += level_name(l);
    out += "\",\"component\":";
    append_json_string(out, component);
    out += ",\"msg\":";
    append_json_string(out, msg);
    for (std::size_t i = 0; i < n; ++i) {
      out += ',';
      append_json_string(out, fields[i].key);
      out += ':';
      if (fields[i].quoted)
        append_json_string(out, fields[i].value);
      else
        out += fields[i].value;
    }
    out += '}';
  } else {
    out += timestamp();
    out += ' ';
    out += level_name(l);
    out += ' ';
    out += component;
    out += ' ';
    out += msg;
    for (std::size_t i = 0; i < n; ++i) {
      out += ' ';
      out += fields[i].key;
      out += '=';
      append_text_value(out, fields[i].value);
    }
  }
  return out;
}

void write(level l, std::string_view msg, const field* fields, std::size_t n) {
  auto& s = st();
  std::shared_ptr<spdlog::logger> lg;
  format f;
  std::string component;
  {
    std::lock_guard lk(s.mu);
    if (!s.logger) s.logger = make_stderr_logger();
    lg = s.logger;
    f = s.fmt;
    component = s.component;
  }
  lg->log(spdlog::level::info, "{}", render(f, l, component, msg, fields, n));
}

}  // namespace shoal::log
