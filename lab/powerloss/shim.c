/*
 * txnsq fault lab: an LD_PRELOAD interposer that journals what a power loss
 * would take back from the files under one directory.
 *
 * For every regular file under $TXNSQ_POWERLOSS_WATCH that the process
 * changes, it keeps an undo journal in $TXNSQ_POWERLOSS_JOURNAL, named
 * <dev>-<ino>.undo (hex), so that after the process is killed (SIGKILL) the
 * file can be put back to what it held at its last fsync:
 *
 *   - the file's size at the first change is taken as synced (it was there
 *     before, or it was just created empty);
 *   - before any change that overwrites, cuts or shifts bytes in
 *     [0, synced size), the bytes about to change are appended to the
 *     journal as an undo record (with a raw syscall, so they reach the
 *     kernel before the change does: a SIGKILL leaves the page cache, and
 *     so the journal, as it was);
 *   - fsync and fdatasync (and sync, syncfs, and writes on O_SYNC/O_DSYNC
 *     descriptors) make the size at their start the synced size and drop
 *     the records made before it; a file with nothing left to undo loses
 *     its journal.
 *
 * lab/powerloss/power.py replays the records backwards and cuts each file
 * to its synced size (lose_unsynced_writes); it documents the format.
 *
 * Creating, renaming and unlinking are taken as durable at once; mmap,
 * stdio (glibc's internal calls), io_uring, splice and raw syscalls are not
 * seen.  lab/README.md lists what this cannot catch.
 *
 * Concurrency: one mutex guards the tables and is held across a watched
 * file's change (so an undo record always holds the bytes that change
 * replaced), never across a real fsync (nsqd's sync thread must not hold
 * the reactor's writes).  The hot paths allocate nothing; journals are
 * opened per use so that a program closing descriptors it does not know
 * cannot break them.
 */

#define _GNU_SOURCE
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef O_TMPFILE
#define O_TMPFILE 0
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef RWF_DSYNC
#define RWF_DSYNC 0x00000002
#endif
#ifndef RWF_SYNC
#define RWF_SYNC 0x00000004
#endif
#ifndef RWF_APPEND
#define RWF_APPEND 0x00000010
#endif

/* ---- journal format (mirrored in power.py) ------------------------------ */

#define JOURNAL_MAGIC "TXPLJ001"
#define RECORD_MAGIC 0x4f444e55u /* "UNDO" little-endian */
#define RECORD_UNKNOWN 1u        /* the old bytes could not be read */
#define PATH_AREA 4096
#define HEADER_SIZE 64
#define RECORDS_START (HEADER_SIZE + PATH_AREA)
#define CHUNK 65536

struct jheader {
    char magic[8];
    uint64_t dev;
    uint64_t ino;
    uint64_t synced;   /* bytes of the file that are durable */
    uint64_t min_seq;  /* records with a smaller seq are void */
    uint64_t path_len; /* the path at the first change follows the header */
    uint64_t reserved[2];
};

struct jrecord {
    uint32_t magic;
    uint32_t flags;
    uint64_t seq;
    uint64_t offset;
    uint64_t length; /* bytes of old data following (or the span, if unknown) */
};

_Static_assert(sizeof(struct jheader) == HEADER_SIZE, "header size");
_Static_assert(sizeof(struct jrecord) == 32, "record size");

/* ---- state ----------------------------------------------------------------- */

/* A file changed since its last sync.  Clean files have no state. */
struct state {
    uint64_t dev, ino;
    uint64_t synced;   /* durable size */
    uint64_t pending;  /* size at the start of an fsync in flight (0: none) */
    uint64_t next_seq;
    uint64_t min_seq;
    uint64_t jend;     /* where the next record goes */
    uint64_t gen;      /* tells a state from a later one of the same inode */
    int inflight;      /* fsyncs in flight */
    int reader;        /* a read-only descriptor of the file, or -1 */
};

#define MAX_STATES 1024
#define FD_CACHE 65536

struct fdent {
    uint64_t dev, ino;
    int8_t watched; /* 0 unknown, 1 under the watched directory, -1 not */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_active;
static char g_watch[PATH_MAX];
static size_t g_watch_len;
static char g_journal[PATH_MAX];
static struct state g_states[MAX_STATES];
static int g_nstates;
static struct fdent g_fds[FD_CACHE];
static unsigned char g_buf[CHUNK];
static unsigned char g_header_buf[RECORDS_START];
static int g_table_full_reported;
static uint64_t g_next_gen = 1;

/* ---- the real functions ------------------------------------------------- */

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*open2_fn)(const char *, int);
typedef int (*openat2_fn)(int, const char *, int);
typedef int (*creat_fn)(const char *, mode_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void *, size_t, off64_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*pwritev64_fn)(int, const struct iovec *, int, off64_t);
typedef ssize_t (*pwritev2_fn)(int, const struct iovec *, int, off_t, int);
typedef ssize_t (*pwritev64v2_fn)(int, const struct iovec *, int, off64_t, int);
typedef int (*ftruncate_fn)(int, off_t);
typedef int (*ftruncate64_fn)(int, off64_t);
typedef int (*truncate_fn)(const char *, off_t);
typedef int (*truncate64_fn)(const char *, off64_t);
typedef int (*fallocate_fn)(int, int, off_t, off_t);
typedef int (*fallocate64_fn)(int, int, off64_t, off64_t);
typedef int (*posix_fallocate_fn)(int, off_t, off_t);
typedef int (*posix_fallocate64_fn)(int, off64_t, off64_t);
typedef int (*fd_fn)(int);
typedef void (*sync_fn)(void);
typedef ssize_t (*sendfile_fn)(int, int, off_t *, size_t);
typedef ssize_t (*sendfile64_fn)(int, int, off64_t *, size_t);
typedef ssize_t (*copy_file_range_fn)(int, off64_t *, int, off64_t *, size_t, unsigned int);
typedef int (*unlink_fn)(const char *);
typedef int (*unlinkat_fn)(int, const char *, int);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned int);

