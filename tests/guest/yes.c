/*
 * yes(1) for the FreeBSD test VM, whose small userland lacks it (FreeBSD's
 * base system has its own): prints its first argument, or "y", forever.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int
main(int argc, char **argv)
{
	const char *word = argc > 1 ? argv[1] : "y";
	size_t len = strlen(word);
	char buf[8192];
	size_t used = 0;

	if (len + 1 > sizeof(buf)) {
		for (;;)
			if (puts(word) == EOF)
				return 1;
	}
	/* As many whole lines as fit, one write each time. */
	while (used + len + 1 <= sizeof(buf)) {
		memcpy(buf + used, word, len);
		buf[used + len] = '\n';
		used += len + 1;
	}
	for (;;)
		if (write(STDOUT_FILENO, buf, used) < 0)
			return 1;
}
