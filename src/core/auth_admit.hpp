// Admission: whether an SSE request may open a connection, to which streams
// now and to which once they exist. The one place that decides access to a
// connection (a message's visibility is Engine::may_see). Pure C++, no
// PostgreSQL: what it needs of the catalog is the Catalog interface, which
// the engine implements. The rules are auth::Gate's (auth_gate.hpp); this
// applies them in order to the whole request.
#pragma once
#include "core/auth_gate.hpp"
#include "core/no_postgres.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace pgbs::auth {

// What admit() asks of the catalog.
class Catalog {
public:
  enum class Found { Yes, No, Unreadable };
  // The stream `name`, and whether it is public. `may_read`: the request
  // holds a verified credential; without one the catalog may answer from
  // what it already holds (made-up names then cost no read).
  virtual Found find_stream(const std::string &name, bool may_read, bool *is_public) = 0;
  // The catalog name of the stream the verified signed name `logical`
  // opens, which may not exist yet (the subscription waits for it); No when
  // no stream can be it.
  virtual Found find_signed_stream(const std::string &logical, std::string *name) = 0;

protected:
  ~Catalog() = default;
};

// What a request asks to open.
struct Ask {
  const Credentials &creds;
  int64_t now_s;                           // the Unix time to check the credentials at
  const std::vector<std::string> &streams; // by name (none on a signed route)
  bool presence;                           // ?presence=1
  const std::string &subscriber;           // ?subscriber= ("" if none)
};

struct Admission {
  enum class Verdict {
    Allow,  // every stream exists: open them
    Wait,   // open, and wait for the streams in `awaited` to exist
    Refuse, // answer `status` (400, 401, 403, 404) with `reason`
    Retry,  // the catalog could not be read: the client comes back soon
  };
  Verdict verdict = Verdict::Allow;
  int status = 0;
  std::string reason;               // Refuse and Retry: one line, ending in "\n"
  Identity who;                     // the verified identity (Allow, Wait)
  std::vector<std::string> open;    // streams that exist, in the request's order
  std::vector<std::string> awaited; // streams not born yet, in the request's order
};

// Decides a request: its credentials first (a refusal never tells whether a
// private stream exists), then each stream it names, then its subscriber.
Admission admit(const Gate &gate, const Ask &ask, Catalog &catalog);

} // namespace pgbs::auth
