// Engine: connections ended on purpose, because their credential expired or
// because pgbus_stream.disconnect() named them. docs/ARCHITECTURE.md,
// "Credentials that end".
#include "core/wire.hpp"
#include "engine/engine.hpp"
#include "engine/state.hpp"

namespace pgbs::engine {

// A pgbus:shutdown frame saying why (a control frame: never dropped, written
// before the stream ends), then the end of the stream.
void Engine::end_connection(Connection &c, const std::string &reason) {
  OutFrame f;
  f.body = std::make_shared<const std::string>(wire::shutdown_frame(reason));
  push(c, std::move(f), false);
  obs_.diagnostic(c.id, "closed", c.subs.empty() ? "" : c.subs[0].st->info.name,
                  "reason=" + reason);
  sink_.close(c.ref, reason);
  closed(c.id);
}

void Engine::forget_expiry(const Connection &c) {
  auto [from, to] = expiries_.equal_range(c.expires_at_s);
  for (auto it = from; it != to; ++it)
    if (it->second == c.id) {
      expiries_.erase(it);
      return;
    }
}

size_t Engine::end_expired(int64_t now_unix_s) {
  size_t n = 0;
  // Past expires_at, as verify_jwt refuses it: a reconnect with the same
  // token is then refused, not served again for the rest of that second.
  while (!expiries_.empty() && expiries_.begin()->first < now_unix_s) {
    const uint64_t id = expiries_.begin()->second;
    auto it = conns_.find(id);
    if (it == conns_.end()) {
      expiries_.erase(expiries_.begin());
      continue;
    }
    end_connection(*it->second, "credential_expired"); // forgets its expiry
    n++;
  }
  return n;
}

size_t Engine::end_connections(uint64_t conn_id, const std::string &sub,
                               const std::string &reason) {
  std::vector<Connection *> ending;
  if (conn_id != 0) {
    auto it = conns_.find(conn_id);
    if (it != conns_.end())
      ending.push_back(it->second.get());
  } else if (!sub.empty()) {
    for (auto &[id, c] : conns_)
      if (c->sub && *c->sub == sub)
        ending.push_back(c.get());
  }
  for (Connection *c : ending)
    end_connection(*c, reason);
  return ending.size();
}

} // namespace pgbs::engine
