/*
 * compare.c - `isoprof compare`: two versions of a worker, from their
 * per-version aggregates (storage's aggs DB, written by the daemon), judged
 * as the daemon judges a deploy (agent/pprof/regress.h): the functions
 * whose share of the CPU grew and shrank, with their shares, deltas,
 * ratios, z and corrected p, and the verdict; --json for scripts, --html
 * for a diff flame graph of the two. And `top --worker W --version V`
 * over a version's aggregate.
 *
 * The thresholds are anomaly.regression's of the config the store path
 * comes from (--config, else the system's when it exists), so the CLI says
 * what the daemon would; without a config, the defaults.
 */
#include "cli_internal.h"

#include "config.h"
#include "flamegraph.h"
#include "guard.h"
#include "regress.h"
#include "store.h"

#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The comparison's parameters: the config's anomaly.regression, else the
 * defaults. *max_fns: the aggregates' bound. An exit code. */
static int params_of(const struct cli *c, struct regress_params *p, uint32_t *max_fns)
{
    regress_params_default(p);
    *max_fns = REGRESS_DEFAULT_MAX_FNS;
    const char *from = "";
    const char *path = c->config_path;
    if (path == NULL) {
        const char *sys = cli_system_config(&from);
        if (access(sys, F_OK) != 0)
            return 0;
        path = sys;
    }
    struct cfg *cfg = NULL;
    char *why = NULL;
    int rc = cfg_load_file(path, &cfg, &why);
    if (rc != 0) {
        fprintf(stderr, "isoprof: cannot read anomaly.regression from %s%s: %s\n", path, from,
                why ? why : isoprof_strerror(rc));
        isoprof_free(why);
        return EXIT_USAGE;
    }
    p->min_samples = cfg->anomaly.regression.min_samples;
    p->min_windows = cfg->anomaly.regression.min_windows;
    p->min_delta = cfg->anomaly.regression.min_delta;
    p->min_ratio = cfg->anomaly.regression.min_ratio;
    p->alpha = cfg->anomaly.regression.alpha;
    *max_fns = cfg->anomaly.regression.max_functions;
    cfg_free(cfg);
    return 0;
}

/* The aggregate of worker/version: *out (decoded) and its figures. An
 * exit code: EXIT_NOMATCH when there is none. */
static int load_agg(struct store *s, const char *worker, const char *version, uint32_t max_fns,
                    struct regress_agg **out, struct store_agg *info)
{
    void *bytes = NULL;
    size_t len = 0;
    int rc = cli_g_agg_get(s, worker, version, info, &bytes, &len);
    if (rc == ISOPROF_ENOTFOUND) {
        fprintf(stderr,
                "isoprof: no aggregate of %s version %s in this store (isoprofd keeps one per "
                "version it profiled, anomaly.regression.max_versions a worker)\n",
                worker, version);
        return EXIT_NOMATCH;
    }
    if (rc != 0) {
        char what[96];
        snprintf(what, sizeof(what), "reading the aggregate of %.32s %.32s", worker, version);
        return cli_store_fail(what, rc);
    }
    rc = regress_agg_decode(bytes, len, max_fns, out);
    isoprof_free(bytes);
    if (rc != 0)
        return cli_die("the aggregate of %s %s does not decode: %s", worker, version,
                       isoprof_strerror(rc));
    return 0;
}

/* A share's ratio for a person: after / before (grown) or before / after
 * (shrunk); "inf" when the other side had none. */
static double ratio_of(const struct regress_change *ch)
{
    double hi = ch->kind == REGRESS_GROWN ? ch->share_after : ch->share_before;
    double lo = ch->kind == REGRESS_GROWN ? ch->share_before : ch->share_after;
    return lo > 0 ? hi / lo : INFINITY;
}

/* The change's flags as words: "regression" for a growth that counts,
 * else why not. */
static void flags_text(const struct regress_change *ch, char *out, size_t cap)
{
    out[0] = '\0';
    size_t n = 0;
    if (ch->kind == REGRESS_GROWN && !(ch->flags & (REGRESS_F_INLINED | REGRESS_F_VM)))
        n += (size_t)snprintf(out + n, cap - n, "regression");
    if (ch->flags & REGRESS_F_INLINED)
        n += (size_t)snprintf(out + n, cap - n, "%sinlined", n ? "," : "");
    if (ch->flags & REGRESS_F_VM)
        n += (size_t)snprintf(out + n, cap - n, "%svm", n ? "," : "");
    if ((ch->flags & REGRESS_F_BOUND) && n < cap)
        snprintf(out + n, cap - n, "%sbound", n ? "," : "");
}