/* Resolved on first use: another library's constructor may call us first. */
#define REAL(type, name)                                                    \
    static type real_##name(void) {                                         \
        static type fn;                                                     \
        if (!fn)                                                            \
            fn = (type)dlsym(RTLD_NEXT, #name);                             \
        return fn;                                                          \
    }

REAL(open_fn, open)
REAL(open_fn, open64)
REAL(openat_fn, openat)
REAL(openat_fn, openat64)
REAL(open2_fn, __open_2)
REAL(open2_fn, __open64_2)
REAL(openat2_fn, __openat_2)
REAL(openat2_fn, __openat64_2)
REAL(creat_fn, creat)
REAL(creat_fn, creat64)
REAL(write_fn, write)
REAL(pwrite_fn, pwrite)
REAL(pwrite64_fn, pwrite64)
REAL(writev_fn, writev)
REAL(pwritev_fn, pwritev)
REAL(pwritev64_fn, pwritev64)
REAL(pwritev2_fn, pwritev2)
REAL(pwritev64v2_fn, pwritev64v2)
REAL(ftruncate_fn, ftruncate)
REAL(ftruncate64_fn, ftruncate64)
REAL(truncate_fn, truncate)
REAL(truncate64_fn, truncate64)
REAL(fallocate_fn, fallocate)
REAL(fallocate64_fn, fallocate64)
REAL(posix_fallocate_fn, posix_fallocate)
REAL(posix_fallocate64_fn, posix_fallocate64)
REAL(fd_fn, fsync)
REAL(fd_fn, fdatasync)
REAL(fd_fn, syncfs)
REAL(sync_fn, sync)
REAL(sendfile_fn, sendfile)
REAL(sendfile64_fn, sendfile64)
REAL(copy_file_range_fn, copy_file_range)
REAL(unlink_fn, unlink)
REAL(unlinkat_fn, unlinkat)
REAL(rename_fn, rename)
REAL(renameat_fn, renameat)
REAL(renameat2_fn, renameat2)

/* ---- small helpers (no malloc, no stdio) ------------------------------------- */

/* The shim's own file I/O goes straight to the kernel: calling write() or
 * openat() here would land in this library's own wrappers. */
static int raw_openat(int dirfd, const char *path, int flags, mode_t mode) {
    return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}
static int raw_close(int fd) { return (int)syscall(SYS_close, fd); }
static ssize_t raw_pwrite(int fd, const void *buf, size_t n, uint64_t off) {
    return syscall(SYS_pwrite64, fd, buf, n, (off_t)off);
}
static ssize_t raw_pwritev(int fd, const struct iovec *iov, int n, uint64_t off) {
    /* pwritev's offset is passed in two halves (low, high) on every ABI. */
    return syscall(SYS_pwritev, fd, iov, n, (unsigned long)off, (unsigned long)((off >> 16) >> 16));
}
static int raw_ftruncate(int fd, uint64_t len) { return (int)syscall(SYS_ftruncate, fd, (off_t)len); }
static int raw_unlink(const char *path) { return (int)syscall(SYS_unlinkat, AT_FDCWD, path, 0); }

static char *put_str(char *p, const char *s) {
    while (*s)
        *p++ = *s++;
    return p;
}

static char *put_hex(char *p, uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    for (int shift = 60; shift >= 0; shift -= 4)
        *p++ = digits[(v >> shift) & 15];
    return p;
}

static char *put_dec(char *p, uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static void journal_path(char *out, uint64_t dev, uint64_t ino) {
    char *p = put_str(out, g_journal);
    *p++ = '/';
    p = put_hex(p, dev);
    *p++ = '-';
    p = put_hex(p, ino);
    p = put_str(p, ".undo");
    *p = 0;
}

static void proc_fd_path(char *out, int fd) {
    char *p = put_str(out, "/proc/self/fd/");
    p = put_dec(p, (uint64_t)fd);
    *p = 0;
}

/* Append a line to <journal>/errors, which power.py reports as warnings. */
static void report(const char *what, uint64_t dev, uint64_t ino) {
    char path[PATH_MAX + 16];
    char line[512];
    char *p = put_str(path, g_journal);
    put_str(p, "/errors")[0] = 0;
    p = put_str(line, "pid ");
    p = put_dec(p, (uint64_t)getpid());
    p = put_str(p, ": ");
    size_t room = sizeof line - 80 - (size_t)(p - line);
    size_t len = strlen(what);
    if (len > room)
        len = room;
    memcpy(p, what, len);
    p += len;
    p = put_str(p, " (dev ");
    p = put_hex(p, dev);
    p = put_str(p, " ino ");
    p = put_hex(p, ino);
    p = put_str(p, ")\n");
    int fd = raw_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
        (void)syscall(SYS_write, fd, line, (size_t)(p - line));
        raw_close(fd);
    }
}

