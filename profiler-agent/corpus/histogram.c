/* A histogram by scatter: a large array of event records is streamed once, each record's key is
 * hashed into a large table of counters (incremented at random), and every record's weight is
 * also added into one of a few hundred coarse bins kept beside it. The records are read once in
 * order, the counters are written at random, the bins are small and hot.
 * Usage: histogram [records MiB] [counters, thousands] [passes]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint64_t key;
    uint32_t weight;
    uint32_t kind;
} record;

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 24;
    size_t counters = (argc > 2 ? (size_t)atol(argv[2]) : 1500) * 1000;
    int passes = argc > 3 ? atoi(argv[3]) : 2;
    size_t n = mib * 1024 * 1024 / sizeof(record), bins = 256;
    record *events = TMC_MALLOC(n * sizeof(record), "event_records");
    uint64_t *counts = TMC_CALLOC(counters, sizeof(uint64_t), "key_counters");
    uint64_t *coarse = TMC_CALLOC(bins, sizeof(uint64_t), "coarse_bins");
    if (!events || !counts || !coarse) return 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = next_random();
        /* A skewed key space: one key in four from a small popular range. */
        events[i].key = (u & 3) ? (u >> 12) : (u >> 12) % 4096;
        events[i].weight = (uint32_t)(u % 1000);
        events[i].kind = (uint32_t)((u >> 40) % bins);
    }
    for (int p = 0; p < passes; p++) {
        for (size_t i = 0; i < n; i++) {
            size_t slot = (size_t)((events[i].key * 0xD6E8FEB86659FD93ull) >> 17) % counters;
            counts[slot] += events[i].weight;
            coarse[events[i].kind] += 1;
        }
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < counters; i += 64) sum += counts[i];
    for (size_t b = 0; b < bins; b++) sum += coarse[b];
    report("histogram", sum);
    return 0;
}
