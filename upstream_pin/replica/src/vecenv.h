/* vecenv.h - the replica's CPU env vectorization, shaped like the threading
 * of the PufferLib 5.0 trainer:
 *
 *   env_start()        resets every env inside an OpenMP `parallel for`
 *                      (run by the calling thread: the main thread), starts
 *                      one pthread per buffer running vec_thread_main(),
 *                      then busy-waits until every worker reports WAITING.
 *   vec_thread_main()  one per buffer; spins until its buffer is RUNNING,
 *                      steps the buffer's envs inside an OpenMP
 *                      `parallel for num_threads(num_workers)`, then
 *                      reports WAITING.
 *
 * The main thread hands a buffer its actions with vec_send() and collects
 * results with vec_wait(), so it can compute one buffer's actions while the
 * other buffers step (double buffering).
 *
 * Build switches:
 *   REPLICA_SERIAL_OMP      both loops run without OpenMP (the upstream fix).
 *   REPLICA_SERIAL_OMP_ENV  only env_start's loop runs without OpenMP.
 *
 * Config vec.inline_buffer=1 (replica only): buffer 0 gets no pthread; the
 * main thread steps it by calling vec_thread_main() in one-shot mode. Its
 * OpenMP region then starts from the main thread: after a fork that is the
 * same libgomp hazard as env_start's loop, now inside vec_thread_main.
 */
#ifndef REPLICA_VECENV_H
#define REPLICA_VECENV_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#if defined(REPLICA_SERIAL_OMP) && !defined(REPLICA_SERIAL_OMP_ENV)
#define REPLICA_SERIAL_OMP_ENV
#endif

enum {
    BUF_STARTING = 0,
    BUF_WAITING = 1,
    BUF_RUNNING = 2,
};

typedef struct VecEnv VecEnv;

typedef struct {
    VecEnv* vec;
    int buf;
    int one_shot; /* step once and return (inline buffer on the main thread) */
} VecThreadArg;

