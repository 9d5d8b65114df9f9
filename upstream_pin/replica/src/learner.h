/* learner.h - a small, real PPO learner for the replica.
 *
 * Policy: linear softmax over the env's observation (plus a bias input).
 * Value: a linear head on the same input. Gradients are written by hand.
 * Update: GAE(gamma, lambda) advantages, PPO clipped surrogate (clip_coef),
 * clipped value loss (vf_clip_coef), entropy bonus (ent_coef), global
 * gradient-norm clipping (max_grad_norm), Adam (beta1, beta2, eps), for
 * update_epochs passes over shuffled minibatches.
 *
 * Everything here runs on the calling (main) thread, with no OpenMP: the
 * only OpenMP regions of the trainer are the two in vecenv.h.
 */
#ifndef REPLICA_LEARNER_H
#define REPLICA_LEARNER_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define IN_SIZE (OBS_SIZE + 1) /* observation + bias */
#define POLICY_PARAMS (NUM_ACTIONS * IN_SIZE)
#define NUM_PARAMS (POLICY_PARAMS + IN_SIZE)

typedef struct {
    float w[NUM_PARAMS]; /* [NUM_ACTIONS][IN_SIZE] policy, then [IN_SIZE] value */
    float m[NUM_PARAMS];
    float v[NUM_PARAMS];
    long adam_t;
} Model;

typedef struct {
    float learning_rate, gamma, gae_lambda, clip_coef, vf_coef, vf_clip_coef;
    float ent_coef, max_grad_norm, beta1, beta2, eps;
    int update_epochs, minibatch_size;
} TrainParams;

typedef struct {
    double policy, value, entropy, total, old_kl, kl, clipfrac;
} Losses;

static inline uint64_t rng_next(uint64_t* s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline float rng_uniform(uint64_t* s) {
    return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0));
}

static void model_init(Model* m, uint64_t* rng) {
    memset(m, 0, sizeof(*m));
    for (int i = 0; i < POLICY_PARAMS; i++) {
        m->w[i] = 0.01f * (rng_uniform(rng) * 2.0f - 1.0f);
    }
}

/* logits[NUM_ACTIONS] and the value for one input row x[IN_SIZE]. */
static inline float model_forward(const Model* m, const float* x, float* logits) {
    for (int a = 0; a < NUM_ACTIONS; a++) {
        const float* w = &m->w[a * IN_SIZE];
        float z = 0;
        for (int k = 0; k < IN_SIZE; k++) z += w[k] * x[k];
        logits[a] = z;
    }
    const float* u = &m->w[POLICY_PARAMS];
    float v = 0;
    for (int k = 0; k < IN_SIZE; k++) v += u[k] * x[k];
    return v;
}

/* In place: logits -> log-probabilities. */
static inline void log_softmax(float* z) {
    float mx = z[0];
    for (int a = 1; a < NUM_ACTIONS; a++) mx = z[a] > mx ? z[a] : mx;
    float s = 0;
    for (int a = 0; a < NUM_ACTIONS; a++) s += expf(z[a] - mx);
    float lse = mx + logf(s);
    for (int a = 0; a < NUM_ACTIONS; a++) z[a] -= lse;
}

/* Samples an action from obs; returns it and writes its logprob and value. */
static inline int model_act(const Model* m, const float* obs, uint64_t* rng,
        float* logprob, float* value) {
    float x[IN_SIZE];
    memcpy(x, obs, OBS_SIZE * sizeof(float));
    x[OBS_SIZE] = 1.0f;
    float lp[NUM_ACTIONS];
    *value = model_forward(m, x, lp);
    log_softmax(lp);
    float u = rng_uniform(rng);
    int act = NUM_ACTIONS - 1;
    float c = 0;
    for (int a = 0; a < NUM_ACTIONS; a++) {
        c += expf(lp[a]);
        if (u < c) {
            act = a;
            break;
        }
    }
    *logprob = lp[act];
    return act;
}

/* GAE over a rollout stored time-major: [H][N]. rewards[t], terms[t] are
 * what arrived at step t (the result of the action at t-1). Rows t < H-1
 * get advantages; the last row only bootstraps. */
static void compute_gae(int H, int N, const float* values, const float* rewards,
        const float* terms, float gamma, float lambda, float* adv, float* ret) {
    for (int n = 0; n < N; n++) {
        float last = 0;
        adv[(size_t)(H - 1) * N + n] = 0;
        ret[(size_t)(H - 1) * N + n] = values[(size_t)(H - 1) * N + n];
        for (int t = H - 2; t >= 0; t--) {
            size_t i = (size_t)t * N + n, j = (size_t)(t + 1) * N + n;
            float nonterm = 1.0f - terms[j];
            float delta = rewards[j] + gamma * values[j] * nonterm - values[i];
            last = delta + gamma * lambda * nonterm * last;
            adv[i] = last;
            ret[i] = last + values[i];
        }
    }
}

/* One PPO update over `count` samples (indices into the flat rollout).
 * obs: [*][OBS_SIZE]. Returns mean losses over all minibatches. */
