/* SPDX-License-Identifier: MIT */
/* disk_room.c - room kept for records of punched pages (disk_room.h). */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "disk_file.h"
#include "disk_room.h"

/* One per file system with disk files held (as disk_file.c's probes). */
#define ROOMS_MAX 32

static struct room {
	dev_t dev;
	int fd;             /* the O_TMPFILE, -1: none could be made */
	unsigned int users; /* disk files held there by our descriptor */
	bool held;          /* DISK_ROOM_BYTES allocated in it */
} rooms[ROOMS_MAX];
static unsigned int nrooms;
static pthread_mutex_t room_lock = PTHREAD_MUTEX_INITIALIZER;

static struct room *room_of(dev_t dev)
{
	for (unsigned int i = 0; i < nrooms; i++)
		if (rooms[i].dev == dev)
			return &rooms[i];
	return NULL;
}

/* Allocate the room's blocks; a partial allocation is given back. */
static void allocate(struct room *m)
{
	if (m->fd < 0 || m->held)
		return;
	if (fallocate(m->fd, 0, 0, DISK_ROOM_BYTES) == 0)
		m->held = true;
	else if (ftruncate(m->fd, 0) < 0)
		vr_debug("disk room: a partial allocation stays: %m");
}

void disk_room_take(int fd, dev_t dev)
{
	struct room *m;

	pthread_mutex_lock(&room_lock);
	m = room_of(dev);
	if (!m && nrooms < ROOMS_MAX) {
		m = &rooms[nrooms++];
		*m = (struct room){ .dev = dev, .fd = -1 };
	}
	if (m) {
		/* None yet: the first file's directory may not have let us
		 * make one; this one's may. */
		if (m->fd < 0)
			m->fd = disk_tmpfile(fd, dev);
		m->users++;
		allocate(m);
	}
	pthread_mutex_unlock(&room_lock);
}

void disk_room_drop(dev_t dev)
{
	struct room *m;

	pthread_mutex_lock(&room_lock);
	m = room_of(dev);
	if (m && --m->users == 0) {
		if (m->fd >= 0)
			close(m->fd);
		*m = rooms[--nrooms];
	}
	pthread_mutex_unlock(&room_lock);
}

bool disk_room_give_back(dev_t dev)
{
	struct room *m;
	bool given = false;

	pthread_mutex_lock(&room_lock);
	m = room_of(dev);
	/* The commit: ext4 and xfs reuse freed blocks only once the log
	 * that frees them is on disk. */
	if (m && m->held && ftruncate(m->fd, 0) == 0) {
		m->held = false;
		given = fsync(m->fd) == 0;
	}
	pthread_mutex_unlock(&room_lock);
	return given;
}

void disk_room_refill(dev_t dev)
{
	struct room *m;

	pthread_mutex_lock(&room_lock);
	m = room_of(dev);
	if (m)
		allocate(m);
	pthread_mutex_unlock(&room_lock);
}

void disk_room_fork_prepare(void)
{
	pthread_mutex_lock(&room_lock);
}

/* Parent and child alike: the table is whole (nobody was inside). */
void disk_room_fork_done(void)
{
	pthread_mutex_unlock(&room_lock);
}
