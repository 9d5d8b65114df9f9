/* hazards.c - the LD_PRELOAD shim of `--hazards` (docs/hazards.md), written for puffer-harness.
 *
 * Records, in a run that may well pass, the two hazards behind the hangs this harness was
 * built for, without rebuilding the program:
 *
 *   - fork() without exec from a process with other live threads (an OpenMP pool among
 *     them): the forking thread's stack, every other thread (name, start routine), the
 *     mutexes they held at that moment, and whether the child then entered an OpenMP
 *     runtime or took one of those mutexes before it exec'd;
 *   - lock order: for every pthread mutex taken while others are held, the edge
 *     held -> taken with both call sites, once per pair; a cycle of edges is a potential
 *     deadlock (the harness finds the cycles after the run).
 *
 * What it interposes: pthread_create, the exec calls, pthread_mutex_lock/trylock/
 * timedlock/unlock/init/destroy and pthread_cond_wait/timedwait/clockwait (a waiter does not
 * hold its mutex), and GNU libgomp's team-starting entry points (GOMP_parallel and family);
 * LLVM's and Intel's OpenMP runtimes are seen through their tool interface (OMPT), nothing of
 * theirs is wrapped (see "OpenMP" below). A fork is seen by atfork handlers (see "fork"):
 * every fork() runs them, whoever calls it; vfork, posix_spawn and system() do not fork a copy
 * that runs on.
 *
 * Output: text records, one per line, appended with write(2) to
 * $HARNESS_HAZARDS_DIR/native-<pid>.log (O_APPEND: a forked child writes into its parent's
 * file, each record tagged with its pid; after an exec the new image opens its own). Addresses
 * are raw; the harness names them from the `M` records (the process's file mappings, written
 * again when an address falls outside the ones already written) with addr2line. Nothing here
 * calls dladdr, malloc or stdio where a lock of someone else could be held: a new edge is
 * recorded from inside pthread_mutex_lock, and a forked child of a threaded process may find
 * any lock taken. Records (fields separated by one space):
 *
 *   I pid ppid exe                       this image started (the constructor; after exec too)
 *   M pid start end offset perms path    a file mapping (executable ones name code, the
 *                                        others a mutex's variable)
 *   F pid tid seq tasks team             a fork with other threads alive (tasks: threads of
 *                                        the process; team: the largest team an OpenMP
 *                                        runtime was asked for so far, 0 none, -1 its default)
 *   S pid seq addr...                    the forking thread's return addresses, innermost first
 *   T pid seq tid start name             a thread alive at that fork (start: its start routine
 *                                        when it was created through pthread_create, else 0)
 *   H pid seq tid lock site              a mutex that thread held then, and where it took it
 *   P pid ppid seq                       the child of fork seq, before anything else
 *   C pid seq what arg site main         that child, before any exec: `omp` (a parallel region
 *                                        began; arg: the team asked for) or `lock` (it took a
 *                                        mutex held at the fork; arg: the mutex); main: 1 on
 *                                        the forking thread (the child's first), 0 on another
 *   X pid seq                            that child calls exec
 *   E pid tid name held hgen taken tgen site_held site_taken addr...
 *                                        a new lock-order edge, and the stack taking `taken`
 *                                        (gen: how often a mutex was made or destroyed at that
 *                                        address before, so a new mutex at an old address is
 *                                        another lock)
 *   D pid what count                     records dropped: a table was full (edges, threads,
 *                                        maps, forks, log)
 *
 * Bounded: at most MAX_EDGES edges, MAX_THREADS threads tracked, MAX_HELD mutexes held per
 * thread, MAX_FORKS fork records and MAX_MAP_DUMPS mapping dumps per process, LOG_CAP bytes
 * per process; beyond, a D record. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_EDGES 8192 /* a power of two */
#define MAX_THREADS 1024
#define MAX_HELD 16
#define MAX_FORKS 64
#define MAX_FORK_LOCKS 64
#define MAX_RANGES 1024
#define MAX_MAP_DUMPS 32
#define MAX_TASKS 512
#define GENS 4096 /* a power of two */
#define STACK_DEPTH 24
#define LOG_CAP (8 << 20)
#define TLS __attribute__((tls_model("initial-exec"))) __thread

/* the harness recognises this object by this export (sampling/runtimes.py): its frames
 * (the thread trampoline, the lock wrappers) are never taken for the program's own code */
const char puffer_harness_hazards_shim[] = "puffer-harness hazards shim 2";

/* ---- the real functions, looked up on first use ------------------------------------- */

static void *next(const char *name) {
    /* dlsym takes only glibc's own loader lock, never a pthread mutex through us */
    void *fn = dlsym(RTLD_NEXT, name);
    if (!fn) {
        static const char msg[] = "puffer-harness hazards shim: a libc function is missing\n";
        (void)!write(2, msg, sizeof(msg) - 1);
        abort();
    }
    return fn;
}

/* every wrapper calls REAL(name): the pointer is looked up once, by whichever thread first
 * needs it (two threads racing store the same value) */
