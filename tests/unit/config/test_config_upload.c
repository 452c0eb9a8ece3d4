/*
 * The upload section: its defaults, a full section, every rule with its
 * exact line:col (URL, tenant id, headers, labels, bool, enum, maps, the
 * rules between options), secrets that must never appear in a message, and
 * the reload check over maps.
 */
#include "../test.h"
#include "helpers.h"

#include <errno.h>

/* Does every upload.* option of c equal want's? Names each that does not. */
static int upload_is(const struct cfg *c, const struct cfg *want)
{
    int same = 1;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const struct cfg_option *o = &cfg_options[i];
        if (strncmp(o->name, "upload.", 7) == 0 && !row_same(o, c, want)) {
            fprintf(stderr, "%s differs\n", o->name);
            same = 0;
        }
    }
    return same;
}

TEST(defaults)
{
    static const struct cfg want = {
        .upload = {
            .url = "",
            .api = CFG_UPLOAD_PUSH,
            .timeout_ns = 10000000000ull,
            .backoff = {.min_ns = 500000000ull, .max_ns = 60000000000ull},
            .batch = {.max_profiles = 32, .max_bytes = 1ull << 20, .max_delay_ns = 10000000000ull},
            .max_profile_size = 4ull << 20,
            .max_age_ns = 3600000000000ull,
            .max_rate = 4ull << 10,
            .isolate_label = 0,
            .host = "",
            .tls = {.ca_file = "", .insecure_skip_verify = 0},
            .basic_auth = {.username = "", .password_file = ""},
            .bearer_token_file = "",
            .tenant_id = "",
            .headers = {NULL, 0},
            .labels = {NULL, 0}}};
    struct cfg *c;
    REQUIRE(cfg_defaults(&c) == 0);
    CHECK(upload_is(c, &want));
    cfg_free(c);
}

static const char *full_section =
    "upload:\n"
    "  url: https://profiles-prod-001.grafana.net/\n"
    "  api: ingest\n"
    "  timeout: 30s\n"
    "  backoff: {min: 1s, max: 2m}\n"
    "  batch: {max_profiles: 1024, max_bytes: 64MiB, max_delay: 10ms}\n"
    "  max_profile_size: 256MiB\n"
    "  max_age: 2h\n"
    "  max_rate: 0B\n"
    "  isolate_label: true\n"
    "  host: web-1\n"
    "  tls:\n"
    "    ca_file: /etc/ssl/corp.pem\n"
    "    insecure_skip_verify: true\n"
    "  basic_auth:\n"
    "    username: '123456'\n"
    "    password_file: /run/secrets/pyroscope\n"
    "  tenant_id: team-a\n"
    "  headers:\n"
    "    X-Trace: \"on\\tyes\"\n"
    "    x-empty: ''\n"
    "    Accept-Language: en\n"
    "  labels:\n"
    "    region: eu-west-1\n"
    "    _zone: b\n"
    "    env: \"pr\xc3\xb6"
    "d\"\n";

