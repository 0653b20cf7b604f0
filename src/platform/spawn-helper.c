/*
 * stove-spawn-helper: a small long-lived child of the daemon that starts processes for it (conmon, the
 * OCI runtime, CNI plugins) and relays their pipes. A fork of the daemon itself copies the page tables
 * of its whole heap, blocks its event loop until the child has exec'd, and makes the child tear that
 * copy down again: 2-3 ms per process on a busy machine. A fork of this process costs next to nothing.
 *
 * Messages both ways: a little-endian u32 length, then that many bytes; the first byte is the type,
 * then little-endian u32 fields, then (S, F, O, W) strings or data.
 *
 *   daemon → helper
 *     S id  flags\0cwd\0file\0argc\0argv...\0envc\0env...\0fds\0   spawn; flags "d" = own session
 *                                        (setsid); cwd "" = the helper's; fds: one letter per child fd
 *                                        from 0, 'i' = /dev/null, 'p' = a socketpair relayed to the daemon
 *     W id fd data                       write to the child's fd
 *     E id fd                            no more writes to it (shutdown SHUT_WR)
 *     Z id fd                            the daemon is done with this fd: close it
 *     K id signal group                  kill the child (group 1: its process group)
 *   helper → daemon
 *     P id pid                           spawned (the program was exec'd)
 *     F id errno text                    not spawned
 *     O id fd data                       the child wrote to fd
 *     C id fd                            end of file on fd
 *     X id code signal                   the child exited (code -1 when killed by signal)
 *
 * A session is forgotten once its child has exited and the daemon has closed every fd. Exits on EOF of
 * stdin and when the daemon dies (PR_SET_PDEATHSIG); the children live on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MESSAGE (1024 * 1024)
#define MAX_FDS 8
#define MAX_ARGS 4096

extern char **environ;

struct outbuf {
  char *data;
  size_t len;
};

struct session {
  uint32_t id;
  pid_t pid;
  int exited;
  int fds[MAX_FDS]; /* the helper's end of each child fd, -1 when none or closed */
  int eof[MAX_FDS];
  int shut[MAX_FDS];  /* shutdown(SHUT_WR) wanted once pending writes are out */
  struct outbuf pending[MAX_FDS];
  struct session *next;
};

static struct session *sessions;
static char *in;
static size_t in_len, in_cap;

static void die(const char *what) {
  perror(what);
  exit(2);
}