#define REAL(type, name)                                                                   \
    static _Atomic(type) real_##name;                                                      \
    static type get_##name(void) {                                                         \
        type fn = atomic_load_explicit(&real_##name, memory_order_acquire);                \
        if (!fn) {                                                                         \
            fn = (type)next(#name);                                                        \
            atomic_store_explicit(&real_##name, fn, memory_order_release);                 \
        }                                                                                  \
        return fn;                                                                         \
    }

typedef int (*mutex_fn)(pthread_mutex_t *);
typedef int (*timedlock_fn)(pthread_mutex_t *, const struct timespec *);
typedef int (*init_fn)(pthread_mutex_t *, const pthread_mutexattr_t *);
typedef int (*cond_wait_fn)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*cond_timed_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
typedef int (*cond_clock_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                             const struct timespec *);
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);

REAL(mutex_fn, pthread_mutex_lock)
REAL(mutex_fn, pthread_mutex_trylock)
REAL(timedlock_fn, pthread_mutex_timedlock)
REAL(mutex_fn, pthread_mutex_unlock)
REAL(init_fn, pthread_mutex_init)
REAL(mutex_fn, pthread_mutex_destroy)
REAL(cond_wait_fn, pthread_cond_wait)
REAL(cond_timed_fn, pthread_cond_timedwait)
REAL(cond_clock_fn, pthread_cond_clockwait)
REAL(create_fn, pthread_create)
REAL(execve_fn, execve)
REAL(execv_fn, execv)
REAL(execv_fn, execvp)
REAL(execve_fn, execvpe)

/* ---- records: formatted by hand (no stdio, no malloc), written with write(2) -------- */

static int log_fd = -1;
static atomic_long log_bytes;
static atomic_int log_full;
static pid_t my_pid;

struct line {
    char buf[1024];
    int n;
};

static void put_char(struct line *l, char c) {
    if (l->n < (int)sizeof(l->buf) - 1) l->buf[l->n++] = c;
}

static void put_str(struct line *l, const char *s) {
    for (; s && *s; s++) put_char(l, *s == ' ' || *s == '\n' ? '_' : *s);
}

/* a path as it is (the last field of a record: spaces allowed), a newline excepted */
static void put_raw(struct line *l, const char *s) {
    for (; s && *s; s++) put_char(l, *s == '\n' ? '?' : *s);
}

static void put_dec(struct line *l, long long v) {
    char tmp[24];
    int k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    if (v < 0) put_char(l, '-');
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u && k < (int)sizeof(tmp));
    while (k) put_char(l, tmp[--k]);
}

static void put_hex(struct line *l, uintptr_t v) {
    char tmp[20];
    int k = 0;
    put_char(l, '0');
    put_char(l, 'x');
    do {
        tmp[k++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v && k < (int)sizeof(tmp));
    while (k) put_char(l, tmp[--k]);
}

static void start_line(struct line *l, char kind) {
    l->n = 0;
    put_char(l, kind);
    put_char(l, ' ');
    put_dec(l, my_pid);
}

static void field_dec(struct line *l, long long v) {
    put_char(l, ' ');
    put_dec(l, v);
}

static void field_hex(struct line *l, uintptr_t v) {
    put_char(l, ' ');
    put_hex(l, v);
}

static void field_str(struct line *l, const char *s) {
    put_char(l, ' ');
    if (!s || !*s) s = "-";
    put_str(l, s);
}

static void end_line(struct line *l) {
    if (log_fd < 0) return;
    l->buf[l->n++] = '\n';
    if (atomic_fetch_add(&log_bytes, l->n) + l->n > LOG_CAP) {
        if (!atomic_exchange(&log_full, 1)) {
            static const char full[] = "D - log 1\n";
            (void)!write(log_fd, full, sizeof(full) - 1);
        }
        return;
    }
    const char *p = l->buf;
    int left = l->n;
    while (left > 0) { /* bounded: a short write advances, an error ends it */
        ssize_t w = write(log_fd, p, (size_t)left);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return;
        }
        p += w;
        left -= (int)w;
    }
}

/* one D record the first time a table overflows */
static void dropped(atomic_int *counter, const char *what) {
    if (atomic_fetch_add(counter, 1) != 0) return;
    struct line l;
    start_line(&l, 'D');
    field_str(&l, what);
    field_dec(&l, 1);
    end_line(&l);
}

static pid_t gettid_raw(void) { return (pid_t)syscall(SYS_gettid); }

/* ---- the file mappings, so the harness can name raw addresses ----------------------- */

struct range {
    uintptr_t start, end;
};
static struct range ranges[MAX_RANGES];
static atomic_int nranges;
static atomic_int maps_busy;
static atomic_int map_dumps;
static atomic_int maps_dropped;

static int known(uintptr_t a) {
    int n = atomic_load(&nranges);
    for (int i = 0; i < n && i < MAX_RANGES; i++)
        if (a >= ranges[i].start && a < ranges[i].end) return 1;
    return 0;
}