static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

static void json_change(FILE *f, const struct regress_change *ch)
{
    fputs("{\"name\":", f);
    cli_json_str(f, ch->name);
    fputs(",\"file\":", f);
    cli_json_str(f, ch->file);
    fprintf(f,
            ",\"before\":%" PRIu64 ",\"after\":%" PRIu64 ",\"self_before\":%" PRIu64
            ",\"self_after\":%" PRIu64 ",\"share_before\":",
            ch->before, ch->after, ch->self_before, ch->self_after);
    json_num(f, ch->share_before);
    fputs(",\"share_after\":", f);
    json_num(f, ch->share_after);
    fputs(",\"delta\":", f);
    json_num(f, ch->share_after - ch->share_before);
    fputs(",\"ratio\":", f);
    json_num(f, ratio_of(ch)); /* null: infinite, a side without it */
    fputs(",\"z\":", f);
    json_num(f, ch->z);
    fputs(",\"dispersion\":", f);
    json_num(f, ch->dispersion);
    fputs(",\"p\":", f);
    json_num(f, ch->p);
    fputs(",\"p_adj\":", f);
    json_num(f, ch->p_adj);
    fprintf(f, ",\"regression\":%s,\"inlined\":%s,\"vm\":%s,\"bound\":%s,\"caller\":",
            ch->kind == REGRESS_GROWN && !(ch->flags & (REGRESS_F_INLINED | REGRESS_F_VM))
                ? "true"
                : "false",
            ch->flags & REGRESS_F_INLINED ? "true" : "false",
            ch->flags & REGRESS_F_VM ? "true" : "false",
            ch->flags & REGRESS_F_BOUND ? "true" : "false");
    if (ch->caller) {
        cli_json_str(f, ch->caller);
        fputs(",\"caller_z\":", f);
        json_num(f, ch->caller_z);
    } else {
        fputs("null,\"caller_z\":null", f);
    }
    fputc('}', f);
}

static void json_side(FILE *f, const char *version, const struct store_agg *info,
                      const struct regress_agg *a, double cpu)
{
    char first[40], last[40];
    cli_format_time(info->first_ns, first, sizeof(first));
    cli_format_time(info->last_ns, last, sizeof(last));
    fputs("{\"version\":", f);
    cli_json_str(f, version);
    fprintf(f,
            ",\"windows\":%" PRIu64 ",\"samples\":%" PRIu64 ",\"busy\":%" PRIu64
            ",\"functions\":%" PRIu32 ",\"folded\":%" PRIu64 ",\"first_seen\":\"%s\","
            "\"last_seen\":\"%s\",\"cpu\":",
            info->windows, a->samples, regress_agg_busy(a), a->nfns, a->folded, first, last);
    json_num(f, cpu >= 0 ? cpu : NAN);
    fputc('}', f);
}

static const char *verdict_of(const struct regress_result *r)
{
    return !r->judged ? "not_judged" : r->regressions ? "regression" : "no_regression";
}

static void print_json(const struct cli *c, const struct store_agg *ib, const struct store_agg *ia,
                       const struct regress_agg *b, const struct regress_agg *a,
                       const struct regress_params *p, const struct regress_result *r)
{
    fputs("{\"worker\":", stdout);
    cli_json_str(stdout, c->f.worker);
    fputs(",\"from\":", stdout);
    json_side(stdout, c->from, ib, b, r->cpu_before);
    fputs(",\"to\":", stdout);
    json_side(stdout, c->to, ia, a, r->cpu_after);
    fprintf(stdout,
            ",\"verdict\":\"%s\",\"judged\":%s,\"regressions\":%zu,\"tested\":%" PRIu32
            ",\"df\":%" PRIu32,
            verdict_of(r), r->judged ? "true" : "false", r->regressions, r->tested, r->df);
    fprintf(stdout,
            ",\"params\":{\"alpha\":%g,\"min_delta\":%g,\"min_ratio\":%g,"
            "\"min_samples\":%" PRIu64 ",\"min_windows\":%" PRIu64 ",\"caller_z\":%g}",
            p->alpha, p->min_delta, p->min_ratio, p->min_samples, p->min_windows, p->caller_z);
    fputs(",\"grown\":[", stdout);
    for (size_t i = 0; i < r->ngrown; i++) {
        if (i)
            fputc(',', stdout);
        json_change(stdout, &r->grown[i]);
    }
    fputs("],\"shrunk\":[", stdout);
    for (size_t i = 0; i < r->nshrunk; i++) {
        if (i)
            fputc(',', stdout);
        json_change(stdout, &r->shrunk[i]);
    }
    fputs("]}\n", stdout);
}

