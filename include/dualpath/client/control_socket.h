// SPDX-License-Identifier: Apache-2.0
// The two ends of the control socket: the daemon listens, dpctl calls. The
// protocol itself (requests, replies, error codes) is core/protocol.h.
#pragma once

#include <string>

#include "dualpath/core/protocol.h"
#include "dualpath/core/result.h"

namespace dp {

// Creates, binds and listens on a unix socket at path (replacing a stale one).
Result<Fd> listen_unix(const std::string& path, unsigned mode);

// Sends one request and waits for its reply (dpctl side).
Result<json> call(const std::string& socket_path, const json& request, int timeout_ms = 5000);

}  // namespace dp
