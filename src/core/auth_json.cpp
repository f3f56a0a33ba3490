// Strict JSON reader for credentials (see auth_json.hpp).
#include "core/auth_json.hpp"

#include <cstdlib>
#include <cstring>

namespace pgbs::auth::json {
namespace {

class Parser {
public:
  explicit Parser(std::string_view text) : s_(text) {}

  bool run(Value *out, std::string *err) {
    if (!value(out, 0) || (skip_ws(), pos_ != s_.size())) {
      if (err)
        *err = err_.empty() ? "trailing characters" : err_;
      return false;
    }
    return true;
  }

private:
  std::string_view s_;
  size_t pos_ = 0;
  std::string err_;

  bool fail(const char *why) {
    if (err_.empty())
      err_ = why;
    return false;
  }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      pos_++;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word)
      return fail("bad literal");
    pos_ += word.size();
    return true;
  }

  bool value(Value *v, int depth) {
    skip_ws();
    if (pos_ >= s_.size())
      return fail("unexpected end");
    const size_t start = pos_;
    bool ok = false;
    switch (s_[pos_]) {
    case '{':
      ok = depth < kMaxDepth ? object(v, depth) : fail("nested too deeply");
      break;
    case '[':
      ok = depth < kMaxDepth ? array(v, depth) : fail("nested too deeply");
      break;
    case '"':
      v->type = Value::Type::String;
      ok = string(&v->str);
      break;
    case 't':
      v->type = Value::Type::Bool;
      v->boolean = true;
      ok = literal("true");
      break;
    case 'f':
      v->type = Value::Type::Bool;
      ok = literal("false");
      break;
    case 'n':
      v->type = Value::Type::Null;
      ok = literal("null");
      break;
    default:
      ok = number(v);
    }
    if (ok)
      v->raw = s_.substr(start, pos_ - start);
    return ok;
  }

  bool object(Value *v, int depth) {
    v->type = Value::Type::Object;
    pos_++; // '{'
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      pos_++;
      return true;
    }
    for (;;) {
      skip_ws();
      std::string key;
      if (pos_ >= s_.size() || s_[pos_] != '"' || !string(&key))
        return fail("expected a member name");
      if (v->get(key))
        return fail("duplicate member name");
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':')
        return fail("expected ':'");
      pos_++;
      Value member;
      if (!value(&member, depth + 1))
        return false;
      v->members.emplace_back(std::move(key), std::move(member));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        pos_++;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        pos_++;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool array(Value *v, int depth) {
    v->type = Value::Type::Array;
    pos_++; // '['
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      pos_++;
      return true;
    }
    for (;;) {
      Value item;
      if (!value(&item, depth + 1))
        return false;
      v->items.push_back(std::move(item));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        pos_++;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        pos_++;
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  bool hex4(unsigned *out) {
    if (pos_ + 4 > s_.size())
      return fail("bad \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= unsigned(c - 'A' + 10);
      else
        return fail("bad \\u escape");
    }
    *out = v;
    return true;
  }

  static void put_utf8(std::string *out, unsigned cp) {
    if (cp < 0x80) {
      out->push_back(char(cp));
    } else if (cp < 0x800) {
      out->push_back(char(0xC0 | (cp >> 6)));
      out->push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(char(0xE0 | (cp >> 12)));
      out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(char(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(char(0xF0 | (cp >> 18)));
      out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(char(0x80 | (cp & 0x3F)));
    }
  }

  bool string(std::string *out) {
    pos_++; // '"'
    out->clear();
    while (pos_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"')
        return true;
      if (c < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        out->push_back(char(c));
        continue;
      }
      if (pos_ >= s_.size())
        break;
      const char e = s_[pos_++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out->push_back(e);
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'u': {
        unsigned cp;
        if (!hex4(&cp))
          return false;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
          return fail("lone surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          unsigned lo;
          if (s_.substr(pos_, 2) != "\\u")
            return fail("lone surrogate");
          pos_ += 2;
          if (!hex4(&lo))
            return false;
          if (lo < 0xDC00 || lo > 0xDFFF)
            return fail("lone surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0)
          return fail("NUL in string");
        put_utf8(out, cp);
        break;
      }
      default:
        return fail("bad escape");
      }
    }
    return fail("unterminated string");
  }

  bool number(Value *v) {
    const size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-')
      pos_++;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9')
        pos_++;
      return pos_ - d;
    };
    const size_t int_start = pos_;
    const size_t n = digits();
    if (n == 0 || (n > 1 && s_[int_start] == '0'))
      return fail("bad number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      pos_++;
      if (digits() == 0)
        return fail("bad number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      pos_++;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-'))
        pos_++;
      if (digits() == 0)
        return fail("bad number");
    }
    if (pos_ - start > 64)
      return fail("number too long");
    char buf[80];
    memcpy(buf, s_.data() + start, pos_ - start);
    buf[pos_ - start] = '\0';
    v->type = Value::Type::Number;
    v->number = strtod(buf, nullptr);
    return true;
  }
};

} // namespace

const Value *Value::get(std::string_view key) const {
  for (const auto &m : members)
    if (m.first == key)
      return &m.second;
  return nullptr;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      i++;
      continue;
    }
    int len;
    unsigned cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size())
      return false;
    for (int k = 1; k < len; k++) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const unsigned kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

bool parse(std::string_view text, Value *out, std::string *err) {
  *out = Value();
  if (!valid_utf8(text)) {
    if (err)
      *err = "not UTF-8";
    return false;
  }
  Parser p(text);
  return p.run(out, err);
}

std::string quote(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      out.append("\\u00");
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
  return out;
}

} // namespace pgbs::auth::json
