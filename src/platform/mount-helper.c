/*
 * stove-mount-helper: a long-lived child of the daemon that makes mount(2), umount2(2), mknod(2) and
 * pinned network namespaces for it. Node has no binding for these, and spawning util-linux `mount`,
 * `umount`, `unshare` or coreutils `mknod` costs a fork of the whole daemon plus the tool's own start-up
 * for each call (several ms on a pod's critical path); a request here costs a pipe round trip.
 *
 * Requests on stdin, answers on stdout, one at a time, in order. Each message is a little-endian u32
 * length and then that many bytes: NUL-terminated fields.
 *
 *   "M" id source target fstype flags data cwd   mount(source, target, fstype, flags, data) in cwd
 *                                                 (overlay's relative lowerdirs); data "" = NULL
 *   "U" id target flags                           umount2(target, flags)
 *   "N" id path                                   new network namespace with `lo` up, bind-mounted on
 *                                                 `path` (an existing file), made in a forked child so
 *                                                 this process never leaves its own namespace
 *   "D" id path type mode major minor             mknod(path, type | mode, makedev(major, minor)) with
 *                                                 umask 0; type c, b or p; mode in octal
 *   "I" id uidmap gidmap cwd sources targets      idmapped bind mounts: a user namespace with these
 *                                                 maps (uid_map/gid_map text) is made in a forked child,
 *                                                 then each source (newline-separated, relative to cwd)
 *                                                 is cloned (open_tree), idmapped with it (mount_setattr
 *                                                 MOUNT_ATTR_IDMAP) and attached on its target (an
 *                                                 existing dir); all or nothing
 *
 *   answer: id errno text    (errno in decimal, 0 = done; text = strerror)
 *
 * Exits on EOF of stdin, and when the daemon dies (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REQUEST (64 * 1024)
#define MAX_FIELDS 8

static int read_full(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
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

static void answer(const char *id, int err) {
  char body[512];
  int n = snprintf(body, sizeof body, "%s%c%d%c%s%c", id, 0, err, 0, err ? strerror(err) : "", 0);
  if (n < 0 || (size_t)n >= sizeof body) exit(2);
  uint32_t len = (uint32_t)n;
  unsigned char head[4] = {len & 0xff, (len >> 8) & 0xff, (len >> 16) & 0xff, (len >> 24) & 0xff};
  if (write_full(1, head, 4) < 0 || write_full(1, body, (size_t)n) < 0) exit(1);
}

static int do_mount(char **f) {
  const char *cwd = f[7][0] ? f[7] : "/";
  if (chdir(cwd) < 0) return errno;
  unsigned long flags = strtoul(f[5], NULL, 10);
  int rc = mount(f[2], f[3], f[4][0] ? f[4] : NULL, flags, f[6][0] ? f[6] : NULL);
  int err = rc < 0 ? errno : 0;
  if (chdir("/") < 0 && err == 0) err = errno;
  return err;
}

/*
 * A user namespace with the given maps, as an fd: a child is cloned straight into a new user
 * namespace and waits on a pipe while the maps are written and its namespace is opened. Returns an
 * errno; *out is the fd.
 */
static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = write_full(fd, text, strlen(text)) < 0 ? (errno ? errno : EIO) : 0;
  close(fd);
  return err;
}

static int userns_fd(const char *uidmap, const char *gidmap, int *out) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) return errno;
  pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (pid < 0) {
    int err = errno;
    close(pipefd[0]);
    close(pipefd[1]);
    return err;
  }
  if (pid == 0) {
    char c;
    close(pipefd[1]);
    (void)!read(pipefd[0], &c, 1); /* EOF once the parent is done */
    _exit(0);
  }
  close(pipefd[0]);
  char path[64];
  int err;
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
  err = write_file(path, uidmap);
  if (!err) {
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    err = write_file(path, gidmap);
  }
  if (!err) {
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    *out = open(path, O_RDONLY | O_CLOEXEC);
    if (*out < 0) err = errno;
  }
  close(pipefd[1]);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  return err;
}