TEST(full_section_round_trips)
{
    char *why;
    struct cfg *c = load(full_section, &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    /* every value, the maps' entries in file order */
    static struct cfg_kv headers[] = {
        {"X-Trace", "on\tyes"}, {"x-empty", ""}, {"Accept-Language", "en"}};
    static struct cfg_kv labels[] = {{"region", "eu-west-1"},
                                     {"_zone", "b"},
                                     {"env", "pr\xc3\xb6"
                                             "d"}};
    static const struct cfg want = {
        .upload = {
            .url = "https://profiles-prod-001.grafana.net/",
            .api = CFG_UPLOAD_INGEST,
            .timeout_ns = 30000000000ull,
            .backoff = {.min_ns = 1000000000ull, .max_ns = 120000000000ull},
            .batch = {.max_profiles = 1024, .max_bytes = 64ull << 20, .max_delay_ns = 10000000ull},
            .max_profile_size = 256ull << 20,
            .max_age_ns = 7200000000000ull,
            .max_rate = 0,
            .isolate_label = 1,
            .host = "web-1",
            .tls = {.ca_file = "/etc/ssl/corp.pem", .insecure_skip_verify = 1},
            .basic_auth = {.username = "123456", .password_file = "/run/secrets/pyroscope"},
            .bearer_token_file = "",
            .tenant_id = "team-a",
            .headers = {headers, 3},
            .labels = {labels, 3}}};
    CHECK(upload_is(c, &want));

    /* the same again compares equal; one label value changed does not */
    struct cfg *d = load(full_section, &why);
    REQUIRE(d != NULL);
    CHECK(cfg_same(c, d));
    isoprof_free(d->upload.labels.items[1].value);
    d->upload.labels.items[1].value = isoprof_strdup("c");
    REQUIRE(d->upload.labels.items[1].value != NULL);
    CHECK(!cfg_same(c, d));
    cfg_free(d);
    cfg_free(c);
}

TEST(accepted_values)
{
    static const char *texts[] = {
        "upload: {url: ''}\n",
        "upload: {url: \"\", host: \"\", tenant_id: '', bearer_token_file: ''}\n",
        "upload: {url: 'http://localhost'}\n",
        "upload: {url: 'http://127.0.0.1:4040'}\n",
        "upload: {url: 'http://[::1]:4040/pyroscope/'}\n",
        "upload: {url: 'https://[2001:db8::1]'}\n",
        "upload: {url: 'https://a.example.com:65535/p/a@b/%20c'}\n",
        "upload: {api: push}\n",
        "upload: {tls: {insecure_skip_verify: false}}\n",
        "upload: {tls: {insecure_skip_verify: 'true'}}\n",
        "upload: {bearer_token_file: /run/token}\n",
        "upload: {tenant_id: '!team~A'}\n",
        "upload: {headers: {\"!#$%&'*+-.^_`|~09azAZ\": x}}\n",
        "upload: {headers: {Content-Typo: x}}\n",
        "upload: {labels: {service_name_x: a, hosts: b, _: c, a__b: d}}\n",
        "upload: {labels: {env: 'a,b}'}}\n", /* fine with push */
        "upload: {api: ingest, labels: {env: 'a{b=c'}}\n",
    };
    CHECK_EQ_INT(valid_texts_failed(texts, ISOPROF_ARRAY_SIZE(texts), NULL), 0);
}

TEST(empty_and_unset_maps_are_the_defaults)
{
    struct cfg *d;
    REQUIRE(cfg_defaults(&d) == 0);
    /* cfg_same also checks that empty maps hold no array */
    static const char *texts[] = {"upload:\n  headers:\n  labels: ~\n",
                                  "upload: {headers: {}, labels: {}}\n", "upload:\n"};
    CHECK_EQ_INT(valid_texts_failed(texts, ISOPROF_ARRAY_SIZE(texts), d), 0);
    cfg_free(d);
}

static const struct one_error one_errors[] = {
    /* the URL */
    {"upload: {url: 'ftp://example.com'}\n",
     "t.yaml:1:15: upload.url 'ftp://example.com' is not an http:// or https:// URL: it must "
     "start with http:// or https://"},
    {"upload: {url: 'HTTP://example.com'}\n",
     "t.yaml:1:15: upload.url 'HTTP://example.com' is not an http:// or https:// URL: it must "
     "start with http:// or https://"},
    {"upload: {url: example.com}\n",
     "t.yaml:1:15: upload.url 'example.com' is not an http:// or https:// URL: it must start "
     "with http:// or https://"},
    {"upload: {url: 'https://'}\n",
     "t.yaml:1:15: upload.url 'https://' is not an http:// or https:// URL: the host is empty"},
    {"upload: {url: 'https:///x'}\n",
     "t.yaml:1:15: upload.url 'https:///x' is not an http:// or https:// URL: the host is empty"},
    {"upload:\n  url: 'http://exa mple.com'\n",
     "t.yaml:2:8: upload.url 'http://exa mple.com' is not an http:// or https:// URL: spaces and "
     "control characters are not allowed"},
    {"upload: {url: \"http://example.com/\\t\"}\n",
     "t.yaml:1:15: upload.url 'http://example.com/\\x09' is not an http:// or https:// URL: "
     "spaces and control characters are not allowed"},
    {"upload: {url: 'http://example.com/\xc3\xa9'}\n",
     "t.yaml:1:15: upload.url 'http://example.com/\xc3\xa9' is not an http:// or https:// URL: "
     "only ASCII is allowed (percent-encode the rest)"},
    {"upload: {url: 'http://example.com:0'}\n",
     "t.yaml:1:15: upload.url 'http://example.com:0' is not an http:// or https:// URL: the port "
     "must be a number from 1 to 65535"},
    {"upload: {url: 'http://example.com:65536/'}\n",
     "t.yaml:1:15: upload.url 'http://example.com:65536/' is not an http:// or https:// URL: the "
     "port must be a number from 1 to 65535"},
    {"upload: {url: 'http://example.com:'}\n",
     "t.yaml:1:15: upload.url 'http://example.com:' is not an http:// or https:// URL: the port "
     "must be a number from 1 to 65535"},
    {"upload: {url: 'http://example.com:80x'}\n",
     "t.yaml:1:15: upload.url 'http://example.com:80x' is not an http:// or https:// URL: the "
     "host must be followed by :port, a path starting with '/', or nothing"},
    {"upload: {url: 'http://ex!ample.com'}\n",
     "t.yaml:1:15: upload.url 'http://ex!ample.com' is not an http:// or https:// URL: the host "
     "has a character that is not allowed"},
    {"upload: {url: 'http://999.1.1.1'}\n",
     "t.yaml:1:15: upload.url 'http://999.1.1.1' is not an http:// or https:// URL: the host is "
     "not a valid IPv4 address"},
    {"upload: {url: 'http://[::1'}\n",
     "t.yaml:1:15: upload.url 'http://[::1' is not an http:// or https:// URL: '[' starts an "
     "IPv6 address that does not end with ']'"},
    {"upload: {url: 'http://[example.com]:80'}\n",
     "t.yaml:1:15: upload.url 'http://[example.com]:80' is not an http:// or https:// URL: the "
     "address in brackets is not an IPv6 address"},
    {"upload: {url: 'http://example.com/p?x=1'}\n",
     "t.yaml:1:15: upload.url must not have a query ('?'); it is a base URL"},
    {"upload: {url: 'http://example.com/#top'}\n",
     "t.yaml:1:15: upload.url must not have a fragment ('#'); it is a base URL"},
    {"upload: {url: 'https://user@example.com'}\n",
     "t.yaml:1:15: upload.url must not hold credentials; use upload.basic_auth"},
    /* the tenant id */
    {"upload: {tenant_id: 'a b'}\n",
     "t.yaml:1:21: upload.tenant_id 'a b' must be printable ASCII without spaces (it is sent as "
     "a header value)"},
    {"upload: {tenant_id: \"t\\u00e9\"}\n",
     "t.yaml:1:21: upload.tenant_id 't\xc3\xa9' must be printable ASCII without spaces (it is "
     "sent as a header value)"},
    /* header names */
    {"upload:\n  headers:\n    X Bad: v\n",
     "t.yaml:3:5: upload.headers name 'X Bad' is not an HTTP header name (letters, digits and "
     "!#$%&'*+-.^_`|~)"},
    {"upload:\n  headers:\n    'X:A': v\n",
     "t.yaml:3:5: upload.headers name 'X:A' is not an HTTP header name (letters, digits and "
     "!#$%&'*+-.^_`|~)"},
    {"upload:\n  headers:\n    '': v\n",
     "t.yaml:3:5: upload.headers name '' must be 1 to 64 bytes long"},
    {"upload:\n  headers:\n    authorization: Basic x\n",
     "t.yaml:3:5: upload.headers name 'authorization' is set by the agent; use "
     "upload.basic_auth or upload.bearer_token_file"},
    {"upload:\n  headers:\n    X-SCOPE-ORGID: t\n",
     "t.yaml:3:5: upload.headers name 'X-SCOPE-ORGID' is set by the agent; use "
     "upload.tenant_id"},
    {"upload: {headers: {Host: h}}\n",
     "t.yaml:1:20: upload.headers name 'Host' is set by the agent"},
    {"upload: {headers: {content-type: h}}\n",
     "t.yaml:1:20: upload.headers name 'content-type' is set by the agent"},
    {"upload: {headers: {Content-Length: h}}\n",
     "t.yaml:1:20: upload.headers name 'Content-Length' is set by the agent"},
    {"upload: {headers: {Content-Encoding: h}}\n",
     "t.yaml:1:20: upload.headers name 'Content-Encoding' is set by the agent"},
    {"upload: {headers: {Transfer-Encoding: h}}\n",
     "t.yaml:1:20: upload.headers name 'Transfer-Encoding' is set by the agent"},
    {"upload: {headers: {connection: h}}\n",
     "t.yaml:1:20: upload.headers name 'connection' is set by the agent"},
    {"upload: {headers: {Expect: h}}\n",
     "t.yaml:1:20: upload.headers name 'Expect' is set by the agent"},
    {"upload: {headers: {Connect-Protocol-Version: h}}\n",
     "t.yaml:1:20: upload.headers name 'Connect-Protocol-Version' is set by the agent"},
    /* header values: never quoted */
    {"upload: {headers: {X-A: \"a\\rb\"}}\n",
     "t.yaml:1:25: upload.headers.X-A must not contain control characters (CR, LF, ...) other "
     "than tab"},
    {"upload: {headers: {X-A: \"a\\x7f\"}}\n",
     "t.yaml:1:25: upload.headers.X-A must not contain control characters (CR, LF, ...) other "
     "than tab"},
    {"upload: {headers: {X-A: \"a\\0b\"}}\n",
     "t.yaml:1:25: upload.headers.X-A must not contain a NUL byte"},
    /* label names and values */
    {"upload:\n  labels:\n    9env: x\n",
     "t.yaml:3:5: upload.labels name '9env' must match [A-Za-z_][A-Za-z0-9_]*"},
    {"upload: {labels: {env-x: y}}\n",
     "t.yaml:1:19: upload.labels name 'env-x' must match [A-Za-z_][A-Za-z0-9_]*"},
    {"upload: {labels: {'': y}}\n",
     "t.yaml:1:19: upload.labels name '' must match [A-Za-z_][A-Za-z0-9_]*"},
    {"upload: {labels: {__name__: y}}\n",
     "t.yaml:1:19: upload.labels name '__name__' must not start with __ (reserved for the "
     "server)"},
    {"upload: {labels: {service_name: y}}\n",
     "t.yaml:1:19: upload.labels name 'service_name' is set by the agent"},
    {"upload: {labels: {version: y}}\n",
     "t.yaml:1:19: upload.labels name 'version' is set by the agent"},
    {"upload: {labels: {host: y}}\n",
     "t.yaml:1:19: upload.labels name 'host' is set by the agent; use upload.host"},
    {"upload: {labels: {isolate: y}}\n",
     "t.yaml:1:19: upload.labels name 'isolate' is set by the agent"},
    {"upload: {labels: {runtime: y}}\n",
     "t.yaml:1:19: upload.labels name 'runtime' is set by the agent"},
    {"upload: {labels: {anomaly: y}}\n",
     "t.yaml:1:19: upload.labels name 'anomaly' is set by the agent"},
    {"upload: {labels: {thread: y}}\n",
     "t.yaml:1:19: upload.labels name 'thread' is set by the agent"},
    {"upload: {labels: {env: \"a\\0\"}}\n",
     "t.yaml:1:24: upload.labels.env must not contain a NUL byte"},
    /* maps: shapes, duplicates, values */
    {"upload: {headers: [a, b]}\n",
     "t.yaml:1:19: upload.headers must be a mapping of names to values, not a list"},
    {"upload:\n  labels: env=prod\n",
     "t.yaml:2:11: upload.labels must be a mapping of names to values, not a scalar"},
    {"upload: {headers: {X-A: [1]}}\n",
     "t.yaml:1:25: upload.headers.X-A must be a string, not a list"},
    {"upload:\n  labels:\n    env:\n      a: b\n",
     "t.yaml:4:7: upload.labels.env must be a string, not a mapping"},
    {"upload: {labels: {env: ~}}\n",
     "t.yaml:1:24: upload.labels.env has no value (write '' for an empty one)"},
    {"upload:\n  headers:\n    X-A:\n",
     "t.yaml:3:9: upload.headers.X-A has no value (write '' for an empty one)"},
    {"upload: {headers: {X-A: 1, X-A: 2}}\n", "t.yaml:1:28: duplicate key 'X-A' (first at 1:20)"},
    {"upload:\n  labels:\n    env: a\n    region: b\n    env: c\n",
     "t.yaml:5:5: duplicate key 'env' (first at 3:5)"},
    {"upload:\n  headers:\n    ? [a]\n    : b\n",
     "t.yaml:3:7: upload.headers: a key must be a name, not a list"},
    /* bool and enum */
    {"upload: {tls: {insecure_skip_verify: yes}}\n",
     "t.yaml:1:38: upload.tls.insecure_skip_verify must be true or false, not 'yes'"},
    {"upload: {tls: {insecure_skip_verify: True}}\n",
     "t.yaml:1:38: upload.tls.insecure_skip_verify must be true or false, not 'True'"},
    {"upload: {tls: {insecure_skip_verify: 1}}\n",
     "t.yaml:1:38: upload.tls.insecure_skip_verify must be true or false, not '1'"},
    {"upload: {tls: {insecure_skip_verify: [true]}}\n",
     "t.yaml:1:38: upload.tls.insecure_skip_verify must be true or false, not a list"},
    {"upload: {tls: {insecure_skip_verify: ~}}\n",
     "t.yaml:1:38: upload.tls.insecure_skip_verify has no value (the default is false; leave the "
     "key out for it)"},
    {"upload: {api: pull}\n", "t.yaml:1:15: upload.api must be push or ingest, not 'pull'"},
    {"upload: {api: Push}\n", "t.yaml:1:15: upload.api must be push or ingest, not 'Push'"},
    {"upload: {api: {a: b}}\n", "t.yaml:1:15: upload.api must be push or ingest, not a mapping"},
    {"upload:\n  api:\n",
     "t.yaml:2:7: upload.api has no value (the default is push; leave the key out for it)"},
    {"upload:\n  url:\n",
     "t.yaml:2:7: upload.url has no value (the default is \"\"; leave the key out for it)"},
    /* numbers */
    {"upload: {timeout: 11m}\n", "t.yaml:1:19: upload.timeout must be between 100ms and 10m, not "
                                 "'11m'"},
    {"upload: {batch: {max_profiles: 0}}\n",
     "t.yaml:1:32: upload.batch.max_profiles must be between 1 and 1024, not '0'"},
    {"upload: {batch: {max_bytes: 512B}}\n",
     "t.yaml:1:29: upload.batch.max_bytes must be between 1KiB and 64MiB, not '512B'"},
    {"upload: {batch: {max_delay: 5ms}}\n",
     "t.yaml:1:29: upload.batch.max_delay must be between 10ms and 1h, not '5ms'"},
    {"upload: {max_profile_size: 257MiB}\n",
     "t.yaml:1:28: upload.max_profile_size must be between 1KiB and 256MiB, not '257MiB'"},
    {"upload: {host: \"a\\nb\"}\n",
     "t.yaml:1:16: upload.host must not contain control characters ('a\\x0ab')"},
    {"upload:\n  header: {X-A: b}\n",
     "t.yaml:2:3: unknown key 'upload.header' (did you mean 'headers'?)"},
    /* rules between options, at the option that is set */
    {"upload:\n  basic_auth:\n    username: u\n",
     "t.yaml:3:15: upload.basic_auth.username needs upload.basic_auth.password_file"},
    {"upload:\n  basic_auth:\n    password_file: /p\n",
     "t.yaml:3:20: upload.basic_auth.password_file needs upload.basic_auth.username"},
    {"upload:\n  bearer_token_file: /t\n  basic_auth: {username: u, password_file: /p}\n",
     "t.yaml:2:22: upload.bearer_token_file and upload.basic_auth cannot both be set; use one"},
    {"upload:\n  basic_auth: {username: u, password_file: /p}\n  bearer_token_file: /t\n",
     "t.yaml:3:22: upload.bearer_token_file and upload.basic_auth cannot both be set; use one"},
    {"upload:\n  labels: {env: 'a,b'}\n  api: ingest\n",
     "t.yaml:2:17: upload.labels.env must not contain ',' or '}' when upload.api is ingest (the "
     "/ingest endpoint cannot escape them)"},
    {"upload:\n  backoff: {min: 2s, max: 1s}\n",
     "t.yaml:2:27: upload.backoff.max must be >= upload.backoff.min (2s)"},
    {"upload:\n  backoff: {min: 90s}\n",
     "t.yaml:2:18: upload.backoff.min must be <= upload.backoff.max (1m)"},
    {"upload:\n  api: ingest\n  labels:\n    ok: fine\n    brace: 'x}'\n",
     "t.yaml:5:12: upload.labels.brace must not contain ',' or '}' when upload.api is ingest "
     "(the /ingest endpoint cannot escape them)"},
};

TEST(each_rule_at_its_position)
{
    CHECK_EQ_INT(one_errors_failed(one_errors, ISOPROF_ARRAY_SIZE(one_errors)), 0);
}

/* The text of n "    <prefix><i>: <value>" lines under `upload: <map>:`. */
static char *many_entries(const char *map, const char *prefix, int n, const char *value)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    fprintf(f, "upload:\n  %s:\n", map);
    for (int i = 0; i < n; i++)
        fprintf(f, "    %s%d: %s\n", prefix, i, value);
    fclose(f);
    return text;
}