static uintptr_t parse_hex(const char **p) {
    uintptr_t v = 0;
    for (;; (*p)++) {
        char c = **p;
        if (c >= '0' && c <= '9')
            v = v * 16 + (uintptr_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v * 16 + (uintptr_t)(c - 'a' + 10);
        else
            return v;
    }
}

/* one line of /proc/self/maps: "start-end perms offset dev inode   path" */
static void map_line(const char *s) {
    const char *p = s;
    uintptr_t start = parse_hex(&p);
    if (*p++ != '-') return;
    uintptr_t end = parse_hex(&p);
    if (*p++ != ' ') return;
    char perms[5];
    for (int i = 0; i < 4; i++) {
        if (!p[i]) return;
        perms[i] = p[i];
    }
    perms[4] = 0;
    int exec = p[2] == 'x';
    p += 4;
    if (*p++ != ' ') return;
    uintptr_t offset = parse_hex(&p);
    /* skip dev and inode to the path */
    int spaces = 0;
    while (*p && spaces < 3) {
        if (*p == ' ') {
            spaces++;
            while (*p == ' ') p++;
        } else {
            p++;
        }
    }
    if (*p != '/') return; /* anonymous, [vdso], [heap] */
    int n = atomic_load(&nranges);
    if (exec && n < MAX_RANGES) {
        ranges[n].start = start;
        ranges[n].end = end;
        atomic_store(&nranges, n + 1);
    }
    struct line l;
    start_line(&l, 'M');
    field_hex(&l, start);
    field_hex(&l, end);
    field_hex(&l, offset);
    field_str(&l, perms);
    put_char(&l, ' ');
    put_raw(&l, p);
    end_line(&l);
}

/* /proc/self/maps read with open/read (async-signal-safe), written as M records; at most
 * MAX_MAP_DUMPS times (an address in no file, JIT code, would otherwise ask every time) */
static void write_maps(void) {
    if (atomic_exchange(&maps_busy, 1)) return; /* another thread is writing them */
    if (atomic_fetch_add(&map_dumps, 1) >= MAX_MAP_DUMPS) {
        dropped(&maps_dropped, "maps");
        atomic_store(&maps_busy, 0);
        return;
    }
    atomic_store(&nranges, 0);
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[4096], row[1024];
        int len = 0;
        ssize_t r;
        while ((r = read(fd, buf, sizeof(buf))) > 0) {
            for (ssize_t i = 0; i < r; i++) {
                if (buf[i] == '\n') {
                    row[len] = 0;
                    map_line(row);
                    len = 0;
                } else if (len < (int)sizeof(row) - 1) {
                    row[len++] = buf[i];
                }
            }
        }
        close(fd);
    }
    atomic_store(&maps_busy, 0);
}

static void ensure_known(const uintptr_t *addrs, int n) {
    for (int i = 0; i < n; i++)
        if (addrs[i] && !known(addrs[i])) {
            write_maps();
            return;
        }
}

/* ---- threads: a static table, so a fork can read what another thread holds without
 * touching memory that thread may free as it exits ---------------------------------- */

struct held {
    void *lock;
    void *site;
};

struct thread_rec {
    atomic_int tid; /* 0: free slot, -1: being claimed */
    void *start;    /* its start routine, NULL for the main thread or one we did not start */
    atomic_int nheld;
    struct held held[MAX_HELD];
};

static struct thread_rec threads[MAX_THREADS];
static atomic_int threads_dropped;
static TLS struct thread_rec *me;
static TLS struct thread_rec spare; /* a thread the table had no room for: tracked alone */
static TLS int in_shim;             /* a mutex taken by the shim's own work is not the program's */
static pthread_key_t exit_key;      /* its destructor frees the slot of a thread that exits */
static int have_exit_key;

static struct thread_rec *claim_slot(void *start) {
    pid_t tid = gettid_raw();
    for (int i = 0; i < MAX_THREADS; i++) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&threads[i].tid, &expect, -1)) {
            threads[i].start = start;
            atomic_store(&threads[i].nheld, 0);
            atomic_store(&threads[i].tid, tid);
            return &threads[i];
        }
    }
    dropped(&threads_dropped, "threads");
    spare.start = start;
    atomic_store(&spare.tid, tid);
    return &spare;
}

static struct thread_rec *self(void) {
    if (!me) {
        me = claim_slot(NULL);
        /* pthread_exit skips a start routine's return: the key's destructor runs either way
         * (a low key: no allocation) */
        if (have_exit_key && me != &spare) pthread_setspecific(exit_key, me);
    }
    return me;
}

static void release_slot(void *p) {
    struct thread_rec *t = p;
    /* a later destructor of this thread may still lock: it does so in its private spare,
     * never in the slot another thread may claim from now on */
    spare.start = t->start;
    atomic_store(&spare.tid, atomic_load(&t->tid));
    me = &spare;
    atomic_store(&t->nheld, 0);
    atomic_store(&t->tid, 0);
}

struct start_arg {
    void *(*fn)(void *);
    void *arg;
};

