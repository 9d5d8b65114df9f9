/* pinball.h - a small pinball table for the puffer-harness replica
 * (header-only, our own env; stands in for the reporter's custom "pinball").
 *
 * Same env API as ocean/breakout/breakout.h (see the comment there).
 * Table: 1.0 wide, 1.6 tall, gravity down. Two slanted inlane walls lead to
 * two flippers with a drain gap between their tips; three round bumpers sit
 * in the upper half. A ball falls in from the top.
 * Actions: 0 none, 1 left flipper, 2 right flipper, 3 both (a flipper swings
 * up while held and falls back when released).
 * Reward per frame: a bumper hit scores its points (1 for each upper bumper,
 * 3 for the centre one; at most one hit per frame), a drain gives -1 (the
 * step stops at a drain). Each step runs `frameskip` frames, so one step's
 * raw reward is in [-1, 3 * frameskip] = [-1, 6] by default: every centre
 * bumper hit goes above the [-1, 1] clamp a trainer applies.
 * The episode ends after 3 drained balls or max_steps steps.
 * Log: perf = episode_length / max_steps (share of the time cap survived,
 * in [0, 1]), score = bumper points, episode_return (points - drains),
 * episode_length, drains, n.
 */
#ifndef REPLICA_ENV_PINBALL_H
#define REPLICA_ENV_PINBALL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ENV_NAME "pinball"
#define OBS_SIZE 10
#define NUM_ACTIONS 4

#define PB_W 1.0f
#define PB_H 1.6f
#define PB_BALLS 3
#define PB_SUBSTEPS 4
#define PB_NUM_BUMPERS 3
#define PB_FLIP_REST (-0.52f) /* radians, about -30 degrees */
#define PB_FLIP_UP (0.52f)
#define PB_FLIP_SPEED 18.0f   /* rad/s */

typedef struct Log {
    float perf;
    float score;
    float episode_return;
    float episode_length;
    float drains;
    float n;
} Log;

static const char* const ENV_LOG_NAMES[] __attribute__((unused)) = {
    "perf", "score", "episode_return", "episode_length", "drains", "n",
};

