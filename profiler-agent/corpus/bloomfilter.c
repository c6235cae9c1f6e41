/* A filter in front of a large table: a Bloom filter (a few bits per key, three probes) answers
 * most lookups, and only the keys it lets through (those present, and its false positives) go on
 * to an open-addressing table of wide records several times larger. The filter is small and hot;
 * the table is large and touched by a minority of lookups.
 * Production size: 8Gi
 * Usage: bloomfilter [table MiB] [lookups] [percent of lookups for present keys]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint64_t key;
    uint64_t fields[7];
} record;

static inline uint64_t mix(uint64_t x, uint64_t salt) {
    x ^= salt;
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 32;
    long lookups = argc > 2 ? atol(argv[2]) : 1000000;
    int present = argc > 3 ? atoi(argv[3]) : 10;
    size_t slots = mib * 1024 * 1024 / sizeof(record);
    size_t keys = slots / 2; /* half full */
    size_t bits = keys * 10;  /* ten bits per key, three probes: about 2 % false positives */
    record *table = TMC_CALLOC(slots, sizeof(record), "record_table");
    uint64_t *filter = TMC_CALLOC((bits + 63) / 64, sizeof(uint64_t), "bloom_filter");
    if (!table || !filter) return 1;
    for (size_t k = 1; k <= keys; k++) {
        uint64_t key = k * 2; /* present keys are even */
        for (uint64_t s = 1; s <= 3; s++) {
            uint64_t b = mix(key, s) % bits;
            filter[b / 64] |= 1ull << (b % 64);
        }
        size_t at = (size_t)(mix(key, 0) % slots);
        while (table[at].key) at = (at + 1) % slots;
        table[at].key = key;
        table[at].fields[0] = k;
    }
    uint64_t found = 0, passed = 0;
    for (long r = 0; r < lookups; r++) {
        uint64_t u = next_random();
        /* Present keys are even, absent ones odd. */
        uint64_t id = (u >> 8) % keys;
        uint64_t key = (int)(u % 100) < present ? 2 * (id + 1) : 2 * id + 1;
        int maybe = 1;
        for (uint64_t s = 1; s <= 3 && maybe; s++) {
            uint64_t b = mix(key, s) % bits;
            maybe = (int)((filter[b / 64] >> (b % 64)) & 1);
        }
        if (!maybe) continue;
        passed++;
        size_t at = (size_t)(mix(key, 0) % slots);
        while (table[at].key && table[at].key != key) at = (at + 1) % slots;
        if (table[at].key == key) found += table[at].fields[0];
    }
    report("bloomfilter", found + passed);
    return 0;
}