static int write_full(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static void put_u32(char *p, uint32_t v) {
  p[0] = (char)(v & 0xff);
  p[1] = (char)((v >> 8) & 0xff);
  p[2] = (char)((v >> 16) & 0xff);
  p[3] = (char)((v >> 24) & 0xff);
}

static uint32_t get_u32(const char *p) {
  const unsigned char *u = (const unsigned char *)p;
  return u[0] | (u[1] << 8) | (u[2] << 16) | ((uint32_t)u[3] << 24);
}

/* Sends type + u32 fields + data to the daemon. */
static void send_msg(char type, const uint32_t *fields, int nfields, const void *data, size_t len) {
  char head[4 + 1 + 4 * 4];
  size_t body = 1 + 4 * (size_t)nfields + len;
  put_u32(head, (uint32_t)body);
  head[4] = type;
  for (int i = 0; i < nfields; i++) put_u32(head + 5 + 4 * i, fields[i]);
  if (write_full(1, head, 5 + 4 * (size_t)nfields) < 0) exit(1);
  if (len && write_full(1, data, len) < 0) exit(1);
}

static struct session *find(uint32_t id) {
  for (struct session *s = sessions; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

static void close_fd(struct session *s, int i) {
  if (s->fds[i] >= 0) close(s->fds[i]);
  s->fds[i] = -1;
  free(s->pending[i].data);
  s->pending[i].data = NULL;
  s->pending[i].len = 0;
}

/* Forgets a session whose child has exited and whose fds the daemon closed. */
static void maybe_free(struct session *s) {
  if (!s->exited) return;
  for (int i = 0; i < MAX_FDS; i++)
    if (s->fds[i] >= 0) return;
  for (struct session **p = &sessions; *p; p = &(*p)->next) {
    if (*p == s) {
      *p = s->next;
      free(s);
      return;
    }
  }
}

/* Writes what is pending on fd i without blocking; shuts it down once empty if asked to. */
static void flush_fd(struct session *s, int i) {
  struct outbuf *b = &s->pending[i];
  while (b->len > 0 && s->fds[i] >= 0) {
    ssize_t n = send(s->fds[i], b->data, b->len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) { /* the child closed its end: drop what it will never read */
      b->len = 0;
      break;
    }
    memmove(b->data, b->data + n, b->len - (size_t)n);
    b->len -= (size_t)n;
  }
  if (b->len == 0 && s->shut[i] && s->fds[i] >= 0) {
    shutdown(s->fds[i], SHUT_WR);
    s->shut[i] = 0;
  }
}

static void reset_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* In the child: fds in place, then exec. Reports errno on the CLOEXEC pipe if exec fails. */
static void child(int report, const char *flags, const char *cwd, const char *file, char **argv, char **envp, const char *fdspec,
                  int *ends) {
  int n = (int)strlen(fdspec);
  int high[MAX_FDS];
  reset_signals();
  if (strchr(flags, 'd') && setsid() < 0) goto fail;
  /* Move every end above the targets first, so that dup2 never overwrites one still needed. */
  for (int i = 0; i < n; i++) {
    int fd = fdspec[i] == 'p' ? ends[i] : open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0) goto fail;
    high[i] = fcntl(fd, F_DUPFD_CLOEXEC, 64);
    if (high[i] < 0) goto fail;
  }
  for (int i = 0; i < n; i++)
    if (dup2(high[i], i) < 0) goto fail;
  if (cwd[0] && chdir(cwd) < 0) goto fail;
  environ = envp; /* execvp looks the program up in the child's own PATH */
  execvp(file, argv);
fail:;
  int err = errno;
  (void)!write(report, &err, sizeof err);
  _exit(127);
}

static void spawn_session(uint32_t id, char *p, size_t len) {
  char *fields[2 * MAX_ARGS + 8];
  int nf = 0;
  for (size_t i = 0; i < len && nf < (int)(sizeof fields / sizeof *fields); nf++) {
    fields[nf] = p + i;
    i += strlen(p + i) + 1;
  }
  int k = 0;
  if (nf < 5) goto bad;
  const char *flags = fields[k++], *cwd = fields[k++], *file = fields[k++];
  int argc = atoi(fields[k++]);
  if (argc < 1 || argc > MAX_ARGS || k + argc >= nf) goto bad;
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  for (int i = 0; i < argc; i++) argv[i] = fields[k++];
  int envc = atoi(fields[k++]);
  if (envc < 0 || envc > MAX_ARGS || k + envc >= nf) {
    free(argv);
    goto bad;
  }
  char **envp = calloc((size_t)envc + 1, sizeof *envp);
  for (int i = 0; i < envc; i++) envp[i] = fields[k++];
  const char *fdspec = fields[k++];
  int n = (int)strlen(fdspec);
  if (n > MAX_FDS) {
    free(argv);
    free(envp);
    goto bad;
  }

  struct session *s = calloc(1, sizeof *s);
  s->id = id;
  for (int i = 0; i < MAX_FDS; i++) s->fds[i] = -1;
  int ends[MAX_FDS];
  int err = 0;
  for (int i = 0; i < n && !err; i++) {
    ends[i] = -1;
    if (fdspec[i] != 'p') continue;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
      err = errno;
      break;
    }
    s->fds[i] = sv[0];
    ends[i] = sv[1];
  }
  int report[2] = {-1, -1};
  if (!err && pipe2(report, O_CLOEXEC) < 0) err = errno;
  pid_t pid = -1;
  if (!err) {
    pid = fork();
    if (pid < 0) err = errno;
    if (pid == 0) child(report[1], flags, cwd, file, argv, envp, fdspec, ends);
  }
  for (int i = 0; i < n; i++)
    if (fdspec[i] == 'p' && ends[i] >= 0) close(ends[i]);
  if (report[1] >= 0) close(report[1]);
  if (!err) {
    int child_err = 0;
    ssize_t got;
    do got = read(report[0], &child_err, sizeof child_err);
    while (got < 0 && errno == EINTR);
    if (got == sizeof child_err) {
      err = child_err;
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
    }
  }
  if (report[0] >= 0) close(report[0]);
  free(argv);
  free(envp);
  if (err) {
    for (int i = 0; i < MAX_FDS; i++)
      if (s->fds[i] >= 0) close(s->fds[i]);
    free(s);
    const char *text = strerror(err);
    uint32_t f[2] = {id, (uint32_t)err};
    send_msg('F', f, 2, text, strlen(text));
    return;
  }
  s->pid = pid;
  s->next = sessions;
  sessions = s;
  uint32_t spawned[2] = {id, (uint32_t)pid};
  send_msg('P', spawned, 2, NULL, 0);
  return;
bad:;
  uint32_t refused[2] = {id, EINVAL};
  send_msg('F', refused, 2, "bad spawn request", 17);
}

static void handle(char *msg, size_t len) {
  if (len < 5) die("short message");
  char type = msg[0];
  uint32_t id = get_u32(msg + 1);
  char *rest = msg + 5;
  size_t rest_len = len - 5;
  if (type == 'S') {
    spawn_session(id, rest, rest_len);
    return;
  }
  struct session *s = find(id);
  if (type == 'K') {
    if (rest_len < 8) die("short kill");
    if (s && !s->exited) kill(get_u32(rest + 4) ? -s->pid : s->pid, (int)get_u32(rest));
    return;
  }
  if (rest_len < 4) die("short message");
  uint32_t fd = get_u32(rest);
  if (!s || fd >= MAX_FDS || s->fds[fd] < 0) return; /* already gone: nothing to do */
  if (type == 'W') {
    struct outbuf *b = &s->pending[fd];
    b->data = realloc(b->data, b->len + rest_len - 4);
    memcpy(b->data + b->len, rest + 4, rest_len - 4);
    b->len += rest_len - 4;
    flush_fd(s, (int)fd);
  } else if (type == 'E') {
    s->shut[fd] = 1;
    flush_fd(s, (int)fd);
  } else if (type == 'Z') {
    close_fd(s, (int)fd);
    maybe_free(s);
  } else {
    die("unknown message");
  }
}

static void read_requests(void) {
  if (in_cap - in_len < 65536) {
    in_cap = in_cap ? in_cap * 2 : 131072;
    in = realloc(in, in_cap);
  }
  ssize_t n = read(0, in + in_len, in_cap - in_len);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) exit(0); /* the daemon is gone */
  in_len += (size_t)n;
  size_t off = 0;
  while (in_len - off >= 4) {
    uint32_t len = get_u32(in + off);
    if (len > MAX_MESSAGE) die("message too long");
    if (in_len - off - 4 < len) break;
    handle(in + off + 4, len);
    off += 4 + len;
  }
  memmove(in, in + off, in_len - off);
  in_len -= off;
}

