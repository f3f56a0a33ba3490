// The worker's side of audiences (core/auth_audience.hpp): reading the rules
// from pgbus_stream.audiences and evaluating one (only a true result
// admits), both through SPI on the main thread.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace pgbs::worker {

// Every label and its rule (jsonpath text), none before the extension
// exists; false when the read failed (the caller keeps the rules it had).
bool load_audience_rules(std::map<std::string, std::string> *out);
// Whether rule admits ctx: a predicate only when true, a path when it
// selects something other than one false or null; nullopt (logged) when the
// rule errors on this context.
std::optional<bool> evaluate_audience_rule(const std::string &rule, const std::string &ctx);

} // namespace pgbs::worker