/* Whether fd (whose fstat is st) is a file under the watched directory. */
static int watched(int fd, const struct stat *st) {
    struct fdent *e = (fd >= 0 && fd < FD_CACHE) ? &g_fds[fd] : NULL;
    if (e && e->watched && e->dev == (uint64_t)st->st_dev && e->ino == (uint64_t)st->st_ino)
        return e->watched > 0;
    char link[40];
    char path[PATH_MAX];
    proc_fd_path(link, fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    int yes = n >= (ssize_t)g_watch_len && memcmp(path, g_watch, g_watch_len) == 0 &&
              (n == (ssize_t)g_watch_len || path[g_watch_len] == '/');
    if (e) {
        e->dev = (uint64_t)st->st_dev;
        e->ino = (uint64_t)st->st_ino;
        e->watched = yes ? 1 : -1;
    }
    return yes;
}

static struct state *find_state(uint64_t dev, uint64_t ino) {
    for (int i = 0; i < g_nstates; i++)
        if (g_states[i].ino == ino && g_states[i].dev == dev)
            return &g_states[i];
    return NULL;
}

static void free_state(struct state *s) {
    if (s->reader >= 0)
        raw_close(s->reader);
    *s = g_states[--g_nstates];
}

/* The file was created or unlinked: whatever was journaled for its inode
 * number belongs to an earlier file. */
static void drop_inode(uint64_t dev, uint64_t ino) {
    char jpath[PATH_MAX + 64];
    struct state *s = find_state(dev, ino);
    if (s)
        free_state(s);
    journal_path(jpath, dev, ino);
    raw_unlink(jpath);
}

static int write_header(struct state *s, int jfd) {
    struct jheader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, JOURNAL_MAGIC, 8);
    h.dev = s->dev;
    h.ino = s->ino;
    h.synced = s->synced;
    h.min_seq = s->min_seq;
    /* path_len is left as written at creation: pwrite only the fields. */
    return raw_pwrite(jfd, &h, offsetof(struct jheader, path_len), 0) ==
                   (ssize_t)offsetof(struct jheader, path_len)
               ? 0
               : -1;
}

/* Pick up a journal left by an earlier process (killed, not yet put back):
 * its synced size still holds.  Returns 0 if there was a usable one. */
static int load_journal(struct state *s, const char *jpath) {
    int jfd = raw_openat(AT_FDCWD, jpath, O_RDWR | O_CLOEXEC, 0);
    if (jfd < 0)
        return -1;
    struct jheader h;
    if (pread(jfd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h.magic, JOURNAL_MAGIC, 8) ||
        h.dev != s->dev || h.ino != s->ino) {
        raw_close(jfd);
        return -1;
    }
    uint64_t pos = RECORDS_START, max_seq = 0;
    struct jrecord r;
    struct stat jst;
    if (fstat(jfd, &jst) != 0) {
        raw_close(jfd);
        return -1;
    }
    while (pread(jfd, &r, sizeof r, (off_t)pos) == (ssize_t)sizeof r && r.magic == RECORD_MAGIC) {
        uint64_t next = pos + sizeof r + ((r.flags & RECORD_UNKNOWN) ? 0 : r.length);
        if ((uint64_t)jst.st_size < next)
            break;
        if (r.seq > max_seq)
            max_seq = r.seq;
        pos = next;
    }
    /* A record torn by a kill was never followed by its change: cut it so
     * the next one is found. */
    raw_ftruncate(jfd, pos);
    raw_close(jfd);
    s->synced = h.synced;
    s->min_seq = h.min_seq;
    s->next_seq = max_seq + 1 > h.min_seq ? max_seq + 1 : h.min_seq;
    s->jend = pos;
    return 0;
}

