/* The floor for PTY throughput: a raw read loop on one PTY. Starts
 * STREAMER COUNT on a PTY, reads it in 64 KiB reads until it closes,
 * counting lines, and prints the time, MiB/s and this process's CPU.
 * Usage: floor_read COUNT STREAMER */
#include "common.h"
#include <poll.h>
#include <string.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: floor_read COUNT STREAMER\n");
        return 2;
    }
    char *sargv[] = {argv[2], argv[1], NULL};
    double cpu0 = self_cpu_ms();
    uint64_t t0 = mono_ns();
    int m;
    pid_t pid = spawn_on_pty(sargv, &m);
    fcntl(m, F_SETFL, fcntl(m, F_GETFL) & ~O_NONBLOCK);
    static char buf[65536];
    unsigned long long lines = 0, bytes = 0;
    for (;;) {
        ssize_t r = read(m, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        bytes += (unsigned long long)r;
        for (ssize_t j = 0; j < r; j++) lines += buf[j] == '\n';
    }
    uint64_t t1 = mono_ns();
    double cpu = self_cpu_ms() - cpu0;
    waitpid(pid, NULL, 0);
    double s = (t1 - t0) / 1e9;
    printf("floor_read lines=%llu bytes=%llu secs=%.3f mib_s=%.1f cpu_ms=%.1f\n", lines, bytes, s, bytes / s / 1048576.0, cpu);
    return 0;
}