/* every thread started through pthread_create starts here: its start routine recorded */
static void *hazards_thread_start(void *p) {
    struct start_arg a = *(struct start_arg *)p;
    free(p);
    me = claim_slot((void *)a.fn);
    if (have_exit_key && me != &spare) pthread_setspecific(exit_key, me);
    return a.fn(a.arg);
}

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    struct start_arg *a = malloc(sizeof(*a));
    if (!a) return get_pthread_create()(t, attr, fn, arg);
    a->fn = fn;
    a->arg = arg;
    int rc = get_pthread_create()(t, attr, hazards_thread_start, a);
    if (rc != 0) free(a);
    return rc;
}

/* ---- mutex generations: a mutex made (or destroyed) at an address already seen is another
 * lock, not the old one (heap mutexes come and go at the same addresses) ----------------- */

static atomic_uint gens[GENS];

static unsigned gen_slot(const void *m) {
    uint64_t x = (uint64_t)(uintptr_t)m * 0x9e3779b97f4a7c15ULL;
    return (unsigned)(x >> 40) & (GENS - 1);
}

static unsigned gen_of(const void *m) { return atomic_load(&gens[gen_slot(m)]); }

/* ---- lock order --------------------------------------------------------------------- */

struct edge {
    atomic_int state; /* 0 empty, 1 being written, 2 ready */
    void *from, *to;
    unsigned gfrom, gto;
    pid_t tid;              /* the thread that took it first */
    atomic_int second_said; /* another thread took it too, and that was recorded */
};
static struct edge edges[MAX_EDGES];
static atomic_int edges_dropped;

static unsigned hash2(const void *a, const void *b, unsigned ga, unsigned gb) {
    uint64_t x = (uint64_t)(uintptr_t)a * 0x9e3779b97f4a7c15ULL;
    x ^= (uint64_t)(uintptr_t)b + 0x632be59bd9b4e019ULL + (x << 6) + (x >> 2);
    x ^= ((uint64_t)ga << 32 | gb) * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return (unsigned)(x * 0xbf58476d1ce4e5b9ULL >> 32);
}

/* 1 when from -> to was not known before (and is now); also 1, once, when a second thread
 * takes it (a cycle needs two threads: the harness must see one besides the first); 0 when
 * it was known, or the table is full */
static int add_edge(void *from, unsigned gfrom, void *to, unsigned gto, pid_t tid) {
    unsigned h = hash2(from, to, gfrom, gto);
    for (int probe = 0; probe < MAX_EDGES; probe++) {
        struct edge *e = &edges[(h + (unsigned)probe) & (MAX_EDGES - 1)];
        int s = atomic_load_explicit(&e->state, memory_order_acquire);
        if (s == 0) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&e->state, &expect, 1)) {
                e->from = from;
                e->to = to;
                e->gfrom = gfrom;
                e->gto = gto;
                e->tid = tid;
                atomic_store_explicit(&e->state, 2, memory_order_release);
                return 1;
            }
            s = atomic_load_explicit(&e->state, memory_order_acquire);
        }
        if (s == 2 && e->from == from && e->to == to && e->gfrom == gfrom && e->gto == gto)
            return e->tid != tid && !atomic_exchange(&e->second_said, 1);
        /* another pair, or one being written by another thread (it may be this very pair:
         * a duplicate E record is harmless, the harness counts pairs once) */
    }
    dropped(&edges_dropped, "edges");
    return 0;
}

static atomic_long fork_seq;
static int forked_child; /* set in a child of a hazardous fork until it execs */
static long child_seq;
static void *fork_locks[MAX_FORK_LOCKS]; /* mutexes other threads held at that fork */
static int nfork_locks;
static atomic_int child_said_lock;

static void child_took(void *lock, void *site) {
    for (int i = 0; i < nfork_locks; i++)
        if (fork_locks[i] == lock) {
            if (atomic_exchange(&child_said_lock, 1)) return;
            struct line l;
            start_line(&l, 'C');
            field_dec(&l, child_seq);
            field_str(&l, "lock");
            field_hex(&l, (uintptr_t)lock);
            field_hex(&l, (uintptr_t)site);
            field_dec(&l, gettid_raw() == my_pid);
            end_line(&l);
            return;
        }
}

/* a mutex (re)made in the child of a fork is no longer the copy the fork left locked */
static void child_forget(void *lock) {
    for (int i = 0; i < nfork_locks; i++)
        if (fork_locks[i] == lock) fork_locks[i] = NULL;
}

static void thread_name(pid_t tid, char *out, int size);

static void new_edge(void *from, unsigned gfrom, void *from_site, void *to, unsigned gto,
                     void *to_site) {
    uintptr_t stack[STACK_DEPTH];
    int n = 0;
    if (!forked_child) {
        /* the unwinder was loaded at start-up (its first use allocates); in a forked child
         * it is not used at all: a lock of the loader may have been copied taken */
        void *raw[STACK_DEPTH];
        n = backtrace(raw, STACK_DEPTH);
        for (int i = 0; i < n; i++) stack[i] = (uintptr_t)raw[i];
    }
    uintptr_t sites[2] = {(uintptr_t)from_site, (uintptr_t)to_site};
    ensure_known(sites, 2);
    ensure_known(stack, n);
    pid_t tid = gettid_raw();
    char name[32];
    thread_name(tid, name, sizeof(name));
    struct line l;
    start_line(&l, 'E');
    field_dec(&l, tid);
    field_str(&l, name);
    field_hex(&l, (uintptr_t)from);
    field_dec(&l, gfrom);
    field_hex(&l, (uintptr_t)to);
    field_dec(&l, gto);
    field_hex(&l, (uintptr_t)from_site);
    field_hex(&l, (uintptr_t)to_site);
    for (int i = 0; i < n; i++) field_hex(&l, stack[i]); /* the harness drops our frames */
    end_line(&l);
}