static void print_side(const char *version, const struct store_agg *info,
                       const struct regress_agg *a, double cpu)
{
    char first[40], last[40], cpus[16] = "-";
    cli_format_time(info->first_ns, first, sizeof(first));
    cli_format_time(info->last_ns, last, sizeof(last));
    if (cpu >= 0)
        snprintf(cpus, sizeof(cpus), "%.1f%%", 100.0 * cpu);
    printf("  %-16.16s %8" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10s  %-24s %s\n", version,
           info->windows, a->samples, regress_agg_busy(a), cpus, first, last);
}

static void print_changes(const char *title, const struct regress_change *c, size_t n)
{
    printf("\n%s\n", title);
    if (n == 0) {
        printf("  (none)\n");
        return;
    }
    printf("  %8s %8s %9s %7s %8s %6s %9s  %-18s %s\n", "BEFORE", "AFTER", "DELTA", "RATIO", "Z",
           "DISP", "P_ADJ", "FLAGS", "FUNCTION");
    for (size_t i = 0; i < n; i++) {
        const struct regress_change *ch = &c[i];
        char ratio[16], flags[64], padj[16];
        double rt = ratio_of(ch);
        if (isfinite(rt))
            snprintf(ratio, sizeof(ratio), "%.2f", rt);
        else
            snprintf(ratio, sizeof(ratio), "inf");
        if (ch->p_adj < 1e-300)
            snprintf(padj, sizeof(padj), "<1e-300");
        else
            snprintf(padj, sizeof(padj), "%.2g", ch->p_adj);
        flags_text(ch, flags, sizeof(flags));
        printf("  %7.2f%% %7.2f%% %+7.2fpt %7s %8.2f %6.2f %9s  %-18s %s", 100.0 * ch->share_before,
               100.0 * ch->share_after, 100.0 * (ch->share_after - ch->share_before), ratio, ch->z,
               ch->dispersion, padj, flags, *ch->name ? ch->name : "(anonymous)");
        if (ch->file && *ch->file)
            printf(" %s", ch->file);
        putchar('\n');
    }
}

static void print_text(const struct cli *c, const struct store_agg *ib, const struct store_agg *ia,
                       const struct regress_agg *b, const struct regress_agg *a,
                       const struct regress_params *p, const struct regress_result *r)
{
    printf("%s: %s against %s\n\n", c->f.worker, c->to, c->from);
    printf("  %-16s %8s %10s %10s %10s  %-24s %s\n", "VERSION", "WINDOWS", "SAMPLES", "NON-IDLE",
           "CPU", "FIRST SEEN", "LAST SEEN");
    print_side(c->from, ib, b, r->cpu_before);
    print_side(c->to, ia, a, r->cpu_after);
    printf("\n");
    if (!r->judged)
        printf("verdict: not judged: each version needs %" PRIu64
               " non-idle samples (anomaly.regression.min_samples) in %" PRIu64
               " windows (anomaly.regression.min_windows)\n",
               p->min_samples, p->min_windows);
    else if (r->regressions)
        printf("verdict: REGRESSION: %zu function%s grew in %s\n", r->regressions,
               r->regressions == 1 ? "" : "s", c->to);
    else
        printf("verdict: no regression\n");
    printf("  (%" PRIu32 " functions compared; alpha %g, min_delta %.2gpt, min_ratio %.2f; a "
           "share is of the non-idle samples; ",
           r->tested, p->alpha, 100.0 * p->min_delta, p->min_ratio);
    if (r->df > 0)
        printf("DISP: how many times the binomial variance a share has, from the spread of "
               "its windows, %" PRIu32 " degrees of freedom)\n",
               r->df);
    else
        printf("binomial tests: an aggregate keeps no windows)\n");
    if (!r->judged)
        return;
    print_changes("GROWN", r->grown, r->ngrown);
    print_changes("SHRUNK", r->shrunk, r->nshrunk);
}

