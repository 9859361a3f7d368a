/* SPDX-License-Identifier: MIT */
/*
 * disk_room.h - room kept on a file system for the records of punched
 * pages (internal).
 *
 * A disk file's pages are punched only after its record names them
 * (disk_file.h), and the record is an extended attribute: on a full file
 * system the kernel may refuse to write it (xfs refuses every attribute
 * change then; ext4 one that needs a block) - and a full file system is
 * when punching is wanted most.  So while the library holds a disk file
 * by its own descriptor, it keeps DISK_ROOM_BYTES allocated in a file of
 * its own on that file system (an O_TMPFILE beside the file: no name, and
 * closed with the last such file, so it never keeps the file system from
 * being unmounted once the application lets go).  A record refused for
 * want of space is written again after the room is given back and the
 * release committed; the room is taken again after the punch that follows.
 */
#ifndef VRANGE_DISK_ROOM_H
#define VRANGE_DISK_ROOM_H

#include <stdbool.h>
#include <sys/types.h>

#include "env.h"

#define DISK_ROOM_BYTES (1u << 20)

/* The library took disk file fd (its own descriptor, on device dev): keep
 * room on its file system, making it if this is the first such file.
 * Nothing is reported: without room a full file system refuses records,
 * as before. */
void disk_room_take(int fd, dev_t dev) VR_HIDDEN;

/* The library gave up its descriptor of a disk file on dev: the last
 * one's going closes the room. */
void disk_room_drop(dev_t dev) VR_HIDDEN;

/* Give dev's room back to its file system and commit that, so that a
 * record refused for want of space can be written: true if there was
 * room to give. */
bool disk_room_give_back(dev_t dev) VR_HIDDEN;

/* Take room again on dev where it was given back (after a punch freed
 * space); room that cannot be had yet is tried again next time. */
void disk_room_refill(dev_t dev) VR_HIDDEN;

/* fork(): the room's lock is held across it (it is taken under file
 * locks, held across system calls: disk_fork_prepare orders it). */
void disk_room_fork_prepare(void) VR_HIDDEN;
void disk_room_fork_done(void) VR_HIDDEN;

#endif
