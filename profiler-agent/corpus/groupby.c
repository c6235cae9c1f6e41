/* Hash aggregation: a fact table of (group, amount) rows is generated once, then scanned in
 * order and folded into an open-addressing table of groups (sum, count, min, max), a few
 * groups drawing most rows and a long tail the rest; the result is written out compacted to
 * an output array nobody reads back.
 * Usage: groupby [rows, thousands] [groups, thousands]
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct row {
    uint64_t group;
    int64_t amount;
} row;

typedef struct slot {
    uint64_t group; /* 0: empty */
    int64_t sum;
    int64_t min, max;
    uint64_t count;
    uint64_t pad[3];
} slot;

int main(int argc, char **argv) {
    size_t rows = (argc > 1 ? (size_t)atol(argv[1]) : 1500) * 1000;
    size_t groups = (argc > 2 ? (size_t)atol(argv[2]) : 150) * 1000;
    size_t slots = 1;
    while (slots < 2 * groups) slots <<= 1;
    row *facts = TMC_MALLOC(rows * sizeof(row), "fact_rows");
    slot *table = TMC_CALLOC(slots, sizeof(slot), "group_table");
    slot *out = TMC_MALLOC(groups * sizeof(slot), "result_rows");
    if (!facts || !table || !out) return 1;
    for (size_t r = 0; r < rows; r++) {
        double x = (double)(next_random() >> 11) / (double)(1ull << 53);
        facts[r].group = (uint64_t)(x * x * x * (double)groups) * 0x9E3779B97F4A7C15ull + 1;
        facts[r].amount = (int64_t)(next_random() % 10000) - 5000;
    }
    for (size_t r = 0; r < rows; r++) {
        uint64_t g = facts[r].group;
        size_t i = (size_t)(g >> 20) & (slots - 1);
        while (table[i].group != 0 && table[i].group != g) i = (i + 1) & (slots - 1);
        slot *s = &table[i];
        if (s->group == 0) {
            s->group = g;
            s->min = s->max = facts[r].amount;
        }
        s->sum += facts[r].amount;
        s->count++;
        if (facts[r].amount < s->min) s->min = facts[r].amount;
        if (facts[r].amount > s->max) s->max = facts[r].amount;
    }
    size_t n = 0;
    uint64_t checksum = 0;
    for (size_t i = 0; i < slots; i++) {
        if (table[i].group == 0) continue;
        if (n < groups) out[n++] = table[i];
        checksum += table[i].count * (uint64_t)(table[i].sum & 0xffff);
    }
    report("groupby", checksum + n);
    return 0;
}
