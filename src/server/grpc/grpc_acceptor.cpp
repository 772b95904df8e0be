#include "server/grpc/grpc_acceptor.hpp"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace kiln::server::grpc {
namespace {

int listen_on(const std::string& address, uint16_t port, uint16_t& bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints, &found);
  KILN_CHECK(rc == 0, ErrorCode::Unavailable, "cannot listen for gRPC on {}:{}: {}", address, port,
             gai_strerror(rc));
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  KILN_CHECK(fd >= 0, ErrorCode::Unavailable, "cannot listen for gRPC on {}:{}: {}", address, port,
             why);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  bound = ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  return fd;
}

ino_t socket_inode(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return st.st_ino;
}

}  // namespace

CappedAcceptor::CappedAcceptor(const std::string& address, uint16_t port, size_t max_connections)
    : max_connections_(max_connections) {
  listen_fd_ = listen_on(address, port, port_);
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  KILN_CHECK(wake_fd_ >= 0, ErrorCode::Internal, "eventfd: {}", std::strerror(errno));
}

CappedAcceptor::~CappedAcceptor() {
  stop();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void CappedAcceptor::start(::grpc::Server* server) {
  thread_ = std::thread([this, server] { run(server); });
}

void CappedAcceptor::stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
  thread_.join();
}

size_t CappedAcceptor::open_connections() {
  std::lock_guard lock(mutex_);
  return prune();
}

size_t CappedAcceptor::prune() {
  std::erase_if(handed_,
                [](const std::pair<int, ino_t>& h) { return socket_inode(h.first) != h.second; });
  return handed_.size();
}

void CappedAcceptor::run(::grpc::Server* server) {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;  // the client gave up, or out of descriptors: try again
    std::lock_guard lock(mutex_);
    if (prune() >= max_connections_) {
      close(fd);  // over the cap: the client sees the connection closed (UNAVAILABLE)
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    handed_.emplace_back(fd, socket_inode(fd));
    ::grpc::AddInsecureChannelFromFd(server, fd);  // gRPC owns the descriptor from here
  }
}

}  // namespace kiln::server::grpc
