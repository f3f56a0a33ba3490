// The worker's side of audiences (see audience_rules.hpp).
#include "worker/audience_rules.hpp"

#include "pg/spi.hpp"

#include "pg/guard.hpp" // after the C++ headers (it includes postgres.h)

extern "C" {
#include "utils/timestamp.h"
}

namespace pgbs::worker {

bool load_audience_rules(std::map<std::string, std::string> *out) {
  try {
    pg::SpiTx tx;
    out->clear();
    // Before CREATE EXTENSION (or at 0.1.0) there are no audiences to read.
    pg::Table exists = tx.query("SELECT to_regclass('pgbus_stream.audiences') IS NOT NULL");
    if (exists.rows() != 1 || exists.at(0, 0).value_or("f") != "t") {
      tx.commit();
      return true;
    }
    // A lock held on the table must not stall the worker's loop.
    tx.query("SET LOCAL lock_timeout = '100ms'", {}, false);
    pg::Table t = tx.query("SELECT label, rule::text FROM pgbus_stream.audiences");
    tx.commit();
    for (size_t r = 0; r < t.rows(); r++)
      if (t.at(r, 0) && t.at(r, 1))
        (*out)[*t.at(r, 0)] = *t.at(r, 1);
    return true;
  } catch (const pg::Error &e) {
    pg::warn(std::string("audiences not reloaded: ") + e.what());
    return false;
  }
}

namespace {

// A rule that errors is logged, at most once a minute per rule: its
// decisions are cached per context, but many contexts may meet it.
void warn_rule_error(const std::string &rule, const std::string &err) {
  static std::map<std::string, int64> last_logged; // rule -> time, bounded below
  const int64 now = (int64)GetCurrentTimestamp();
  auto it = last_logged.find(rule);
  if (it != last_logged.end() && now - it->second < 60 * USECS_PER_SEC)
    return;
  if (last_logged.size() >= 256)
    last_logged.clear();
  last_logged[rule] = now;
  std::string shown = rule.size() > 200 ? rule.substr(0, 200) + "..." : rule;
  pg::warn("audience rule " + shown + " failed: " + err +
           " (its messages stay hidden from that context)");
}

} // namespace

// Only a true result admits. A predicate rule ('$.role == "admin"') yields
// one boolean: true admits, false and unknown (null) do not (with
// jsonb_path_exists a false would admit, since a false is a result). A path
// rule ('$.role ? (@ == "admin")') admits when it selects something, unless
// all it selects is one false or null. Evaluated in the rule's own mode, not
// silently: a rule that errors (strict mode on a missing key, a type
// mismatch) raises, and the message stays hidden.
std::optional<bool> evaluate_audience_rule(const std::string &rule, const std::string &ctx) {
  try {
    pg::SpiTx tx;
    // Bounded: a costly rule (a regex on a large context) hides the message
    // rather than stall every stream of this worker.
    tx.query("SET LOCAL statement_timeout = '50ms'", {}, false);
    pg::Table t = tx.query("SELECT r <> '[]' AND r <> '[false]' AND r <> '[null]' FROM "
                           "(SELECT jsonb_path_query_array($1::jsonb, $2::jsonpath, '{}', false)"
                           " AS r) q",
                           {pg::Arg::txt(ctx), pg::Arg::txt(rule)});
    tx.commit();
    if (t.rows() != 1 || !t.at(0, 0))
      return std::nullopt;
    return *t.at(0, 0) == "t";
  } catch (const pg::Error &e) {
    warn_rule_error(rule, e.what());
    return std::nullopt;
  }
}

} // namespace pgbs::worker
