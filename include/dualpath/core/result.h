// SPDX-License-Identifier: Apache-2.0
// The one error type of dualpath, and the Result<T> every fallible call returns.
//
// An Error carries errno (0 when the failure is not an OS error), a sentence
// that names the object and the operation ("update of map dp_rails failed"),
// and the source location that produced it.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace dp {

struct Error {
  int code = 0;  // errno value, or 0
  std::string message;
  std::string where;  // "file:line" of the code that made the error

  // "message: strerror (where)" - for logs.
  std::string str() const;
  // "message: strerror" - for users.
  std::string what() const;
};

// file and line default to the caller's (__builtin_FILE/LINE rather than
// std::source_location, which clang 14 cannot compile with libstdc++ 12).
Error make_error(int code, std::string message, const char* file = __builtin_FILE(),
                 unsigned line = __builtin_LINE());

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error err) : v_(std::move(err)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const Error& error() const { return std::get<Error>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error err) : err_(std::move(err)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

// An OS error from errno or a negative return code (libbpf style).
#define DP_SYS_ERROR(code, ...) ::dp::make_error((code), fmt::format(__VA_ARGS__))
// A logic or input error, no errno.
#define DP_ERROR(...) ::dp::make_error(0, fmt::format(__VA_ARGS__))
// Propagate the error of a Result expression.
#define DP_TRY(expr)                          \
  do {                                        \
    auto dp_try_r_ = (expr);                  \
    if (!dp_try_r_) return dp_try_r_.error(); \
  } while (0)

// A move-only file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  bool valid() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace dp
