// Passing a file descriptor (and a few bytes with it) over a Unix socket
// with SCM_RIGHTS, as a process sends a shareable pool's descriptor to
// another (tests of pool IPC).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <vector>

namespace cuarrow_test {

/// Sends `fd` and `payload` (at least one byte) as one message.
inline bool send_fd(int sock, int fd, const std::vector<std::byte>& payload) {
  if (payload.empty()) return false;
  iovec iov{const_cast<std::byte*>(payload.data()), payload.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(payload.size());
}

/// Receives one message of send_fd: the descriptor (close-on-exec; -1 if
/// none came) and the payload.
inline int receive_fd(int sock, std::vector<std::byte>* payload, std::size_t max_payload = 4096) {
  payload->assign(max_payload, std::byte{0});
  iovec iov{payload->data(), payload->size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  payload->resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (n <= 0 || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

/// A connected Unix socket pair whose child end a child process inherits
/// across exec (the parent's end is close-on-exec); both closed with it.
struct socket_pair {
  int parent = -1, child = -1;
  socket_pair() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
      parent = sv[0];
      child = sv[1];
      fcntl(parent, F_SETFD, FD_CLOEXEC);
    }
  }
  ~socket_pair() {
    if (parent >= 0) close(parent);
    if (child >= 0) close(child);
  }
  socket_pair(const socket_pair&) = delete;
  socket_pair& operator=(const socket_pair&) = delete;
};

}  // namespace cuarrow_test