/* the edges held -> m, before m is asked for (lockdep's order): a run that deadlocks on m
 * has them too */
static void order_edges(pthread_mutex_t *m, void *site) {
    struct thread_rec *t = self();
    int n = atomic_load_explicit(&t->nheld, memory_order_relaxed);
    if (n == 0) return;
    in_shim = 1;
    unsigned gm = gen_of(m);
    pid_t tid = atomic_load(&t->tid);
    for (int i = 0; i < n && i < MAX_HELD; i++) {
        void *h = t->held[i].lock;
        if (h == m) continue; /* a recursive mutex taken again */
        unsigned gh = gen_of(h);
        if (add_edge(h, gh, m, gm, tid)) new_edge(h, gh, t->held[i].site, m, gm, site);
    }
    in_shim = 0;
}

static void push_held(pthread_mutex_t *m, void *site) {
    struct thread_rec *t = self();
    int n = atomic_load_explicit(&t->nheld, memory_order_relaxed);
    if (n < MAX_HELD) {
        t->held[n].lock = m;
        t->held[n].site = site;
    }
    atomic_store_explicit(&t->nheld, n + 1, memory_order_release);
}

/* the mutex's entry gone from the held stack; its call site, or NULL when it was not there */
static void *pop_held(pthread_mutex_t *m) {
    struct thread_rec *t = self();
    int n = atomic_load_explicit(&t->nheld, memory_order_relaxed);
    if (n <= 0) return NULL; /* taken before the shim saw it, or by another thread */
    int top = n < MAX_HELD ? n : MAX_HELD;
    for (int i = top - 1; i >= 0; i--)
        if (t->held[i].lock == m) {
            void *site = t->held[i].site;
            for (int j = i; j < top - 1; j++) t->held[j] = t->held[j + 1];
            atomic_store_explicit(&t->nheld, n - 1, memory_order_release);
            return site;
        }
    /* deeper than MAX_HELD: the count still goes down, so the stack stays in step */
    if (n > MAX_HELD) atomic_store_explicit(&t->nheld, n - 1, memory_order_release);
    return NULL;
}

int pthread_mutex_lock(pthread_mutex_t *m) {
    void *site = __builtin_return_address(0);
    if (forked_child) child_took(m, site);
    if (!in_shim) order_edges(m, site);
    int rc = get_pthread_mutex_lock()(m);
    if (rc == 0 && !in_shim) push_held(m, site);
    return rc;
}

int pthread_mutex_trylock(pthread_mutex_t *m) {
    int rc = get_pthread_mutex_trylock()(m);
    /* held, but no edge into it: a try cannot wait, so it cannot close a cycle (as lockdep) */
    if (rc == 0 && !in_shim) push_held(m, __builtin_return_address(0));
    return rc;
}

int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t) {
    int rc = get_pthread_mutex_timedlock()(m, t);
    if (rc == 0 && !in_shim) push_held(m, __builtin_return_address(0));
    return rc;
}

int pthread_mutex_unlock(pthread_mutex_t *m) {
    if (!in_shim) pop_held(m);
    return get_pthread_mutex_unlock()(m);
}

int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a) {
    atomic_fetch_add(&gens[gen_slot(m)], 1);
    if (forked_child) child_forget(m);
    return get_pthread_mutex_init()(m, a);
}

int pthread_mutex_destroy(pthread_mutex_t *m) {
    atomic_fetch_add(&gens[gen_slot(m)], 1);
    return get_pthread_mutex_destroy()(m);
}

/* a thread waiting on a condition variable does not hold its mutex meanwhile (a worker
 * parked on its queue's condition holds nothing a fork could copy taken); it holds it
 * again on return, in the order it first took it: no new edge */
int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    void *site = in_shim ? NULL : pop_held(m);
    int rc = get_pthread_cond_wait()(c, m);
    if (site) push_held(m, site);
    return rc;
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) {
    void *site = in_shim ? NULL : pop_held(m);
    int rc = get_pthread_cond_timedwait()(c, m, t);
    if (site) push_held(m, site);
    return rc;
}

int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clock,
                           const struct timespec *t) {
    void *site = in_shim ? NULL : pop_held(m);
    int rc = get_pthread_cond_clockwait()(c, m, clock, t);
    if (site) push_held(m, site);
    return rc;
}