TEST(entry_limits)
{
    char *why;
    /* 32 headers and 20 labels are fine, one more is not (reported at it) */
    char *text = many_entries("headers", "X-H", 32, "v");
    REQUIRE(text != NULL);
    struct cfg *c = load(text, &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->upload.headers.n, 32);
    CHECK_STR(c->upload.headers.items[31].key, "X-H31");
    cfg_free(c);
    free(text); /* banned-ok: allocated by open_memstream */
    text = many_entries("headers", "X-H", 40, "v");
    CHECK(load(text, &why) == NULL);
    CHECK_EQ_INT(count_lines(why), 1);
    CHECK(has_line(why, "t.yaml:35:5: upload.headers has more than 32 entries"));
    isoprof_free(why);
    free(text); /* banned-ok: allocated by open_memstream */
    text = many_entries("labels", "l", 20, "v");
    c = load(text, &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(c->upload.labels.n, 20);
    cfg_free(c);
    free(text); /* banned-ok: allocated by open_memstream */
    text = many_entries("labels", "l", 21, "v");
    CHECK(load(text, &why) == NULL);
    CHECK(has_line(why, "t.yaml:23:5: upload.labels has more than 20 entries"));
    isoprof_free(why);
    free(text); /* banned-ok: allocated by open_memstream */

    /* lengths: names 64 (headers) and 1024 (labels), values 1024 and 2048 bytes */
    size_t big = 4096;
    char *name = isoprof_malloc(big), *value = isoprof_malloc(big), *doc = isoprof_malloc(3 * big);
    REQUIRE(name != NULL && value != NULL && doc != NULL);
    static const struct {
        const char *map;
        size_t nlen, vlen;
        const char *want; /* NULL: valid */
    } cases[] = {
        {"headers", 64, 1024, NULL},
        {"headers", 65, 1,
         "t.yaml:3:7: upload.headers name "
         "'XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX...' "
         "must be 1 to 64 bytes long"},
        {"headers", 1, 1025, "t.yaml:4:7: upload.headers.X is longer than 1024 bytes"},
        {"labels", 1024, 2048, NULL},
        {"labels", 1025, 1,
         "t.yaml:3:7: upload.labels name "
         "'XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX...' "
         "is longer than 1024 bytes"},
        {"labels", 1, 2049, "t.yaml:4:7: upload.labels.X is longer than 2048 bytes"},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(cases); i++) {
        memset(name, 'X', cases[i].nlen);
        name[cases[i].nlen] = '\0';
        memset(value, 'v', cases[i].vlen);
        value[cases[i].vlen] = '\0';
        /* explicit keys: YAML caps implicit ones at 1024 characters */
        snprintf(doc, 3 * big, "upload:\n  %s:\n    ? %s\n    : %s\n", cases[i].map, name, value);
        c = load(doc, &why);
        if (cases[i].want == NULL) {
            CHECK(c != NULL);
        } else if (!has_line(why, cases[i].want) || count_lines(why) != 1) {
            fprintf(stderr, "case %zu: want\n  %s\ngot\n  %s\n", i, cases[i].want,
                    why ? why : "(null)");
            test_failed_ = 1;
        }
        cfg_free(c);
        isoprof_free(why);
    }
    isoprof_free(name);
    isoprof_free(value);
    isoprof_free(doc);

    /* the URL's own bound */
    char url[2100];
    memcpy(url, "upload: {url: 'http://h/", 24);
    memset(url + 24, 'p', 2040);
    snprintf(url + 24 + 2040, sizeof(url) - 24 - 2040, "'}\n");
    CHECK(load(url, &why) == NULL);
    CHECK(has_line(why, "t.yaml:1:15: upload.url is longer than 2048 bytes"));
    isoprof_free(why);
}

/* Label values come from libyaml, which only hands out valid UTF-8; the
 * check stands on its own all the same. */
TEST(label_values_are_utf8)
{
    char buf[256];
    static const char *bad[] = {"\xff",
                                "a\xc3",
                                "\xc0\xaf",
                                "\xe0\x80\xaf",
                                "\xed\xa0\x80",
                                "\xf4\x90\x80\x80",
                                "\xf5\x80\x80\x80",
                                "\x80"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(bad); i++)
        CHECK(cfg_upload_check_label(bad[i], strlen(bad[i]), 0, NULL, buf, sizeof(buf)) != NULL);
    static const char *good[] = {"",
                                 "prod",
                                 "pr\xc3\xb6\x64", /* "pr\u00f6d" */
                                 "\xe2\x82\xac",
                                 "\xf0\x9f\x94\xa5",
                                 "\xf4\x8f\xbf\xbf",
                                 "a,b}"};
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(good); i++)
        CHECK(cfg_upload_check_label(good[i], strlen(good[i]), 0, NULL, buf, sizeof(buf)) == NULL);
}

