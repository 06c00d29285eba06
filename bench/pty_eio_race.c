/* How often a Linux PTY master says EIO (the slave side closed) before it
 * has handed over all the slave wrote, and how often more reads then still
 * get the rest: the kernel race `platform::read_master` rechecks for.
 *
 *   cc -O2 -o /tmp/pty_eio_race bench/pty_eio_race.c
 *   /tmp/pty_eio_race 20000        # rounds; run a few at once to load the CPUs
 *
 * Each round starts the agent of the 200-agent integration test (52 short
 * JSON lines, then exit) on a fresh PTY and reads its master without
 * blocking, spinning on EAGAIN, until EIO or end of file. An EIO that
 * comes early is followed by up to RECHECKS more reads; the round counts
 * as lost if the bytes are still short after them. */
#include "common.h"

#include <sys/wait.h>

#define RECHECKS 2

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 2000;
    char *agent[] = {
        "/bin/sh", "-c",
        "echo '{\"type\":\"session\",\"id\":\"s\"}'; i=0; while [ $i -lt 50 ]; do "
        "echo '{\"type\":\"turn_start\"}'; i=$((i+1)); done; "
        "echo '{\"type\":\"agent_end\",\"messages\":[]}'",
        NULL};
    const long want = 28 + 50 * 22 + 35;
    long early_eio = 0, recovered = 0, lost = 0;
    static char buf[65536];
    for (long r = 0; r < rounds; r++) {
        int master;
        pid_t pid = spawn_on_pty(agent, &master);
        long got = 0;
        int rechecks = 0;
        for (;;) {
            ssize_t n = read(master, buf, sizeof buf);
            if (n > 0) {
                got += n;
                continue;
            }
            if (n < 0 && errno == EAGAIN) continue;
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno != EIO) die("read");
            /* EIO or 0: the end, unless bytes are missing and rechecks are left. */
            if (got < want && rechecks == 0) early_eio++;
            if (got < want && rechecks < RECHECKS) {
                rechecks++;
                continue;
            }
            break;
        }
        if (rechecks > 0 && got == want) recovered++;
        if (got != want) {
            lost++;
            fprintf(stderr, "round %ld: %ld of %ld bytes\n", r, got, want);
        }
        int status;
        waitpid(pid, &status, 0);
        close(master);
    }
    printf("rounds %ld  early EIO %ld  recovered by %d rechecks %ld  lost %ld\n", rounds,
           early_eio, RECHECKS, recovered, lost);
    return 0;
}
