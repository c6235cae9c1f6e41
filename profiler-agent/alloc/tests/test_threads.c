/* The shim under concurrency: threads allocate, check and free blocks of shared tags, and hand
 * blocks to each other so that a block is often freed by another thread than its allocator. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tmc_alloc.h"

enum { THREADS = 8, SLOTS = 256, OPS = 60000, SHARED = 64 };
static const char *TAGS[] = {"t0", "t1", "t2", "t3"};
static void *shared[SHARED];
static int failed;

struct block {
    uint32_t size;
    uint8_t fill;
    uint8_t tag;
};

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int verify(void *p) {
    struct block *b = p;
    const char *t = tmc_tag_of(p);
    if (!t || strcmp(t, TAGS[b->tag])) return 0;
    unsigned char *bytes = p;
    for (uint32_t i = sizeof *b; i < b->size; i += 61)
        if (bytes[i] != b->fill) return 0;
    return 1;
}

static void *make(uint64_t *rng) {
    uint64_t r = next(rng);
    uint32_t size = sizeof(struct block) + (uint32_t)(r % 2000);
    if (r % 997 == 0) size = 70000;
    if (r % 20011 == 0) size = 3u << 20;
    uint8_t tag = (uint8_t)(r >> 20) % 4;
    struct block *b;
    if ((r >> 30) % 3 == 0) {
        /* Plain malloc inside a scope exercises the interposed path and the TLS scope stack. */
#ifndef TMC_NO_INTERPOSE
        tmc_scope_begin(TAGS[tag]);
        b = malloc(size);
        tmc_scope_end();
#else
        b = tmc_malloc(size, TAGS[tag]);
#endif
    } else {
        b = tmc_malloc(size, TAGS[tag]);
    }
    if (!b) return NULL;
    b->size = size;
    b->fill = (uint8_t)r;
    b->tag = tag;
    memset((char *)b + sizeof *b, b->fill, size - sizeof *b);
    return b;
}

static void *worker(void *arg) {
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(uintptr_t)(arg) + 1;
    void *slots[SLOTS] = {0};
    for (int op = 0; op < OPS; op++) {
        uint64_t r = next(&rng);
        void **slot = &slots[r % SLOTS];
        if ((r >> 40) % 8 == 0) slot = &shared[(r >> 20) % SHARED];
        void *mine = __atomic_exchange_n(slot, NULL, __ATOMIC_ACQ_REL);
        if (mine) {
            if (!verify(mine)) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
            tmc_free(mine);
        } else {
            void *b = make(&rng);
            if (!b) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
            void *old = __atomic_exchange_n(slot, b, __ATOMIC_ACQ_REL);
            if (old) tmc_free(old);
        }
    }
    for (int i = 0; i < SLOTS; i++)
        if (slots[i]) {
            if (!verify(slots[i])) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
            tmc_free(slots[i]);
        }
    return NULL;
}

int main(void) {
    if (!tmc_malloc) {
        fprintf(stderr, "the shim is not loaded\n");
        return 2;
    }
    pthread_t th[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < SHARED; i++)
        if (shared[i]) {
            if (!verify(shared[i])) failed = 1;
            tmc_free(shared[i]);
        }
    if (failed) {
        fprintf(stderr, "test_threads: a block lost its content or tag\n");
        return 1;
    }
    puts("test_threads ok");
    return 0;
}
