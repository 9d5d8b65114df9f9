/* ini.h - the replica's key/value store and ini reader.
 *
 * Written for puffer-harness. A Dict is an ordered list of (key, number,
 * optional text) entries; it holds both the configuration sections and the
 * per-epoch training log. An Ini is a list of named Dicts (one per section).
 *
 * Getters come in two flavours, which matters for the hang investigation:
 *   dict_get()          strict: a missing key prints "missing key [sec] key"
 *                       on stderr and exits 1 (sec is "?" for unnamed dicts,
 *                       such as the training log).
 *   dict_get_default()  guarded: a missing key returns the given fallback.
 */
#ifndef REPLICA_INI_H
#define REPLICA_INI_H

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DICT_KEY_LEN 128

typedef struct {
    char key[DICT_KEY_LEN];
    double num;   /* numeric value (0 when the text is not a number) */
    char* text;   /* original text for config entries, NULL for log entries */
} Entry;

typedef struct {
    char name[64];  /* section name; empty for anonymous dicts (the log) */
    Entry* entries;
    int count;
    int capacity;
} Dict;

typedef struct {
    Dict* sections;
    int count;
} Ini;

static void die_oom(void) {
    fprintf(stderr, "out of memory\n");
    exit(1);
}

static char* text_copy(const char* s) {
    size_t n = strlen(s) + 1;
    char* out = (char*)malloc(n);
    if (!out) die_oom();
    memcpy(out, s, n);
    return out;
}

static Entry* dict_lookup(const Dict* d, const char* key) {
    for (int i = 0; i < d->count; i++) {
        if (strcmp(d->entries[i].key, key) == 0) return &d->entries[i];
    }
    return NULL;
}

static Entry* dict_slot(Dict* d, const char* key) {
    Entry* e = dict_lookup(d, key);
    if (e) return e;
    if (strlen(key) >= DICT_KEY_LEN) {
        fprintf(stderr, "key too long: %s\n", key);
        exit(1);
    }
    if (d->count == d->capacity) {
        int cap = d->capacity ? d->capacity * 2 : 16;
        Entry* grown = (Entry*)realloc(d->entries, (size_t)cap * sizeof(Entry));
        if (!grown) die_oom();
        d->entries = grown;
        d->capacity = cap;
    }
    e = &d->entries[d->count++];
    memset(e, 0, sizeof(*e));
    snprintf(e->key, sizeof(e->key), "%s", key);
    return e;
}

static void dict_set(Dict* d, const char* key, double value) {
    Entry* e = dict_slot(d, key);
    free(e->text);
    e->text = NULL;
    e->num = value;
}

/* Strict getter: the key must be there. */
static double dict_get(const Dict* d, const char* key) {
    const Entry* e = dict_lookup(d, key);
    if (!e) {
        fprintf(stderr, "missing key [%s] %s\n", d->name[0] ? d->name : "?", key);
        exit(1);
    }
    return e->num;
}

/* Guarded getter: a missing key gives `fallback`. */
static double dict_get_default(const Dict* d, const char* key, double fallback) {
    const Entry* e = dict_lookup(d, key);
    return e ? e->num : fallback;
}

static void dict_free(Dict* d) {
    for (int i = 0; i < d->count; i++) free(d->entries[i].text);
    free(d->entries);
    d->entries = NULL;
    d->count = d->capacity = 0;
}

static inline void dict_clone(Dict* dst, const Dict* src) {
    memset(dst, 0, sizeof(*dst));
    memcpy(dst->name, src->name, sizeof(dst->name));
    for (int i = 0; i < src->count; i++) {
        Entry* e = dict_slot(dst, src->entries[i].key);
        e->num = src->entries[i].num;
        e->text = src->entries[i].text ? text_copy(src->entries[i].text) : NULL;
    }
}

/* ---- parsing ---------------------------------------------------------- */

/* Numbers may contain '_' separators (94_000_000); true/false are 1/0. */
static int parse_number(const char* raw, double* out) {
    if (strcasecmp(raw, "true") == 0) { *out = 1; return 1; }
    if (strcasecmp(raw, "false") == 0) { *out = 0; return 1; }
    char clean[128];
    size_t n = 0;
    for (const char* p = raw; *p && n + 1 < sizeof(clean); p++) {
        if (*p != '_') clean[n++] = *p;
    }
    clean[n] = 0;
    if (!n) return 0;
    char* end = NULL;
    double v = strtod(clean, &end);
    if (end == clean || *end) return 0;
    *out = v;
    return 1;
}

static void dict_set_text(Dict* d, const char* key, const char* raw) {
    Entry* e = dict_slot(d, key);
    free(e->text);
    e->text = text_copy(raw);
    double v = 0;
    e->num = parse_number(raw, &v) ? v : 0;
}