/* The header lines of one side of the flame graph. */
static size_t fg_side(const char *worker, const char *version, const struct store_agg *info,
                      const struct regress_agg *a, struct fg_pair *p)
{
    size_t n = 0;
    p[n].key = "worker";
    snprintf(p[n++].value, sizeof(p->value), "%s", worker);
    p[n].key = "version";
    snprintf(p[n++].value, sizeof(p->value), "%s", version);
    p[n].key = "from";
    cli_format_time(info->first_ns, p[n++].value, sizeof(p->value));
    p[n].key = "to";
    cli_format_time(info->last_ns, p[n++].value, sizeof(p->value));
    p[n].key = "windows";
    snprintf(p[n++].value, sizeof(p->value), "%" PRIu64, info->windows);
    p[n].key = "non-idle samples";
    snprintf(p[n++].value, sizeof(p->value), "%" PRIu64, regress_agg_busy(a));
    p[n].key = "stacks";
    snprintf(p[n++].value, sizeof(p->value), "rebuilt from the aggregate's callers");
    return n;
}

static int write_html(const struct cli *c, const struct store_agg *ib, const struct store_agg *ia,
                      const struct regress_agg *b, const struct regress_agg *a)
{
    struct pprof_tree t = {0};
    int rc = regress_agg_tree(a, &t, 0);
    if (rc == 0)
        rc = regress_agg_tree(b, &t, 1);
    if (rc != 0) {
        pprof_tree_free(&t);
        return cli_die("building the flame graph: %s", isoprof_strerror(rc));
    }
    struct fg_pair head[8], base[8];
    char title[600];
    snprintf(title, sizeof(title), "isoprof compare: %s %s against %s", c->f.worker, c->to,
             c->from);
    struct fg_info info = {.title = title,
                           .header = head,
                           .nheader = fg_side(c->f.worker, c->to, ia, a, head),
                           .base_header = base,
                           .nbase = fg_side(c->f.worker, c->from, ib, b, base),
                           .diff = 1,
                           .fold_share = FG_FOLD_DEFAULT};
    FILE *f = cli_open_out(c, 1, "an HTML page");
    if (f == NULL) {
        pprof_tree_free(&t);
        return EXIT_USAGE;
    }
    const char *why = NULL;
    rc = cli_close_out(c, f, fg_write_html(f, &t, &info, &why), why);
    pprof_tree_free(&t);
    return rc;
}

int cli_cmd_compare(int argc, char **argv)
{
    struct cli c = {0};
    int rc = cli_parse_args(&c, argc, argv, ARG_JSON | ARG_COMPARE);
    if (rc)
        return rc;
    if (c.f.worker == NULL || c.from == NULL || c.to == NULL)
        return cli_die("compare needs --worker W --from V1 --to V2");
    if (c.f.version || c.f.thread || c.f.type || c.f.since_ns || c.f.until_ns)
        return cli_die("compare reads the versions' aggregates: --worker, --from and --to "
                       "choose them, no other filter applies");
    if (strcmp(c.from, c.to) == 0)
        return cli_die("--from and --to name the same version");
    struct regress_params p;
    uint32_t max_fns;
    if ((rc = params_of(&c, &p, &max_fns)) != 0)
        return rc;
    struct store *s;
    if ((rc = cli_open_store(&c, &s)) != 0)
        return rc;
    struct regress_agg *b = NULL, *a = NULL;
    struct store_agg ib, ia;
    struct regress_result r = {0};
    if ((rc = load_agg(s, c.f.worker, c.from, max_fns, &b, &ib)) != 0 ||
        (rc = load_agg(s, c.f.worker, c.to, max_fns, &a, &ia)) != 0)
        goto out;
    if ((rc = regress_compare(b, a, &p, &r)) != 0) {
        rc = cli_die("comparing: %s", isoprof_strerror(rc));
        goto out;
    }
    if (c.out != NULL && (rc = write_html(&c, &ib, &ia, b, a)) != 0)
        goto out;
    if (c.json)
        print_json(&c, &ib, &ia, b, a, &p, &r);
    else
        print_text(&c, &ib, &ia, b, a, &p, &r);
    rc = fflush(stdout) == 0 ? 0 : cli_die("writing stdout: %s", strerror(errno));
out:
    regress_result_free(&r);
    regress_agg_free(a);
    regress_agg_free(b);
    store_close(s);
    return rc;
}