/* ---- OpenMP ------------------------------------------------------------------------
 *
 * LLVM's and Intel's runtimes through their tool interface (OMPT): this file defines
 * ompt_start_tool, and every parallel region calls back with its call site; nothing of
 * theirs is wrapped. GNU libgomp has none: its entry points that start a team are wrapped
 * (GOMP_parallel and family) and forward to the libgomp the caller would have reached
 * without the shim: the next one in the global scope (RTLD_NEXT), else, for a caller whose
 * libgomp is private to it (a wheel's copy loaded RTLD_LOCAL), the one its own
 * dependencies hold. */

static atomic_uint omp_team; /* the largest team asked for so far (DEFAULT_TEAM: the default) */
#define DEFAULT_TEAM 1000000u
static atomic_int child_said_omp, child_said_omp_thread;

static void omp_began(unsigned requested, const void *codeptr) {
    unsigned t = requested ? requested : DEFAULT_TEAM;
    unsigned old = atomic_load(&omp_team);
    while (t > old && !atomic_compare_exchange_weak(&omp_team, &old, t)) {
    }
    if (!forked_child) return;
    /* the child's forking thread is its first (tid == pid); a region from a thread the child
     * started gets a fresh pool even from libgomp: told apart */
    int main = gettid_raw() == my_pid;
    if (atomic_exchange(main ? &child_said_omp : &child_said_omp_thread, 1)) return;
    struct line l;
    start_line(&l, 'C');
    field_dec(&l, child_seq);
    field_str(&l, "omp");
    field_dec(&l, requested);
    field_hex(&l, (uintptr_t)codeptr);
    field_dec(&l, main);
    end_line(&l);
}

typedef void (*ompt_interface_fn_t)(void);
typedef ompt_interface_fn_t (*ompt_function_lookup_t)(const char *);
typedef union {
    uint64_t value;
    void *ptr;
} ompt_data_t;
typedef int (*ompt_initialize_t)(ompt_function_lookup_t, int, ompt_data_t *);
typedef void (*ompt_finalize_t)(ompt_data_t *);
typedef struct {
    ompt_initialize_t initialize;
    ompt_finalize_t finalize;
    ompt_data_t tool_data;
} ompt_start_tool_result_t;
typedef int (*ompt_set_callback_t)(int, ompt_interface_fn_t);
#define OMPT_CALLBACK_PARALLEL_BEGIN 3 /* omp-tools.h: ompt_callback_parallel_begin */

static void on_parallel_begin(ompt_data_t *task, const void *frame, ompt_data_t *par,
                              unsigned requested, int flags, const void *codeptr) {
    (void)task, (void)frame, (void)par, (void)flags;
    omp_began(requested, codeptr);
}

static int ompt_init(ompt_function_lookup_t lookup, int device, ompt_data_t *data) {
    (void)device, (void)data;
    ompt_set_callback_t set = (ompt_set_callback_t)lookup("ompt_set_callback");
    if (set) set(OMPT_CALLBACK_PARALLEL_BEGIN, (ompt_interface_fn_t)on_parallel_begin);
    return 1;
}

static void ompt_fini(ompt_data_t *data) { (void)data; }

static ompt_start_tool_result_t ompt_tool = {ompt_init, ompt_fini, {0}};

/* asked by an OMPT runtime at its start; a program with a tool of its own
 * (OMP_TOOL_LIBRARIES) keeps it, and its regions go unseen here */
ompt_start_tool_result_t *ompt_start_tool(unsigned version, const char *runtime) {
    (void)version, (void)runtime;
    const char *own = getenv("OMP_TOOL_LIBRARIES");
    return own && *own ? NULL : &ompt_tool;
}

/* libgomp's team-starting entry points all take (fn, data, num_threads, ...) with integer
 * arguments only (at most 8: GOMP_parallel_loop_static and kin); one forwarder shape passes
 * all 8 on (a callee reads the ones it has) and the return register back
 * (GOMP_parallel_reductions returns its count) */
typedef long (*gomp_fn)(void *, void *, unsigned long, long, long, long, long, long);

#define ROUTES 64
struct route {
    _Atomic(const void *) caller;
    _Atomic(gomp_fn) fn;
};

static gomp_fn gomp_real(_Atomic(gomp_fn) *next_fn, struct route *routes, const char *name,
                         const void *caller, gomp_fn self_fn) {
    gomp_fn fn = atomic_load_explicit(next_fn, memory_order_acquire);
    if (fn) return fn;
    fn = (gomp_fn)dlsym(RTLD_NEXT, name);
    if (fn) {
        atomic_store_explicit(next_fn, fn, memory_order_release);
        return fn;
    }
    unsigned h = (unsigned)(((uintptr_t)caller >> 4) * 2654435761u) % ROUTES;
    for (int i = 0; i < ROUTES; i++) {
        struct route *r = &routes[(h + (unsigned)i) % ROUTES];
        const void *c = atomic_load(&r->caller);
        if (c == caller) return atomic_load(&r->fn);
        if (c) continue;
        /* the libgomp among the caller's own dependencies */
        Dl_info info;
        void *handle = NULL;
        if (dladdr(caller, &info) && info.dli_fname)
            handle = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
        fn = handle ? (gomp_fn)dlsym(handle, name) : NULL;
        if (handle) dlclose(handle);
        if (!fn || fn == self_fn) break;
        const void *expect = NULL;
        if (atomic_compare_exchange_strong(&r->caller, &expect, caller)) atomic_store(&r->fn, fn);
        return fn;
    }
    if (fn && fn != self_fn) return fn; /* the routes are full: not remembered */
    static const char msg[] = "puffer-harness hazards shim: no libgomp for a GOMP_ call\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    abort();
}

