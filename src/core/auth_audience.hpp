// Audiences: which connections see a message broadcast with visible_to =>
// label. Each label has a rule (jsonpath text, see define_audience()); a
// connection sees the message when the rule matches its context (the ctx
// claim of its JWT). Pure C++, no PostgreSQL: the rule itself is evaluated by
// a callback the worker supplies (SQL on its main thread; only a true result
// admits a context).
//
// Fail closed: an unknown label, a connection without context, or a rule
// that errors hides the message. A decision is evaluated once per context and
// label and then cached (connections with the same context share it), so the
// cost is per connection and label, never per message; set_rules() drops the
// decisions of labels whose rule changed or went away.
#pragma once
#include "core/no_postgres.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace pgbs::auth {

class Audiences {
public:
  // Evaluates rule against ctx: true/false, or nullopt when the rule errors.
  using Evaluator =
      std::function<std::optional<bool>(const std::string &rule, const std::string &ctx)>;
  // Decisions kept per label; beyond this the label's cache starts over.
  static constexpr size_t kMaxCachedPerLabel = 4096;

  explicit Audiences(Evaluator eval) : eval_(std::move(eval)) {}

  // Replaces the rule set (label -> rule text). Returns true when it changed.
  bool set_rules(const std::map<std::string, std::string> &rules);
  // Whether a connection with context ctx ("" = none) may see a message for label.
  bool visible(std::string_view ctx, std::string_view label);

  size_t evaluations() const { return evaluations_; }
  size_t labels() const { return labels_.size(); }

private:
  struct Label {
    std::string rule;
    std::unordered_map<std::string, bool> decided; // ctx -> visible
  };
  Evaluator eval_;
  std::map<std::string, Label, std::less<>> labels_;
  size_t evaluations_ = 0;
};

} // namespace pgbs::auth