static void reap(int sfd) {
  struct signalfd_siginfo info;
  while (read(sfd, &info, sizeof info) > 0) {
  }
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (struct session *s = sessions; s; s = s->next) {
      if (s->pid != pid || s->exited) continue;
      s->exited = 1;
      uint32_t f[3] = {s->id, WIFEXITED(status) ? (uint32_t)WEXITSTATUS(status) : (uint32_t)-1, WIFSIGNALED(status) ? (uint32_t)WTERMSIG(status) : 0};
      send_msg('X', f, 3, NULL, 0);
      maybe_free(s);
      break;
    }
  }
}

static void read_output(struct session *s, int i) {
  char buf[65536];
  ssize_t n = read(s->fds[i], buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n > 0) {
    uint32_t f[2] = {s->id, (uint32_t)i};
    send_msg('O', f, 2, buf, (size_t)n);
    return;
  }
  s->eof[i] = 1;
  uint32_t f[2] = {s->id, (uint32_t)i};
  send_msg('C', f, 2, NULL, 0);
}

int main(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 1; /* the daemon is already gone */
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) die("signalfd");
  fcntl(0, F_SETFD, FD_CLOEXEC);
  fcntl(1, F_SETFD, FD_CLOEXEC);
  fcntl(2, F_SETFD, FD_CLOEXEC);
  for (;;) {
    size_t cap = 2;
    for (struct session *s = sessions; s; s = s->next) cap += MAX_FDS;
    struct pollfd *pfds = calloc(cap, sizeof *pfds);
    struct session **owner = calloc(cap, sizeof *owner);
    int *index = calloc(cap, sizeof *index);
    size_t n = 0;
    pfds[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
    pfds[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    for (struct session *s = sessions; s; s = s->next) {
      for (int i = 0; i < MAX_FDS; i++) {
        if (s->fds[i] < 0) continue;
        short events = (short)((s->eof[i] ? 0 : POLLIN) | (s->pending[i].len ? POLLOUT : 0));
        if (!events) continue;
        owner[n] = s;
        index[n] = i;
        pfds[n++] = (struct pollfd){.fd = s->fds[i], .events = events};
      }
    }
    int ready = poll(pfds, n, -1);
    if (ready < 0 && errno != EINTR) die("poll");
    if (ready > 0) {
      /* Outputs first, then exits, then requests: a child's last output reaches the daemon before
         its exit, and a request never finds a session freed under it in this round. */
      for (size_t k = 2; k < n; k++) {
        struct session *s = owner[k];
        int i = index[k];
        if (s->fds[i] < 0) continue;
        if (pfds[k].revents & POLLOUT) flush_fd(s, i);
        if (s->fds[i] >= 0 && !s->eof[i] && (pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) read_output(s, i);
      }
      if (pfds[1].revents & POLLIN) reap(sfd);
      if (pfds[0].revents & (POLLIN | POLLHUP | POLLERR)) read_requests();
    }
    free(pfds);
    free(owner);
    free(index);
  }
}