/* The file behind fd is changed for the first time since it was clean. */
static struct state *create_state(int fd, const struct stat *st) {
    if (g_nstates == MAX_STATES) {
        if (!g_table_full_reported) {
            g_table_full_reported = 1;
            report("too many unsynced files; changes to further files are not journaled",
                   (uint64_t)st->st_dev, (uint64_t)st->st_ino);
        }
        return NULL;
    }
    struct state *s = &g_states[g_nstates];
    memset(s, 0, sizeof *s);
    s->dev = (uint64_t)st->st_dev;
    s->ino = (uint64_t)st->st_ino;
    s->reader = -1;
    s->gen = g_next_gen++;
    char jpath[PATH_MAX + 64];
    journal_path(jpath, s->dev, s->ino);
    if (load_journal(s, jpath) != 0) {
        s->synced = (uint64_t)st->st_size;
        s->min_seq = 1;
        s->next_seq = 1;
        s->jend = RECORDS_START;
        struct jheader *h = (struct jheader *)g_header_buf;
        memset(g_header_buf, 0, sizeof g_header_buf);
        memcpy(h->magic, JOURNAL_MAGIC, 8);
        h->dev = s->dev;
        h->ino = s->ino;
        h->synced = s->synced;
        h->min_seq = s->min_seq;
        char link[40];
        proc_fd_path(link, fd);
        ssize_t n = readlink(link, (char *)g_header_buf + HEADER_SIZE, PATH_AREA - 1);
        h->path_len = n > 0 ? (uint64_t)n : 0;
        int jfd = raw_openat(AT_FDCWD, jpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (jfd < 0 || raw_pwrite(jfd, g_header_buf, RECORDS_START, 0) != RECORDS_START) {
            if (jfd >= 0)
                raw_close(jfd);
            report("cannot write a journal; this file's changes are not journaled", s->dev, s->ino);
            return NULL;
        }
        raw_close(jfd);
    }
    g_nstates++;
    return s;
}

/* A descriptor to read the file's current bytes from (fd may be write-only). */
static int reader_for(struct state *s, int fd) {
    struct stat st;
    if (s->reader >= 0) {
        /* The program may have closed or replaced it behind our back. */
        if (fstat(s->reader, &st) == 0 && (uint64_t)st.st_dev == s->dev && (uint64_t)st.st_ino == s->ino)
            return s->reader;
        s->reader = -1;
    }
    char link[40];
    proc_fd_path(link, fd);
    int r = raw_openat(AT_FDCWD, link, O_RDONLY | O_CLOEXEC, 0);
    if (r >= 0) {
        s->reader = r;
        return r;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_ACCMODE) != O_WRONLY)
        return fd;
    return -1;
}

/* Journal the bytes [lo, hi) of the file as they are now. */
static void save_range(struct state *s, int fd, uint64_t lo, uint64_t hi) {
    char jpath[PATH_MAX + 64];
    journal_path(jpath, s->dev, s->ino);
    int jfd = raw_openat(AT_FDCWD, jpath, O_WRONLY | O_CLOEXEC, 0);
    if (jfd < 0) {
        report("journal missing; a change is not journaled", s->dev, s->ino);
        return;
    }
    int rfd = reader_for(s, fd);
    while (lo < hi) {
        struct jrecord r = {RECORD_MAGIC, 0, s->next_seq, lo, 0};
        size_t want = hi - lo > CHUNK ? CHUNK : (size_t)(hi - lo);
        ssize_t got = rfd >= 0 ? pread(rfd, g_buf, want, (off_t)lo) : -1;
        struct iovec iov[2] = {{&r, sizeof r}, {g_buf, 0}};
        if (got == 0)
            break; /* past the end: nothing there to lose */
        if (got < 0) {
            r.flags = RECORD_UNKNOWN;
            r.length = hi - lo;
            report("cannot read bytes about to change; the journal marks them unknown", s->dev, s->ino);
        } else {
            r.length = (uint64_t)got;
            iov[1].iov_len = (size_t)got;
        }
        ssize_t n = raw_pwritev(jfd, iov, 2, s->jend);
        if (n != (ssize_t)(sizeof r + iov[1].iov_len)) {
            report("cannot append to a journal", s->dev, s->ino);
            break;
        }
        s->jend += (uint64_t)n;
        s->next_seq++;
        if (got < 0)
            break;
        lo += (uint64_t)got;
    }
    raw_close(jfd);
}

/*
 * Called with the lock held before a change to the file behind fd that may
 * alter the bytes [lo, hi) (hi may be UINT64_MAX: to the end) or its size.
 * st is a fresh fstat of fd.
 */
static void before_change(int fd, const struct stat *st, uint64_t lo, uint64_t hi) {
    struct state *s = find_state((uint64_t)st->st_dev, (uint64_t)st->st_ino);
    if (!s)
        s = create_state(fd, st);
    if (!s)
        return;
    uint64_t guarded = s->synced > s->pending ? s->synced : s->pending;
    uint64_t size = (uint64_t)st->st_size;
    if (hi > guarded)
        hi = guarded;
    if (hi > size)
        hi = size;
    if (lo < hi)
        save_range(s, fd, lo, hi);
}

/* With the lock held: an fsync that began when the file was `size` bytes
 * long, before record `seq`, has returned `ok`. */
static void sync_done(struct state *s, int fd, uint64_t size, uint64_t seq, int ok) {
    if (ok && seq >= s->min_seq) {
        s->synced = size;
        s->min_seq = seq;
    }
    if (s->inflight == 0) {
        s->pending = 0;
        struct stat st;
        if (s->next_seq == s->min_seq && fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == s->synced &&
            (uint64_t)st.st_ino == s->ino) {
            /* Nothing left to undo: the file is clean again. */
            char jpath[PATH_MAX + 64];
            journal_path(jpath, s->dev, s->ino);
            raw_unlink(jpath);
            free_state(s);
            return;
        }
    }
    char jpath[PATH_MAX + 64];
    journal_path(jpath, s->dev, s->ino);
    int jfd = raw_openat(AT_FDCWD, jpath, O_WRONLY | O_CLOEXEC, 0);
    if (jfd < 0 || write_header(s, jfd) != 0)
        report("cannot record a sync in the journal", s->dev, s->ino);
    if (jfd >= 0) {
        if (s->next_seq == s->min_seq) {
            raw_ftruncate(jfd, RECORDS_START);
            s->jend = RECORDS_START;
        }
        raw_close(jfd);
    }
}

