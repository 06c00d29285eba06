/* The floor for the exit notice: what a bare C supervisor loop achieves.
 * Listens on SOCKET and waits for one client (bench/watch_client), then
 * starts STREAMERS copies of STREAMER on PTYs and reads them (one 64 KiB
 * read per ready PTY per pass, counting lines), and EXITS times in a row
 * starts STAMP_EXIT on a PTY, waits for its exit through a pidfd in the
 * same epoll set, reaps it, drains its PTY and writes one line
 * {"event":"exited","pane":"PID"} to the client. No logging, no syslog.
 * With IDLE and IDLE_AGENT, it first starts IDLE copies of IDLE_AGENT on
 * PTYs, each master and a pidfd in the epoll set (what colibrid holds per
 * agent), reads what they print, and only then listens: the floor for the
 * exit notice among that many agents.
 * Usage: floor_pidfd SOCKET STAMP_EXIT STAMPFILE EXITS STREAMERS STREAMER
 *        [IDLE IDLE_AGENT] */
#include "common.h"
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#define MAX_STREAMERS 256
#define TAG_CHILD_EXIT (1ull << 40)
#define TAG_IDLE (1ull << 41)
#define TAG_IDLE_EXIT (1ull << 42)

static int pidfd_open(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: floor_pidfd SOCKET STAMP_EXIT STAMPFILE EXITS STREAMERS STREAMER [IDLE IDLE_AGENT]\n");
        return 2;
    }
    int exits = atoi(argv[4]), nstream = atoi(argv[5]);
    if (nstream > MAX_STREAMERS) nstream = MAX_STREAMERS;
    int nidle = argc >= 9 ? atoi(argv[7]) : 0;
    signal(SIGPIPE, SIG_IGN);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    static char buf[65536];
    int *imaster = calloc((size_t)nidle + 1, sizeof *imaster);
    int *ipidfd = calloc((size_t)nidle + 1, sizeof *ipidfd);
    char *iheard = calloc((size_t)nidle + 1, 1);
    pid_t *ipid = calloc((size_t)nidle + 1, sizeof *ipid);
    if (!imaster || !ipidfd || !iheard || !ipid) die("calloc");
    char *iargv[] = {argc >= 9 ? argv[8] : NULL, NULL};
    for (int i = 0; i < nidle; i++) {
        ipid[i] = spawn_on_pty(iargv, &imaster[i]);
        int pfd = ipidfd[i] = pidfd_open(ipid[i]);
        if (pfd < 0) die("pidfd_open");
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_IDLE | (uint64_t)i};
        struct epoll_event xev = {.events = EPOLLIN, .data.u64 = TAG_IDLE_EXIT | (uint64_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, imaster[i], &ev) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, pfd, &xev) < 0)
            die("epoll_ctl");
    }
    /* Every idle agent has printed (its header) before the exits begin. */
    for (int heard = 0; heard < nidle;) {
        struct epoll_event evs[256];
        int n = epoll_wait(ep, evs, 256, 60000);
        if (n <= 0) die("idle agents did not print within 60 s");
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            int k = (int)(tag & 0xffffffffu);
            /* An agent gone before it printed would keep its pidfd and
             * PTY ready for ever: the floor fails instead of spinning. */
            if (tag & TAG_IDLE_EXIT) die("an idle agent exited before the exits began");
            ssize_t r = read(imaster[k], buf, sizeof buf);
            if (r < 0 && errno == EAGAIN) continue;
            if (r <= 0) die("an idle agent's PTY closed before the exits began");
            if (!iheard[k]) iheard[k] = 1, heard++;
        }
    }
    int ls = listen_unix(argv[1]);
    int client = accept(ls, NULL, NULL);
    if (client < 0) die("accept");
    static const char hello[] = "{\"ok\":true,\"error\":null,\"data\":{\"watching\":true}}\n";
    if (write(client, hello, sizeof hello - 1) < 0) die("write hello");

    int smaster[MAX_STREAMERS];
    pid_t spid[MAX_STREAMERS];
    char *sargv[] = {argv[6], NULL};
    for (int i = 0; i < nstream; i++) {
        spid[i] = spawn_on_pty(sargv, &smaster[i]);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, smaster[i], &ev);
    }
    unsigned long long lines = 0, bytes = 0;
    char *cargv[] = {argv[2], argv[3], "20000", "0", NULL};
    for (int k = 0; k < exits; k++) {
        int cm;
        pid_t cp = spawn_on_pty(cargv, &cm);
        int pfd = pidfd_open(cp);
        if (pfd < 0) die("pidfd_open");
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_CHILD_EXIT};
        epoll_ctl(ep, EPOLL_CTL_ADD, pfd, &ev);
        int done = 0;
        while (!done) {
            struct epoll_event evs[64];
            int n = epoll_wait(ep, evs, 64, -1);
            for (int i = 0; i < n; i++) {
                uint64_t tag = evs[i].data.u64;
                if (tag & (TAG_IDLE | TAG_IDLE_EXIT)) {
                    int a = (int)(tag & 0xffffffffu);
                    ssize_t r = tag & TAG_IDLE ? read(imaster[a], buf, sizeof buf) : 0;
                    if (r > 0 || (r < 0 && errno == EAGAIN)) continue;
                    /* Gone (killed from outside): out of the set, so its
                     * events do not come back on every wait. */
                    epoll_ctl(ep, EPOLL_CTL_DEL, imaster[a], NULL);
                    epoll_ctl(ep, EPOLL_CTL_DEL, ipidfd[a], NULL);
                    continue;
                }
                if (tag == TAG_CHILD_EXIT) {
                    waitpid(cp, NULL, 0);
                    while (read(cm, buf, sizeof buf) > 0) {
                    }
                    epoll_ctl(ep, EPOLL_CTL_DEL, pfd, NULL);
                    close(pfd);
                    close(cm);
                    char line[96];
                    int len = snprintf(line, sizeof line, "{\"event\":\"exited\",\"pane\":\"%d\"}\n", (int)cp);
                    if (write(client, line, (size_t)len) != len) die("write client");
                    done = 1;
                    continue;
                }
                ssize_t r = read(smaster[tag], buf, sizeof buf);
                if (r <= 0) {
                    if (r < 0 && errno == EAGAIN) continue;
                    epoll_ctl(ep, EPOLL_CTL_DEL, smaster[tag], NULL);
                    continue;
                }
                bytes += (unsigned long long)r;
                for (ssize_t j = 0; j < r; j++) lines += buf[j] == '\n';
            }
        }
    }
    for (int i = 0; i < nstream; i++) {
        kill(spid[i], SIGKILL);
        waitpid(spid[i], NULL, 0);
    }
    for (int i = 0; i < nidle; i++) kill(ipid[i], SIGKILL);
    for (int i = 0; i < nidle; i++) waitpid(ipid[i], NULL, 0);
    fprintf(stderr, "floor_pidfd: %d exits, read %llu lines (%llu bytes) from %d streamers\n", exits, lines, bytes, nstream);
    return 0;
}
