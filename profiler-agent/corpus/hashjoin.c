/* A hash join: a small dimension table is built into a chained hash table, then a large fact
 * table is scanned once and each row probes the hash table with its foreign key; matching rows
 * add a dimension attribute into a per-group aggregate. The fact table is streamed, the hash
 * table and its chains are probed at random, the aggregates are small and hot.
 * Usage: hashjoin [fact MiB] [dimension rows, thousands] [groups]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint64_t foreign_key;
    uint64_t quantity;
    uint64_t padding[2];
} fact_row;

typedef struct dim_row {
    uint64_t key;
    uint64_t group;
    uint64_t price;
    struct dim_row *next;
} dim_row;

int main(int argc, char **argv) {
    size_t fact_mib = argc > 1 ? (size_t)atol(argv[1]) : 32;
    size_t dims = (argc > 2 ? (size_t)atol(argv[2]) : 200) * 1000;
    size_t groups = argc > 3 ? (size_t)atol(argv[3]) : 64;
    size_t facts = fact_mib * 1024 * 1024 / sizeof(fact_row);
    size_t buckets = 1;
    while (buckets < dims) buckets <<= 1;
    fact_row *fact = TMC_MALLOC(facts * sizeof(fact_row), "fact_table");
    dim_row *rows = TMC_MALLOC(dims * sizeof(dim_row), "dimension_rows");
    dim_row **heads = TMC_CALLOC(buckets, sizeof(dim_row *), "hash_buckets");
    uint64_t *totals = TMC_CALLOC(groups, sizeof(uint64_t), "group_totals");
    if (!fact || !rows || !heads || !totals) return 1;
    for (size_t i = 0; i < facts; i++) {
        uint64_t u = next_random();
        /* Nine rows in ten find a dimension row; keys are 1..2*dims, the present ones odd. */
        fact[i].foreign_key = (u % 10) ? 2 * ((u >> 8) % dims) + 1 : 2 * ((u >> 8) % dims) + 2;
        fact[i].quantity = u % 17;
    }
    /* Build: rows inserted in a shuffled order, so that a chain's rows lie far apart. */
    for (size_t i = 0; i < dims; i++) {
        size_t j = (size_t)(next_random() % (i + 1));
        rows[i] = rows[j];
        rows[j].key = 2 * i + 1;
        rows[j].group = next_random() % groups;
        rows[j].price = 1 + i % 97;
    }
    for (size_t i = 0; i < dims; i++) {
        size_t b = (size_t)((rows[i].key * 0x9E3779B97F4A7C15ull) >> 20) & (buckets - 1);
        rows[i].next = heads[b];
        heads[b] = &rows[i];
    }
    uint64_t matched = 0;
    for (size_t i = 0; i < facts; i++) {
        uint64_t key = fact[i].foreign_key;
        size_t b = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (buckets - 1);
        for (dim_row *d = heads[b]; d; d = d->next) {
            if (d->key == key) {
                totals[d->group] += d->price * fact[i].quantity;
                matched++;
                break;
            }
        }
    }
    uint64_t sum = matched;
    for (size_t g = 0; g < groups; g++) sum += totals[g];
    report("hashjoin", sum);
    return 0;
}
