#pragma once
// A connection cap for the gRPC frontend (--grpc-max-connections). grpc++ 1.51 (Debian 12) has
// no argument that bounds connections and no hook where a server sees them open and close, so
// with a cap Kiln accepts the TCP connections itself and hands each to the gRPC server as a
// file descriptor (grpc::AddInsecureChannelFromFd); one that would exceed the cap is closed at
// once, which a client sees as UNAVAILABLE. A connection counts until gRPC closes its
// descriptor: each handed descriptor is remembered with its socket's inode, and one whose number
// no longer names that socket has been closed. gRPC takes only plaintext connections this way,
// so the cap and TLS exclude each other.
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace grpc {
class Server;
}

namespace kiln::server::grpc {

class CappedAcceptor {
 public:
  // Binds and listens on address:port (port 0: any free port); Unavailable naming the address
  // when that fails.
  CappedAcceptor(const std::string& address, uint16_t port, size_t max_connections);
  ~CappedAcceptor();
  CappedAcceptor(const CappedAcceptor&) = delete;
  CappedAcceptor& operator=(const CappedAcceptor&) = delete;

  uint16_t port() const { return port_; }
  // Starts the accept thread, handing connections to `server` (already started).
  void start(::grpc::Server* server);
  // Stops accepting (connections already handed over stay with gRPC) and joins the thread.
  void stop();
  // Connections gRPC still holds.
  size_t open_connections();

 private:
  void run(::grpc::Server* server);
  size_t prune();  // forgets closed connections; returns how many remain (mutex_ held)

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop() wakes the accept thread
  uint16_t port_ = 0;
  size_t max_connections_;
  std::mutex mutex_;
  std::vector<std::pair<int, ino_t>> handed_;  // descriptor, socket inode
  std::thread thread_;
};

}  // namespace kiln::server::grpc
