// connect_burst: opens N TCP connections to the SSE listener at once, sends
// one GET on each as soon as it is connected, and waits for every status
// line. Connections answered 200 stay open until all are answered (so they
// are held at the same time); others are closed when answered.
//
//   connect_burst PORT PATH N TIMEOUT_S
//
// Prints one line:
//   answered=A ok=B unavailable=C retry_after=D other=E reset=F unanswered=G slowest_ms=H
// (unavailable: 503; retry_after: 503s with a Retry-After header; reset: the
// connection failed or closed before a status line). Exit 0 when it ran.
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <string>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace {

enum class State { Connecting, Sent, Done };

struct Client {
  int fd = -1;
  State state = State::Connecting;
  std::string in;
  int status = 0;
  bool retry_after = false;
  bool reset = false;
  double ms = 0;
};

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// Parses the response head once complete; true when decided.
bool parse(Client &c) {
  size_t end = c.in.find("\r\n\r\n");
  if (end == std::string::npos)
    return false;
  if (c.in.compare(0, 5, "HTTP/") != 0 || c.in.size() < 12) {
    c.reset = true;
    return true;
  }
  c.status = std::atoi(c.in.c_str() + 9);
  std::string head = c.in.substr(0, end);
  for (auto &ch : head)
    ch = (char)std::tolower((unsigned char)ch);
  c.retry_after = head.find("\r\nretry-after:") != std::string::npos;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: connect_burst PORT PATH N TIMEOUT_S\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string path = argv[2];
  const int n = std::atoi(argv[3]);
  const double timeout_ms = std::atof(argv[4]) * 1000.0;

  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 16) {
    std::fprintf(stderr, "connect_burst: open files limit %lu is below %d\n",
                 (unsigned long)rl.rlim_cur, n + 16);
    return 2;
  }

  const int ep = epoll_create1(EPOLL_CLOEXEC);
  std::vector<Client> cs(n);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n";
  const double t0 = now_ms();
  int open = 0;
  for (int i = 0; i < n; ++i) {
    Client &c = cs[i];
    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) {
      std::perror("socket");
      return 2;
    }
    if (connect(c.fd, (sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
      c.reset = true;
      c.state = State::Done;
      close(c.fd);
      c.fd = -1;
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP;
    ev.data.u32 = (uint32_t)i;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
    open++;
  }
  std::vector<epoll_event> evs(1024);
  int pending = open;
  char buf[4096];
  while (pending > 0) {
    const double left = timeout_ms - (now_ms() - t0);
    if (left <= 0)
      break;
    const int k = epoll_wait(ep, evs.data(), (int)evs.size(), (int)std::min(left, 200.0));
    for (int e = 0; e < k; ++e) {
      Client &c = cs[evs[e].data.u32];
      if (c.state == State::Done)
        continue;
      if (c.state == State::Connecting && (evs[e].events & EPOLLOUT)) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0 && send(c.fd, req.data(), req.size(), MSG_NOSIGNAL) == (ssize_t)req.size()) {
          c.state = State::Sent;
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLRDHUP;
          ev.data.u32 = evs[e].data.u32;
          epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        } else {
          c.reset = true;
        }
      }
      if (!c.reset && c.state == State::Sent &&
          (evs[e].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))) {
        ssize_t r;
        while ((r = recv(c.fd, buf, sizeof buf, 0)) > 0)
          c.in.append(buf, (size_t)r);
        if (!parse(c) && (r == 0 || (r < 0 && errno != EAGAIN)))
          c.reset = true;
      }
      if (!c.reset && (evs[e].events & (EPOLLERR | EPOLLHUP)) && c.status == 0)
        c.reset = true;
      if (c.reset || c.status != 0) {
        c.ms = now_ms() - t0;
        c.state = State::Done;
        pending--;
        epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
        if (c.status != 200) {
          close(c.fd);
          c.fd = -1;
        }
      }
    }
  }
  int answered = 0, ok = 0, unavailable = 0, retry = 0, other = 0, reset = 0, unanswered = 0;
  double slowest = 0;
  for (Client &c : cs) {
    if (c.reset) {
      reset++;
    } else if (c.status == 0) {
      unanswered++;
    } else {
      answered++;
      slowest = std::max(slowest, c.ms);
      if (c.status == 200)
        ok++;
      else if (c.status == 503) {
        unavailable++;
        retry += c.retry_after;
      } else
        other++;
    }
    if (c.fd >= 0)
      close(c.fd);
  }
  std::printf("answered=%d ok=%d unavailable=%d retry_after=%d other=%d reset=%d unanswered=%d "
              "slowest_ms=%.0f\n",
              answered, ok, unavailable, retry, other, reset, unanswered, slowest);
  return 0;
}
