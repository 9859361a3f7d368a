/* SPDX-License-Identifier: MIT */
/* coordinate.c - `vrangectl coordinate` (not yet). */
#include <stdio.h>

#include "commands.h"

int vc_cmd_coordinate(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fputs("vrangectl: coordinate: not implemented yet\n", stderr);
	return 1;
}
