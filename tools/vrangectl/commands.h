/* SPDX-License-Identifier: MIT */
/* commands.h - the long-running subcommands (argv[0] is the subcommand). */
#ifndef VRANGECTL_COMMANDS_H
#define VRANGECTL_COMMANDS_H

int vc_cmd_watch(int argc, char **argv);
int vc_cmd_coordinate(int argc, char **argv);

#endif
