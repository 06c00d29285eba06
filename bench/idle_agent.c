/* An idle agent for the scale runs: prints one Pi session header, then
 * waits for a signal. Its comm ("idle_agent") tells the benchmark it has
 * exec'd. */
#include "common.h"
#include <string.h>

int main(void) {
    static const char header[] = "{\"type\":\"session\",\"id\":\"bench\"}\n";
    if (write(1, header, sizeof header - 1) < 0) return 1;
    for (;;) pause();
}
