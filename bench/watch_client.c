/* A watch client in its own process, as a supervisor's consumer would be:
 * connects to SOCKET, sends REQUEST (default {"cmd":"watch"}), prints
 * "ready" once the first line (the reply) arrives, then for every line whose
 * event is "exited" prints "PANE NS", NS being CLOCK_MONOTONIC read as soon
 * as the read() that delivered the line returned. A reply with "ok":false
 * (the daemon dropping this watcher) is printed as "dropped N LINE" and ends
 * it, N being the number of lines received before it; when the daemon
 * closes the connection it prints "eof N".
 * Usage: watch_client SOCKET [REQUEST] */
#include "common.h"
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define BUF (1 << 20)

static unsigned long long lines_seen;

static void on_line(char *line, size_t len, uint64_t at, int *seen_reply) {
    line[len] = 0;
    lines_seen++;
    if (!*seen_reply) {
        *seen_reply = 1;
        if (strstr(line, "\"ok\":false")) {
            printf("dropped %llu %s\n", lines_seen, line);
            exit(3);
        }
        printf("ready\n");
        fflush(stdout);
        return;
    }
    if (strstr(line, "\"ok\":false")) {
        printf("dropped %llu %s\n", lines_seen, line);
        fflush(stdout);
        exit(3);
    }
    if (!strstr(line, "\"event\":\"exited\"")) return;
    char *p = strstr(line, "\"pane\":\"");
    if (!p) return;
    p += 8;
    char *q = strchr(p, '"');
    if (!q) return;
    *q = 0;
    printf("%s %llu\n", p, (unsigned long long)at);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: watch_client SOCKET [REQUEST]\n");
        return 2;
    }
    const char *req = argc > 2 ? argv[2] : "{\"cmd\":\"watch\"}";
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) die("socket");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strncpy(sa.sun_path, argv[1], sizeof sa.sun_path - 1);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) die("connect");
    char reqline[4096];
    int n = snprintf(reqline, sizeof reqline, "%s\n", req);
    if (write(s, reqline, (size_t)n) != n) die("write");
    static char buf[BUF + 1];
    size_t have = 0;
    int seen_reply = 0;
    for (;;) {
        ssize_t r = read(s, buf + have, BUF - have);
        uint64_t at = mono_ns();
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            printf("eof %llu\n", lines_seen);
            return 0;
        }
        have += (size_t)r;
        size_t start = 0;
        for (size_t i = have - (size_t)r; i < have; i++) {
            if (buf[i] != '\n') continue;
            on_line(buf + start, i - start, at, &seen_reply);
            start = i + 1;
        }
        if (start == 0 && have == BUF) have = 0; /* a line longer than 1 MiB: skip it */
        memmove(buf, buf + start, have - start);
        have -= start;
    }
}
