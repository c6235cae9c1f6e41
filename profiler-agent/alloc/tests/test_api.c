/* The shim's explicit API and its C-library interface, single-threaded.
 * Run with the shim preloaded (or, built with -DTMC_NO_INTERPOSE, linked in under ASan). */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tmc_alloc.h"

#define CHUNK ((uintptr_t)2 << 20)
#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                       \
        }                                                                   \
    } while (0)

static int tag_is(const void *p, const char *tag) {
    const char *t = tmc_tag_of(p);
    return t && !strcmp(t, tag);
}

int main(void) {
    if (!tmc_malloc) {
        fprintf(stderr, "the shim is not loaded\n");
        return 2;
    }
    /* Tags live in separate chunks. */
    char *a = TMC_MALLOC(100, "alpha");
    char *b = TMC_MALLOC(100, "beta");
    CHECK(a && b && tag_is(a, "alpha") && tag_is(b, "beta"));
    CHECK(((uintptr_t)a & ~(CHUNK - 1)) != ((uintptr_t)b & ~(CHUNK - 1)));
    CHECK(((uintptr_t)a & 15) == 0);
    memset(a, 1, 100);

    /* Many blocks of one tag: distinct, intact, all tagged. */
    enum { N = 20000 };
    static char *blocks[N];
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 7919 % 3000);
        blocks[i] = TMC_MALLOC(n, "alpha");
        CHECK(blocks[i] && tag_is(blocks[i], "alpha"));
        memset(blocks[i], i & 0xff, n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 7919 % 3000);
        for (size_t j = 0; j < n; j += 97) CHECK((unsigned char)blocks[i][j] == (i & 0xff));
        if (i % 2) TMC_FREE(blocks[i]);
    }
    /* Freed memory comes back within the tag. */
    for (int i = 1; i < N; i += 2) {
        blocks[i] = TMC_MALLOC(64, "alpha");
        CHECK(tag_is(blocks[i], "alpha"));
    }
    for (int i = 0; i < N; i++) TMC_FREE(blocks[i]);

    /* A large block: its own run of 2 MiB-aligned chunks. */
    char *big = TMC_MALLOC((size_t)5 << 20, "big");
    CHECK(big && tag_is(big, "big") && tag_is(big + ((size_t)5 << 20) - 1, "big"));
    CHECK((((uintptr_t)big - 16) & (CHUNK - 1)) == 0);
    memset(big, 7, (size_t)5 << 20);
    big = TMC_REALLOC(big, (size_t)9 << 20, "big");
    CHECK(big && big[(5 << 20) - 1] == 7 && tag_is(big, "big"));
    TMC_FREE(big);

    /* calloc zeroes reused memory; realloc keeps content and tag. */
    char *c = TMC_MALLOC(200, "gamma");
    memset(c, 0xff, 200);
    TMC_FREE(c);
    char *z = TMC_CALLOC(50, 4, "gamma");
    for (int i = 0; i < 200; i++) CHECK(z[i] == 0);
    strcpy(z, "keep me");
    z = TMC_REALLOC(z, 100000, "gamma");
    CHECK(z && !strcmp(z, "keep me") && tag_is(z, "gamma"));
    z = TMC_REALLOC(z, 10, "gamma");
    CHECK(z && !memcmp(z, "keep me", 7));
    TMC_FREE(z);
    volatile size_t huge = (size_t)1 << 62;
    CHECK(TMC_CALLOC(huge, 16, "gamma") == NULL);

    /* Aligned allocations, freed through the back offset. */
    size_t aligns[] = {32, 64, 4096, 65536, (size_t)1 << 20};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        char *p = tmc_aligned_alloc(aligns[i], 1000, "aligned");
        CHECK(p && ((uintptr_t)p & (aligns[i] - 1)) == 0 && tag_is(p, "aligned"));
        memset(p, 3, 1000);
        TMC_FREE(p);
    }

#ifndef TMC_NO_INTERPOSE
    /* Scopes tag plain mallocs; outside a scope they are the C library's (unless auto-tagging). */
    tmc_scope_begin("scoped");
    char *s = malloc(48);
    void *al = NULL;
    CHECK(posix_memalign(&al, 256, 300) == 0 && ((uintptr_t)al & 255) == 0);
    tmc_scope_end();
    CHECK(tag_is(s, "scoped") && tag_is(al, "scoped"));
    CHECK(malloc_usable_size(s) >= 48);
    free(s);
    free(al);
    char *plain = malloc(32);
    const char *auto_env = getenv("TMC_AUTO_TAG");
    if (auto_env && *auto_env == '1') CHECK(tmc_tag_of(plain) && !strncmp(tmc_tag_of(plain), "site:", 5));
    else CHECK(tmc_tag_of(plain) == NULL);
    plain = realloc(plain, 4000);
    free(plain);
    free(NULL);
    free(malloc(0));
    free(realloc(NULL, 10));
#endif
    TMC_FREE(a);
    TMC_FREE(b);
    puts("test_api ok");
    return 0;
}