/* ---- the wrappers' common parts ------------------------------------------- */

struct change {
    int locked;
    int sync_after;
    int fd;
};

/* Lock and journal if fd is a watched file about to take `len` bytes at
 * `off` (-1: at the file position, or the end for O_APPEND). */
static void begin_write(int fd, int64_t off, uint64_t len, int append, int sync_flag, struct change *c) {
    c->locked = 0;
    c->sync_after = 0;
    c->fd = fd;
    if (!g_active || len == 0)
        return;
    int saved = errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        errno = saved;
        return;
    }
    pthread_mutex_lock(&g_lock);
    if (!watched(fd, &st) || fstat(fd, &st) != 0) {
        pthread_mutex_unlock(&g_lock);
        errno = saved;
        return;
    }
    c->locked = 1;
    int fl = fcntl(fd, F_GETFL);
    /* Linux appends even a pwrite on an O_APPEND descriptor. */
    if ((fl >= 0 && (fl & O_APPEND)) || append)
        off = (int64_t)st.st_size;
    else if (off < 0)
        off = (int64_t)lseek(fd, 0, SEEK_CUR);
    if (off < 0)
        off = 0;
    c->sync_after = sync_flag || (fl >= 0 && (fl & O_DSYNC));
    before_change(fd, &st, (uint64_t)off, (uint64_t)off + len);
    errno = saved;
}

static void end_change(struct change *c, int succeeded) {
    if (!c->locked)
        return;
    int saved = errno;
    if (c->sync_after && succeeded) {
        /* O_SYNC/O_DSYNC/RWF_*SYNC: taken as an fsync of the whole file
         * (Linux syncs only the range written: see lab/README.md). */
        struct stat st;
        if (fstat(c->fd, &st) == 0) {
            struct state *s = find_state((uint64_t)st.st_dev, (uint64_t)st.st_ino);
            if (s)
                sync_done(s, c->fd, (uint64_t)st.st_size, s->next_seq, 1);
        }
    }
    pthread_mutex_unlock(&g_lock);
    errno = saved;
}

/* Lock and journal for a change of [lo, hi) of fd that is not a write. */
static void begin_other(int fd, uint64_t lo, uint64_t hi, struct change *c) {
    c->locked = 0;
    c->sync_after = 0;
    c->fd = fd;
    if (!g_active)
        return;
    int saved = errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        errno = saved;
        return;
    }
    pthread_mutex_lock(&g_lock);
    if (!watched(fd, &st)) {
        pthread_mutex_unlock(&g_lock);
        errno = saved;
        return;
    }
    c->locked = 1;
    before_change(fd, &st, lo, hi);
    errno = saved;
}

static uint64_t iov_total(const struct iovec *iov, int n) {
    uint64_t total = 0;
    if (!iov)
        return 0; /* the real call fails with EFAULT or EINVAL */
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    return total;
}

static int do_fsync(int fd, fd_fn real) {
    if (!g_active || !real)
        return real ? real(fd) : (errno = ENOSYS, -1);
    int saved = errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        errno = saved;
        return real(fd);
    }
    pthread_mutex_lock(&g_lock);
    struct state *s = find_state((uint64_t)st.st_dev, (uint64_t)st.st_ino);
    uint64_t size = 0, seq = 0, gen = 0;
    if (s && fstat(fd, &st) == 0) {
        size = (uint64_t)st.st_size;
        seq = s->next_seq;
        gen = s->gen;
        s->inflight++;
        if (size > s->pending)
            s->pending = size;
    } else {
        s = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    errno = saved;
    /* No lock held here: other threads' writes go on during the fsync, and
     * their records are kept (they are at or after seq). */
    int rc = real(fd);
    if (!s)
        return rc;
    saved = errno;
    pthread_mutex_lock(&g_lock);
    /* Unlinked meanwhile, the file may have a new state: leave that one be. */
    s = find_state((uint64_t)st.st_dev, (uint64_t)st.st_ino);
    if (s && s->gen == gen) {
        s->inflight--;
        sync_done(s, fd, size, seq, rc == 0);
    }
    pthread_mutex_unlock(&g_lock);
    errno = saved;
    return rc;
}

