/* The floor for spawning: N children started on their own PTYs the way
 * colibrid starts agents (posix_openpt, fork, setsid, controlling TTY,
 * exec), each PTY master and a pidfd registered in one epoll set; timed
 * until every child has exec'd (its /proc/PID/comm is AGENT's name).
 * Prints the time and this process's CPU per spawn, then kills them.
 * Usage: floor_spawn N AGENT */
#include "common.h"
#include <libgen.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static int exec_done(pid_t pid, const char *comm) {
    char path[64], got[64] = {0};
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t r = read(fd, got, sizeof got - 1);
    close(fd);
    if (r > 0 && got[r - 1] == '\n') got[r - 1] = 0;
    return r > 0 && strncmp(got, comm, 15) == 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: floor_spawn N AGENT\n");
        return 2;
    }
    int n = atoi(argv[1]);
    char *agent = argv[2];
    char comm[64];
    snprintf(comm, sizeof comm, "%s", basename(strdup(agent)));
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    char *cargv[] = {agent, NULL};
    double cpu0 = self_cpu_ms();
    uint64_t t0 = mono_ns();
    for (int i = 0; i < n; i++) {
        int m;
        pids[i] = spawn_on_pty(cargv, &m);
        int pfd = (int)syscall(SYS_pidfd_open, pids[i], 0);
        if (pfd < 0) die("pidfd_open");
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, m, &ev) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, pfd, &ev) < 0) die("epoll_ctl");
    }
    uint64_t t_forked = mono_ns();
    double cpu1 = self_cpu_ms();
    int left = n;
    char *done = calloc((size_t)n, 1);
    while (left > 0) {
        for (int i = 0; i < n; i++)
            if (!done[i] && exec_done(pids[i], comm)) done[i] = 1, left--;
        if (mono_ns() - t0 > 120000000000ull) {
            fprintf(stderr, "floor_spawn: %d children did not exec\n", left);
            break;
        }
    }
    uint64_t t_exec = mono_ns();
    printf("floor_spawn n=%d forked_ms=%.1f execd_ms=%.1f cpu_ms_per_spawn=%.4f\n", n, (t_forked - t0) / 1e6,
           (t_exec - t0) / 1e6, (cpu1 - cpu0) / n);
    fflush(stdout);
    for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
    return 0;
}
