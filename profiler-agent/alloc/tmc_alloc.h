/* tmc's tagging allocator: explicit API.
 *
 * Every allocation belongs to a tag (a data structure). Each tag is served from its own 2 MiB
 * aligned chunks, so an address maps to exactly one tag; the shim logs those regions so that
 * sampled miss addresses can be attributed, and it places each tag's chunks on the fast or slow
 * NUMA node as a placement plan says (paper §3.1, §3.4, §3.6).
 *
 * Two ways to use it:
 *  - explicitly: link with -ltmcalloc (or LD_PRELOAD it) and call tmc_malloc(size, "tag");
 *  - the TMC_* macros below bind weakly: the program builds and runs with plain malloc when the
 *    shim is absent, and gets tags when it is preloaded. No code change between the two.
 *
 * Environment (read once, at load):
 *   TMC_REGION_LOG=path   write the region log there ("%p" is replaced by the pid)
 *   TMC_AUTO_TAG=1        tag plain malloc/calloc/realloc by call site ("site:<object>:0x<offset>")
 *   TMC_PLAN=path         placement plan: per-tag fast-memory limits, fast and slow node
 *   TMC_TARGET_EXE=path   only the process image running this executable (its /proc/self/exe)
 *                         logs, auto-tags and follows the plan; wrappers that inherit the
 *                         preload pass every call through to the C library
 */
#ifndef TMC_ALLOC_H
#define TMC_ALLOC_H

#include <stddef.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

void *tmc_malloc(size_t size, const char *tag) __attribute__((weak));
void *tmc_calloc(size_t count, size_t size, const char *tag) __attribute__((weak));
void *tmc_realloc(void *ptr, size_t size, const char *tag) __attribute__((weak));
void *tmc_aligned_alloc(size_t alignment, size_t size, const char *tag) __attribute__((weak));
void tmc_free(void *ptr) __attribute__((weak));
/* The tag an address belongs to, or NULL when the shim did not allocate it. */
const char *tmc_tag_of(const void *ptr) __attribute__((weak));
/* Until tmc_scope_end, this thread's plain mallocs get `tag` (e.g. around a library call that
 * allocates on your behalf). Scopes nest up to 16 deep. */
void tmc_scope_begin(const char *tag) __attribute__((weak));
void tmc_scope_end(void) __attribute__((weak));

/* Fall back to the C library when the shim is not loaded. */
#define TMC_MALLOC(size, tag) (tmc_malloc ? tmc_malloc((size), (tag)) : malloc(size))
#define TMC_CALLOC(n, size, tag) (tmc_calloc ? tmc_calloc((n), (size), (tag)) : calloc((n), (size)))
#define TMC_REALLOC(p, size, tag) \
    (tmc_realloc ? tmc_realloc((p), (size), (tag)) : realloc((p), (size)))
#define TMC_FREE(p) (tmc_free ? tmc_free(p) : free(p))

#ifdef __cplusplus
}
#endif
#endif
