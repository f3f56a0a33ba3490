// Listening sockets for the HTTP listener. Created here rather than by
// libmicrohttpd so that SO_REUSEPORT can be set (several worker processes
// accept on the same port, the kernel spreads connections among them).
#pragma once
#include "core/no_postgres.hpp"

#include <string>
#include <vector>

namespace pgbs::http {

// Binds and listens on every address of a comma-separated list: IPv4 or IPv6
// literals (IPv6 optionally in brackets), "*" (0.0.0.0 and ::) or
// "localhost" (127.0.0.1 and ::1). Host names are refused: resolving them
// could block. For "*" and "localhost" the IPv6 half is skipped when the host
// has no IPv6. Sockets are nonblocking and close-on-exec. With port 0 the
// first socket gets an ephemeral port and the others reuse it.
// On failure closes what it opened and returns false with *err set.
bool open_listeners(const std::string &addresses, int port, bool reuse_port, std::vector<int> *fds,
                    int *bound_port, std::string *err);

} // namespace pgbs::http
