/* Update-heavy hash table: open addressing, counters incremented at random keys (a word count
 * or an aggregation), most of the table written back dirty.
 * Usage: hashupdate [table MiB] [updates]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint64_t key;
    uint64_t count;
} slot;

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 8;
    long updates = argc > 2 ? atol(argv[2]) : 1500000;
    size_t slots = mib * 1024 * 1024 / sizeof(slot);
    slot *table = TMC_CALLOC(slots, sizeof(slot), "counts_table");
    uint32_t *keys = TMC_MALLOC((size_t)updates * sizeof(uint32_t), "input_keys");
    if (!table || !keys) return 1;
    uint64_t distinct = slots / 2;
    for (long i = 0; i < updates; i++) keys[i] = (uint32_t)(next_random() % distinct + 1);
    for (long i = 0; i < updates; i++) {
        uint64_t key = keys[i];
        size_t at = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) % slots;
        while (table[at].key != 0 && table[at].key != key) at = (at + 1) % slots;
        table[at].key = key;
        table[at].count++;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < slots; i += 97) sum += table[i].count;
    report("hashupdate", sum);
    return 0;
}
