/* A hot set that moves: the data is split into regions and each phase hammers one region with
 * random reads and writes while the others rest; every region is hot for a while and cold
 * the rest of the run (a time-windowed cache, a generational store).
 * Usage: phases [region MiB] [regions] [operations per phase]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 8;
    int regions = argc > 2 ? atoi(argv[2]) : 4;
    long ops = argc > 3 ? atol(argv[3]) : 400000;
    size_t n = mib * 1024 * 1024 / sizeof(uint64_t);
    uint64_t *data = TMC_CALLOC(n * (size_t)regions, sizeof(uint64_t), "regions");
    uint64_t *meta = TMC_CALLOC(64 * 1024, sizeof(uint64_t), "phase_metadata");
    if (!data || !meta) return 1;
    uint64_t sum = 0;
    for (int p = 0; p < regions; p++) {
        uint64_t *region = data + (size_t)p * n;
        for (long i = 0; i < ops; i++) {
            size_t at = (size_t)(next_random() % n);
            if (i & 3)
                sum += region[at];
            else
                region[at] += (uint64_t)i;
            meta[at & (64 * 1024 - 1)]++;
        }
    }
    report("phases", sum + meta[7]);
    return 0;
}