#define GOMP_WRAP(name)                                                                    \
    static _Atomic(gomp_fn) next_##name;                                                   \
    static struct route routes_##name[ROUTES];                                             \
    long name(void *fn, void *data, unsigned long team, long a, long b, long c, long d,   \
              long e) {                                                                    \
        const void *caller = __builtin_return_address(0);                                  \
        omp_began((unsigned)team, caller);                                                 \
        gomp_fn real = gomp_real(&next_##name, routes_##name, #name, caller, (gomp_fn)name); \
        return real(fn, data, team, a, b, c, d, e);                                         \
    }

GOMP_WRAP(GOMP_parallel)
GOMP_WRAP(GOMP_parallel_start)
GOMP_WRAP(GOMP_parallel_reductions)
GOMP_WRAP(GOMP_parallel_sections)
GOMP_WRAP(GOMP_parallel_loop_static)
GOMP_WRAP(GOMP_parallel_loop_dynamic)
GOMP_WRAP(GOMP_parallel_loop_guided)
GOMP_WRAP(GOMP_parallel_loop_runtime)
GOMP_WRAP(GOMP_parallel_loop_nonmonotonic_dynamic)
GOMP_WRAP(GOMP_parallel_loop_nonmonotonic_guided)
GOMP_WRAP(GOMP_parallel_loop_nonmonotonic_runtime)
GOMP_WRAP(GOMP_parallel_loop_maybe_nonmonotonic_runtime)

/* ---- fork --------------------------------------------------------------------------- */

static int alive(pid_t tid) { return syscall(SYS_tgkill, my_pid, tid, 0) == 0; }

/* the name of a thread, from /proc/self/task/TID/comm */
static void thread_name(pid_t tid, char *out, int size) {
    struct line p;
    p.n = 0;
    put_raw(&p, "/proc/self/task/");
    put_dec(&p, tid);
    put_raw(&p, "/comm");
    p.buf[p.n] = 0;
    out[0] = 0;
    int fd = open(p.buf, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t r = read(fd, out, (size_t)size - 1);
    close(fd);
    if (r <= 0) return;
    out[r] = 0;
    if (out[r - 1] == '\n') out[r - 1] = 0;
}

struct linux_dirent64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* every tid of this process, from /proc/self/task (getdents64: no malloc); the count may
 * exceed cap, the array holds the first cap */
static int list_tasks(pid_t *tids, int cap) {
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[4096];
    int n = 0;
    long r;
    while ((r = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
        for (long off = 0; off < r;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
            off += d->reclen;
            if (d->name[0] < '0' || d->name[0] > '9') continue;
            long v = 0;
            for (const char *c = d->name; *c >= '0' && *c <= '9'; c++) v = v * 10 + (*c - '0');
            if (n < cap) tids[n] = (pid_t)v;
            n++;
        }
    }
    close(fd);
    return n;
}

static struct thread_rec *thread_of(pid_t tid) {
    for (int i = 0; i < MAX_THREADS; i++)
        if (atomic_load(&threads[i].tid) == tid) return &threads[i];
    return NULL;
}

/* the fork record: who forks, from where, beside which threads holding which mutexes */
static void record_fork(long seq, pid_t self_tid, int ntasks, const pid_t *tids, int listed) {
    unsigned team = atomic_load(&omp_team);
    void *raw[STACK_DEPTH];
    int n = backtrace(raw, STACK_DEPTH);
    write_maps(); /* the child's addresses are named with these too */
    struct line l;
    start_line(&l, 'F');
    field_dec(&l, self_tid);
    field_dec(&l, seq);
    field_dec(&l, ntasks);
    field_dec(&l, team >= DEFAULT_TEAM ? -1 : (long long)team);
    end_line(&l);
    start_line(&l, 'S');
    field_dec(&l, seq);
    for (int i = 0; i < n; i++) field_hex(&l, (uintptr_t)raw[i]); /* the harness drops ours */
    end_line(&l);
    nfork_locks = 0;
    for (int i = 0; i < listed; i++) {
        pid_t tid = tids[i];
        if (tid == self_tid) continue;
        struct thread_rec *t = thread_of(tid);
        char name[32];
        thread_name(tid, name, sizeof(name));
        start_line(&l, 'T');
        field_dec(&l, seq);
        field_dec(&l, tid);
        field_hex(&l, (uintptr_t)(t ? t->start : NULL));
        field_str(&l, name);
        end_line(&l);
        if (!t) continue;
        /* read while that thread runs (a snapshot; the table is static, so a thread that
         * exits meanwhile leaves a stale entry, never freed memory) */
        int k = atomic_load(&t->nheld);
        for (int j = 0; j < k && j < MAX_HELD; j++) {
            struct held h = t->held[j];
            if (!h.lock) continue;
            start_line(&l, 'H');
            field_dec(&l, seq);
            field_dec(&l, tid);
            field_hex(&l, (uintptr_t)h.lock);
            field_hex(&l, (uintptr_t)h.site);
            end_line(&l);
            if (nfork_locks < MAX_FORK_LOCKS) fork_locks[nfork_locks++] = h.lock;
        }
    }
}

static atomic_int forks_dropped;
static long pending_seq;     /* prepare -> child: the fork being made (glibc serialises */
static pid_t pending_parent; /* forks: its atfork lock is held from prepare to the end) */

/* The fork's record, made in an atfork prepare handler: registered at start-up, ours runs
 * after those of every library that registered later (prepare handlers run in reverse
 * order), so the threads it lists are the ones alive at the fork itself: a pool its library
 * stops before forking (OpenBLAS's) is gone, one it keeps (libgomp's, libomp's) is there. */
static void at_prepare(void) {
    pending_seq = 0;
    pending_parent = my_pid;
    if (log_fd < 0) return;
    pid_t self_tid = gettid_raw();
    pid_t tids[MAX_TASKS];
    int ntasks = list_tasks(tids, MAX_TASKS);
    int listed = ntasks < MAX_TASKS ? ntasks : MAX_TASKS;
    /* live threads besides the forking one; tgkill confirms each (a tid just exiting) */
    int others = 0;
    for (int i = 0; i < listed; i++)
        if (tids[i] != self_tid && alive(tids[i])) others++;
    if (others == 0 && atomic_load(&omp_team) <= 1) return;
    long seq = atomic_fetch_add(&fork_seq, 1) + 1;
    if (seq > MAX_FORKS) {
        dropped(&forks_dropped, "forks");
        return;
    }
    int was = in_shim;
    in_shim = 1; /* the unwinder's own mutexes are not the program's */
    record_fork(seq, self_tid, ntasks, tids, listed);
    in_shim = was;
    pending_seq = seq;
}

/* in the child, before any other library's child handler (child handlers run in the order
 * they were registered): from here, what it does with the parent's runtime and locks counts */
static void at_child(void) {
    my_pid = (pid_t)syscall(SYS_getpid);
    /* the parent's other threads are gone: their slots would name dead tids */
    for (int i = 0; i < MAX_THREADS; i++)
        if (&threads[i] != me) atomic_store(&threads[i].tid, 0);
    if (me) atomic_store(&me->tid, my_pid);
    atomic_store(&fork_seq, 0);
    atomic_store(&child_said_lock, 0);
    atomic_store(&child_said_omp, 0);
    atomic_store(&child_said_omp_thread, 0);
    long seq = pending_seq;
    forked_child = seq != 0;
    child_seq = seq;
    if (!seq) return;
    struct line l;
    start_line(&l, 'P');
    field_dec(&l, pending_parent);
    field_dec(&l, seq);
    end_line(&l);
}

/* ---- exec: the child of a hazardous fork is safe from here ---------------------------- */

static void execing(void) {
    if (!forked_child) return;
    struct line l;
    start_line(&l, 'X');
    field_dec(&l, child_seq);
    end_line(&l);
}

int execve(const char *path, char *const argv[], char *const envp[]) {
    execing();
    return get_execve()(path, argv, envp);
}

int execv(const char *path, char *const argv[]) {
    execing();
    return get_execv()(path, argv);
}

int execvp(const char *file, char *const argv[]) {
    execing();
    return get_execvp()(file, argv);
}

int execvpe(const char *file, char *const argv[], char *const envp[]) {
    execing();
    return get_execvpe()(file, argv, envp);
}

/* ---- start-up ----------------------------------------------------------------------- */

__attribute__((constructor(101))) static void hazards_init(void) {
    my_pid = (pid_t)syscall(SYS_getpid);
    const char *dir = getenv("HARNESS_HAZARDS_DIR");
    if (dir && *dir == '/') {
        struct line p;
        p.n = 0;
        put_raw(&p, dir);
        put_raw(&p, "/native-");
        put_dec(&p, my_pid);
        put_raw(&p, ".log");
        p.buf[p.n] = 0;
        /* O_NOFOLLOW: a link planted in the folder is not followed out of it */
        log_fd = open(p.buf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    }
    void *warm[2];
    (void)backtrace(warm, 2); /* loads the unwinder now, not inside a lock or a fork */
    have_exit_key = pthread_key_create(&exit_key, release_slot) == 0;
    (void)self();
    pthread_atfork(at_prepare, NULL, at_child);
    char exe[512];
    ssize_t r = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[r > 0 ? r : 0] = 0;
    struct line l;
    start_line(&l, 'I');
    field_dec(&l, (long long)getppid());
    put_char(&l, ' ');
    put_raw(&l, exe[0] ? exe : "-");
    end_line(&l);
}