static int do_idmap(char **f) {
  const char *cwd = f[4][0] ? f[4] : "/";
  int userns = -1;
  int err = userns_fd(f[2], f[3], &userns);
  if (err) return err;
  if (chdir(cwd) < 0) {
    err = errno;
    close(userns);
    return err;
  }
  char *src_save = NULL, *dst_save = NULL;
  char *targets[512];
  int attached = 0;
  char *src = strtok_r(f[5], "\n", &src_save), *dst = strtok_r(f[6], "\n", &dst_save);
  for (; src && dst; src = strtok_r(NULL, "\n", &src_save), dst = strtok_r(NULL, "\n", &dst_save)) {
    if (attached == (int)(sizeof targets / sizeof targets[0])) {
      err = E2BIG;
      break;
    }
    int tree = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0) {
      err = errno;
      break;
    }
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns};
    if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0 ||
        move_mount(tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
      err = errno;
      close(tree);
      break;
    }
    close(tree);
    targets[attached++] = dst;
  }
  if (!err && (src || dst)) err = EINVAL; /* as many sources as targets */
  if (err) {
    while (attached > 0) umount2(targets[--attached], MNT_DETACH);
  }
  close(userns);
  if (chdir("/") < 0 && err == 0) err = errno;
  return err;
}

static int do_umount(char **f) {
  return umount2(f[2], (int)strtol(f[3], NULL, 10)) < 0 ? errno : 0;
}

static int do_mknod(char **f) {
  mode_t type = strcmp(f[3], "c") == 0 ? S_IFCHR : strcmp(f[3], "b") == 0 ? S_IFBLK : strcmp(f[3], "p") == 0 ? S_IFIFO : 0;
  if (type == 0) return EINVAL;
  mode_t mode = (mode_t)strtoul(f[4], NULL, 8) & 07777;
  dev_t dev = makedev((unsigned)strtoul(f[5], NULL, 10), (unsigned)strtoul(f[6], NULL, 10));
  mode_t old = umask(0); /* the mode asked for, as mknod -m gives it */
  int err = mknod(f[2], type | mode, dev) < 0 ? errno : 0;
  umask(old);
  return err;
}

/* In the child: a new netns, loopback up, pinned on path. Returns an errno. */
static int make_netns(const char *path) {
  if (unshare(CLONE_NEWNET) < 0) return errno;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errno;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) return errno;
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) return errno;
  close(s);
  if (mount("/proc/thread-self/ns/net", path, NULL, MS_BIND, NULL) < 0) return errno;
  return 0;
}

static int do_netns(char **f) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) return errno;
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(pipefd[0]);
    close(pipefd[1]);
    return err;
  }
  if (pid == 0) {
    int err = make_netns(f[2]);
    (void)!write(pipefd[1], &err, sizeof err);
    _exit(err ? 1 : 0);
  }
  close(pipefd[1]);
  int err = 0;
  if (read_full(pipefd[0], &err, sizeof err) < 0) err = EIO;
  close(pipefd[0]);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  return err;
}

int main(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 1; /* the daemon is already gone */
  signal(SIGPIPE, SIG_IGN);
  static char buf[MAX_REQUEST + 1];
  for (;;) {
    unsigned char head[4];
    if (read_full(0, head, 4) < 0) return 0;
    uint32_t len = head[0] | (head[1] << 8) | (head[2] << 16) | ((uint32_t)head[3] << 24);
    if (len == 0 || len > MAX_REQUEST) return 2;
    if (read_full(0, buf, len) < 0) return 2;
    buf[len] = 0;
    char *f[MAX_FIELDS] = {0};
    int nf = 0;
    for (size_t i = 0; i < len && nf < MAX_FIELDS; nf++) {
      f[nf] = buf + i;
      i += strlen(buf + i) + 1;
    }
    if (nf < 2) return 2;
    int err;
    if (strcmp(f[0], "M") == 0 && nf == 8) err = do_mount(f);
    else if (strcmp(f[0], "U") == 0 && nf == 4) err = do_umount(f);
    else if (strcmp(f[0], "N") == 0 && nf == 3) err = do_netns(f);
    else if (strcmp(f[0], "D") == 0 && nf == 7) err = do_mknod(f);
    else if (strcmp(f[0], "I") == 0 && nf == 7) err = do_idmap(f);
    else err = EINVAL;
    answer(f[1], err);
  }
}
