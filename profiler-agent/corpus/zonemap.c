/* A filter in front of a large table: a column of values, nearly ordered (a clustered load),
 * stored in blocks of 1024 rows with a zone map (each block's least and greatest value) in
 * front. Each query asks for the rows in a narrow range of values: it reads the whole zone map,
 * scans only the blocks whose range meets the query's, and for each matching row follows its
 * row id into a wide table of records, in no order.
 * Usage: zonemap [rows, thousands] [queries]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

#define BLOCK 1024

typedef struct zone {
    int32_t least, greatest;
} zone;

typedef struct record {
    uint64_t id;
    uint64_t fields[3];
} record;

int main(int argc, char **argv) {
    size_t rows = (argc > 1 ? (size_t)atol(argv[1]) : 1000) * 1000;
    size_t queries = argc > 2 ? (size_t)atol(argv[2]) : 3000;
    /* Values reach 4 x rows + 6000 and must stay within int32; row ids are 32-bit. */
    if (rows == 0 || rows > (INT32_MAX - 6000) / 4) return 2;
    size_t blocks = (rows + BLOCK - 1) / BLOCK;
    int32_t *values = TMC_MALLOC(rows * sizeof(int32_t), "value_column");
    uint32_t *row_ids = TMC_MALLOC(rows * sizeof(uint32_t), "row_ids");
    record *table = TMC_MALLOC(rows * sizeof(record), "record_table");
    zone *zones = TMC_MALLOC(blocks * sizeof(zone), "zone_map");
    if (!values || !row_ids || !table || !zones) return 1;
    for (size_t r = 0; r < rows; r++) {
        values[r] = (int32_t)(r * 4 + next_random() % 6000);
        row_ids[r] = (uint32_t)(next_random() % rows);
        table[r].id = r;
        table[r].fields[0] = next_random();
    }
    for (size_t b = 0; b < blocks; b++) {
        zones[b].least = INT32_MAX;
        zones[b].greatest = INT32_MIN;
        for (size_t r = b * BLOCK; r < rows && r < (b + 1) * BLOCK; r++) {
            if (values[r] < zones[b].least) zones[b].least = values[r];
            if (values[r] > zones[b].greatest) zones[b].greatest = values[r];
        }
    }
    uint64_t checksum = 0, matched = 0;
    for (size_t q = 0; q < queries; q++) {
        double x = (double)(next_random() >> 11) / (double)(1ull << 53);
        int32_t low = (int32_t)(x * x * (double)rows * 4.0);
        int32_t high = low + 600;
        for (size_t b = 0; b < blocks; b++) {
            if (zones[b].greatest < low || zones[b].least > high) continue;
            for (size_t r = b * BLOCK; r < rows && r < (b + 1) * BLOCK; r++) {
                if (values[r] < low || values[r] > high) continue;
                record *t = &table[row_ids[r]];
                checksum += t->fields[0] & 0xff;
                matched++;
            }
        }
    }
    report("zonemap", checksum + matched);
    return 0;
}