/* sync() and syncfs(): every unsynced file (of one filesystem) synced. */
static void sync_all(int has_dev, uint64_t dev, int (*call)(int), int arg, void (*call_void)(void), int *rc) {
    struct snap {
        uint64_t dev, ino, size, seq, gen;
    } snaps[MAX_STATES];
    int n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_nstates; i++) {
        struct state *s = &g_states[i];
        struct stat st;
        if (has_dev && s->dev != dev)
            continue;
        if (s->reader < 0 || fstat(s->reader, &st) != 0 || (uint64_t)st.st_ino != s->ino ||
            (uint64_t)st.st_dev != s->dev)
            continue; /* no way to tell its size: left unsynced (errs toward losing more) */
        snaps[n].dev = s->dev;
        snaps[n].ino = s->ino;
        snaps[n].size = (uint64_t)st.st_size;
        snaps[n].seq = s->next_seq;
        snaps[n].gen = s->gen;
        s->inflight++;
        if (snaps[n].size > s->pending)
            s->pending = snaps[n].size;
        n++;
    }
    pthread_mutex_unlock(&g_lock);
    if (call_void)
        call_void();
    else
        *rc = call(arg);
    int ok = call_void ? 1 : *rc == 0;
    int saved = errno;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < n; i++) {
        struct state *s = find_state(snaps[i].dev, snaps[i].ino);
        if (!s || s->gen != snaps[i].gen)
            continue;
        s->inflight--;
        sync_done(s, s->reader, snaps[i].size, snaps[i].seq, ok);
    }
    pthread_mutex_unlock(&g_lock);
    errno = saved;
}

/* ---- opening ----------------------------------------------------------------- */

struct opening {
    int new_file;
};

static int wants_mode(int flags) { return (flags & O_CREAT) || (O_TMPFILE && (flags & O_TMPFILE) == O_TMPFILE); }

/* Before an open: journal what O_TRUNC is about to cut; note whether
 * O_CREAT is about to make a new file. */
static void before_open(int dirfd, const char *path, int flags, struct opening *o) {
    o->new_file = 0;
    if (!g_active || !path)
        return;
    if (O_TMPFILE && (flags & O_TMPFILE) == O_TMPFILE) {
        o->new_file = 1;
        return;
    }
    if (!(flags & (O_CREAT | O_TRUNC)))
        return;
    int saved = errno;
    struct stat st;
    if (fstatat(dirfd, path, &st, 0) != 0) {
        if (errno == ENOENT && (flags & O_CREAT))
            o->new_file = 1;
        errno = saved;
        return;
    }
    if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY && S_ISREG(st.st_mode) && st.st_size > 0) {
        int fd = raw_openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0);
        if (fd >= 0) {
            struct change c;
            begin_other(fd, 0, UINT64_MAX, &c);
            if (c.locked)
                pthread_mutex_unlock(&g_lock);
            raw_close(fd);
        }
    }
    errno = saved;
}

static void after_open(int fd, struct opening *o) {
    if (fd < 0 || !o->new_file)
        return;
    int saved = errno;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        pthread_mutex_lock(&g_lock);
        if (watched(fd, &st))
            drop_inode((uint64_t)st.st_dev, (uint64_t)st.st_ino);
        pthread_mutex_unlock(&g_lock);
    }
    errno = saved;
}

#define OPEN_MODE(flags, mode)                                                \
    mode_t mode = 0;                                                          \
    if (wants_mode(flags)) {                                                  \
        va_list ap;                                                           \
        va_start(ap, flags);                                                  \
        mode = (mode_t)va_arg(ap, int);                                       \
        va_end(ap);                                                           \
    }

int open(const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    struct opening o;
    before_open(AT_FDCWD, path, flags, &o);
    int fd = real_open()(path, flags, mode);
    after_open(fd, &o);
    return fd;
}

int open64(const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    struct opening o;
    before_open(AT_FDCWD, path, flags, &o);
    int fd = real_open64()(path, flags, mode);
    after_open(fd, &o);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    struct opening o;
    before_open(dirfd, path, flags, &o);
    int fd = real_openat()(dirfd, path, flags, mode);
    after_open(fd, &o);
    return fd;
}

int openat64(int dirfd, const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    struct opening o;
    before_open(dirfd, path, flags, &o);
    int fd = real_openat64()(dirfd, path, flags, mode);
    after_open(fd, &o);
    return fd;
}

int __open_2(const char *path, int flags) {
    struct opening o;
    before_open(AT_FDCWD, path, flags, &o);
    int fd = real___open_2()(path, flags);
    after_open(fd, &o);
    return fd;
}

int __open64_2(const char *path, int flags) {
    struct opening o;
    before_open(AT_FDCWD, path, flags, &o);
    int fd = real___open64_2()(path, flags);
    after_open(fd, &o);
    return fd;
}

int __openat_2(int dirfd, const char *path, int flags) {
    struct opening o;
    before_open(dirfd, path, flags, &o);
    int fd = real___openat_2()(dirfd, path, flags);
    after_open(fd, &o);
    return fd;
}

int __openat64_2(int dirfd, const char *path, int flags) {
    struct opening o;
    before_open(dirfd, path, flags, &o);
    int fd = real___openat64_2()(dirfd, path, flags);
    after_open(fd, &o);
    return fd;
}

int creat(const char *path, mode_t mode) {
    struct opening o;
    before_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, &o);
    int fd = real_creat()(path, mode);
    after_open(fd, &o);
    return fd;
}