typedef struct Env {
    int frameskip;
    int max_steps;
    float gravity;
    float ball_radius;
    float flipper_length;
    float bumper_radius;
    float bumper_kick;
    float max_speed;
    float restitution;
    int num_agents;
    float bx, by, vx, vy;
    float flip_angle[2]; /* left, right: angle above the rest line */
    float flip_omega[2];
    int balls_left;
    int steps;
    int hits; /* bumper points */
    int drains;
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

static const float PB_BUMPERS[PB_NUM_BUMPERS][3] __attribute__((unused)) = {
    {0.30f, 1.10f, 1.0f}, {0.70f, 1.10f, 1.0f}, {0.50f, 0.85f, 3.0f}, /* x, y, points */
};
static const float PB_PIVOT[2][2] __attribute__((unused)) = {{0.30f, 0.22f}, {0.70f, 0.22f}};

static inline uint32_t pb_rand(uint32_t* s) {
    uint32_t x = *s ? *s : 0x1b873593u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

static inline float pb_uniform(uint32_t* s, float lo, float hi) {
    return lo + (hi - lo) * ((pb_rand(s) >> 8) * (1.0f / 16777216.0f));
}

static inline void env_defaults(Env* e) {
    memset(e, 0, sizeof(*e));
    e->frameskip = 2;
    e->max_steps = 2000;
    e->gravity = 2.5f;
    e->ball_radius = 0.025f;
    e->flipper_length = 0.17f;
    e->bumper_radius = 0.07f;
    e->bumper_kick = 1.8f;
    e->max_speed = 4.0f;
    e->restitution = 0.85f;
    e->num_agents = 1;
}

static inline int env_set_param(Env* e, const char* key, double v) {
    if (!strcmp(key, "frameskip")) e->frameskip = (int)v;
    else if (!strcmp(key, "max_steps")) e->max_steps = (int)v;
    else if (!strcmp(key, "gravity")) e->gravity = (float)v;
    else if (!strcmp(key, "ball_radius")) e->ball_radius = (float)v;
    else if (!strcmp(key, "flipper_length")) e->flipper_length = (float)v;
    else if (!strcmp(key, "bumper_radius")) e->bumper_radius = (float)v;
    else if (!strcmp(key, "bumper_kick")) e->bumper_kick = (float)v;
    else if (!strcmp(key, "max_speed")) e->max_speed = (float)v;
    else if (!strcmp(key, "restitution")) e->restitution = (float)v;
    else if (!strcmp(key, "num_agents")) e->num_agents = (int)v;
    else return 0;
    return 1;
}

static inline float env_score_max(const Env* e) {
    return 3.0f * (float)e->max_steps * (float)e->frameskip;
}

static inline void env_reward_range(const Env* e, float* lo, float* hi) {
    *lo = -1.0f;
    *hi = 3.0f * (float)e->frameskip;
}

static inline void env_init(Env* e, unsigned int seed) {
    if (e->frameskip < 1) e->frameskip = 1;
    if (e->max_steps < 1) e->max_steps = 1;
    e->rng = seed * 2654435761u + 4242u;
    e->observations = e->own_obs;
    e->actions = &e->own_action;
    e->rewards = &e->own_reward;
    e->terminals = &e->own_terminal;
}

static inline void pb_serve(Env* e) {
    e->bx = pb_uniform(&e->rng, 0.2f, 0.8f);
    e->by = 1.45f;
    e->vx = pb_uniform(&e->rng, -0.8f, 0.8f);
    e->vy = 0.0f;
}

/* Flipper geometry: pivot and tip for side s (0 left, 1 right). */
static inline void pb_flipper(const Env* e, int s, float* tx, float* ty) {
    float a = PB_FLIP_REST + e->flip_angle[s];
    float dir = s == 0 ? 1.0f : -1.0f;
    *tx = PB_PIVOT[s][0] + dir * cosf(a) * e->flipper_length;
    *ty = PB_PIVOT[s][1] + sinf(a) * e->flipper_length;
}

static inline void pb_observe(Env* e) {
    float* o = e->observations;
    int falling = e->vy < 0;
    int low = e->by < 0.42f;
    o[0] = e->bx / PB_W;
    o[1] = e->by / PB_H;
    o[2] = e->vx / e->max_speed;
    o[3] = e->vy / e->max_speed;
    o[4] = e->flip_angle[0] / (PB_FLIP_UP - PB_FLIP_REST);
    o[5] = e->flip_angle[1] / (PB_FLIP_UP - PB_FLIP_REST);
    o[6] = (falling && low && e->bx < 0.5f) ? 1.0f : 0.0f;
    o[7] = (falling && low && e->bx >= 0.5f) ? 1.0f : 0.0f;
    o[8] = (e->bx - 0.5f) * 2.0f;
    o[9] = (float)e->balls_left / PB_BALLS;
}

static inline void env_reset(Env* e) {
    e->balls_left = PB_BALLS;
    e->steps = 0;
    e->hits = 0;
    e->drains = 0;
    e->episode_return = 0;
    e->flip_angle[0] = e->flip_angle[1] = 0;
    e->flip_omega[0] = e->flip_omega[1] = 0;
    pb_serve(e);
    pb_observe(e);
}

/* Bounces the ball off segment (ax,ay)-(bx,by) whose points move with
 * angular velocity omega about (px,py). Returns 1 on contact. */
static inline int pb_segment(Env* e, float ax, float ay, float bx2, float by2,
        float px, float py, float omega) {
    float sx = bx2 - ax, sy = by2 - ay;
    float len2 = sx * sx + sy * sy;
    float t = len2 > 0 ? ((e->bx - ax) * sx + (e->by - ay) * sy) / len2 : 0;
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    float cx = ax + t * sx, cy = ay + t * sy;
    float dx = e->bx - cx, dy = e->by - cy;
    float d2 = dx * dx + dy * dy;
    float r = e->ball_radius;
    if (d2 >= r * r || d2 < 1e-12f) return 0;
    float d = sqrtf(d2);
    float nx = dx / d, ny = dy / d;
    e->bx = cx + nx * r;
    e->by = cy + ny * r;
    float ux = -omega * (cy - py), uy = omega * (cx - px); /* surface velocity */
    float rvx = e->vx - ux, rvy = e->vy - uy;
    float vn = rvx * nx + rvy * ny;
    if (vn < 0) {
        rvx -= (1.0f + e->restitution) * vn * nx;
        rvy -= (1.0f + e->restitution) * vn * ny;
        e->vx = rvx + ux;
        e->vy = rvy + uy;
    }
    return 1;
}

/* One frame. Returns the points of a bumper hit, -1 for a drain, else 0. */
static inline int pb_frame(Env* e, int action) {
    int held[2] = {action == 1 || action == 3, action == 2 || action == 3};
    float dt = 1.0f / 60.0f / PB_SUBSTEPS;
    int points = 0;
    for (int sub = 0; sub < PB_SUBSTEPS; sub++) {
        for (int s = 0; s < 2; s++) {
            float target = held[s] ? PB_FLIP_UP - PB_FLIP_REST : 0.0f;
            float prev = e->flip_angle[s];
            float next = prev + (held[s] ? PB_FLIP_SPEED : -PB_FLIP_SPEED) * dt;
            if ((held[s] && next > target) || (!held[s] && next < target)) next = target;
            e->flip_angle[s] = next;
            /* Counter-clockwise for the left flipper, clockwise for the right. */
            e->flip_omega[s] = (next - prev) / dt * (s == 0 ? 1.0f : -1.0f);
        }
        e->vy -= e->gravity * dt;
        e->bx += e->vx * dt;
        e->by += e->vy * dt;
        float r = e->ball_radius;
        if (e->bx < r) { e->bx = r; e->vx = fabsf(e->vx) * e->restitution; }
        if (e->bx > PB_W - r) { e->bx = PB_W - r; e->vx = -fabsf(e->vx) * e->restitution; }
        if (e->by > PB_H - r) { e->by = PB_H - r; e->vy = -fabsf(e->vy) * e->restitution; }
        /* inlane walls from the sides down to the flipper pivots */
        pb_segment(e, 0.0f, 0.50f, PB_PIVOT[0][0], PB_PIVOT[0][1], 0, 0, 0);
        pb_segment(e, PB_W, 0.50f, PB_PIVOT[1][0], PB_PIVOT[1][1], 0, 0, 0);
        for (int s = 0; s < 2; s++) {
            float tx, ty;
            pb_flipper(e, s, &tx, &ty);
            pb_segment(e, PB_PIVOT[s][0], PB_PIVOT[s][1], tx, ty,
                PB_PIVOT[s][0], PB_PIVOT[s][1], e->flip_omega[s]);
        }
        for (int b = 0; b < PB_NUM_BUMPERS; b++) {
            float dx = e->bx - PB_BUMPERS[b][0], dy = e->by - PB_BUMPERS[b][1];
            float rr = e->ball_radius + e->bumper_radius;
            float d2 = dx * dx + dy * dy;
            if (d2 >= rr * rr || d2 < 1e-12f) continue;
            float d = sqrtf(d2);
            float nx = dx / d, ny = dy / d;
            e->bx = PB_BUMPERS[b][0] + nx * rr;
            e->by = PB_BUMPERS[b][1] + ny * rr;
            float vn = e->vx * nx + e->vy * ny;
            if (vn < 0) {
                e->vx -= 2.0f * vn * nx;
                e->vy -= 2.0f * vn * ny;
            }
            e->vx += nx * e->bumper_kick;
            e->vy += ny * e->bumper_kick;
            if (!points) points = (int)PB_BUMPERS[b][2];
        }
        float sp = sqrtf(e->vx * e->vx + e->vy * e->vy);
        if (sp > e->max_speed) {
            e->vx *= e->max_speed / sp;
            e->vy *= e->max_speed / sp;
        }
        if (e->by < -r) return -1;
    }
    return points;
}

static inline void env_step(Env* e) {
    int action = *e->actions;
    if (action < 0 || action >= NUM_ACTIONS) action = 0;
    float reward = 0;
    int done = 0;
    for (int f = 0; f < e->frameskip; f++) {
        int r = pb_frame(e, action);
        if (r > 0) {
            e->hits += r;
            reward += (float)r;
        } else if (r < 0) {
            reward -= 1.0f;
            e->drains++;
            e->balls_left--;
            pb_serve(e);
            break;
        }
    }
    e->steps++;
    e->episode_return += reward;
    if (e->balls_left <= 0 || e->steps >= e->max_steps) done = 1;
    *e->rewards = reward;
    *e->terminals = done ? 1.0f : 0.0f;
    if (done) {
        Log* l = &e->log;
        l->perf += (float)e->steps / (float)e->max_steps;
        l->score += (float)e->hits;
        l->episode_return += e->episode_return;
        l->episode_length += (float)e->steps;
        l->drains += (float)e->drains;
        l->n += 1.0f;
        env_reset(e);
    } else {
        pb_observe(e);
    }
}

static inline void env_close(Env* e) {
    (void)e;
}

#endif