struct VecEnv {
    Env* envs;
    int num_envs;        /* = total agents: every replica env has one agent */
    int num_buffers;
    int num_workers;     /* OpenMP threads per buffer */
    int inline_buffer;   /* 1: buffer 0 is stepped by the main thread */
    int* buf_start;      /* first env of each buffer */
    int* buf_count;      /* envs in each buffer */
    float* observations; /* [num_envs][OBS_SIZE] */
    int* actions;        /* [num_envs] */
    float* rewards;      /* [num_envs] */
    float* terminals;    /* [num_envs] */
    atomic_int* state;   /* per buffer: BUF_* */
    atomic_int shutdown;
    pthread_t* threads;
    VecThreadArg* args;
    double* env_seconds; /* per buffer: time spent stepping envs */
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Spin politely: pause for a few thousand rounds, then give the core away,
 * so the replica stays fast on small machines. */
static inline void spin_wait(unsigned* spins) {
    if (++*spins < 4096) {
        cpu_relax();
    } else {
        sched_yield();
    }
}

static void* vec_thread_main(void* arg) {
    VecThreadArg* a = (VecThreadArg*)arg;
    VecEnv* vec = a->vec;
    int buf = a->buf;
    atomic_int* state = &vec->state[buf];
    Env* envs = vec->envs;
    int first = vec->buf_start[buf];
    int last = first + vec->buf_count[buf];
    if (!a->one_shot) {
        atomic_store(state, BUF_WAITING);
    }
    for (;;) {
        unsigned spins = 0;
        while (atomic_load(state) != BUF_RUNNING) {
            if (atomic_load(&vec->shutdown)) {
                return NULL;
            }
            spin_wait(&spins);
        }
        double t0 = now_seconds();
#ifndef REPLICA_SERIAL_OMP
        #pragma omp parallel for schedule(static) num_threads(vec->num_workers)
#endif
        for (int i = first; i < last; i++) {
            env_step(&envs[i]);
        }
        vec->env_seconds[buf] += now_seconds() - t0;
        atomic_store(state, BUF_WAITING);
        if (a->one_shot) {
            return NULL;
        }
    }
}

static void vec_create(VecEnv* vec, const Env* proto, int num_envs, int num_buffers,
        int num_threads, int inline_buffer, unsigned int seed) {
    memset(vec, 0, sizeof(*vec));
    if (num_buffers < 1) num_buffers = 1;
    if (num_buffers > num_envs) num_buffers = num_envs;
    vec->num_envs = num_envs;
    vec->num_buffers = num_buffers;
    vec->num_workers = num_threads / num_buffers;
    if (vec->num_workers < 1) vec->num_workers = 1;
    vec->inline_buffer = inline_buffer ? 1 : 0;
    vec->envs = (Env*)calloc((size_t)num_envs, sizeof(Env));
    vec->observations = (float*)calloc((size_t)num_envs * OBS_SIZE, sizeof(float));
    vec->actions = (int*)calloc((size_t)num_envs, sizeof(int));
    vec->rewards = (float*)calloc((size_t)num_envs, sizeof(float));
    vec->terminals = (float*)calloc((size_t)num_envs, sizeof(float));
    vec->buf_start = (int*)calloc((size_t)num_buffers, sizeof(int));
    vec->buf_count = (int*)calloc((size_t)num_buffers, sizeof(int));
    vec->state = (atomic_int*)calloc((size_t)num_buffers, sizeof(atomic_int));
    vec->threads = (pthread_t*)calloc((size_t)num_buffers, sizeof(pthread_t));
    vec->args = (VecThreadArg*)calloc((size_t)num_buffers, sizeof(VecThreadArg));
    vec->env_seconds = (double*)calloc((size_t)num_buffers, sizeof(double));
    if (!vec->envs || !vec->observations || !vec->actions || !vec->rewards ||
            !vec->terminals || !vec->buf_start || !vec->buf_count || !vec->state ||
            !vec->threads || !vec->args || !vec->env_seconds) {
        fprintf(stderr, "out of memory creating %d envs\n", num_envs);
        exit(1);
    }
    atomic_init(&vec->shutdown, 0);
    for (int b = 0; b < num_buffers; b++) {
        atomic_init(&vec->state[b], BUF_STARTING);
        vec->buf_count[b] = num_envs / num_buffers + (b < num_envs % num_buffers ? 1 : 0);
        vec->buf_start[b] = b == 0 ? 0 : vec->buf_start[b - 1] + vec->buf_count[b - 1];
    }
    for (int i = 0; i < num_envs; i++) {
        Env* e = &vec->envs[i];
        *e = *proto;
        env_init(e, seed + (unsigned int)i);
        e->observations = &vec->observations[(size_t)i * OBS_SIZE];
        e->actions = &vec->actions[i];
        e->rewards = &vec->rewards[i];
        e->terminals = &vec->terminals[i];
    }
}

static void env_start(VecEnv* vec) {
#ifndef REPLICA_SERIAL_OMP_ENV
    #pragma omp parallel for schedule(static) num_threads(vec->num_workers)
#endif
    for (int i = 0; i < vec->num_envs; i++) {
        env_reset(&vec->envs[i]);
    }
    for (int b = 0; b < vec->num_buffers; b++) {
        vec->args[b].vec = vec;
        vec->args[b].buf = b;
        if (b == 0 && vec->inline_buffer) {
            vec->args[b].one_shot = 1;
            atomic_store(&vec->state[b], BUF_WAITING);
            continue;
        }
        int rc = pthread_create(&vec->threads[b], NULL, vec_thread_main, &vec->args[b]);
        if (rc != 0) {
            fprintf(stderr, "pthread_create failed for buffer %d\n", b);
            exit(1);
        }
        char name[32];
        snprintf(name, sizeof(name), "puffer-buf%d", b);
        name[15] = 0; /* thread names are at most 15 characters */
        pthread_setname_np(vec->threads[b], name);
    }
    for (int b = 0; b < vec->num_buffers; b++) {
        unsigned spins = 0;
        while (atomic_load(&vec->state[b]) != BUF_WAITING) {
            spin_wait(&spins);
        }
    }
}

/* Let buffer b step with the actions now in vec->actions. */
static void vec_send(VecEnv* vec, int b) {
    atomic_store(&vec->state[b], BUF_RUNNING);
    if (b == 0 && vec->inline_buffer) {
        vec_thread_main(&vec->args[b]);
    }
}

/* Wait until buffer b has finished its step. */
static void vec_wait(VecEnv* vec, int b) {
    unsigned spins = 0;
    while (atomic_load(&vec->state[b]) != BUF_WAITING) {
        spin_wait(&spins);
    }
}

static void vec_close(VecEnv* vec) {
    atomic_store(&vec->shutdown, 1);
    for (int b = 0; b < vec->num_buffers; b++) {
        if (b == 0 && vec->inline_buffer) continue;
        pthread_join(vec->threads[b], NULL);
    }
    for (int i = 0; i < vec->num_envs; i++) env_close(&vec->envs[i]);
}

#endif
