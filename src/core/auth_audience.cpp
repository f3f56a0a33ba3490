// Audiences: rules per label, decisions cached per context (see auth_audience.hpp).
#include "core/auth_audience.hpp"

namespace pgbs::auth {

bool Audiences::set_rules(const std::map<std::string, std::string> &rules) {
  bool changed = rules.size() != labels_.size();
  for (auto it = labels_.begin(); it != labels_.end();) {
    auto r = rules.find(it->first);
    if (r == rules.end()) {
      it = labels_.erase(it);
      changed = true;
    } else {
      if (r->second != it->second.rule) {
        it->second.rule = r->second;
        it->second.decided.clear();
        changed = true;
      }
      ++it;
    }
  }
  for (const auto &[label, rule] : rules)
    if (labels_.find(label) == labels_.end()) {
      labels_[label].rule = rule;
      changed = true;
    }
  return changed;
}

bool Audiences::visible(std::string_view ctx, std::string_view label) {
  if (ctx.empty())
    return false;
  auto it = labels_.find(label);
  if (it == labels_.end())
    return false;
  Label &l = it->second;
  const std::string key(ctx);
  auto d = l.decided.find(key);
  if (d != l.decided.end())
    return d->second;
  if (l.decided.size() >= kMaxCachedPerLabel)
    l.decided.clear();
  evaluations_++;
  std::optional<bool> v;
  try {
    v = eval_(l.rule, key);
  } catch (...) {
    v = std::nullopt; // an evaluator failure hides the message like a rule error
  }
  const bool seen = v.value_or(false);
  l.decided.emplace(key, seen);
  return seen;
}

} // namespace pgbs::auth