/* --- top over an aggregate --- */

static const struct regress_agg *top_agg;

static int by_self(const void *x, const void *y)
{
    const struct regress_fn *f = &top_agg->fns[*(const uint32_t *)x];
    const struct regress_fn *g = &top_agg->fns[*(const uint32_t *)y];
    if (f->self != g->self)
        return f->self < g->self ? 1 : -1;
    if (f->cum != g->cum)
        return f->cum < g->cum ? 1 : -1;
    return strcmp(f->name, g->name);
}

int cli_top_aggregate(struct cli *c, struct store *s)
{
    struct regress_params p;
    uint32_t max_fns;
    int rc = params_of(c, &p, &max_fns);
    if (rc != 0)
        return rc;
    struct regress_agg *a = NULL;
    struct store_agg info;
    void *bytes = NULL;
    size_t len = 0;
    rc = cli_g_agg_get(s, c->f.worker, c->f.version, &info, &bytes, &len);
    if (rc == ISOPROF_ENOTFOUND)
        return EXIT_NOMATCH;
    if (rc != 0)
        return cli_store_fail("reading the version's aggregate", rc);
    rc = regress_agg_decode(bytes, len, max_fns, &a);
    isoprof_free(bytes);
    if (rc != 0)
        return cli_die("the aggregate of %s %s does not decode: %s", c->f.worker, c->f.version,
                       isoprof_strerror(rc));
    uint32_t *order = isoprof_calloc(a->nfns ? a->nfns : 1, sizeof(*order));
    if (order == NULL) {
        regress_agg_free(a);
        return cli_die("out of memory");
    }
    for (uint32_t i = 0; i < a->nfns; i++)
        order[i] = i;
    top_agg = a;
    qsort(order, a->nfns, sizeof(*order), by_self);
    uint64_t busy = regress_agg_busy(a);
    char first[40], last[40];
    cli_format_time(info.first_ns, first, sizeof(first));
    cli_format_time(info.last_ns, last, sizeof(last));
    printf("Type: samples (the aggregate of %s %s: %" PRIu64 " windows, %s to %s)\n", c->f.worker,
           c->f.version, info.windows, first, last);
    size_t shown = a->nfns < (uint32_t)c->top_n ? a->nfns : (size_t)c->top_n;
    printf("Showing top %zu of %" PRIu32 " functions, %" PRIu64 " non-idle samples of %" PRIu64
           " (shares of the non-idle)\n",
           shown, a->nfns, busy, a->samples);
    printf("%12s %7s %7s %12s %7s  %s\n", "flat", "flat%", "sum%", "cum", "cum%", "function");
    double sum = 0;
    for (size_t i = 0; i < shown; i++) {
        const struct regress_fn *f = &a->fns[order[i]];
        double fp = busy ? 100.0 * (double)f->self / (double)busy : 0;
        double cp = busy ? 100.0 * (double)f->cum / (double)busy : 0;
        sum += fp;
        printf("%12" PRIu64 " %6.2f%% %6.2f%% %12" PRIu64 " %6.2f%%  %s", f->self, fp, sum, f->cum,
               cp, *f->name ? f->name : "(anonymous)");
        if (*a->files[f->file])
            printf(" %s", a->files[f->file]);
        putchar('\n');
    }
    if (a->other_self > 0)
        printf("%12" PRIu64 " %6.2f%%          %s  (%" PRIu64 " functions folded)\n", a->other_self,
               busy ? 100.0 * (double)a->other_self / (double)busy : 0.0, "", a->folded);
    isoprof_free(order);
    regress_agg_free(a);
    return 0;
}
