/* Writes 42-byte JSONL lines (a Pi turn_start event with padding) to stdout
 * as fast as it takes them: COUNT lines, or forever when COUNT is 0. With
 * "states", it first prints a Pi RPC `response` line (so the pane reads
 * `agent_settled` as idle, not done), then every other line is
 * agent_settled instead: each line changes the pane's state (working, idle,
 * working, ...) and makes a watch event.
 * Usage: streamer [COUNT=0] [states] */
#include "common.h"
#include <string.h>

#define LINE "{\"type\":\"turn_start\",\"pad\":\"xxxxxxxxxxx\"}\n"
#define SETTLED "{\"type\":\"agent_settled\",\"pad\":\"xxxxxxxx\"}\n"
#define LINE_LEN 42
#define PER_WRITE 1560 /* 65,520 bytes */

int main(int argc, char **argv) {
    long long count = argc > 1 ? atoll(argv[1]) : 0;
    static char buf[LINE_LEN * PER_WRITE];
    _Static_assert(sizeof(LINE) - 1 == LINE_LEN, "42-byte line");
    _Static_assert(sizeof(SETTLED) - 1 == LINE_LEN, "42-byte line");
    int states = argc > 2 && strcmp(argv[2], "states") == 0;
    for (int i = 0; i < PER_WRITE; i++) memcpy(buf + i * LINE_LEN, states && i % 2 ? SETTLED : LINE, LINE_LEN);
    static const char rpc[] = "{\"type\":\"response\"}\n";
    if (states && write(1, rpc, sizeof rpc - 1) < 0) return 1;
    long long left = count;
    for (;;) {
        size_t lines = PER_WRITE;
        if (count > 0) {
            if (left == 0) return 0;
            if (left < PER_WRITE) lines = (size_t)left;
            left -= (long long)lines;
        }
        size_t len = lines * LINE_LEN, off = 0;
        while (off < len) {
            ssize_t w = write(1, buf + off, len - off);
            if (w < 0) {
                if (errno == EINTR) continue;
                return 1;
            }
            off += (size_t)w;
        }
    }
}
