// Listening sockets for the HTTP listener (see listen.hpp).
#include "http/listen.hpp"

#include "core/text.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pgbs::http {
namespace {

struct Addr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  bool optional = false; // IPv6 half of "*" / "localhost"
  std::string text;
};

bool parse_literal(std::string_view text, Addr *a) {
  std::string s(text);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']')
    s = s.substr(1, s.size() - 2);
  auto *v4 = reinterpret_cast<sockaddr_in *>(&a->ss);
  if (inet_pton(AF_INET, s.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    a->len = sizeof(sockaddr_in);
    return true;
  }
  auto *v6 = reinterpret_cast<sockaddr_in6 *>(&a->ss);
  if (inet_pton(AF_INET6, s.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    a->len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

void set_port(Addr *a, int port) {
  if (a->ss.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in *>(&a->ss)->sin_port = htons(static_cast<uint16_t>(port));
  else
    reinterpret_cast<sockaddr_in6 *>(&a->ss)->sin6_port = htons(static_cast<uint16_t>(port));
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len) != 0)
    return -1;
  if (ss.ss_family == AF_INET)
    return ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port);
}

bool expand(const std::string &addresses, std::vector<Addr> *out, std::string *err) {
  std::string_view rest = addresses;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = text::trim(rest.substr(0, comma));
    std::vector<std::pair<std::string, bool>> literals; // text, optional
    if (item == "*") {
      literals = {{"0.0.0.0", false}, {"::", true}};
    } else if (item == "localhost") {
      literals = {{"127.0.0.1", false}, {"::1", true}};
    } else if (!item.empty()) {
      literals = {{std::string(item), false}};
    }
    for (auto &[text, optional] : literals) {
      Addr a;
      if (!parse_literal(text, &a)) {
        *err = "listen_addresses: \"" + text + "\" is not an IP address, \"*\" or \"localhost\"";
        return false;
      }
      a.optional = optional;
      a.text = text;
      out->push_back(a);
    }
    if (comma == std::string_view::npos)
      break;
    rest = rest.substr(comma + 1);
  }
  if (out->empty()) {
    *err = "listen_addresses is empty";
    return false;
  }
  return true;
}

// Returns the listening socket or -1 with *err set (errno preserved).
int open_one(const Addr &a, bool reuse_port, std::string *err) {
  const int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = std::string("socket(): ") + strerror(errno);
    return -1;
  }
  const int one = 1;
  bool ok = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0;
  if (ok && reuse_port)
    ok = setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0;
  // IPv4 has its own socket: keep "::" from also claiming IPv4.
  if (ok && a.ss.ss_family == AF_INET6)
    ok = setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) == 0;
  if (ok)
    ok = bind(fd, reinterpret_cast<const sockaddr *>(&a.ss), a.len) == 0;
  if (ok)
    ok = listen(fd, SOMAXCONN) == 0;
  if (!ok) {
    const int e = errno;
    *err = "cannot listen on " + a.text + ": " + strerror(e);
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

} // namespace

bool open_listeners(const std::string &addresses, int port, bool reuse_port, std::vector<int> *fds,
                    int *bound_port, std::string *err) {
  std::vector<Addr> addrs;
  if (!expand(addresses, &addrs, err))
    return false;
  if (port < 0 || port > 65535) {
    *err = "port out of range";
    return false;
  }
  std::vector<int> opened;
  for (Addr &a : addrs) {
    set_port(&a, port);
    std::string e;
    const int fd = open_one(a, reuse_port, &e);
    if (fd < 0) {
      const bool no_ipv6 = errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL;
      if (a.optional && no_ipv6)
        continue;
      for (int o : opened)
        close(o);
      *err = e;
      return false;
    }
    if (port == 0)
      port = local_port(fd); // the other addresses take the same port
    opened.push_back(fd);
  }
  *fds = std::move(opened);
  *bound_port = port;
  return true;
}

} // namespace pgbs::http