static Losses ppo_update(Model* m, const TrainParams* tp, float lr, int count,
        int* order, const float* obs, const int* actions, const float* old_logprob,
        const float* old_value, const float* adv, const float* ret, uint64_t* rng,
        double* model_seconds, double (*clock_fn)(void)) {
    Losses out = {0};
    int batches = 0;
    int mb = tp->minibatch_size < count ? tp->minibatch_size : count;
    if (mb < 1) mb = 1;
    static float grad[NUM_PARAMS];
    for (int epoch = 0; epoch < tp->update_epochs; epoch++) {
        for (int i = count - 1; i > 0; i--) {
            int j = (int)(rng_next(rng) % (uint64_t)(i + 1));
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int start = 0; start + mb <= count; start += mb) {
            double t0 = clock_fn();
            const int* idx = &order[start];
            double asum = 0, asq = 0;
            for (int s = 0; s < mb; s++) {
                double a = adv[idx[s]];
                asum += a;
                asq += a * a;
            }
            float amean = (float)(asum / mb);
            float astd = (float)sqrt(fmax(asq / mb - (asum / mb) * (asum / mb), 0.0)) + 1e-8f;
            memset(grad, 0, sizeof(grad));
            double pg_sum = 0, v_sum = 0, ent_sum = 0, okl = 0, kl = 0, cf = 0;
            float inv = 1.0f / (float)mb;
            for (int s = 0; s < mb; s++) {
                int k = idx[s];
                float x[IN_SIZE];
                memcpy(x, &obs[(size_t)k * OBS_SIZE], OBS_SIZE * sizeof(float));
                x[OBS_SIZE] = 1.0f;
                float lp[NUM_ACTIONS];
                float v = model_forward(m, x, lp);
                log_softmax(lp);
                int act = actions[k];
                float p[NUM_ACTIONS];
                float ent = 0;
                for (int a = 0; a < NUM_ACTIONS; a++) {
                    p[a] = expf(lp[a]);
                    ent -= p[a] * lp[a];
                }
                float logratio = lp[act] - old_logprob[k];
                float ratio = expf(logratio);
                float A = (adv[k] - amean) / astd;
                float c = tp->clip_coef;
                float rc = ratio < 1.0f - c ? 1.0f - c : (ratio > 1.0f + c ? 1.0f + c : ratio);
                float l1 = -A * ratio, l2 = -A * rc;
                float pg = l1 > l2 ? l1 : l2;
                /* d pg / d logp(act): only the unclipped branch has a gradient */
                float dlogp = l1 >= l2 ? -A * ratio : 0.0f;
                /* clipped value loss */
                float R = ret[k], ov = old_value[k];
                float dv = v - ov;
                float vc = tp->vf_clip_coef;
                float vclip = ov + (dv < -vc ? -vc : (dv > vc ? vc : dv));
                float e1 = (v - R) * (v - R), e2 = (vclip - R) * (vclip - R);
                float vl = 0.5f * (e1 > e2 ? e1 : e2);
                float dvalue;
                if (e1 >= e2) dvalue = v - R;
                else dvalue = (dv > -vc && dv < vc) ? (vclip - R) : 0.0f;
                /* gradient of total = pg + vf_coef * vl - ent_coef * ent */
                for (int a = 0; a < NUM_ACTIONS; a++) {
                    float dz = dlogp * ((a == act ? 1.0f : 0.0f) - p[a]);
                    dz += tp->ent_coef * p[a] * (lp[a] + ent); /* -ent_coef * dH/dz */
                    dz *= inv;
                    float* g = &grad[a * IN_SIZE];
                    for (int q = 0; q < IN_SIZE; q++) g[q] += dz * x[q];
                }
                float dvs = tp->vf_coef * dvalue * inv;
                float* gv = &grad[POLICY_PARAMS];
                for (int q = 0; q < IN_SIZE; q++) gv[q] += dvs * x[q];
                pg_sum += pg;
                v_sum += vl;
                ent_sum += ent;
                okl += -logratio;
                kl += (ratio - 1.0f) - logratio;
                cf += fabsf(ratio - 1.0f) > c ? 1.0 : 0.0;
            }
            /* global grad-norm clip, then Adam */
            double norm2 = 0;
            for (int q = 0; q < NUM_PARAMS; q++) norm2 += (double)grad[q] * grad[q];
            double norm = sqrt(norm2);
            float scale = norm > tp->max_grad_norm && norm > 0 ? (float)(tp->max_grad_norm / norm) : 1.0f;
            m->adam_t++;
            float bc1 = 1.0f - powf(tp->beta1, (float)m->adam_t);
            float bc2 = 1.0f - powf(tp->beta2, (float)m->adam_t);
            for (int q = 0; q < NUM_PARAMS; q++) {
                float g = grad[q] * scale;
                m->m[q] = tp->beta1 * m->m[q] + (1.0f - tp->beta1) * g;
                m->v[q] = tp->beta2 * m->v[q] + (1.0f - tp->beta2) * g * g;
                float mh = m->m[q] / bc1, vh = m->v[q] / bc2;
                m->w[q] -= lr * mh / (sqrtf(vh) + tp->eps);
            }
            double pgm = pg_sum / mb, vm = v_sum / mb, em = ent_sum / mb;
            out.policy += pgm;
            out.value += vm;
            out.entropy += em;
            out.total += pgm + tp->vf_coef * vm - tp->ent_coef * em;
            out.old_kl += okl / mb;
            out.kl += kl / mb;
            out.clipfrac += cf / mb;
            batches++;
            *model_seconds += clock_fn() - t0;
        }
    }
    if (batches) {
        out.policy /= batches;
        out.value /= batches;
        out.entropy /= batches;
        out.total /= batches;
        out.old_kl /= batches;
        out.kl /= batches;
        out.clipfrac /= batches;
    }
    return out;
}

#endif
