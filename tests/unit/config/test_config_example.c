/*
 * The outputs generated from the option table: the example config loads
 * back (from memory and from a file) and equals the defaults; its
 * commented-out options become valid when uncommented; --help lists every
 * option in aligned columns. Also sanity checks on the table itself.
 */
#include "../test.h"
#include "helpers.h"

#include <errno.h>
#include <unistd.h>

static char *example(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    int rc = cfg_write_example(f);
    fclose(f);
    if (rc != 0) {
        free(text); /* banned-ok: allocated by open_memstream */
        return NULL;
    }
    return text;
}

TEST(example_loads_back_to_the_defaults)
{
    char *text = example();
    REQUIRE(text != NULL);
    char *why;
    struct cfg *c = load(text, &why);
    if (c == NULL)
        fprintf(stderr, "%s\n---\n%s\n", text, why ? why : "");
    REQUIRE(c != NULL);
    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    CHECK(cfg_same(c, d));
    cfg_free(c);

    /* and through a file, as `isoprofd --print-config > f; isoprofd -c f` */
    char dir[] = "/tmp/isoprof-cfg-XXXXXX", path[64];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/isoprof.yaml", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
    c = NULL;
    CHECK_EQ_INT(cfg_load_file(path, &c, &why), 0);
    REQUIRE(c != NULL);
    CHECK(cfg_same(c, d));
    CHECK_STR(c->source, path);
    cfg_free(c);
    unlink(path);
    rmdir(dir);

    cfg_free(d);
    free(text); /* banned-ok: allocated by open_memstream */
}

TEST(example_names_every_option_with_its_help)
{
    char *text = example();
    REQUIRE(text != NULL);
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        const char *leaf = strrchr(o->name, '.');
        leaf = leaf ? leaf + 1 : o->name;
        char key[96];
        snprintf(key, sizeof(key), "%s:", leaf);
        CHECK(strstr(text, key) != NULL);
        CHECK(strstr(text, o->help) != NULL);
    }
    free(text); /* banned-ok: allocated by open_memstream */
}

/* Uncommenting "# worker:" and "# version:" (with values) keeps it valid. */
TEST(commented_options_are_at_the_right_place)
{
    char *text = example();
    REQUIRE(text != NULL);
    size_t len = strlen(text);
    char *edited = isoprof_malloc(len + 64);
    REQUIRE(edited != NULL);
    size_t o = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        const char *hash = p;
        while (*hash == ' ')
            hash++;
        if (strncmp(hash, "# worker:", 9) == 0 || strncmp(hash, "# version:", 10) == 0) {
            size_t indent = (size_t)(hash - p);
            memcpy(edited + o, p, indent);
            o += indent;
            size_t klen = (size_t)(strchr(hash, ':') - hash) - 2;
            memcpy(edited + o, hash + 2, klen);
            o += klen;
            memcpy(edited + o, ": x1\n", 5);
            o += 5;
        } else {
            memcpy(edited + o, p, n);
            o += n;
        }
        p += n;
    }
    edited[o] = '\0';
    char *why;
    struct cfg *c = load(edited, &why);
    if (c == NULL)
        fprintf(stderr, "%s\n---\n%s\n", edited, why ? why : "");
    REQUIRE(c != NULL);
    REQUIRE(c->ntargets == 1);
    CHECK_STR(c->targets[0].worker, "x1");
    CHECK_STR(c->targets[0].version, "x1");
    cfg_free(c);
    isoprof_free(edited);
    free(text); /* banned-ok: allocated by open_memstream */
}

TEST(example_reports_stream_errors)
{
    FILE *f = fopen("/dev/null", "r"); /* writes fail */
    REQUIRE(f != NULL);
    CHECK_EQ_INT(cfg_write_example(f), -EIO);
    fclose(f);
}

