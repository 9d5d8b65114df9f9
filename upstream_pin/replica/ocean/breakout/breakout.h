/* breakout.h - Breakout for the puffer-harness replica (header-only).
 *
 * Self-contained: needs only the C standard library, so a test driver can
 * include it alone, init N envs, step them and read rewards and the Log.
 *
 * Env API shared by every replica env header:
 *   ENV_NAME, OBS_SIZE, NUM_ACTIONS          compile-time shape
 *   Log                                      all floats, perf first, n last
 *   ENV_LOG_NAMES[]                          one name per Log field, in order
 *   env_defaults(e)                          default parameters
 *   env_set_param(e, key, value)             1 if key is a parameter, else 0
 *   env_init(e, seed)                        allocate; point I/O at own storage
 *   env_reset(e) / env_step(e) / env_close(e)
 *   env_score_max(e)                         upper bound of Log.score
 *   env_reward_range(e, &lo, &hi)            bounds of one step's raw reward
 * I/O goes through e->observations (OBS_SIZE floats), e->actions (1 int),
 * e->rewards and e->terminals (1 float each); a trainer may repoint them
 * after env_init. env_step auto-resets a finished episode and adds it to
 * e->log (sums; divide by log.n for means).
 *
 * Game: a paddle, one ball and a wall of brick_rows x brick_cols bricks
 * worth 7/7/4/4/1/1 points by row (top row first). Each step runs
 * `frameskip` frames and at most one brick breaks per frame, so one step's
 * raw reward is in [0, 7 * frameskip] (28 by default) -- above the [-1, 1]
 * clamp a trainer applies. Clearing the first wall brings up a second one;
 * the episode ends when the balls run out or the score reaches twice the
 * wall's worth (864 for 6 x 18). perf = score / 864.
 */
#ifndef REPLICA_ENV_BREAKOUT_H
#define REPLICA_ENV_BREAKOUT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ENV_NAME "breakout"
#define OBS_SIZE 12
#define NUM_ACTIONS 3 /* 0 stay, 1 left, 2 right */

#define BO_MAX_BRICKS 256
#define BO_DT (1.0f / 60.0f)
#define BO_BALLS 5
#define BO_MAX_TICKS 60000 /* frames; a safety cap, never reached in practice */

typedef struct Log {
    float perf;
    float score;
    float episode_return;
    float episode_length;
    float n;
} Log;

static const char* const ENV_LOG_NAMES[] __attribute__((unused)) = {
    "perf", "score", "episode_return", "episode_length", "n",
};

