/* The FreeBSD floor for the exit notice: what a bare C supervisor loop
 * achieves with kqueue, as floor_pidfd.c does with epoll on Linux.
 * Listens on SOCKET and waits for one client (bench/watch_client), then
 * EXITS times in a row starts STAMP_EXIT on a PTY, waits for its exit
 * through EVFILT_PROC/NOTE_EXIT (and reads its PTY through EVFILT_READ) in
 * one kqueue, reaps it, drains its PTY and writes one line
 * {"event":"exited","pane":"PID"} to the client. No logging, no syslog.
 * Built for FreeBSD only (scripts/freebsd-vm-test.sh bench).
 * Usage: floor_kqueue SOCKET STAMP_EXIT STAMPFILE EXITS */
#include "common.h"
#include <signal.h>
#include <string.h>
#include <sys/event.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: floor_kqueue SOCKET STAMP_EXIT STAMPFILE EXITS\n");
        return 2;
    }
    int exits = atoi(argv[4]);
    signal(SIGPIPE, SIG_IGN);
    int kq = kqueue();
    if (kq < 0) die("kqueue");
    static char buf[65536];
    int ls = listen_unix(argv[1]);
    int client = accept(ls, NULL, NULL);
    if (client < 0) die("accept");
    static const char hello[] = "{\"ok\":true,\"error\":null,\"data\":{\"watching\":true}}\n";
    if (write(client, hello, sizeof hello - 1) < 0) die("write hello");

    char *cargv[] = {argv[2], argv[3], "20000", "0", NULL};
    for (int k = 0; k < exits; k++) {
        int cm;
        pid_t cp = spawn_on_pty(cargv, &cm);
        struct kevent changes[2];
        EV_SET(&changes[0], cp, EVFILT_PROC, EV_ADD | EV_ONESHOT, NOTE_EXIT, 0, NULL);
        EV_SET(&changes[1], cm, EVFILT_READ, EV_ADD | EV_CLEAR, 0, 0, NULL);
        if (kevent(kq, changes, 2, NULL, 0, NULL) < 0) die("kevent add");
        int done = 0;
        while (!done) {
            struct kevent evs[8];
            int n = kevent(kq, NULL, 0, evs, 8, NULL);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) die("kevent wait");
            for (int i = 0; i < n; i++) {
                if (evs[i].filter == EVFILT_READ) {
                    /* Read as it comes: FreeBSD discards what an exiting
                     * agent left unread a second after its last close. */
                    while (read(cm, buf, sizeof buf) > 0) {
                    }
                    continue;
                }
                waitpid(cp, NULL, 0);
                while (read(cm, buf, sizeof buf) > 0) {
                }
                close(cm); /* its EVFILT_READ note goes with the fd */
                char line[96];
                int len = snprintf(line, sizeof line, "{\"event\":\"exited\",\"pane\":\"%d\"}\n", (int)cp);
                if (write(client, line, (size_t)len) != len) die("write client");
                done = 1;
                break;
            }
        }
    }
    close(client);
    return 0;
}