TEST(problems_together_in_file_order)
{
    const char *text = "upload:\n"
                       "  url: 'gopher://x'\n" /* 2:8 scheme */
                       "  api: ingest\n"
                       "  bearer_token_file: /t\n" /* 4:22 both auth kinds */
                       "  basic_auth:\n"
                       "    username: u\n" /* 6:15 no password_file */
                       "  headers:\n"
                       "    Host: h\n"      /* 8:5 reserved */
                       "    X-A: \"\\n\"\n" /* 9:10 control character */
                       "  labels:\n"
                       "    env: 'a,b'\n" /* 11:10 ingest */
                       "    __x: y\n";    /* 12:5 reserved prefix */
    char *why;
    CHECK(load(text, &why) == NULL);
    REQUIRE(why != NULL);
    static const char *want[] = {
        "t.yaml:2:8: upload.url 'gopher://x' is not an http:// or https:// URL: it must start "
        "with http:// or https://",
        "t.yaml:4:22: upload.bearer_token_file and upload.basic_auth cannot both be set; use one",
        "t.yaml:6:15: upload.basic_auth.username needs upload.basic_auth.password_file",
        "t.yaml:8:5: upload.headers name 'Host' is set by the agent",
        "t.yaml:9:10: upload.headers.X-A must not contain control characters (CR, LF, ...) other "
        "than tab",
        "t.yaml:12:5: upload.labels name '__x' must not start with __ (reserved for the server)",
    };
    /* the ingest rule is skipped: labels holds an invalid entry */
    CHECK_EQ_INT(count_lines(why), ISOPROF_ARRAY_SIZE(want));
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(want); i++) {
        if (!has_line(why, want[i])) {
            fprintf(stderr, "missing\n  %s\ngot\n%s\n", want[i], why);
            test_failed_ = 1;
        }
    }
    isoprof_free(why);

    /* an invalid api skips the ingest rule too */
    CHECK(load("upload: {api: legacy, labels: {env: 'a,b'}}\n", &why) == NULL);
    CHECK_EQ_INT(count_lines(why), 1);
    CHECK(has_prefix(why, "t.yaml:1:15: upload.api must be push or ingest"));
    isoprof_free(why);
}

