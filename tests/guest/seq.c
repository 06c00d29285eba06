/*
 * seq(1) for the FreeBSD test VM, whose small userland lacks it (FreeBSD's
 * base system has its own): "seq LAST" or "seq FIRST LAST", integers only,
 * one per line.
 */
#include <stdio.h>
#include <stdlib.h>

int
main(int argc, char **argv)
{
	long first = 1, last, i;

	if (argc == 2) {
		last = strtol(argv[1], NULL, 10);
	} else if (argc == 3) {
		first = strtol(argv[1], NULL, 10);
		last = strtol(argv[2], NULL, 10);
	} else {
		fprintf(stderr, "usage: seq [first] last\n");
		return 2;
	}
	for (i = first; i <= last; i++)
		if (printf("%ld\n", i) < 0)
			return 1;
	return 0;
}
