/* dashboard.h - the replica's per-epoch dashboard, laid out like the
 * PufferLib 5.0 trainer's non-tty dashboard: an 80-column box drawn with
 * Unicode box characters, a header line with a moving puffer fish and the
 * GPU/VRAM/RAM figures, seven summary rows (Env/Params/Steps/SPS/Epoch/
 * Uptime/To go) beside the timing and loss columns, then up to 30 env
 * values two per row with the "env/" prefix stripped. The replica appends
 * its reward values after the env values in the same two-column area,
 * labelled with the full key (e.g. "reward/raw_max"): a label containing
 * '/' is a full log key, a label without one is an env key.
 *
 * The frame is composed in memory and written with one write, so a read
 * that exits leaves nothing of that frame on stdout. No ANSI codes are
 * written (the replica only produces the non-tty form).
 */
#ifndef REPLICA_DASHBOARD_H
#define REPLICA_DASHBOARD_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DASH_W 80
#define DASH_MAX_VALUES 30

typedef struct {
    const char* env_name;
    double params;
    long total_timesteps;
    long batch;  /* agents * horizon: steps per epoch */
    int frame;   /* moves the fish */
} Dashboard;

/* ---- log reads ---------------------------------------------------------
 * The dashboard reads uptime, agent_steps and the four util keys through
 * dash_get(). Stock: the strict getter, so a missing key prints
 * "missing key [?] <key>" and exits 1 before anything of the frame is
 * written. With REPLICA_GUARDED_READS a missing key reads as NAN: the
 * value shows as n/a, and a log without uptime (no epoch trained yet) is
 * not drawn at all. */
static double dash_get(const Dict* log, const char* key) {
#ifdef REPLICA_GUARDED_READS
    return dict_get_default(log, key, NAN);
#else
    return dict_get(log, key);
#endif
}
/* ---- end of log reads -------------------------------------------------- */

typedef struct {
    char* data;
    size_t len, cap;
} Frame;

static void frame_put(Frame* f, const char* fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof(tmp)) n = sizeof(tmp) - 1;
    if (f->len + (size_t)n + 1 > f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8192;
        while (cap < f->len + (size_t)n + 1) cap *= 2;
        char* grown = (char*)realloc(f->data, cap);
        if (!grown) return;
        f->data = grown;
        f->cap = cap;
    }
    memcpy(f->data + f->len, tmp, (size_t)n);
    f->len += (size_t)n;
    f->data[f->len] = 0;
}

/* Right-aligned in w columns; longer text is cut to its first w chars. */
static void frame_cell(Frame* f, const char* s, int w) {
    int n = (int)strlen(s);
    if (n > w) n = w;
    frame_put(f, "%*s%.*s", w - n, "", n, s);
}

static void frame_rule(Frame* f, const char* left, const char* right) {
    frame_put(f, "%s", left);
    for (int i = 0; i < DASH_W - 2; i++) frame_put(f, "─");
    frame_put(f, "%s\n", right);
}

static void frame_blank(Frame* f) {
    frame_put(f, "│%*s│\n", DASH_W - 2, "");
}

/* 1234567 -> "1.2M" */
static void fmt_abbrev(char* out, size_t n, double v) {
    if (isnan(v)) {
        snprintf(out, n, "n/a");
        return;
    }
    const char* suffix[] = {"", "K", "M", "B", "T"};
    int i = 0;
    while (fabs(v) >= 1000.0 && i < 4) {
        v /= 1000.0;
        i++;
    }
    snprintf(out, n, "%.1f%s", v, suffix[i]);
}

/* seconds -> "250ms", "5s 250ms", "2m 05s 250ms", "1d 2h 3m 4s" */
static void fmt_duration(char* out, size_t n, double sec) {
    if (isnan(sec)) {
        snprintf(out, n, "n/a");
        return;
    }
    if (sec < 0) sec = 0;
    long ms = (long)(sec * 1000.0 + 0.5);
    if (ms < 1000) {
        snprintf(out, n, "%ldms", ms);
    } else if (ms < 60000) {
        snprintf(out, n, "%lds %03ldms", ms / 1000, ms % 1000);
    } else if (ms < 3600000) {
        snprintf(out, n, "%ldm %02lds %03ldms", ms / 60000, (ms / 1000) % 60, ms % 1000);
    } else {
        long s = ms / 1000;
        snprintf(out, n, "%ldd %ldh %ldm %lds", s / 86400, (s / 3600) % 24, (s / 60) % 60, s % 60);
    }
}

static double opt_num(const Dict* log, const char* key, double fallback) {
    return dict_get_default(log, key, fallback);
}