/* Secrets must never reach a message, whatever else is wrong. */
TEST(secrets_are_never_echoed)
{
    static const char *texts[] = {
        "upload: {url: 'https://alice:s3cr3t@example.com/'}\n",
        "upload: {url: 'https://alice:s3cr3t@exa mple.com/?q#f'}\n",
        "upload: {url: \"https://alice:s3cr3t@example.com/\\n\"}\n",
        "upload: {url: 'http:/alice:s3cr3t@example.com'}\n",
        "upload: {url: 'alice:s3cr3t@example.com:4040'}\n",
        "upload: {url: 'ftp://alice:s3cr3t@example.com'}\n",
        "upload: {url: 'https://example.com/p?token=s3cr3t'}\n",
        "upload: {url: 'https://example.com/p#s3cr3t'}\n",
        "upload: {headers: {Authorization: 'Bearer s3cr3t'}}\n",
        "upload: {headers: {X-Token: \"Bearer s3cr3t\\r\\n\"}}\n",
        "upload: {headers: {X-Token: \"Bearer s3cr3t\\u0001\"}}\n",
        "upload: {headers: {X-Token: \"Bearer s3cr3t\\0\"}}\n",
        "upload: {headers: {X-Token: [Bearer s3cr3t]}}\n",
        "upload: {headers: {X-Token: {Bearer: s3cr3t}}}\n",
        "upload: {headers: {X-Token: 'Bearer s3cr3t', X-Token: 'Bearer s3cr3t'}}\n",
        "upload: {headers: {'bad name': 'Bearer s3cr3t'}}\n",
        "upload: {headers: 'Authorization: Bearer s3cr3t'}\n",
        "upload: {header: {Authorization: 'Bearer s3cr3t'}}\n",
        "upload: {basic_auth: {username: alice, password: s3cr3t}}\n",
        "upload: {bearer_token: s3cr3t}\n",
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(texts); i++) {
        char *why = NULL;
        struct cfg *c = load(texts[i], &why);
        CHECK(c == NULL);
        CHECK(why != NULL);
        if (why != NULL && (strstr(why, "s3cr3t") != NULL || strstr(why, "alice:") != NULL)) {
            fprintf(stderr, "text %zu leaks: %s\n", i, why);
            test_failed_ = 1;
        }
        isoprof_free(why);
        cfg_free(c);
    }
    char *why;
    CHECK(load("upload: {url: 'https://alice:s3cr3t@example.com/'}\n", &why) == NULL);
    CHECK_STR(why, "t.yaml:1:15: upload.url must not hold credentials; use upload.basic_auth");
    isoprof_free(why);

    /* a long value: the length message does not quote it either */
    char text[1200];
    int n = snprintf(text, sizeof(text), "upload: {headers: {X-Token: 'Bearer s3cr3t");
    memset(text + n, 'x', 1100);
    snprintf(text + n + 1100, sizeof(text) - (size_t)n - 1100, "'}}\n");
    CHECK(load(text, &why) == NULL);
    CHECK(why != NULL && strstr(why, "s3cr3t") == NULL);
    CHECK(has_line(why, "t.yaml:1:29: upload.headers.X-Token is longer than 1024 bytes"));
    isoprof_free(why);
}

