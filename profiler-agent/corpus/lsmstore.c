/* A log-structured key-value store: puts go to a hash memtable and are appended to a
 * write-ahead log that is never read back; older keys live in sorted runs, each with a Bloom
 * filter in front. Most gets ask for recent keys and are answered by the memtable; the rest
 * check the runs' filters newest first and binary-search the run that may hold the key.
 * Usage: lsmstore [run MiB] [runs] [operations] [percent of gets for old keys]
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint64_t key;
    uint64_t value[7];
} row;

typedef struct {
    uint64_t key;
    uint64_t value;
} slot;

static inline uint64_t mix(uint64_t x, uint64_t salt) {
    x ^= salt;
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 31);
}

int main(int argc, char **argv) {
    size_t run_mib = argc > 1 ? (size_t)atol(argv[1]) : 8;
    size_t nruns = argc > 2 ? (size_t)atol(argv[2]) : 4;
    long operations = argc > 3 ? atol(argv[3]) : 600000;
    int old_percent = argc > 4 ? atoi(argv[4]) : 10;
    size_t per_run = run_mib * 1024 * 1024 / sizeof(row);
    size_t filter_bits = per_run * 10; /* ten bits a key, three probes */
    size_t filter_words = (filter_bits + 63) / 64;
    size_t mem_slots = 1 << 16;          /* 1 MiB of 16-byte slots, kept under half full */
    size_t wal_bytes = 16 * 1024 * 1024; /* a ring: the oldest records are overwritten */

    row *runs = TMC_MALLOC(nruns * per_run * sizeof(row), "sorted_runs");
    uint64_t *filters = TMC_CALLOC(nruns * filter_words, sizeof(uint64_t), "run_filters");
    slot *memtable = TMC_CALLOC(mem_slots, sizeof(slot), "memtable");
    uint64_t *wal = TMC_MALLOC(wal_bytes, "write_ahead_log");
    if (!runs || !filters || !memtable || !wal) return 1;

    /* Run r holds keys r, r + nruns, r + 2 nruns, ... in order: every run covers the key space. */
    for (size_t r = 0; r < nruns; r++) {
        row *run = runs + r * per_run;
        uint64_t *filter = filters + r * filter_words;
        for (size_t i = 0; i < per_run; i++) {
            uint64_t key = (uint64_t)(i * nruns + r) * 2 + 2; /* old keys are even */
            run[i].key = key;
            run[i].value[0] = key ^ 0x5555;
            for (uint64_t s = 1; s <= 3; s++) {
                uint64_t b = mix(key, s) % filter_bits;
                filter[b / 64] |= 1ull << (b % 64);
            }
        }
    }
    uint64_t old_keys = (uint64_t)(nruns * per_run);

    uint64_t next_new = 1, sum = 0, wal_at = 0, in_memtable = 0;
    size_t wal_words = wal_bytes / sizeof(uint64_t);
    for (long op = 0; op < operations; op++) {
        uint64_t u = next_random();
        if (u % 100 < 30 || in_memtable == 0) {
            /* A put of a new key (odd): the memtable, and eight words of log. */
            uint64_t key = next_new * 2 + 1;
            next_new++;
            if (in_memtable >= mem_slots / 2) { /* flushed: a new memtable (the old one is a run) */
                memset(memtable, 0, mem_slots * sizeof(slot));
                in_memtable = 0;
            }
            size_t at = (size_t)(mix(key, 0) % mem_slots);
            while (memtable[at].key) at = (at + 1) % mem_slots;
            memtable[at].key = key;
            memtable[at].value = u;
            in_memtable++;
            for (int w = 0; w < 8; w++) wal[(wal_at + w) % wal_words] = key + w;
            wal_at = (wal_at + 8) % wal_words;
            continue;
        }
        uint64_t key;
        if ((int)((u >> 8) % 100) < old_percent) {
            key = ((u >> 16) % old_keys) * 2 + 2;
        } else { /* a recent key, one still in the memtable */
            uint64_t back = 1 + (u >> 16) % (in_memtable ? in_memtable : 1);
            key = (next_new - back) * 2 + 1;
        }
        size_t at = (size_t)(mix(key, 0) % mem_slots);
        while (memtable[at].key && memtable[at].key != key) at = (at + 1) % mem_slots;
        if (memtable[at].key == key) {
            sum += memtable[at].value;
            continue;
        }
        for (size_t r = nruns; r-- > 0;) {
            uint64_t *filter = filters + r * filter_words;
            int maybe = 1;
            for (uint64_t s = 1; s <= 3 && maybe; s++) {
                uint64_t b = mix(key, s) % filter_bits;
                maybe = (int)((filter[b / 64] >> (b % 64)) & 1);
            }
            if (!maybe) continue;
            row *run = runs + r * per_run;
            size_t lo = 0, hi = per_run;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (run[mid].key < key) lo = mid + 1;
                else hi = mid;
            }
            if (lo < per_run && run[lo].key == key) {
                sum += run[lo].value[0];
                break;
            }
        }
    }
    report("lsmstore", sum + wal[wal_at]);
    return 0;
}
