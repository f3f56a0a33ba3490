// Admission of an SSE request: see auth_admit.hpp.
#include "core/auth_admit.hpp"

#include "core/names.hpp"

#include <algorithm>
#include <utility>

namespace pgbs::auth {
namespace {

Admission refused(Admission a, int status, std::string reason) {
  a.verdict = Admission::Verdict::Refuse;
  a.status = status;
  a.reason = std::move(reason);
  return a;
}

Admission retry(Admission a, std::string reason) {
  a.verdict = Admission::Verdict::Retry;
  a.reason = std::move(reason);
  return a;
}

bool holds(const std::vector<std::string> &v, const std::string &name) {
  return std::find(v.begin(), v.end(), name) != v.end();
}

// A signed name the gem's normalisation empties (":", "...", "é") names no
// stream; one too long for a queue name (longer than PGMQ allows) is never a
// stream either: said now, rather than a stream that waits forever. 0 when
// neither.
int check_signed_name(const std::string &logical, std::string *reason) {
  names::QueueNameError qerr = names::QueueNameError::None;
  names::queue_name(logical, &qerr);
  if (qerr == names::QueueNameError::Empty) {
    *reason = "signed stream name maps to no stream name (no letter, digit or \"_\")\n";
    return 400;
  }
  if (qerr == names::QueueNameError::TooLong) {
    const size_t len = names::normalize(std::string(names::kGemPrefix) + logical).size();
    *reason = "stream name too long: its queue name (pgbus_ + the name, normalized) would have " +
              std::to_string(len) + " characters, more than the 47 of PGMQ and the pgbus gem\n";
    return 400;
  }
  return 0;
}

} // namespace

Admission admit(const Gate &gate, const Ask &ask, Catalog &catalog) {
  Admission a;
  std::string why;
  if (int status = gate.authenticate(ask.creds, ask.now_s, &a.who, &why))
    return refused(std::move(a), status, why + "\n");
  std::vector<std::string> wanted = ask.streams;
  if (!ask.creds.signed_name.empty()) {
    if (int status = check_signed_name(a.who.signed_name, &why))
      return refused(std::move(a), status, why);
    std::string target;
    switch (catalog.find_signed_stream(a.who.signed_name, &target)) {
    case Catalog::Found::Unreadable:
      return retry(std::move(a), "stream unavailable: cannot read the catalog, retry\n");
    case Catalog::Found::No:
      return refused(std::move(a), 404,
                     "unknown stream: no stream is the gem's queue for this signed name\n");
    case Catalog::Found::Yes:
      wanted = {std::move(target)};
    }
  }
  if (wanted.empty())
    return refused(std::move(a), 400, "no stream named\n");
  for (const std::string &name : wanted) {
    bool is_public = false;
    const Catalog::Found found = catalog.find_stream(name, a.who.present, &is_public);
    if (found == Catalog::Found::Unreadable)
      return retry(std::move(a), "stream unavailable: cannot read the catalog, retry\n");
    const bool known = found == Catalog::Found::Yes;
    // 404 for a name authorised: a stream that does not exist yet (the gem
    // creates its queue at the first broadcast), which the connection awaits.
    const int status = Gate::authorize(a.who, name, known, known && is_public, &why);
    if (status != 0 && status != 404)
      return refused(std::move(a), status, why + "\n");
    if (ask.presence)
      if (int refusal = Gate::authorize_presence(a.who, name, &why))
        return refused(std::move(a), refusal, "presence: " + why + "\n");
    if (holds(a.open, name) || holds(a.awaited, name))
      return refused(std::move(a), 400, "stream named twice: " + name + "\n");
    (status == 404 ? a.awaited : a.open).push_back(name);
  }
  if (!ask.subscriber.empty())
    if (int status = Gate::authorize_subscriber(a.who, ask.subscriber, &why))
      return refused(std::move(a), status, why + "\n");
  a.verdict = a.awaited.empty() ? Admission::Verdict::Allow : Admission::Verdict::Wait;
  return a;
}

} // namespace pgbs::auth
