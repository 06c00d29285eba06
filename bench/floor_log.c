/* A second floor for PTY throughput: floor_read's loop that also logs each
 * line, as colibrid's session log holds it. Starts STREAMER COUNT on a PTY,
 * reads it in 64 KiB reads until it closes, cuts the lines, and appends one
 * record per non-blank line, {"ts":"<read's wall time>","pane":"<a UUID>","ev":<line>},
 * to LOG in 64 KiB writes from this one thread. It does not parse the lines
 * or fold them into a state: colibrid's cost beyond this floor is the
 * parse, the fold, the policies and the hand-off to its writer thread.
 * Prints the time, MiB/s, this process's CPU and the bytes logged.
 * Usage: floor_log COUNT STREAMER LOG */
#include "common.h"
#include <string.h>
#include <sys/wait.h>

#define CHUNK 65536

static char out[CHUNK * 4];
/* A pane id as long as colibrid's (a UUID), so the records are as long. */
static const char pane[] = "\",\"pane\":\"00000000-0000-4000-8000-000000000001\",\"ev\":";
static size_t out_len;
static unsigned long long logged;

static void flush_out(int fd) {
    size_t off = 0;
    while (off < out_len) {
        ssize_t w = write(fd, out + off, out_len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("write log");
        off += (size_t)w;
    }
    logged += out_len;
    out_len = 0;
}

static void put(const char *s, size_t n) {
    memcpy(out + out_len, s, n);
    out_len += n;
}

/* The wall time as colibrid's records carry it, once per read. */
static size_t stamp(char *ts, size_t cap) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(ts, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(ts + n, cap - n, ".%03ldZ", now.tv_nsec / 1000000);
    return n;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: floor_log COUNT STREAMER LOG\n");
        return 2;
    }
    int log = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (log < 0) die("open log");
    char *sargv[] = {argv[2], argv[1], NULL};
    double cpu0 = self_cpu_ms();
    uint64_t t0 = mono_ns();
    int m;
    pid_t pid = spawn_on_pty(sargv, &m);
    fcntl(m, F_SETFL, fcntl(m, F_GETFL) & ~O_NONBLOCK);
    /* A partial line carried over, then a read's worth after it. */
    static char in[CHUNK * 2];
    size_t carry = 0;
    unsigned long long lines = 0, bytes = 0;
    char ts[64];
    for (;;) {
        ssize_t r = read(m, in + carry, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        bytes += (unsigned long long)r;
        size_t ts_len = stamp(ts, sizeof ts);
        char *p = in, *end = in + carry + (size_t)r;
        for (char *nl; (nl = memchr(p, '\n', (size_t)(end - p))) != NULL; p = nl + 1) {
            char *e = nl;
            while (e > p && (e[-1] == '\r' || e[-1] == ' ')) e--;
            if (e == p) continue;
            lines++;
            put("{\"ts\":\"", 7);
            put(ts, ts_len);
            put(pane, sizeof pane - 1);
            put(p, (size_t)(e - p));
            put("}\n", 2);
            if (out_len >= CHUNK) flush_out(log);
        }
        carry = (size_t)(end - p);
        if (carry > CHUNK) carry = 0; /* a line longer than a read: dropped, as no 42-byte stream makes */
        memmove(in, p, carry);
    }
    flush_out(log);
    uint64_t t1 = mono_ns();
    double cpu = self_cpu_ms() - cpu0;
    waitpid(pid, NULL, 0);
    double s = (t1 - t0) / 1e9;
    printf("floor_log lines=%llu bytes=%llu secs=%.3f mib_s=%.1f cpu_ms=%.1f logged=%llu\n", lines, bytes, s,
           bytes / s / 1048576.0, cpu, logged);
    return 0;
}