TEST(reload_applies_upload_options_but_the_url)
{
    char *why;
    struct cfg *d, *c = load(full_section, &why);
    REQUIRE(c != NULL);
    REQUIRE(cfg_defaults(&d) == 0);
    /* every upload option changed but bearer_token_file: only the url
     * needs a restart (the store queues windows only if it was opened with
     * upload on); the rest the agent applies live */
    CHECK_EQ_INT(cfg_check_reload(d, c, &why), ISOPROF_ECONFIG);
    CHECK_EQ_INT(count_lines(why), 1);
    CHECK(has_line(why,
                   "t.yaml: upload.url changed (\"\" -> https://profiles-prod-001.grafana.net/); "
                   "restart to apply"));
    isoprof_free(why);

    /* header and label changes reload, whatever their values */
    static const char *pairs[][2] = {
        {"upload: {headers: {X-A: 'Bearer s3cr3t'}}\n", "upload: {headers: {X-A: 'Bearer n3w'}}\n"},
        {"upload: {labels: {a: x, b: y}}\n", "upload: {labels: {b: y, a: x}}\n"},
        {"upload: {api: push, timeout: 1s}\n", "upload: {api: ingest, timeout: 2s}\n"},
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(pairs); i++) {
        struct cfg *a = load(pairs[i][0], &why), *b = load(pairs[i][1], &why);
        REQUIRE(a != NULL && b != NULL);
        CHECK_EQ_INT(cfg_check_reload(a, b, &why), 0);
        CHECK(why == NULL);
        cfg_free(a);
        cfg_free(b);
    }
    CHECK_EQ_INT(cfg_check_reload(c, c, &why), 0);
    cfg_free(c);
    cfg_free(d);
}

