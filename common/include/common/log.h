#pragma once
// Structured logging on spdlog: one line per event, as text or as JSON lines.
//
//   log::info("blob committed", log::kv("digest", d.str()), log::kv("bytes", n));
//   text: 2026-11-29T19:05:18.123Z info registry-proxy blob committed digest=sha256:.. bytes=12
//   json: {"ts":"2026-11-29T19:05:18.123Z","level":"info","component":"registry-proxy",
//          "msg":"blob committed","digest":"sha256:..","bytes":12}
//
// Thread-safe. init() once at start-up; before init() lines go to stderr as text at info level.

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace shoal::log {

enum class level { trace = 0, debug, info, warn, error, critical, off };
enum class format { text, json };

// A key and its rendered value; `quoted` is false for numbers and booleans (JSON output).
struct field {
  std::string_view key;
  std::string value;
  bool quoted = true;
};

template <class T>
field kv(std::string_view key, const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return field{key, value ? "true" : "false", false};
  } else if constexpr (std::is_arithmetic_v<T>) {
    return field{key, std::to_string(value), false};
  } else {
    return field{key, std::string(std::string_view(value)), true};
  }
}

// Sets format, minimum level and the component name printed on every line. Output is stderr,
// or the file at `path` (appended) when it is not empty.
void init(format f, level min_level, std::string_view component, const std::string& path = {});
// Parses "trace|debug|info|warn|error|critical|off"; returns false on anything else.
bool parse_level(std::string_view s, level& out);
bool parse_format(std::string_view s, format& out);
bool enabled(level l);

void write(level l, std::string_view msg, const field* fields, std::size_t n);

template <class... F>
void emit(level l, std::string_view msg, F&&... fields) {
  if (!enabled(l)) return;
  if constexpr (sizeof...(F) == 0) {
    write(l, msg, nullptr, 0);
  } else {
    const field arr[] = {field(std::forward<F>(fields))...};
    write(l, msg, arr, sizeof...(F));
  }
}

template <class... F>
void trace(std::string_view m, F&&... f) {
  emit(level::trace, m, std::forward<F>(f)...);
}
template <class... F>
void debug(std::string_view m, F&&... f) {
  emit(level::debug, m, std::forward<F>(f)...);
}
template <class... F>
void info(std::string_view m, F&&... f) {
  emit(level::info, m, std::forward<F>(f)...);
}
template <class... F>
void warn(std::string_view m, F&&... f) {
  emit(level::warn, m, std::forward<F>(f)...);
}
template <class... F>
void error(std::string_view m, F&&... f) {
  emit(level::error, m, std::forward<F>(f)...);
}

// Renders one line without writing it (tests use this).
std::string render(format f, level l, std::string_view component, std::string_view msg,
                   const field* fields, std::size_t n);

}  // namespace shoal::log
