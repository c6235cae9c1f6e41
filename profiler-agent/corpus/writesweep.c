/* Store-heavy: a large output buffer written in full sweeps (an image or a log being rebuilt),
 * from a small lookup table read at random. Almost every LLC miss is a store.
 * Usage: writesweep [buffer MiB] [sweeps]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 48;
    int sweeps = argc > 2 ? atoi(argv[2]) : 3;
    size_t n = mib * 1024 * 1024 / sizeof(uint64_t);
    size_t table_n = 256 * 1024 / sizeof(uint64_t);
    uint64_t *out = TMC_MALLOC(n * sizeof(uint64_t), "output_buffer");
    uint64_t *table = TMC_MALLOC(table_n * sizeof(uint64_t), "lookup_table");
    if (!out || !table) return 1;
    for (size_t i = 0; i < table_n; i++) table[i] = next_random();
    uint64_t sum = 0;
    for (int s = 0; s < sweeps; s++) {
        for (size_t i = 0; i < n; i++) out[i] = table[(i * 7 + (size_t)s) % table_n] ^ i;
        sum += out[(size_t)(next_random() % n)];
    }
    report("writesweep", sum);
    return 0;
}