int creat64(const char *path, mode_t mode) {
    struct opening o;
    before_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, &o);
    int fd = real_creat64()(path, mode);
    after_open(fd, &o);
    return fd;
}

/* ---- writing ---------------------------------------------------------------- */

ssize_t write(int fd, const void *buf, size_t n) {
    struct change c;
    begin_write(fd, -1, n, 0, 0, &c);
    ssize_t r = real_write()(fd, buf, n);
    end_change(&c, r > 0);
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    struct change c;
    begin_write(fd, off, n, 0, 0, &c);
    ssize_t r = real_pwrite()(fd, buf, n, off);
    end_change(&c, r > 0);
    return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    struct change c;
    begin_write(fd, off, n, 0, 0, &c);
    ssize_t r = real_pwrite64()(fd, buf, n, off);
    end_change(&c, r > 0);
    return r;
}

ssize_t writev(int fd, const struct iovec *iov, int n) {
    struct change c;
    begin_write(fd, -1, iov_total(iov, n), 0, 0, &c);
    ssize_t r = real_writev()(fd, iov, n);
    end_change(&c, r > 0);
    return r;
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
    struct change c;
    begin_write(fd, off, iov_total(iov, n), 0, 0, &c);
    ssize_t r = real_pwritev()(fd, iov, n, off);
    end_change(&c, r > 0);
    return r;
}

ssize_t pwritev64(int fd, const struct iovec *iov, int n, off64_t off) {
    struct change c;
    begin_write(fd, off, iov_total(iov, n), 0, 0, &c);
    ssize_t r = real_pwritev64()(fd, iov, n, off);
    end_change(&c, r > 0);
    return r;
}

ssize_t pwritev2(int fd, const struct iovec *iov, int n, off_t off, int flags) {
    struct change c;
    begin_write(fd, off, iov_total(iov, n), flags & RWF_APPEND, flags & (RWF_SYNC | RWF_DSYNC), &c);
    ssize_t r = real_pwritev2()(fd, iov, n, off, flags);
    end_change(&c, r > 0);
    return r;
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int n, off64_t off, int flags) {
    struct change c;
    begin_write(fd, off, iov_total(iov, n), flags & RWF_APPEND, flags & (RWF_SYNC | RWF_DSYNC), &c);
    ssize_t r = real_pwritev64v2()(fd, iov, n, off, flags);
    end_change(&c, r > 0);
    return r;
}

ssize_t sendfile(int out, int in, off_t *offset, size_t count) {
    struct change c;
    begin_write(out, -1, count, 0, 0, &c);
    ssize_t r = real_sendfile()(out, in, offset, count);
    end_change(&c, r > 0);
    return r;
}

ssize_t sendfile64(int out, int in, off64_t *offset, size_t count) {
    struct change c;
    begin_write(out, -1, count, 0, 0, &c);
    ssize_t r = real_sendfile64()(out, in, offset, count);
    end_change(&c, r > 0);
    return r;
}

ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off, size_t len, unsigned int flags) {
    struct change c;
    begin_write(out, out_off ? *out_off : -1, len, 0, 0, &c);
    ssize_t r = real_copy_file_range()(in, in_off, out, out_off, len, flags);
    end_change(&c, r > 0);
    return r;
}

/* ---- sizes and space ----------------------------------------------------------- */

int ftruncate(int fd, off_t len) {
    struct change c;
    begin_other(fd, len < 0 ? 0 : (uint64_t)len, UINT64_MAX, &c);
    int r = real_ftruncate()(fd, len);
    end_change(&c, r == 0);
    return r;
}

int ftruncate64(int fd, off64_t len) {
    struct change c;
    begin_other(fd, len < 0 ? 0 : (uint64_t)len, UINT64_MAX, &c);
    int r = real_ftruncate64()(fd, len);
    end_change(&c, r == 0);
    return r;
}

static void begin_truncate_path(const char *path, int64_t len, struct change *c, int *tmpfd) {
    c->locked = 0;
    *tmpfd = -1;
    if (!g_active || !path)
        return;
    int saved = errno;
    int fd = raw_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0);
    errno = saved;
    if (fd < 0)
        return;
    *tmpfd = fd;
    begin_other(fd, len < 0 ? 0 : (uint64_t)len, UINT64_MAX, c);
}

static void end_truncate_path(struct change *c, int ok, int tmpfd) {
    end_change(c, ok);
    if (tmpfd >= 0) {
        int saved = errno;
        raw_close(tmpfd);
        errno = saved;
    }
}

int truncate(const char *path, off_t len) {
    struct change c;
    int tmpfd;
    begin_truncate_path(path, len, &c, &tmpfd);
    int r = real_truncate()(path, len);
    end_truncate_path(&c, r == 0, tmpfd);
    return r;
}

int truncate64(const char *path, off64_t len) {
    struct change c;
    int tmpfd;
    begin_truncate_path(path, len, &c, &tmpfd);
    int r = real_truncate64()(path, len);
    end_truncate_path(&c, r == 0, tmpfd);
    return r;
}