TEST(help_lists_every_option_aligned)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    cfg_write_help(f);
    fclose(f);
    long help_col = -1;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        char name[96];
        snprintf(name, sizeof(name), "\n  %s%s ", o->scope == CFG_SCOPE_TARGET ? "targets[]." : "",
                 o->name);
        const char *line = strstr(text, name);
        CHECK(line != NULL);
        if (line == NULL)
            continue;
        line++;
        const char *eol = strchr(line, '\n');
        const char *h = strstr(line, o->help);
        CHECK(h != NULL && h < eol);
        if (h == NULL)
            continue;
        if (help_col < 0)
            help_col = h - line;
        CHECK_EQ_INT(h - line, help_col); /* the description column lines up */
        CHECK(strstr(line, o->def ? o->def : "(") < eol);
        int restart = strstr(line, "[restart]") != NULL && strstr(line, "[restart]") < eol;
        CHECK_EQ_INT(restart, !o->reloadable);
    }
    CHECK(strstr(text, "  sampling.cpu.period ") != NULL);
    CHECK(strstr(text, "100ms..24h") != NULL);
    CHECK(strstr(text, ">= 1MiB") != NULL);
    free(text); /* banned-ok: allocated by open_memstream */
}

TEST(table_is_consistent)
{
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        CHECK(o->name != NULL && o->help != NULL && o->help[0] != '\0');
        CHECK(o->max == 0 || o->max >= o->min);
        CHECK(o->def != NULL || o->required || o->type == CFG_T_STRING || o->def_row != NULL);
        /* a row that takes another's value when unset: no default of its own,
         * a row of its scope and type to take it from, and 0 free to mean unset */
        if (o->def_row != NULL) {
            const struct cfg_option *from = NULL;
            for (size_t j = 0; j < cfg_noptions; j++)
                if (cfg_options[j].scope == o->scope &&
                    strcmp(cfg_options[j].name, o->def_row) == 0)
                    from = &cfg_options[j];
            CHECK(o->def == NULL && !o->required && o->min > 0);
            CHECK(from != NULL && from != o && from->type == o->type && from->def_row == NULL);
            CHECK(o->type == CFG_T_SIZE || o->type == CFG_T_DURATION || o->type == CFG_T_COUNT);
        }
        for (size_t j = 0; j < i; j++)
            CHECK(!(cfg_options[j].scope == o->scope && strcmp(cfg_options[j].name, o->name) == 0));
        /* an enum names its choices (cfg_defaults fails if the default is not one) */
        CHECK((o->type == CFG_T_ENUM) == (o->choices != NULL));
        /* a map holds at most max entries and starts empty */
        if (o->type == CFG_T_MAP)
            CHECK(o->max > 0 && o->def != NULL && strcmp(o->def, "{}") == 0);
        /* a list caps each entry's bytes and has a flow-list default */
        if (o->type == CFG_T_STRLIST)
            CHECK(o->max > 0 && o->def != NULL && o->def[0] == '[');
        /* a string defaulting to "" must accept a quoted "" */
        if (o->type == CFG_T_STRING && o->def != NULL && o->def[0] == '\0')
            CHECK(o->min == 1);
    }
    /* each side of a rule is a global option, or (other) a section of them */
    for (size_t r = 0; r < cfg_nrelations; r++) {
        const struct cfg_relation *rel = &cfg_relations[r];
        int a = 0, b = 0;
        size_t bl = strlen(rel->other);
        for (size_t i = 0; i < cfg_noptions; i++) {
            const struct cfg_option *o = &cfg_options[i];
            if (o->scope != CFG_SCOPE_GLOBAL)
                continue;
            a |= strcmp(o->name, rel->name) == 0;
            b |= strncmp(o->name, rel->other, bl) == 0 &&
                 (o->name[bl] == '\0' || o->name[bl] == '.');
        }
        CHECK(a && b);
        CHECK((rel->kind == CFG_REL_ENTRIES) == (rel->entry_rule != NULL));
    }
}

int main(void)
{
    RUN(example_loads_back_to_the_defaults);
    RUN(example_names_every_option_with_its_help);
    RUN(commented_options_are_at_the_right_place);
    RUN(example_reports_stream_errors);
    RUN(help_lists_every_option_aligned);
    RUN(table_is_consistent);
    TEST_EXIT();
}