typedef struct Env {
    /* parameters */
    int frameskip;
    float width, height;
    float initial_paddle_width, paddle_height;
    float ball_width, ball_height;
    float brick_width, brick_height;
    int brick_rows, brick_cols;
    float initial_ball_speed, max_ball_speed, paddle_speed;
    int continuous;
    int num_agents;
    /* state */
    float paddle_x, paddle_y, paddle_width;
    float ball_x, ball_y, ball_vx, ball_vy, ball_speed;
    int in_play;
    int balls_left;
    int hits;
    int walls_cleared;
    int top_touched;
    int bricks_left;
    int score;
    int wall_points;
    int ticks;      /* frames this episode */
    int steps;      /* steps this episode */
    float episode_return;
    unsigned char bricks[BO_MAX_BRICKS]; /* 1 = standing */
    uint32_t rng;
    /* I/O */
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

static inline uint32_t bo_rand(uint32_t* s) {
    uint32_t x = *s ? *s : 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

static inline float bo_uniform(uint32_t* s) {
    return (bo_rand(s) >> 8) * (1.0f / 16777216.0f);
}

static inline int bo_row_points(int row) {
    return 7 - 3 * (row / 2) > 1 ? 7 - 3 * (row / 2) : 1;
}

static inline void env_defaults(Env* e) {
    memset(e, 0, sizeof(*e));
    e->frameskip = 4;
    e->width = 576;
    e->height = 330;
    e->initial_paddle_width = 62;
    e->paddle_height = 8;
    e->ball_width = 10;
    e->ball_height = 10;
    e->brick_width = 32;
    e->brick_height = 12;
    e->brick_rows = 6;
    e->brick_cols = 18;
    e->initial_ball_speed = 256;
    e->max_ball_speed = 448;
    e->paddle_speed = 620;
    e->continuous = 0;
    e->num_agents = 1;
}

static inline int env_set_param(Env* e, const char* key, double v) {
    if (!strcmp(key, "frameskip")) e->frameskip = (int)v;
    else if (!strcmp(key, "width")) e->width = (float)v;
    else if (!strcmp(key, "height")) e->height = (float)v;
    else if (!strcmp(key, "initial_paddle_width")) e->initial_paddle_width = (float)v;
    else if (!strcmp(key, "paddle_width")) e->initial_paddle_width = (float)v;
    else if (!strcmp(key, "paddle_height")) e->paddle_height = (float)v;
    else if (!strcmp(key, "ball_width")) e->ball_width = (float)v;
    else if (!strcmp(key, "ball_height")) e->ball_height = (float)v;
    else if (!strcmp(key, "brick_width")) e->brick_width = (float)v;
    else if (!strcmp(key, "brick_height")) e->brick_height = (float)v;
    else if (!strcmp(key, "brick_rows")) e->brick_rows = (int)v;
    else if (!strcmp(key, "brick_cols")) e->brick_cols = (int)v;
    else if (!strcmp(key, "initial_ball_speed")) e->initial_ball_speed = (float)v;
    else if (!strcmp(key, "max_ball_speed")) e->max_ball_speed = (float)v;
    else if (!strcmp(key, "paddle_speed")) e->paddle_speed = (float)v;
    else if (!strcmp(key, "continuous")) e->continuous = (int)v;
    else if (!strcmp(key, "num_agents")) e->num_agents = (int)v;
    else return 0;
    return 1;
}

static inline float env_score_max(const Env* e) {
    int wall = 0;
    for (int r = 0; r < e->brick_rows; r++) wall += bo_row_points(r) * e->brick_cols;
    return 2.0f * wall;
}

static inline void env_reward_range(const Env* e, float* lo, float* hi) {
    *lo = 0.0f;
    *hi = 7.0f * (float)e->frameskip;
}

static inline void env_init(Env* e, unsigned int seed) {
    if (e->frameskip < 1) e->frameskip = 1;
    if (e->brick_rows * e->brick_cols > BO_MAX_BRICKS) {
        e->brick_rows = BO_MAX_BRICKS / (e->brick_cols > 0 ? e->brick_cols : 1);
    }
    e->rng = seed * 2654435761u + 12345u;
    e->wall_points = (int)(env_score_max(e) / 2);
    e->observations = e->own_obs;
    e->actions = &e->own_action;
    e->rewards = &e->own_reward;
    e->terminals = &e->own_terminal;
}

static inline void bo_new_ball(Env* e) {
    e->in_play = 0;
    e->hits = 0;
    e->ball_speed = e->initial_ball_speed;
    e->ball_x = e->width * 0.5f - e->ball_width * 0.5f;
    e->ball_y = e->height * 0.5f - 30.0f;
    e->ball_vx = 0;
    e->ball_vy = 0;
}

static inline void bo_fill_wall(Env* e) {
    int n = e->brick_rows * e->brick_cols;
    for (int i = 0; i < n; i++) e->bricks[i] = 1;
    e->bricks_left = n;
}

static inline void bo_observe(Env* e) {
    float* o = e->observations;
    float pc = e->paddle_x + 0.5f * e->paddle_width;
    float bcx = e->ball_x + 0.5f * e->ball_width;
    float bcy = e->ball_y + 0.5f * e->ball_height;
    float dx = (bcx - pc) / e->width;
    /* Where the ball will cross the paddle line, folded at the side walls. */
    float land = bcx;
    if (e->in_play && e->ball_vy > 0) {
        float t = (e->paddle_y - (e->ball_y + e->ball_height)) / e->ball_vy;
        if (t < 0) t = 0;
        float x = bcx + e->ball_vx * t;
        float span = 2.0f * e->width;
        x = fmodf(x, span);
        if (x < 0) x += span;
        land = x > e->width ? span - x : x;
    }
    float ldx = (land - pc) / e->width;
    float sharp = ldx * 8.0f;
    o[0] = pc / e->width;
    o[1] = bcx / e->width;
    o[2] = bcy / e->height;
    o[3] = e->ball_vx / e->max_ball_speed;
    o[4] = e->ball_vy / e->max_ball_speed;
    o[5] = dx;
    o[6] = ldx;
    o[7] = sharp > 1 ? 1 : (sharp < -1 ? -1 : sharp);
    o[8] = (float)e->balls_left / BO_BALLS;
    o[9] = (float)e->bricks_left / (float)(e->brick_rows * e->brick_cols);
    o[10] = e->paddle_width / e->initial_paddle_width;
    o[11] = (float)e->score / env_score_max(e);
}

static inline void env_reset(Env* e) {
    e->score = 0;
    e->balls_left = BO_BALLS;
    e->walls_cleared = 0;
    e->top_touched = 0;
    e->ticks = 0;
    e->steps = 0;
    e->episode_return = 0;
    e->paddle_width = e->initial_paddle_width;
    e->paddle_x = 0.5f * (e->width - e->paddle_width);
    e->paddle_y = e->height - e->paddle_height - 10.0f;
    bo_fill_wall(e);
    bo_new_ball(e);
    bo_observe(e);
}

static inline void bo_set_speed(Env* e, float speed) {
    float cur = sqrtf(e->ball_vx * e->ball_vx + e->ball_vy * e->ball_vy);
    e->ball_speed = speed;
    if (cur > 1e-6f) {
        e->ball_vx *= speed / cur;
        e->ball_vy *= speed / cur;
    }
}

/* Breaks at most one brick overlapped by the ball; returns its points. */
static inline int bo_bricks(Env* e) {
    float top = 50.0f;
    float x0 = e->ball_x, x1 = e->ball_x + e->ball_width;
    float y0 = e->ball_y, y1 = e->ball_y + e->ball_height;
    int r0 = (int)floorf((y0 - top) / e->brick_height);
    int r1 = (int)floorf((y1 - top) / e->brick_height);
    if (r1 < 0 || r0 >= e->brick_rows) return 0;
    if (r0 < 0) r0 = 0;
    if (r1 >= e->brick_rows) r1 = e->brick_rows - 1;
    int c0 = (int)floorf(x0 / e->brick_width);
    int c1 = (int)floorf(x1 / e->brick_width);
    if (c0 < 0) c0 = 0;
    if (c1 >= e->brick_cols) c1 = e->brick_cols - 1;
    /* Nearest row first in the direction of travel. */
    for (int k = 0; k <= r1 - r0; k++) {
        int r = e->ball_vy < 0 ? r1 - k : r0 + k;
        for (int c = c0; c <= c1; c++) {
            int idx = r * e->brick_cols + c;
            if (!e->bricks[idx]) continue;
            float bx0 = c * e->brick_width, bx1 = bx0 + e->brick_width;
            float by0 = top + r * e->brick_height, by1 = by0 + e->brick_height;
            float ox = fminf(x1, bx1) - fmaxf(x0, bx0);
            float oy = fminf(y1, by1) - fmaxf(y0, by0);
            if (ox <= 0 || oy <= 0) continue;
            e->bricks[idx] = 0;
            e->bricks_left--;
            if (ox < oy) {
                e->ball_vx = -e->ball_vx;
                e->ball_x += e->ball_vx > 0 ? ox : -ox;
            } else {
                e->ball_vy = -e->ball_vy;
                e->ball_y += e->ball_vy > 0 ? oy : -oy;
            }
            if (r < 3 && e->ball_speed < e->max_ball_speed) bo_set_speed(e, e->max_ball_speed);
            return bo_row_points(r);
        }
    }
    return 0;
}

/* One frame. Returns the points scored; sets *lost when a ball drops. */
static inline int bo_frame(Env* e, int action, int* lost) {
    float move = action == 1 ? -1.0f : (action == 2 ? 1.0f : 0.0f);
    e->paddle_x += move * e->paddle_speed * BO_DT;
    if (e->paddle_x < 0) e->paddle_x = 0;
    if (e->paddle_x > e->width - e->paddle_width) e->paddle_x = e->width - e->paddle_width;
    if (!e->in_play) {
        float angle = 0.35f + 0.45f * bo_uniform(&e->rng);
        float sign = (bo_rand(&e->rng) & 1) ? 1.0f : -1.0f;
        e->ball_vx = sign * sinf(angle) * e->ball_speed;
        e->ball_vy = cosf(angle) * e->ball_speed;
        e->in_play = 1;
    }
    float prev_bottom = e->ball_y + e->ball_height;
    e->ball_x += e->ball_vx * BO_DT;
    e->ball_y += e->ball_vy * BO_DT;
    if (e->ball_x < 0) {
        e->ball_x = -e->ball_x;
        e->ball_vx = fabsf(e->ball_vx);
    } else if (e->ball_x + e->ball_width > e->width) {
        e->ball_x = 2.0f * (e->width - e->ball_width) - e->ball_x;
        e->ball_vx = -fabsf(e->ball_vx);
    }
    if (e->ball_y < 0) {
        e->ball_y = -e->ball_y;
        e->ball_vy = fabsf(e->ball_vy);
        if (!e->top_touched) {
            e->top_touched = 1;
            float c = e->paddle_x + 0.5f * e->paddle_width;
            e->paddle_width = 0.5f * e->initial_paddle_width;
            e->paddle_x = c - 0.5f * e->paddle_width;
        }
    }
    int points = bo_bricks(e);
    if (points && e->bricks_left == 0 && e->walls_cleared == 0) {
        e->walls_cleared = 1;
        bo_fill_wall(e);
    }
    float bottom = e->ball_y + e->ball_height;
    if (e->ball_vy > 0 && bottom >= e->paddle_y && prev_bottom <= e->paddle_y + e->paddle_height) {
        float bc = e->ball_x + 0.5f * e->ball_width;
        if (bc >= e->paddle_x - 0.5f * e->ball_width &&
                bc <= e->paddle_x + e->paddle_width + 0.5f * e->ball_width) {
            float rel = (bc - e->paddle_x) / e->paddle_width;
            if (rel < 0) rel = 0;
            if (rel > 1) rel = 1;
            float angle = (-0.25f + 0.5f * rel) * 3.14159265f; /* -45..45 deg */
            e->hits++;
            if (e->hits % 4 == 0 && e->ball_speed < e->max_ball_speed) {
                e->ball_speed = fminf(e->ball_speed + 64.0f, e->max_ball_speed);
            }
            e->ball_vx = sinf(angle) * e->ball_speed;
            e->ball_vy = -cosf(angle) * e->ball_speed;
            e->ball_y = e->paddle_y - e->ball_height;
        }
    }
    if (e->ball_y > e->paddle_y + e->paddle_height) {
        *lost = 1;
        e->balls_left--;
        bo_new_ball(e);
    }
    return points;
}

static inline void bo_finish(Env* e) {
    Log* l = &e->log;
    l->perf += (float)e->score / env_score_max(e);
    l->score += (float)e->score;
    l->episode_return += e->episode_return;
    l->episode_length += (float)e->steps;
    l->n += 1.0f;
}

static inline void env_step(Env* e) {
    int action = *e->actions;
    if (action < 0 || action >= NUM_ACTIONS) action = 0;
    float reward = 0;
    int done = 0;
    for (int f = 0; f < e->frameskip && !done; f++) {
        int lost = 0;
        e->ticks++;
        int points = bo_frame(e, action, &lost);
        e->score += points;
        reward += (float)points;
        if (e->balls_left <= 0 || e->score >= (int)env_score_max(e) || e->ticks >= BO_MAX_TICKS) {
            done = 1;
        }
    }
    e->steps++;
    e->episode_return += reward;
    *e->rewards = reward;
    *e->terminals = done ? 1.0f : 0.0f;
    if (done) {
        bo_finish(e);
        env_reset(e);
    } else {
        bo_observe(e);
    }
}

static inline void env_close(Env* e) {
    (void)e;
}

#endif
