/*
 * A small stty(1) for the FreeBSD test VM, whose userland lacks it
 * (FreeBSD's base system has the real one): sets or clears the named
 * flags on standard input's terminal, e.g. "stty icrnl -echo".
 */
#include <stdio.h>
#include <string.h>
#include <termios.h>

struct flag {
	const char *name;
	int which; /* 0 iflag, 1 oflag, 2 lflag */
	tcflag_t bit;
};

static const struct flag flags[] = {
	{ "icrnl", 0, ICRNL }, { "ixon", 0, IXON },
	{ "opost", 1, OPOST }, { "onlcr", 1, ONLCR },
	{ "echo", 2, ECHO }, { "icanon", 2, ICANON }, { "isig", 2, ISIG },
};

int
main(int argc, char **argv)
{
	struct termios t;
	int i;
	size_t f;

	if (tcgetattr(0, &t) != 0) {
		perror("stty: tcgetattr");
		return 1;
	}
	for (i = 1; i < argc; i++) {
		const char *name = argv[i][0] == '-' ? argv[i] + 1 : argv[i];
		tcflag_t *field = NULL;
		tcflag_t bit = 0;

		for (f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
			if (strcmp(flags[f].name, name) == 0) {
				field = flags[f].which == 0 ? &t.c_iflag :
				    flags[f].which == 1 ? &t.c_oflag : &t.c_lflag;
				bit = flags[f].bit;
			}
		}
		if (field == NULL) {
			fprintf(stderr, "stty: unknown mode: %s\n", argv[i]);
			return 1;
		}
		if (argv[i][0] == '-')
			*field &= ~bit;
		else
			*field |= bit;
	}
	if (tcsetattr(0, TCSANOW, &t) != 0) {
		perror("stty: tcsetattr");
		return 1;
	}
	return 0;
}