/* What the agent compares on a reload to decide whether to restart its
 * uploader: every upload option, from the table; nothing outside it. */
TEST(section_equal_reads_every_upload_option)
{
    char *why;
    struct cfg *d, *c = load(full_section, &why);
    REQUIRE(c != NULL);
    REQUIRE(cfg_defaults(&d) == 0);
    CHECK(cfg_section_equal(c, c, "upload"));
    CHECK(cfg_section_equal(d, d, "upload"));
    CHECK(!cfg_section_equal(d, c, "upload"));
    /* one option of each kind changed alone: a number, a duration, a
     * nested one, a string, a boolean, a map (order counts), a path */
    static const char *changed[] = {
        "upload: {batch: {max_profiles: 7}}\n",
        "upload: {backoff: {max: 3m}}\n",
        "upload: {host: web-2}\n",
        "upload: {isolate_label: true}\n",
        "upload: {tls: {insecure_skip_verify: true}}\n",
        "upload: {labels: {a: x}}\n",
        "upload: {bearer_token_file: /run/secrets/t}\n",
        "upload: {max_rate: 1KiB}\n",
    };
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(changed); i++) {
        struct cfg *x = load(changed[i], &why);
        REQUIRE(x != NULL);
        CHECK(!cfg_section_equal(d, x, "upload"));
        CHECK(cfg_section_equal(x, x, "upload"));
        cfg_free(x);
    }
    /* options of other sections, and a section that only shares a prefix
     * of the name, do not count */
    struct cfg *o = load("sampling: {cpu: {period: 2m}}\nlog: {level: debug}\n", &why);
    REQUIRE(o != NULL);
    CHECK(cfg_section_equal(d, o, "upload"));
    CHECK(!cfg_section_equal(d, o, "sampling"));
    CHECK(cfg_section_equal(d, o, "sampling.cpu.dur"));
    cfg_free(o);
    cfg_free(c);
    cfg_free(d);
}

int main(void)
{
    RUN(defaults);
    RUN(full_section_round_trips);
    RUN(accepted_values);
    RUN(empty_and_unset_maps_are_the_defaults);
    RUN(each_rule_at_its_position);
    RUN(entry_limits);
    RUN(label_values_are_utf8);
    RUN(problems_together_in_file_order);
    RUN(secrets_are_never_echoed);
    RUN(reload_applies_upload_options_but_the_url);
    RUN(section_equal_reads_every_upload_option);
    TEST_EXIT();
}