static Dict* ini_find(Ini* ini, const char* name) {
    for (int i = 0; i < ini->count; i++) {
        if (strcmp(ini->sections[i].name, name) == 0) return &ini->sections[i];
    }
    return NULL;
}

static Dict* ini_section(Ini* ini, const char* name) {
    Dict* d = ini_find(ini, name);
    if (d) return d;
    Dict* grown = (Dict*)realloc(ini->sections, (size_t)(ini->count + 1) * sizeof(Dict));
    if (!grown) die_oom();
    ini->sections = grown;
    d = &ini->sections[ini->count++];
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", name);
    return d;
}

static char* trim(char* s) {
    while (isspace((unsigned char)*s)) s++;
    char* e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* Reads `path` into `ini`; later files override earlier values. Comments
 * start with '#' or ';'. Values may be quoted. Returns 0 if unreadable. */
static int ini_load(Ini* ini, const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    Dict* section = NULL;
    int lineno = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        for (char* p = line; *p; p++) {
            if (*p == '#' || *p == ';') { *p = 0; break; }
        }
        char* s = trim(line);
        if (!*s) continue;
        size_t n = strlen(s);
        if (s[0] == '[') {
            if (s[n - 1] != ']') {
                fprintf(stderr, "%s:%d: bad section header\n", path, lineno);
                exit(1);
            }
            s[n - 1] = 0;
            section = ini_section(ini, trim(s + 1));
            continue;
        }
        char* eq = strchr(s, '=');
        if (!eq || !section) {
            fprintf(stderr, "%s:%d: expected key = value inside a section\n", path, lineno);
            exit(1);
        }
        *eq = 0;
        char* key = trim(s);
        char* val = trim(eq + 1);
        size_t vn = strlen(val);
        if (vn >= 2 && (val[0] == '\'' || val[0] == '"') && val[vn - 1] == val[0]) {
            val[vn - 1] = 0;
            val++;
        }
        dict_set_text(section, key, val);
    }
    fclose(f);
    return 1;
}

/* Strict config read: "missing key [section] key" and exit 1. */
static double ini_get(Ini* ini, const char* section, const char* key) {
    Dict* d = ini_find(ini, section);
    if (!d) {
        fprintf(stderr, "missing key [%s] %s\n", section, key);
        exit(1);
    }
    return dict_get(d, key);
}

static const char* ini_get_text(Ini* ini, const char* section, const char* key) {
    Dict* d = ini_find(ini, section);
    Entry* e = d ? dict_lookup(d, key) : NULL;
    if (!e) {
        fprintf(stderr, "missing key [%s] %s\n", section, key);
        exit(1);
    }
    return e->text ? e->text : "";
}

/* Applies one command-line flag. Accepted form: --section.key=value, with
 * dashes turned into underscores; the key must already exist in the loaded
 * config. A flag without '=' is refused (no space-separated values). */
static void ini_apply_flag(Ini* ini, const char* arg) {
    if (strncmp(arg, "--", 2) != 0) {
        fprintf(stderr, "unexpected argument '%s': flags must look like --section.key=value\n", arg);
        exit(1);
    }
    const char* eq = strchr(arg, '=');
    if (!eq) {
        fprintf(stderr, "flag '%s' has no value: use --section.key=value "
            "(the space-separated form is not accepted)\n", arg);
        exit(1);
    }
    char name[512];
    size_t n = (size_t)(eq - (arg + 2));
    if (n == 0 || n >= sizeof(name)) {
        fprintf(stderr, "bad flag '%s'\n", arg);
        exit(1);
    }
    memcpy(name, arg + 2, n);
    name[n] = 0;
    for (char* p = name; *p; p++) {
        if (*p == '-') *p = '_';
    }
    const char* section = "base";
    char* key = name;
    char* dot = strrchr(name, '.');
    if (dot) {
        *dot = 0;
        section = name;
        key = dot + 1;
    }
    Dict* d = ini_find(ini, section);
    if (!d || !dict_lookup(d, key)) {
        fprintf(stderr, "missing key [%s] %s\n", section, key);
        exit(1);
    }
    dict_set_text(d, key, eq + 1);
}

static void ini_write(FILE* f, Ini* ini) {
    for (int s = 0; s < ini->count; s++) {
        Dict* d = &ini->sections[s];
        fprintf(f, "[%s]\n", d->name);
        for (int i = 0; i < d->count; i++) {
            Entry* e = &d->entries[i];
            if (e->text) fprintf(f, "%s = %s\n", e->key, e->text);
            else fprintf(f, "%s = %.17g\n", e->key, e->num);
        }
        fputc('\n', f);
    }
}

#endif
