/* Reward probe driver (ours): steps N envs of one env header with random actions and
 * prints what it saw as JSON. Compiled by harness/probe.py against an env header with the
 * replica's env API (env_defaults/env_init/env_reset/env_step/env_close, Log, ENV_LOG_NAMES,
 * env_reward_range, env_score_max; see upstream_pin/replica/ocean/breakout/breakout.h):
 *   cc -O2 -DENV_HEADER='"ocean/breakout/breakout.h"' -I TREE probe.c -o probe -lm
 *   ./probe NUM_ENVS STEPS SEED
 * The clamp is the trainers' own: rewards are clamped to [-1, 1] before training sees them.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include ENV_HEADER

static unsigned int probe_rand(unsigned int* s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

int main(int argc, char** argv) {
    int num_envs = argc > 1 ? atoi(argv[1]) : 64;
    long steps = argc > 2 ? atol(argv[2]) : 100000;
    unsigned int seed = argc > 3 ? (unsigned int)atoi(argv[3]) : 1u;
    if (num_envs < 1 || steps < 1) {
        fprintf(stderr, "usage: probe NUM_ENVS STEPS SEED\n");
        return 2;
    }
    Env* envs = calloc((size_t)num_envs, sizeof(Env));
    if (envs == NULL) return 3;
    for (int i = 0; i < num_envs; i++) {
        env_defaults(&envs[i]);
        env_init(&envs[i], seed * 7919u + (unsigned int)i);
        env_reset(&envs[i]);
    }
    double raw_min = DBL_MAX, raw_max = -DBL_MAX, clamped_min = DBL_MAX, clamped_max = -DBL_MAX;
    double raw_sum = 0;
    long terminals = 0, above_one = 0, nonfinite = 0, total = 0;
    unsigned int rng = seed ? seed : 1u;
    for (long t = 0; t < steps; t++) {
        for (int i = 0; i < num_envs; i++) {
            Env* e = &envs[i];
            *e->actions = (int)(probe_rand(&rng) % NUM_ACTIONS);
            env_step(e);
            double r = *e->rewards;
            if (!isfinite(r)) { nonfinite++; continue; }
            double c = r < -1 ? -1 : (r > 1 ? 1 : r);
            raw_min = r < raw_min ? r : raw_min;
            raw_max = r > raw_max ? r : raw_max;
            clamped_min = c < clamped_min ? c : clamped_min;
            clamped_max = c > clamped_max ? c : clamped_max;
            raw_sum += r;
            above_one += fabs(r) > 1;
            terminals += *e->terminals != 0;
            total++;
        }
    }
    float lo = 0, hi = 0;
    env_reward_range(&envs[0], &lo, &hi);
    printf("{\"env\": \"%s\", \"num_envs\": %d, \"steps\": %ld, \"samples\": %ld,\n", ENV_NAME,
           num_envs, steps, total);
    printf(" \"raw_min\": %.9g, \"raw_max\": %.9g, \"raw_mean\": %.9g,\n", raw_min, raw_max,
           total ? raw_sum / total : 0.0);
    printf(" \"clamped_min\": %.9g, \"clamped_max\": %.9g,\n", clamped_min, clamped_max);
    printf(" \"above_one\": %ld, \"nonfinite\": %ld, \"terminal_rate\": %.9g,\n", above_one,
           nonfinite, total ? (double)terminals / total : 0.0);
    printf(" \"declared_min\": %.9g, \"declared_max\": %.9g, \"score_max\": %.9g,\n", lo, hi,
           env_score_max(&envs[0]));
    /* per-field means of the Log over finished episodes, then the episode count */
    Log sum = {0};
    float* acc = (float*)&sum;
    int fields = (int)(sizeof(Log) / sizeof(float));
    for (int i = 0; i < num_envs; i++) {
        float* f = (float*)&envs[i].log;
        for (int k = 0; k < fields; k++) acc[k] += f[k];
    }
    float n = acc[fields - 1];
    printf(" \"episodes\": %.9g, \"log\": {", n);
    for (int k = 0; k < fields - 1; k++) {
        printf("%s\"%s\": %.9g", k ? ", " : "", ENV_LOG_NAMES[k], n > 0 ? acc[k] / n : 0.0);
    }
    printf("}}\n");
    for (int i = 0; i < num_envs; i++) env_close(&envs[i]);
    free(envs);
    return 0;
}