static void dashboard_print(Dashboard* d, const Dict* log) {
    double uptime = dash_get(log, "uptime");
    double steps = dash_get(log, "agent_steps");
    if (isnan(uptime)) return; /* guarded build, nothing trained yet */
    double gpu = dash_get(log, "util/gpu_percent");
    double vram_used = dash_get(log, "util/vram_used_gb");
    double vram_total = dash_get(log, "util/vram_total_gb");
    double ram = dash_get(log, "util/cpu_mem_gb");

    double sps = opt_num(log, "SPS", 0);
    double target = (double)((d->total_timesteps / d->batch) * d->batch);
    double remain = sps > 0 && target > steps ? (target - steps) / sps : 0;
    double rollout = opt_num(log, "perf/rollout", 0);
    double train = opt_num(log, "perf/train", 0);
    double perf_total = rollout + train;

    char params[32], steps_s[32], sps_s[32], up_s[64], remain_s[64], epoch_s[32];
    fmt_abbrev(params, sizeof(params), d->params);
    fmt_abbrev(steps_s, sizeof(steps_s), steps);
    fmt_abbrev(sps_s, sizeof(sps_s), sps);
    fmt_duration(up_s, sizeof(up_s), uptime);
    fmt_duration(remain_s, sizeof(remain_s), remain);
    snprintf(epoch_s, sizeof(epoch_s), "%d", (int)opt_num(log, "epoch", 0));

    char gpu_s[16], vram_s[32], ram_s[16];
    if (isnan(gpu)) snprintf(gpu_s, sizeof(gpu_s), "n/a");
    else snprintf(gpu_s, sizeof(gpu_s), "%3.0f%%", gpu);
    if (isnan(vram_used) || isnan(vram_total)) snprintf(vram_s, sizeof(vram_s), "n/a");
    else snprintf(vram_s, sizeof(vram_s), "%.1f/%.0fG", vram_used, vram_total);
    if (isnan(ram)) snprintf(ram_s, sizeof(ram_s), "n/a");
    else snprintf(ram_s, sizeof(ram_s), "%.1fG", ram);

    const int span = 18;
    int fish = (span - 3) - (d->frame++ % (span - 2));

    Frame f = {0};
    frame_rule(&f, "╭", "╮");
    frame_put(&f, "│ PufferLib 5.0%*s🐡%*sGPU: ", fish, "", span - 2 - fish, "");
    frame_cell(&f, gpu_s, 4);
    frame_put(&f, "   VRAM:");
    frame_cell(&f, vram_s, 10);
    frame_put(&f, "    RAM:");
    frame_cell(&f, ram_s, 6);
    frame_put(&f, "     │\n");
    frame_blank(&f);

    struct {
        const char* label;
        const char* value;
        const char* timer;
        const char* timer_key; /* NULL: use seconds */
        double seconds;
        const char* loss;
        const char* loss_key;
    } rows[] = {
        {"Env", d->env_name, "Evaluate", NULL, rollout, "Losses", "loss/total"},
        {"Params", params, "  Model", "perf/eval_model", 0, "policy", "loss/policy"},
        {"Steps", steps_s, "  Env", "perf/eval_env", 0, "value", "loss/value"},
        {"SPS", sps_s, "  Copy", "perf/eval_copy", 0, "entropy", "loss/entropy"},
        {"Epoch", epoch_s, "Train", NULL, train, "old_kl", "loss/old_kl"},
        {"Uptime", up_s, "  Model", "perf/train_model", 0, "kl", "loss/kl"},
        {"To go", remain_s, "  Misc", "perf/train_misc", 0, "clipfrac", "loss/clipfrac"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        double sec = rows[i].timer_key ? opt_num(log, rows[i].timer_key, 0) : rows[i].seconds;
        char t_s[64], pct_s[16], loss_s[32];
        fmt_duration(t_s, sizeof(t_s), sec);
        snprintf(pct_s, sizeof(pct_s), "%d%%", perf_total > 0 ? (int)(100.0 * sec / perf_total) : 0);
        const Entry* le = dict_lookup(log, rows[i].loss_key);
        if (le) snprintf(loss_s, sizeof(loss_s), "%.3f", le->num);
        else loss_s[0] = 0;
        frame_put(&f, "│ %-9.9s ", rows[i].label);
        frame_cell(&f, rows[i].value, 13);
        frame_put(&f, "    %-12.12s ", rows[i].timer);
        frame_cell(&f, t_s, 6);
        frame_put(&f, " ");
        frame_cell(&f, pct_s, 4);
        frame_put(&f, "    %-10.10s ", rows[i].loss);
        frame_cell(&f, loss_s, 7);
        frame_put(&f, "    │\n");
    }
    frame_blank(&f);

    /* env values (prefix stripped, env/n left out), then the reward values */
    const char* names[DASH_MAX_VALUES];
    double values[DASH_MAX_VALUES];
    int shown = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < log->count && shown < DASH_MAX_VALUES; i++) {
            const char* key = log->entries[i].key;
            if (pass == 0) {
                if (strncmp(key, "env/", 4) != 0 || strcmp(key, "env/n") == 0) continue;
                names[shown] = key + 4;
            } else {
                if (strncmp(key, "reward/", 7) != 0) continue;
                names[shown] = key;
            }
            values[shown++] = log->entries[i].num;
        }
    }
    for (int i = 0; i < shown; i += 2) {
        char ls[32], rs[32];
        snprintf(ls, sizeof(ls), "%.3f", values[i]);
        if (i + 1 < shown) {
            snprintf(rs, sizeof(rs), "%.3f", values[i + 1]);
            frame_put(&f, "│ %-25.25s %9.9s   %-25.25s %9.9s    │\n",
                names[i], ls, names[i + 1], rs);
        } else {
            frame_put(&f, "│ %-25.25s %9.9s   %-25.25s %9.9s    │\n", names[i], ls, "", "");
        }
    }
    frame_rule(&f, "╰", "╯");
    if (f.data) {
        fwrite(f.data, 1, f.len, stdout);
        fflush(stdout);
        free(f.data);
    }
}

#endif
