/* Shared by the C benchmark programs: a monotonic clock in ns and a child
 * started on a fresh PTY the way colibrid starts an agent (session leader,
 * the PTY as its controlling terminal and stdio). */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This process's CPU time so far (user + system), in ms. */
static inline double self_cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + ru.ru_stime.tv_sec * 1e3 + ru.ru_stime.tv_usec / 1e3;
}

static inline void die(const char *what) {
    perror(what);
    exit(1);
}

/* A Unix stream socket listening at PATH. It is bound under a temporary
 * name and renamed once listening, so PATH appears only when a connect
 * to it can succeed (the benchmark waits for the file). */
static inline int listen_unix(const char *path) {
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    if (ls < 0) die("socket");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (snprintf(sa.sun_path, sizeof sa.sun_path, "%s.tmp", path) >= (int)sizeof sa.sun_path)
        die("socket path too long");
    unlink(sa.sun_path);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 4) < 0) die("bind/listen");
    if (rename(sa.sun_path, path) < 0) die("rename");
    return ls;
}

/* Opens a PTY, forks, execs argv on its slave; returns the child's pid and
 * stores the (non-blocking, close-on-exec) master in *master. */
static inline pid_t spawn_on_pty(char *const argv[], int *master) {
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0) die("posix_openpt");
    if (grantpt(m) < 0 || unlockpt(m) < 0) die("grantpt/unlockpt");
    char name[128];
    if (ptsname_r(m, name, sizeof name) != 0) die("ptsname_r");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        setsid();
        int s = open(name, O_RDWR);
        if (s < 0) _exit(126);
        ioctl(s, TIOCSCTTY, 0);
        struct termios t; /* raw, as colibrid sets its agents' PTYs */
        if (tcgetattr(s, &t) == 0) {
            cfmakeraw(&t);
            tcsetattr(s, TCSANOW, &t);
        }
        dup2(s, 0);
        dup2(s, 1);
        dup2(s, 2);
        if (s > 2) close(s);
        execv(argv[0], argv);
        _exit(127);
    }
    fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
    *master = m;
    return pid;
}
#endif
