/* cpuinfo.h - the processor a C benchmark ran on, read from /proc/cpuinfo (Linux): its name, CPU
 * family and model numbers (a virtual machine often names itself only "AMD EPYC", which tells
 * neither the generation nor how 512-bit instructions run), logical CPUs and flags. The C twin
 * of bench/cpuinfo.py, so every report's CPU line says the same. Shared by the benchmark
 * programs; header-only. */
#ifndef NNT_BENCH_CPUINFO_H
#define NNT_BENCH_CPUINFO_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_cpu {
    char name[256];     /* "model name", or "unknown CPU" */
    int family, model;  /* "cpu family" and "model"; -1 when absent */
    int cpus;           /* logical CPUs ("processor" lines) */
    double mhz;         /* "cpu MHz" of the first CPU, 0 when absent */
    char flags[8192];   /* the first CPU's flags, space-separated, with a space at each end */
} bench_cpu;

/* Fills *c from /proc/cpuinfo; fields it does not find keep their "unknown" values. */
static void bench_cpu_read(bench_cpu *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "unknown CPU");
    c->family = c->model = -1;
    snprintf(c->flags, sizeof c->flags, " ");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    int first = 1, got_name = 0;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        size_t klen = (size_t)(colon - line);
        while (klen && isspace((unsigned char)line[klen - 1])) klen--;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = 0;
#define KEY_IS(k) (klen == strlen(k) && !strncmp(line, k, klen))
        if (KEY_IS("processor")) {
            first = c->cpus == 0;
            c->cpus++;
        }
        if (!first) continue; /* the first CPU describes them all */
        if (KEY_IS("model name") && !got_name) {
            snprintf(c->name, sizeof c->name, "%s", v);
            got_name = 1;
        } else if (KEY_IS("cpu family")) {
            c->family = atoi(v);
        } else if (KEY_IS("model")) {
            c->model = atoi(v);
        } else if (KEY_IS("cpu MHz")) {
            c->mhz = atof(v);
        } else if (KEY_IS("flags") || KEY_IS("Features")) {
            snprintf(c->flags, sizeof c->flags, " %s ", v);
        }
#undef KEY_IS
    }
    fclose(f);
}

/* 1 when the CPU has flag (a /proc/cpuinfo flag name such as "avx512_bf16"). */
static int bench_cpu_has(const bench_cpu *c, const char *flag)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", flag);
    return strstr(c->flags, pat) != NULL;
}

/* "NAME (family F, model M)" into out (n bytes): the name every report prints. */
static void bench_cpu_title(const bench_cpu *c, char *out, size_t n)
{
    if (c->family >= 0 && c->model >= 0)
        snprintf(out, n, "%s (family %d, model %d)", c->name, c->family, c->model);
    else
        snprintf(out, n, "%s", c->name);
}

#endif /* NNT_BENCH_CPUINFO_H */
