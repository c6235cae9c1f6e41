/* A small key-value store: a chained hash index of small entries pointing into a value log,
 * Zipf-like popularity (a few keys take most gets), 90 % gets and 10 % puts that append.
 * Usage: kvstore [value log MiB] [requests]
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct entry {
    uint64_t key;
    uint64_t offset;
    struct entry *next;
} entry;

int main(int argc, char **argv) {
    size_t log_mib = argc > 1 ? (size_t)atol(argv[1]) : 32;
    long requests = argc > 2 ? atol(argv[2]) : 1000000;
    size_t value_bytes = 128;
    size_t log_bytes = log_mib * 1024 * 1024;
    size_t keys = log_bytes / value_bytes / 2; /* half the log holds the first versions */
    size_t buckets = keys;
    entry **index = TMC_CALLOC(buckets, sizeof(entry *), "hash_buckets");
    entry *entries = TMC_MALLOC(keys * sizeof(entry), "index_entries");
    char *values = TMC_MALLOC(log_bytes, "value_log");
    if (!index || !entries || !values) return 1;
    size_t tail = 0;
    for (size_t k = 0; k < keys; k++) {
        size_t b = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) % buckets;
        entries[k] = (entry){k, tail, index[b]};
        index[b] = &entries[k];
        memset(values + tail, (int)(k & 0xff), value_bytes);
        tail += value_bytes;
    }
    uint64_t sum = 0;
    for (long r = 0; r < requests; r++) {
        /* Popularity: the square of a uniform draw skews towards small key ids. */
        uint64_t u = next_random() % keys;
        uint64_t key = (u * u) / keys;
        size_t b = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) % buckets;
        entry *e = index[b];
        while (e && e->key != key) e = e->next;
        if (!e) continue;
        if (r % 10 == 0 && tail + value_bytes <= log_bytes) {
            memset(values + tail, (int)(r & 0xff), value_bytes);
            e->offset = tail;
            tail += value_bytes;
        } else {
            const uint64_t *v = (const uint64_t *)(values + e->offset);
            sum += v[0] + v[15];
        }
    }
    report("kvstore", sum);
    return 0;
}
