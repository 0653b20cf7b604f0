/*
 * stove-attach-relay: connects to a conmon attach socket (AF_UNIX, SOCK_SEQPACKET, which Node's `net`
 * cannot open) and relays it over plain pipes without losing packet boundaries.
 *
 *   usage: stove-attach-relay [-n] <socket path>     (-n: never read stdin, never half-close)
 *
 * socket -> stdout: every packet becomes a frame `u32 big-endian length` + packet bytes. conmon's packets
 *   start with one byte naming the pipe (2 = stdout, 3 = stderr), so a byte stream would lose that.
 *   A zero-length frame is written once, right after connecting (conmon never sends empty packets).
 * stdin -> socket: raw bytes, at most 16 KiB per packet (conmon reads 32 KiB - 1 per packet and drops
 *   the rest). stdin EOF half-closes the socket (SHUT_WR): conmon then closes the container's stdin
 *   unless it runs with --leave-stdin-open, and keeps sending output.
 * Exits 0 when conmon closes the socket, 1 on errors (message on stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>

#define PACKET_MAX 65536
#define STDIN_CHUNK 16384

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int write_frame(const char *data, uint32_t len) {
  unsigned char header[4] = {len >> 24, (len >> 16) & 0xff, (len >> 8) & 0xff, len & 0xff};
  if (write_all(STDOUT_FILENO, header, 4) < 0) return -1;
  return len ? write_all(STDOUT_FILENO, data, len) : 0;
}

/*
 * A path longer than sun_path (a deep state dir: 64 hex digits of container ID sit in it) is reached
 * through the socket's directory, opened with O_PATH and named as /proc/self/fd/N/<name>, as conmon binds
 * it (the directory is conmon's <id> link to the bundle, in a directory only root writes).
 */
static int socket_address(const char *path, struct sockaddr_un *addr, int *dir_fd) {
  *dir_fd = -1;
  if (strlen(path) < sizeof(addr->sun_path)) {
    strcpy(addr->sun_path, path);
    return 0;
  }
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return -1;
  char dir[4096];
  size_t dir_len = (size_t)(slash - path);
  if (dir_len >= sizeof(dir)) return -1;
  memcpy(dir, path, dir_len);
  dir[dir_len] = 0;
  *dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*dir_fd < 0) return -1;
  int n = snprintf(addr->sun_path, sizeof(addr->sun_path), "/proc/self/fd/%d/%s", *dir_fd, slash + 1);
  return n > 0 && (size_t)n < sizeof(addr->sun_path) ? 0 : -1;
}

static int connect_seqpacket(const char *path) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  int dir_fd;
  if (socket_address(path, &addr, &dir_fd) < 0) {
    fprintf(stderr, "attach socket path too long: %s\n", path);
    return -1;
  }
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  int failed = fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0;
  int saved = errno;
  if (dir_fd >= 0) close(dir_fd);
  if (failed) {
    fprintf(stderr, "connect %s: %s\n", path, strerror(saved));
    return -1;
  }
  return fd;
}

int main(int argc, char **argv) {
  static char packet[PACKET_MAX];
  static char pending[STDIN_CHUNK];
  size_t pending_len = 0;
  int stdin_open = 1;

  if (argc == 3 && strcmp(argv[1], "-n") == 0) {
    stdin_open = 0;
  } else if (argc != 2) {
    fprintf(stderr, "usage: %s [-n] <attach socket>\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  int sock = connect_seqpacket(argv[argc - 1]);
  if (sock < 0) return 1;
  /* Non-blocking sends: a full socket must not stop us reading conmon's output (deadlock). */
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
  if (write_frame(NULL, 0) < 0) return 1;

  for (;;) {
    struct pollfd fds[2] = {
        {.fd = sock, .events = POLLIN | (pending_len ? POLLOUT : 0)},
        {.fd = (stdin_open && !pending_len) ? STDIN_FILENO : -1, .events = POLLIN},
    };
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      perror("poll");
      return 1;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = recv(sock, packet, sizeof(packet), 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return 0; /* conmon closed the socket: the process is gone */
      if (write_frame(packet, (uint32_t)n) < 0) return 1;
    }
    if (pending_len && (fds[0].revents & POLLOUT)) {
      ssize_t n = send(sock, pending, pending_len, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return 1;
      if (n > 0) pending_len = 0; /* a SEQPACKET send is all or nothing */
    }
    if (fds[1].fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(STDIN_FILENO, pending, sizeof(pending));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        stdin_open = 0;
        shutdown(sock, SHUT_WR);
      } else {
        pending_len = (size_t)n;
      }
    }
  }
}
