/* An agent whose exit is timed: after DELAY_US it appends "PID NS\n" to
 * STAMPFILE, NS being CLOCK_MONOTONIC read just before _exit, and exits
 * with CODE. With a fourth argument "pane" it writes its COLIBRI_PANE_ID
 * instead of its pid (a driver that knows panes by id, not pid).
 * Usage: stamp_exit STAMPFILE [DELAY_US=20000] [CODE=0] [pane] */
#include "common.h"
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: stamp_exit STAMPFILE [DELAY_US] [CODE]\n");
        return 2;
    }
    long delay = argc > 2 ? atol(argv[2]) : 20000;
    int code = argc > 3 ? atoi(argv[3]) : 0;
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) die("open stampfile");
    usleep((useconds_t)delay);
    char line[128];
    uint64_t now = mono_ns();
    const char *pane = argc > 4 && strcmp(argv[4], "pane") == 0 ? getenv("COLIBRI_PANE_ID") : NULL;
    int n = pane ? snprintf(line, sizeof line, "%s %llu\n", pane, (unsigned long long)now)
                 : snprintf(line, sizeof line, "%d %llu\n", (int)getpid(), (unsigned long long)now);
    if (write(fd, line, (size_t)n) != n) _exit(125);
    _exit(code);
}
