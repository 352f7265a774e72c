// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/result.h"

#include <unistd.h>

#include <filesystem>

namespace dp {

Error make_error(int code, std::string message, const char* file, unsigned line) {
  if (code < 0) code = -code;
  return Error{code, std::move(message),
               fmt::format("{}:{}", std::filesystem::path(file).filename().string(), line)};
}

std::string Error::what() const {
  if (code == 0) return message;
  return fmt::format("{}: {}", message, std::strerror(code));
}

std::string Error::str() const { return fmt::format("{} ({})", what(), where); }

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

Fd::~Fd() { reset(); }

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace dp