static void begin_fallocate(int fd, int mode, int64_t off, int64_t len, struct change *c) {
    uint64_t lo = off < 0 ? 0 : (uint64_t)off;
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
        begin_other(fd, lo, lo + (uint64_t)(len < 0 ? 0 : len), c);
    else if (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE))
        begin_other(fd, lo, UINT64_MAX, c); /* everything after off moves */
    else
        begin_other(fd, 0, 0, c); /* may only grow the file: note its size */
}

int fallocate(int fd, int mode, off_t off, off_t len) {
    struct change c;
    begin_fallocate(fd, mode, off, len, &c);
    int r = real_fallocate()(fd, mode, off, len);
    end_change(&c, r == 0);
    return r;
}

int fallocate64(int fd, int mode, off64_t off, off64_t len) {
    struct change c;
    begin_fallocate(fd, mode, off, len, &c);
    int r = real_fallocate64()(fd, mode, off, len);
    end_change(&c, r == 0);
    return r;
}

int posix_fallocate(int fd, off_t off, off_t len) {
    struct change c;
    begin_other(fd, 0, 0, &c);
    int r = real_posix_fallocate()(fd, off, len);
    end_change(&c, r == 0);
    return r;
}

int posix_fallocate64(int fd, off64_t off, off64_t len) {
    struct change c;
    begin_other(fd, 0, 0, &c);
    int r = real_posix_fallocate64()(fd, off, len);
    end_change(&c, r == 0);
    return r;
}

/* ---- syncing ------------------------------------------------------------------ */

int fsync(int fd) { return do_fsync(fd, real_fsync()); }

/* fdatasync counts as fsync: it must write the size too whenever that is
 * needed to read the data back, and that is all this journal tracks. */
int fdatasync(int fd) { return do_fsync(fd, real_fdatasync()); }

int syncfs(int fd) {
    struct stat st;
    int rc = 0;
    if (!g_active || fstat(fd, &st) != 0)
        return real_syncfs()(fd);
    sync_all(1, (uint64_t)st.st_dev, real_syncfs(), fd, NULL, &rc);
    return rc;
}

void sync(void) {
    int rc = 0;
    if (!g_active) {
        real_sync()();
        return;
    }
    sync_all(0, 0, NULL, 0, real_sync(), &rc);
}

/* ---- directory entries ------------------------------------------------------- */

/* Whether (dirfd, path) names the last link of a regular file: once it is
 * unlinked or replaced, whatever was journaled for its inode is void. */
static int last_link(int dirfd, const char *path, struct stat *st) {
    if (!g_active || !path)
        return 0;
    int saved = errno;
    int yes = fstatat(dirfd, path, st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st->st_mode) && st->st_nlink == 1;
    errno = saved;
    return yes;
}

static void forget(const struct stat *st) {
    int saved = errno;
    pthread_mutex_lock(&g_lock);
    drop_inode((uint64_t)st->st_dev, (uint64_t)st->st_ino);
    pthread_mutex_unlock(&g_lock);
    errno = saved;
}

int unlink(const char *path) {
    struct stat st;
    int gone = last_link(AT_FDCWD, path, &st);
    int r = real_unlink()(path);
    if (r == 0 && gone)
        forget(&st);
    return r;
}

int unlinkat(int dirfd, const char *path, int flags) {
    struct stat st;
    int gone = !(flags & AT_REMOVEDIR) && last_link(dirfd, path, &st);
    int r = real_unlinkat()(dirfd, path, flags);
    if (r == 0 && gone)
        forget(&st);
    return r;
}

int rename(const char *from, const char *to) {
    struct stat st;
    int gone = last_link(AT_FDCWD, to, &st);
    int r = real_rename()(from, to);
    if (r == 0 && gone)
        forget(&st);
    return r;
}

int renameat(int fromdir, const char *from, int todir, const char *to) {
    struct stat st;
    int gone = last_link(todir, to, &st);
    int r = real_renameat()(fromdir, from, todir, to);
    if (r == 0 && gone)
        forget(&st);
    return r;
}

int renameat2(int fromdir, const char *from, int todir, const char *to, unsigned int flags) {
    struct stat st;
    int gone = !(flags & RENAME_EXCHANGE) && last_link(todir, to, &st);
    int r = real_renameat2()(fromdir, from, todir, to, flags);
    if (r == 0 && gone)
        forget(&st);
    return r;
}

/* ---- set-up --------------------------------------------------------------------- */

static void lock_for_fork(void) { pthread_mutex_lock(&g_lock); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&g_lock); }

__attribute__((constructor)) static void powerloss_init(void) {
    const char *journal = getenv("TXNSQ_POWERLOSS_JOURNAL");
    const char *watch = getenv("TXNSQ_POWERLOSS_WATCH");
    if (!journal || !watch || !*journal || !*watch)
        return;
    size_t jl = strlen(journal), wl = strlen(watch);
    if (jl >= sizeof g_journal - 64 || wl >= sizeof g_watch)
        return;
    memcpy(g_journal, journal, jl + 1);
    memcpy(g_watch, watch, wl + 1);
    while (wl > 1 && g_watch[wl - 1] == '/')
        g_watch[--wl] = 0;
    g_watch_len = wl;
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
    g_active = 1;
}
