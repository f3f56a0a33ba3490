// Text helpers (see text.hpp).
#include "core/text.hpp"

namespace pgbs::text {
namespace {

char fold(char c, Case cs) {
  return cs == Case::Insensitive && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

} // namespace

std::string_view trim(std::string_view s, std::string_view chars) {
  const size_t first = s.find_first_not_of(chars);
  if (first == std::string_view::npos)
    return s.substr(s.size());
  return s.substr(first, s.find_last_not_of(chars) - first + 1);
}

bool glob(std::string_view pattern, std::string_view s, Case cs) {
  // On a mismatch, the last "*" seen takes one more character.
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = i;
    } else if (p < pattern.size() && fold(pattern[p], cs) == fold(s[i], cs)) {
      p++;
      i++;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    p++;
  return p == pattern.size();
}

} // namespace pgbs::text
