/* Lookups by binary search: a large sorted array of keys is searched for each query (its first
 * probes always land on the same few keys, its last ones anywhere), and a hit reads the key's
 * record from a parallel array of wider records. Queries are independent of each other; within
 * one, each probe waits for the one before.
 * Usage: binsearch [keys, thousands] [queries, thousands]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint64_t fields[4];
} record;

int main(int argc, char **argv) {
    size_t n = (argc > 1 ? (size_t)atol(argv[1]) : 1000) * 1000;
    long queries = (argc > 2 ? atol(argv[2]) : 300) * 1000;
    uint64_t *keys = TMC_MALLOC(n * sizeof(uint64_t), "sorted_keys");
    record *records = TMC_MALLOC(n * sizeof(record), "records");
    if (!keys || !records) return 1;
    uint64_t key = 0;
    for (size_t i = 0; i < n; i++) {
        key += 1 + next_random() % 7; /* strictly increasing, with gaps */
        keys[i] = key;
        records[i].fields[0] = i;
        records[i].fields[3] = key;
    }
    uint64_t found = 0;
    for (long q = 0; q < queries; q++) {
        uint64_t want = next_random() % (key + 1);
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (keys[mid] < want)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < n && keys[lo] == want) found += records[lo].fields[0];
    }
    report("binsearch", found);
    return 0;
}
