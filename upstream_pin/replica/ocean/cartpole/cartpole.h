/* cartpole.h - classic cart-pole for the puffer-harness replica (header-only).
 *
 * Same env API as ocean/breakout/breakout.h (see the comment there).
 * Physics: the classic frictionless cart-pole (Barto, Sutton & Anderson),
 * Euler-integrated with step dt. Actions: 0 push left, 1 push right.
 * Reward: 1 per step, 0 on the step that ends the episode; so one step's raw
 * reward is in [0, 1]. The episode ends when |x| > 2.4, |theta| > 12 degrees,
 * or after 200 steps. Log: perf = episode_length / 200, score = the
 * episode's return, episode_length, three termination counters, n.
 */
#ifndef REPLICA_ENV_CARTPOLE_H
#define REPLICA_ENV_CARTPOLE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ENV_NAME "cartpole"
#define OBS_SIZE 4
#define NUM_ACTIONS 2

#define CP_MAX_STEPS 200
#define CP_X_LIMIT 2.4f
#define CP_THETA_LIMIT (12.0f * 3.14159265f / 180.0f)

typedef struct Log {
    float perf;
    float score;
    float episode_length;
    float x_threshold_termination;
    float pole_angle_termination;
    float max_steps_termination;
    float n;
} Log;

static const char* const ENV_LOG_NAMES[] __attribute__((unused)) = {
    "perf", "score", "episode_length", "x_threshold_termination",
    "pole_angle_termination", "max_steps_termination", "n",
};

typedef struct Env {
    float cart_mass, pole_mass, pole_length, gravity, force_mag, dt;
    int continuous;
    int num_agents;
    float x, x_dot, theta, theta_dot;
    int steps;
    float episode_return;
    uint32_t rng;
    Log log;
    float* observations;
    int* actions;
    float* rewards;
    float* terminals;
    float own_obs[OBS_SIZE];
    int own_action;
    float own_reward;
    float own_terminal;
} Env;

static inline uint32_t cp_rand(uint32_t* s) {
    uint32_t x = *s ? *s : 0x2545f491u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

static inline float cp_uniform(uint32_t* s, float lo, float hi) {
    return lo + (hi - lo) * ((cp_rand(s) >> 8) * (1.0f / 16777216.0f));
}

static inline void env_defaults(Env* e) {
    memset(e, 0, sizeof(*e));
    e->cart_mass = 1.0f;
    e->pole_mass = 0.1f;
    e->pole_length = 0.5f;
    e->gravity = 9.8f;
    e->force_mag = 10.0f;
    e->dt = 0.02f;
    e->continuous = 0;
    e->num_agents = 1;
}

static inline int env_set_param(Env* e, const char* key, double v) {
    if (!strcmp(key, "cart_mass")) e->cart_mass = (float)v;
    else if (!strcmp(key, "pole_mass")) e->pole_mass = (float)v;
    else if (!strcmp(key, "pole_length")) e->pole_length = (float)v;
    else if (!strcmp(key, "gravity")) e->gravity = (float)v;
    else if (!strcmp(key, "force_mag")) e->force_mag = (float)v;
    else if (!strcmp(key, "dt")) e->dt = (float)v;
    else if (!strcmp(key, "continuous")) e->continuous = (int)v;
    else if (!strcmp(key, "num_agents")) e->num_agents = (int)v;
    else return 0;
    return 1;
}

static inline float env_score_max(const Env* e) {
    (void)e;
    return (float)CP_MAX_STEPS;
}

static inline void env_reward_range(const Env* e, float* lo, float* hi) {
    (void)e;
    *lo = 0.0f;
    *hi = 1.0f;
}

static inline void env_init(Env* e, unsigned int seed) {
    e->rng = seed * 2654435761u + 777u;
    e->observations = e->own_obs;
    e->actions = &e->own_action;
    e->rewards = &e->own_reward;
    e->terminals = &e->own_terminal;
}

static inline void cp_observe(Env* e) {
    float* o = e->observations;
    o[0] = e->x / CP_X_LIMIT;
    o[1] = e->x_dot / 2.0f;
    o[2] = e->theta / CP_THETA_LIMIT;
    o[3] = e->theta_dot / 2.0f;
}

static inline void env_reset(Env* e) {
    e->x = cp_uniform(&e->rng, -0.05f, 0.05f);
    e->x_dot = cp_uniform(&e->rng, -0.05f, 0.05f);
    e->theta = cp_uniform(&e->rng, -0.05f, 0.05f);
    e->theta_dot = cp_uniform(&e->rng, -0.05f, 0.05f);
    e->steps = 0;
    e->episode_return = 0;
    cp_observe(e);
}

static inline void env_step(Env* e) {
    int action = *e->actions;
    float force = action == 1 ? e->force_mag : -e->force_mag;
    float total_mass = e->cart_mass + e->pole_mass;
    float pml = e->pole_mass * e->pole_length;
    float c = cosf(e->theta), s = sinf(e->theta);
    float temp = (force + pml * e->theta_dot * e->theta_dot * s) / total_mass;
    float theta_acc = (e->gravity * s - c * temp) /
        (e->pole_length * (4.0f / 3.0f - e->pole_mass * c * c / total_mass));
    float x_acc = temp - pml * theta_acc * c / total_mass;
    e->x += e->dt * e->x_dot;
    e->x_dot += e->dt * x_acc;
    e->theta += e->dt * e->theta_dot;
    e->theta_dot += e->dt * theta_acc;
    e->steps++;

    int out_x = e->x < -CP_X_LIMIT || e->x > CP_X_LIMIT;
    int out_theta = e->theta < -CP_THETA_LIMIT || e->theta > CP_THETA_LIMIT;
    int out_time = e->steps >= CP_MAX_STEPS;
    int done = out_x || out_theta || out_time;
    float reward = done ? 0.0f : 1.0f;
    e->episode_return += reward;
    *e->rewards = reward;
    *e->terminals = done ? 1.0f : 0.0f;
    if (done) {
        Log* l = &e->log;
        l->perf += (float)e->steps / (float)CP_MAX_STEPS;
        l->score += e->episode_return;
        l->episode_length += (float)e->steps;
        l->x_threshold_termination += out_x ? 1.0f : 0.0f;
        l->pole_angle_termination += (!out_x && out_theta) ? 1.0f : 0.0f;
        l->max_steps_termination += (!out_x && !out_theta) ? 1.0f : 0.0f;
        l->n += 1.0f;
        env_reset(e);
    } else {
        cp_observe(e);
    }
}

static inline void env_close(Env* e) {
    (void)e;
}

#endif
