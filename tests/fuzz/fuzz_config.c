/* libFuzzer target: arbitrary bytes as a config file. Whatever the input,
 * the loader returns a config or an error and frees everything. */
#include "base.h"
#include "config.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cfg *c = NULL;
    char *why = NULL;
    if (cfg_load_buffer("fuzz.yaml", (const char *)data, size, &c, &why) == 0)
        cfg_free(c);
    isoprof_free(why);
    return 0;
}
