// The worker's side of audiences (see audience_rules.hpp).
#include "worker/audience_rules.hpp"

#include "pg/spi.hpp"

#include "pg/guard.hpp" // after the C++ headers (it includes postgres.h)

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

std::optional<bool> evaluate_audience_rule(const std::string &rule, const std::string &ctx) {
  try {
    pg::SpiTx tx;
    // Bounded: a costly rule (a regex on a large context) hides the message
    // rather than stall every stream of this worker.
    tx.query("SET LOCAL statement_timeout = '50ms'", {}, false);
    // silent => false: a rule that errors (a strict-mode structural error,
    // a type mismatch) raises, and the message stays hidden.
    pg::Table t = tx.query("SELECT jsonb_path_exists($1::jsonb, $2::jsonpath, '{}', false)",
                           {pg::Arg::txt(ctx), pg::Arg::txt(rule)});
    tx.commit();
    if (t.rows() != 1 || !t.at(0, 0))
      return std::nullopt;
    return *t.at(0, 0) == "t";
  } catch (const pg::Error &e) {
    return std::nullopt;
  }
}

} // namespace pgbs::worker
