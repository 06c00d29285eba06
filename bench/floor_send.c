/* The floor for a large reply: what the host charges to move a snapshot's
 * bytes through a Unix socket. Listens on SOCKET and serves one client:
 * for each request line holding a byte count N, writes an N-byte line
 * (N - 1 bytes of filler and a newline) from one buffer made
 * once, 64 KiB per write(2), the slice size colibrid streams a snapshot
 * in. No serialisation at all: the kernel's copy and the client's reads.
 * Usage: floor_send SOCKET */
#include "common.h"
#include <string.h>

#define SLICE (64 << 10)
#define MAX_REPLY (64 << 20)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: floor_send SOCKET\n");
        return 2;
    }
    int ls = listen_unix(argv[1]);
    int c = accept(ls, NULL, NULL);
    if (c < 0) die("accept");
    char *reply = malloc(MAX_REPLY);
    if (!reply) die("malloc");
    memset(reply, 'x', MAX_REPLY);
    char req[64];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(c, req + have, sizeof req - 1 - have);
        if (r <= 0) return 0;
        have += (size_t)r;
        char *nl = memchr(req, '\n', have);
        if (!nl) {
            if (have == sizeof req - 1) die("request too long");
            continue;
        }
        long n = atol(req);
        have = 0;
        if (n < 1 || n > MAX_REPLY) die("bad size");
        reply[n - 1] = '\n';
        for (long off = 0; off < n;) {
            long len = n - off < SLICE ? n - off : SLICE;
            ssize_t w = write(c, reply + off, (size_t)len);
            if (w <= 0) die("write");
            off += w;
        }
        reply[n - 1] = 'x';
    }
}
