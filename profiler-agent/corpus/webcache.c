/* An object cache in front of a web service: a hash index of object ids, small objects (a few
 * hundred bytes) fetched with a strong popularity skew, a few large bodies streamed whole by a
 * small share of requests, and an access log appended by every request and never read.
 * Usage: webcache [small objects, thousands] [large bodies] [requests] [percent large]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

#define SMALL_BYTES 256
#define LARGE_BYTES (32 * 1024)

typedef struct {
    uint64_t id;
    uint64_t where; /* small: object number; large: body number with the top bit set */
} index_slot;

static inline uint64_t mix(uint64_t x) {
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

int main(int argc, char **argv) {
    size_t small = (argc > 1 ? (size_t)atol(argv[1]) : 100) * 1000;
    size_t large = argc > 2 ? (size_t)atol(argv[2]) : 512;
    long requests = argc > 3 ? atol(argv[3]) : 500000;
    int large_percent = argc > 4 ? atoi(argv[4]) : 1;
    size_t objects = small + large;
    size_t slots = 1;
    while (slots < objects * 2) slots <<= 1;
    size_t log_words = 8 * 1024 * 1024 / sizeof(uint64_t);

    index_slot *index = TMC_CALLOC(slots, sizeof(index_slot), "object_index");
    uint64_t *smalls = TMC_MALLOC(small * SMALL_BYTES, "small_objects");
    uint64_t *bodies = TMC_MALLOC(large * LARGE_BYTES, "large_bodies");
    uint64_t *log = TMC_MALLOC(log_words * sizeof(uint64_t), "access_log");
    if (!index || !smalls || !bodies || !log) return 1;

    size_t small_words = SMALL_BYTES / sizeof(uint64_t), large_words = LARGE_BYTES / sizeof(uint64_t);
    for (size_t o = 0; o < objects; o++) {
        uint64_t id = o + 1;
        size_t at = (size_t)(mix(id) & (slots - 1));
        while (index[at].id) at = (at + 1) & (slots - 1);
        index[at].id = id;
        index[at].where = o < small ? o : ((o - small) | (1ull << 63));
        if (o < small) smalls[o * small_words] = id;
        else bodies[(o - small) * large_words] = id;
    }

    uint64_t sum = 0, log_at = 0;
    for (long r = 0; r < requests; r++) {
        uint64_t u = next_random();
        uint64_t id;
        if ((int)(u % 100) < large_percent) {
            id = small + 1 + (u >> 8) % large;
        } else {
            /* Popularity: the cube of a uniform draw puts most requests on a few objects. */
            double x = (double)((u >> 11) & ((1ull << 40) - 1)) / (double)(1ull << 40);
            id = 1 + (uint64_t)(x * x * x * (double)small);
        }
        size_t at = (size_t)(mix(id) & (slots - 1));
        while (index[at].id != id) at = (at + 1) & (slots - 1);
        uint64_t where = index[at].where;
        if (where >> 63) {
            uint64_t *body = bodies + (where & ~(1ull << 63)) * large_words;
            for (size_t w = 0; w < large_words; w += 8) sum += body[w];
        } else {
            uint64_t *obj = smalls + where * small_words;
            for (size_t w = 0; w < small_words; w += 8) sum += obj[w];
        }
        for (int w = 0; w < 4; w++) log[(log_at + w) % log_words] = id + (uint64_t)w;
        log_at = (log_at + 4) % log_words;
    }
    report("webcache", sum);
    return 0;
}
