/* Two tiers of data in one program: a cold 64 MiB array written sparsely once at the start and
 * read once at the end, and a hot 4 MiB open-addressing hash table hit by random lookups and
 * updates in between. The cold array is the part slow memory should take.
 * Usage: twotier [cold MiB] [hot MiB] [operations]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tmc_alloc.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct {
    uint64_t key;
    uint64_t value;
} slot;

int main(int argc, char **argv) {
    size_t cold_mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
    size_t hot_mib = argc > 2 ? (size_t)atol(argv[2]) : 4;
    long ops = argc > 3 ? atol(argv[3]) : 2000000;
    size_t cold_n = cold_mib * 1024 * 1024 / sizeof(uint64_t);
    size_t slots = hot_mib * 1024 * 1024 / sizeof(slot);
    uint64_t *cold = TMC_CALLOC(cold_n, sizeof(uint64_t), "cold_array");
    slot *table = TMC_CALLOC(slots, sizeof(slot), "hot_table");
    if (!cold || !table) return 1;

    /* Sparse write sweep: one word per cache line. */
    for (size_t i = 0; i < cold_n; i += 8) cold[i] = i * 2654435761u;

    uint64_t sum = 0;
    uint64_t keys = slots / 2;
    for (long op = 0; op < ops; op++) {
        uint64_t key = next() % keys + 1;
        size_t at = (size_t)(key * 0x9E3779B97F4A7C15ull >> 20) % slots;
        while (table[at].key != 0 && table[at].key != key) at = (at + 1) % slots;
        if (table[at].key == 0) table[at].key = key;
        if (op & 1)
            table[at].value += op;
        else
            sum += table[at].value;
    }

    /* Read sweep over the cold array at the end. */
    for (size_t i = 0; i < cold_n; i += 8) sum += cold[i];
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
