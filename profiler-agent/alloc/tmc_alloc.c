/* tmc's tagging allocator (LD_PRELOAD shim and explicit API; see tmc_alloc.h).
 *
 * Layout: every tag owns an arena of 2 MiB-aligned chunks (big allocations get an aligned run
 * of whole chunks), so `address & ~(2 MiB - 1)` names the chunk and a chunk belongs to one tag.
 * A small block is [16-byte header][user bytes]; freed blocks go back to their tag's free list
 * of their size class, never to another tag, which keeps the address -> tag map true.
 *
 * Bootstrap: the real allocator is found with dlsym(RTLD_NEXT) in a constructor (or at the
 * first call, whichever comes first). dlsym itself may allocate; while this thread is inside
 * the bootstrap such requests are served from a static buffer, so nothing recurses.
 *
 * Nothing here calls malloc, stdio or snprintf: the log is written with write(2) and numbers
 * are formatted by hand, so the shim can log from inside malloc.
 */
#define _GNU_SOURCE
#include "tmc_alloc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHUNK ((uintptr_t)2 << 20)
#define HDR 16u
#define MAX_TAGS 1024
#define SMALL_LIMIT 1024u              /* 16-byte classes up to here */
#define N_SMALL (SMALL_LIMIT / 16u)    /* 64 classes */
#define N_POW 10                       /* 2 KiB .. 1 MiB */
#define N_CLASS (N_SMALL + N_POW)
#define CLS_LARGE 0xFFFFu
#define CLS_ALIGNED 0xFFFEu
#define MAGIC 0x7A6Du
#define TABLE_BITS 17                  /* chunk table: 128 Ki chunks = 256 GiB of arenas */
#define TABLE_SIZE ((size_t)1 << TABLE_BITS)
#define TOMBSTONE ((uintptr_t)1)
#define SITE_SIZE 4096
#define NAME_SIZE 2048
#define MPOL_BIND_MODE 2

#define TLS __thread __attribute__((tls_model("initial-exec")))

struct hdr {
    uint32_t tag;
    uint16_t cls;
    uint16_t magic;
    uint64_t aux; /* requested bytes (a large run's length follows from it); aligned: offset
                   * back to the block's user pointer */
};

struct arena {
    pthread_mutex_t lock;
    char name[128];
    uintptr_t bump, end;
    void *free_list[N_CLASS];
    uint64_t fast_limit; /* bytes of this tag allowed on the fast node (plan) */
    uint64_t fast_used;
    uint64_t live, peak; /* requested bytes of live blocks: the structure's size */
    uint64_t mapped;
};

/* ---- state ------------------------------------------------------------------------------ */

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_memalign)(size_t, size_t);
static size_t (*real_usable)(void *);

static int state; /* 0 not started, 1 starting, 2 ready */
static TLS int in_bootstrap;
static TLS int scope_depth;
static TLS uint32_t scope_tags[16];

static char boot_buf[1 << 16] __attribute__((aligned(16)));
static size_t boot_used;

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct arena arenas[MAX_TAGS];
static uint32_t n_tags; /* published with release after the arena is ready */
static uintptr_t chunk_table[TABLE_SIZE];
static uintptr_t site_keys[SITE_SIZE];
static uint32_t site_tags[SITE_SIZE];
static uint64_t name_keys[NAME_SIZE];
static uint32_t name_tags[NAME_SIZE];

static int auto_tag;
static int log_fd = -1;
static char self_exe[512]; /* this process image's executable, for the log and the target test */
static int plan_active;
static int fast_node = -1, slow_node = -1;
static int nodes_ok; /* both plan nodes are online: mbind is applied */
static uint64_t default_fast_limit = UINT64_MAX;

/* ---- tiny formatting and logging ----------------------------------------------------------- */

static char *put_str(char *p, const char *s) {
    while (*s) *p++ = *s++;
    return p;
}

static char *put_dec(char *p, int64_t v) {
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)(-v) : (uint64_t)v;
    if (v < 0) *p++ = '-';
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n) *p++ = tmp[--n];
    return p;
}

static char *put_hex(char *p, uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    int n = 0;
    p = put_str(p, "0x");
    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

static void log_write(const char *buf, size_t len) {
    if (log_fd < 0) return;
    while (len) {
        ssize_t w = write(log_fd, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        buf += w;
        len -= (size_t)w;
    }
}

static void log_region(char kind, uint32_t tag, uintptr_t start, uintptr_t end, int node) {
    char line[96];
    char *p = line;
    *p++ = kind;
    *p++ = ' ';
    p = put_dec(p, tag);
    *p++ = ' ';
    p = put_hex(p, start);
    *p++ = ' ';
    p = put_hex(p, end);
    *p++ = ' ';
    p = put_dec(p, node);
    *p++ = '\n';
    log_write(line, (size_t)(p - line));
}

static void log_tag(uint32_t tag, const char *name) {
    char line[180];
    char *p = put_str(line, "T ");
    p = put_dec(p, tag);
    *p++ = ' ';
    p = put_str(p, name);
    *p++ = '\n';
    log_write(line, (size_t)(p - line));
}

/* ---- environment and plan ---------------------------------------------------------------- */

static size_t read_file(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    return n;
}

static int node_online(int node) {
    /* /sys/devices/system/node/online is a list such as "0" or "0-1,3". */
    char buf[256];
    if (node < 0 || !read_file("/sys/devices/system/node/online", buf, sizeof buf)) return 0;
    const char *p = buf;
    while (*p) {
        long lo = 0, hi;
        while (*p >= '0' && *p <= '9') lo = lo * 10 + (*p++ - '0');
        hi = lo;
        if (*p == '-') {
            p++;
            hi = 0;
            while (*p >= '0' && *p <= '9') hi = hi * 10 + (*p++ - '0');
        }
        if (node >= lo && node <= hi) return 1;
        if (*p == ',') p++;
        else break;
    }
    return 0;
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h | 1; /* 0 marks an empty slot */
}

static uint32_t tag_by_name_locked(const char *name);

/* Plan lines: "fast_node N", "slow_node N", "default_fast_bytes N", "tag NAME FAST_BYTES" (a
 * fourth word, the slow bytes the plan expects, is for readers and ignored here). Numbers are
 * ASCII decimal digits within bounds (nodes 0..1023, bytes below 2^52), as
 * model/node_contract.py's parse_plan_file reads them; a known line with other words or another
 * number refuses the whole plan (no node: nothing bound), and unknown lines are ignored. */
static char plan_buf[1 << 16];

#define PLAN_MAX_NODE 1023ull
#define PLAN_MAX_BYTES ((1ull << 52) - 1)

/* `s` as a decimal number up to `max`, or -1 when it is anything else. */
static int plan_number(const char *s, unsigned long long max, unsigned long long *out) {
    unsigned long long v = 0;
    if (!*s) return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (unsigned long long)(*s - '0');
        if (v > max) return -1; /* max < 2^52: no overflow before this check */
    }
    *out = v;
    return 0;
}

/* 0 when the plan was read, -1 when it is refused. */
static int parse_plan(void) {
    char *p = plan_buf;
    int refused = 0;
    while (*p) {
        char *line = p;
        while (*p && *p != '\n') p++;
        if (*p) *p++ = 0;
        char *words[5] = {0, 0, 0, 0, 0};
        int n = 0;
        char *q = line;
        while (*q && n < 5) {
            while (*q == ' ' || *q == '\t' || *q == '\r') *q++ = 0;
            if (!*q) break;
            words[n++] = q;
            while (*q && *q != ' ' && *q != '\t' && *q != '\r') q++;
        }
        if (n == 0 || words[0][0] == '#') continue;
        unsigned long long v = 0, slow = 0;
        int is_node = !strcmp(words[0], "fast_node") || !strcmp(words[0], "slow_node");
        if (is_node || !strcmp(words[0], "default_fast_bytes")) {
            if (n != 2 || plan_number(words[1], is_node ? PLAN_MAX_NODE : PLAN_MAX_BYTES, &v)) {
                refused = 1;
                break;
            }
            if (!strcmp(words[0], "fast_node")) fast_node = (int)v;
            else if (!strcmp(words[0], "slow_node")) slow_node = (int)v;
            else default_fast_limit = v;
        } else if (!strcmp(words[0], "tag")) {
            if ((n != 3 && n != 4) || plan_number(words[2], PLAN_MAX_BYTES, &v) ||
                (n == 4 && plan_number(words[3], PLAN_MAX_BYTES, &slow))) {
                refused = 1;
                break;
            }
            arenas[tag_by_name_locked(words[1])].fast_limit = v;
        }
    }
    if (refused) fast_node = slow_node = -1; /* no plan: nothing is bound */
    return refused ? -1 : 0;
}

/* ---- chunk ownership table ---------------------------------------------------------------- */

static size_t slot_of(uintptr_t key) {
    return (size_t)((key >> 21) * 0x9E3779B97F4A7C15ull >> (64 - TABLE_BITS));
}

static void table_insert(uintptr_t base, uint32_t tag) {
    /* key = chunk base | 0 (low 21 bits free: store tag+2 there to keep it one word). */
    uintptr_t key = base | ((uintptr_t)tag + 2);
    size_t i = slot_of(base);
    for (;;) {
        uintptr_t cur = __atomic_load_n(&chunk_table[i], __ATOMIC_ACQUIRE);
        if (cur == 0 || cur == TOMBSTONE) {
            if (__atomic_compare_exchange_n(&chunk_table[i], &cur, key, 0, __ATOMIC_RELEASE,
                                            __ATOMIC_RELAXED))
                return;
            continue;
        }
        i = (i + 1) & (TABLE_SIZE - 1);
    }
}

/* The tag owning the chunk of `p`, or -1 when the chunk is not ours. */
static int64_t table_find(uintptr_t p) {
    uintptr_t base = p & ~(CHUNK - 1);
    size_t i = slot_of(base);
    for (size_t probes = 0; probes < TABLE_SIZE; probes++) {
        uintptr_t cur = __atomic_load_n(&chunk_table[i], __ATOMIC_ACQUIRE);
        if (cur == 0) return -1;
        if (cur != TOMBSTONE && (cur & ~(CHUNK - 1)) == base)
            return (int64_t)(cur & (CHUNK - 1)) - 2;
        i = (i + 1) & (TABLE_SIZE - 1);
    }
    return -1;
}

static void table_remove(uintptr_t base) {
    size_t i = slot_of(base);
    for (;;) {
        uintptr_t cur = __atomic_load_n(&chunk_table[i], __ATOMIC_ACQUIRE);
        if (cur == 0) return;
        if (cur != TOMBSTONE && (cur & ~(CHUNK - 1)) == base) {
            __atomic_store_n(&chunk_table[i], TOMBSTONE, __ATOMIC_RELEASE);
            return;
        }
        i = (i + 1) & (TABLE_SIZE - 1);
    }
}

/* ---- memory from the kernel, placed per plan ---------------------------------------------- */

static void *map_aligned(size_t len) {
    size_t span = len + CHUNK;
    char *raw = mmap(0, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return 0;
    uintptr_t start = ((uintptr_t)raw + CHUNK - 1) & ~(CHUNK - 1);
    if (start > (uintptr_t)raw) munmap(raw, start - (uintptr_t)raw);
    uintptr_t tail = (uintptr_t)raw + span - (start + len);
    if (tail) munmap((void *)(start + len), tail);
    return (void *)start;
}

/* Decide the node of a new region of `tag` and bind it (memory is untouched, so the policy
 * decides where its pages fault in). Returns the node, or -1 when no plan applies. */
static int place(struct arena *a, void *start, size_t len) {
    if (!plan_active) return -1;
    int node = fast_node;
    if (a->fast_used + len > a->fast_limit) node = slow_node;
    else a->fast_used += len;
    if (!nodes_ok) return fast_node >= 0 ? fast_node : -1; /* one node: nothing to bind */
    unsigned long mask[16];
    memset(mask, 0, sizeof mask);
    mask[node / 64] |= 1ul << (node % 64);
    if (syscall(SYS_mbind, start, len, MPOL_BIND_MODE, mask, (unsigned long)sizeof mask * 8, 0))
        return -1;
    return node;
}

static void *new_region(uint32_t tag, size_t len) {
    void *m = map_aligned(len);
    if (!m) return 0;
    for (uintptr_t c = (uintptr_t)m; c < (uintptr_t)m + len; c += CHUNK) table_insert(c, tag);
    int node = place(&arenas[tag], m, len);
    arenas[tag].mapped += len;
    log_region('R', tag, (uintptr_t)m, (uintptr_t)m + len, node);
    return m;
}

/* ---- tags -------------------------------------------------------------------------------- */

static uint32_t new_tag_locked(const char *name) {
    uint32_t t = __atomic_load_n(&n_tags, __ATOMIC_ACQUIRE);
    if (t >= MAX_TAGS) return 0; /* tag 0, "(overflow)", takes what does not fit */
    struct arena *a = &arenas[t];
    pthread_mutex_init(&a->lock, 0);
    size_t n = strlen(name);
    if (n > sizeof a->name - 1) n = sizeof a->name - 1;
    memcpy(a->name, name, n);
    a->name[n] = 0;
    a->fast_limit = default_fast_limit;
    __atomic_store_n(&n_tags, t + 1, __ATOMIC_RELEASE);
    log_tag(t, a->name);
    return t;
}

static uint32_t tag_by_name_locked(const char *name) {
    uint64_t h = hash_name(name);
    size_t i = h & (NAME_SIZE - 1);
    for (size_t probes = 0; probes < NAME_SIZE; probes++) {
        uint64_t k = __atomic_load_n(&name_keys[i], __ATOMIC_ACQUIRE);
        if (k == 0) break;
        if (k == h && !strncmp(arenas[name_tags[i]].name, name, sizeof arenas[0].name - 1))
            return name_tags[i];
        i = (i + 1) & (NAME_SIZE - 1);
    }
    uint32_t t = new_tag_locked(name);
    if (t == 0 && strcmp(name, arenas[0].name)) return 0;
    name_tags[i] = t;
    __atomic_store_n(&name_keys[i], h, __ATOMIC_RELEASE);
    return t;
}

static void ensure_init(void);

static uint32_t tag_by_name(const char *name) {
    if (!name || !*name) name = "(unnamed)";
    uint64_t h = hash_name(name);
    size_t i = h & (NAME_SIZE - 1);
    for (size_t probes = 0; probes < NAME_SIZE; probes++) {
        uint64_t k = __atomic_load_n(&name_keys[i], __ATOMIC_ACQUIRE);
        if (k == 0) break;
        if (k == h && !strncmp(arenas[name_tags[i]].name, name, sizeof arenas[0].name - 1))
            return name_tags[i];
        i = (i + 1) & (NAME_SIZE - 1);
    }
    pthread_mutex_lock(&global_lock);
    uint32_t t = tag_by_name_locked(name);
    pthread_mutex_unlock(&global_lock);
    return t;
}

/* "site:<object basename>:0x<offset>": stable across runs despite ASLR. */
static uint32_t tag_by_site(uintptr_t site) {
    size_t i = (size_t)((site * 0x9E3779B97F4A7C15ull) >> 52) & (SITE_SIZE - 1);
    for (size_t probes = 0; probes < SITE_SIZE; probes++) {
        uintptr_t k = __atomic_load_n(&site_keys[i], __ATOMIC_ACQUIRE);
        if (k == site) return site_tags[i];
        if (k == 0) break;
        i = (i + 1) & (SITE_SIZE - 1);
    }
    pthread_mutex_lock(&global_lock);
    /* Another thread may have added it meanwhile: look again under the lock. */
    for (;;) {
        uintptr_t k = site_keys[i];
        if (k == site) {
            pthread_mutex_unlock(&global_lock);
            return site_tags[i];
        }
        if (k == 0) break;
        i = (i + 1) & (SITE_SIZE - 1);
    }
    char name[128];
    char *p = put_str(name, "site:");
    Dl_info info;
    uintptr_t off = site;
    if (dladdr((void *)site, &info) && info.dli_fname) {
        const char *base = info.dli_fname, *s;
        for (s = info.dli_fname; *s; s++)
            if (*s == '/') base = s + 1;
        size_t room = 60;
        for (s = base; *s && room; s++, room--) {
            char c = *s;
            int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_' || c == '.' || c == '-';
            *p++ = ok ? c : '_';
        }
        off = site - (uintptr_t)info.dli_fbase;
    } else {
        p = put_str(p, "unknown");
    }
    *p++ = ':';
    p = put_hex(p, off);
    *p = 0;
    uint32_t t = tag_by_name_locked(name);
    site_tags[i] = t;
    __atomic_store_n(&site_keys[i], site, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&global_lock);
    return t;
}

/* ---- the allocator ----------------------------------------------------------------------- */

static unsigned class_of(size_t total) {
    if (total <= SMALL_LIMIT) return (unsigned)((total + 15) / 16 - 1);
    unsigned bits = 64 - (unsigned)__builtin_clzll((unsigned long long)(total - 1));
    return N_SMALL + (bits - 11); /* 2^11 .. 2^20 */
}

static size_t class_size(unsigned cls) {
    return cls < N_SMALL ? (size_t)(cls + 1) * 16 : (size_t)1 << (cls - N_SMALL + 11);
}

static size_t large_len(size_t size) { return (size + HDR + CHUNK - 1) & ~(CHUNK - 1); }

static void *arena_alloc(uint32_t tag, size_t size) {
    struct arena *a = &arenas[tag];
    if (size > (size_t)1 << 40) {
        errno = ENOMEM;
        return 0;
    }
    size_t total = size + HDR;
    if (total > (size_t)1 << 20) {
        size_t len = large_len(size);
        pthread_mutex_lock(&a->lock);
        char *run = new_region(tag, len);
        if (run) {
            a->live += size;
            if (a->live > a->peak) a->peak = a->live;
        }
        pthread_mutex_unlock(&a->lock);
        if (!run) {
            errno = ENOMEM;
            return 0;
        }
        struct hdr *h = (struct hdr *)run;
        h->tag = tag;
        h->cls = CLS_LARGE;
        h->magic = MAGIC;
        h->aux = size;
        return run + HDR;
    }
    unsigned cls = class_of(total);
    size_t csize = class_size(cls);
    pthread_mutex_lock(&a->lock);
    char *block = a->free_list[cls];
    if (block) {
        a->free_list[cls] = *(void **)(block + HDR);
    } else {
        if (a->bump + csize > a->end) {
            char *c = new_region(tag, CHUNK);
            if (!c) {
                pthread_mutex_unlock(&a->lock);
                errno = ENOMEM;
                return 0;
            }
            a->bump = (uintptr_t)c;
            a->end = (uintptr_t)c + CHUNK;
        }
        block = (char *)a->bump;
        a->bump += csize;
    }
    a->live += size;
    if (a->live > a->peak) a->peak = a->live;
    pthread_mutex_unlock(&a->lock);
    struct hdr *h = (struct hdr *)block;
    h->tag = tag;
    h->cls = (uint16_t)cls;
    h->magic = MAGIC;
    h->aux = size;
    return block + HDR;
}

/* The primary header of one of our pointers (following an aligned allocation's back offset). */
static struct hdr *header_of(void *p) {
    struct hdr *h = (struct hdr *)((char *)p - HDR);
    if (h->cls == CLS_ALIGNED) h = (struct hdr *)((char *)p - h->aux - HDR);
    return h;
}

static void arena_free(void *p) {
    struct hdr *h = header_of(p);
    struct arena *a = &arenas[h->tag];
    if (h->cls == CLS_LARGE) {
        size_t len = large_len((size_t)h->aux);
        pthread_mutex_lock(&a->lock);
        a->live -= h->aux;
        a->mapped -= len;
        pthread_mutex_unlock(&a->lock);
        for (uintptr_t c = (uintptr_t)h; c < (uintptr_t)h + len; c += CHUNK) table_remove(c);
        log_region('U', h->tag, (uintptr_t)h, (uintptr_t)h + len, -1);
        munmap(h, len);
        return;
    }
    unsigned cls = h->cls;
    pthread_mutex_lock(&a->lock);
    *(void **)((char *)h + HDR) = a->free_list[cls];
    a->free_list[cls] = h;
    a->live -= h->aux;
    pthread_mutex_unlock(&a->lock);
}

static size_t usable_of(void *p) {
    struct hdr *h = header_of(p);
    size_t cap = h->cls == CLS_LARGE ? large_len((size_t)h->aux) : class_size(h->cls);
    size_t skip = (size_t)((char *)p - (char *)h);
    return cap - skip;
}

static void *arena_aligned(uint32_t tag, size_t align, size_t size) {
    if (align <= 16) return arena_alloc(tag, size);
    if (size > SIZE_MAX - align) {
        errno = ENOMEM;
        return 0;
    }
    char *p = arena_alloc(tag, size + align);
    if (!p) return 0;
    uintptr_t u = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    if (u == (uintptr_t)p) return p;
    struct hdr *h = (struct hdr *)(u - HDR);
    h->tag = ((struct hdr *)(p - HDR))->tag;
    h->cls = CLS_ALIGNED;
    h->magic = MAGIC;
    h->aux = u - (uintptr_t)p;
    return (void *)u;
}

static int ours(const void *p) { return p && table_find((uintptr_t)p) >= 0; }

static int in_boot_buf(const void *p) {
    return (const char *)p >= boot_buf && (const char *)p < boot_buf + sizeof boot_buf;
}

__attribute__((unused)) static void *boot_alloc(size_t size) {
    size_t n = (size + 15) & ~(size_t)15;
    size_t at = __atomic_fetch_add(&boot_used, n, __ATOMIC_RELAXED);
    if (at + n > sizeof boot_buf) return 0;
    return boot_buf + at; /* static storage is zeroed: calloc is satisfied too */
}

/* ---- bootstrap ---------------------------------------------------------------------------- */

static void write_peaks(void) {
    uint32_t n = __atomic_load_n(&n_tags, __ATOMIC_ACQUIRE);
    for (uint32_t t = 0; t < n; t++) {
        char line[96];
        char *p = put_str(line, "P ");
        p = put_dec(p, t);
        *p++ = ' ';
        p = put_dec(p, (int64_t)arenas[t].peak);
        *p++ = ' ';
        p = put_dec(p, (int64_t)arenas[t].mapped);
        *p++ = '\n';
        log_write(line, (size_t)(p - line));
    }
}

static void open_log(void) {
    const char *path = getenv("TMC_REGION_LOG");
    if (!path || !*path) return;
    char buf[512];
    char *p = buf;
    for (const char *s = path; *s && p < buf + sizeof buf - 24; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            p = put_dec(p, getpid());
            s++;
        } else {
            *p++ = *s;
        }
    }
    *p = 0;
    log_fd = open(buf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void init_real(void) {
#ifdef TMC_NO_INTERPOSE
    /* Linked into a (sanitized) program: the C library's functions are simply the next ones. */
    real_malloc = malloc;
    real_free = free;
    real_calloc = calloc;
    real_realloc = realloc;
    real_memalign = memalign;
    real_usable = malloc_usable_size;
    return;
#endif
    in_bootstrap = 1;
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
    real_usable = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    in_bootstrap = 0;
}

static void ensure_init(void) {
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == 2) return;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&state, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        if (in_bootstrap) return; /* our own dlsym: the caller falls back to the buffer */
        while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2) sched_yield();
        return;
    }
    init_real();
    ssize_t n_exe = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[n_exe > 0 ? n_exe : 0] = 0;
    /* A wrapper (a shell, a launcher script, valgrind's own front end) inherits LD_PRELOAD and
     * often the pid of the program it execs: only the image named by TMC_TARGET_EXE logs, tags
     * and places, so the wrapper's allocations never mix into the program's. */
    const char *target = getenv("TMC_TARGET_EXE");
    int is_target = !target || !*target || !strcmp(target, self_exe);
    const char *a = getenv("TMC_AUTO_TAG");
    auto_tag = is_target && a && *a && *a != '0';
    if (is_target) open_log();
    char head[160 + sizeof self_exe];
    char *p = put_str(head, "# tmc-regions v1 pid ");
    p = put_dec(p, getpid());
    p = put_str(p, auto_tag ? " auto exe " : " exe ");
    p = put_str(p, self_exe[0] ? self_exe : "?");
    *p++ = '\n';
    log_write(head, (size_t)(p - head));
    pthread_mutex_lock(&global_lock);
    new_tag_locked("(overflow)");
    const char *plan = getenv("TMC_PLAN");
    if (is_target && plan && *plan && read_file(plan, plan_buf, sizeof plan_buf)) {
        int refused = parse_plan();
        plan_active = fast_node >= 0;
        nodes_ok = plan_active && node_online(fast_node) && node_online(slow_node);
        /* Limits set before the plan's default was known get it now. */
        char line[160];
        p = put_str(line, "# plan fast_node ");
        p = put_dec(p, fast_node);
        p = put_str(p, " slow_node ");
        p = put_dec(p, slow_node);
        p = put_str(p, refused    ? " refused: a malformed line, no binding\n"
                       : nodes_ok ? " binding\n"
                                  : " fallback: slow node not online, no binding\n");
        log_write(line, (size_t)(p - line));
    }
    pthread_mutex_unlock(&global_lock);
    __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void tmc_init(void) { ensure_init(); }

__attribute__((destructor)) static void tmc_fini(void) {
    write_peaks();
}

/* The tag a plain malloc from `site` gets, or -1 to hand it to the C library. */
__attribute__((unused)) static int64_t implicit_tag(uintptr_t site) {
    if (scope_depth > 0) return scope_tags[(scope_depth > 16 ? 16 : scope_depth) - 1];
    if (auto_tag) return tag_by_site(site);
    return -1;
}

static void *realloc_in(uint32_t tag, void *p, size_t size) {
    size_t have = usable_of(p);
    if (size <= have && size >= have / 2) return p;
    void *q = arena_alloc(tag, size);
    if (!q) return 0;
    memcpy(q, p, have < size ? have : size);
    arena_free(p);
    return q;
}

/* ---- the C library's interface ------------------------------------------------------------ */

#ifndef TMC_NO_INTERPOSE

void *malloc(size_t size) {
    if (__builtin_expect(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2, 0)) {
        ensure_init();
        if (state != 2) return boot_alloc(size);
    }
    int64_t t = implicit_tag((uintptr_t)__builtin_return_address(0));
    if (t < 0) return real_malloc(size);
    return arena_alloc((uint32_t)t, size);
}

void free(void *p) {
    if (!p || in_boot_buf(p)) return;
    if (ours(p)) {
        arena_free(p);
        return;
    }
    if (real_free) real_free(p);
}

void *calloc(size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return 0;
    }
    if (__builtin_expect(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2, 0)) {
        ensure_init();
        if (state != 2) return boot_alloc(total);
    }
    int64_t t = implicit_tag((uintptr_t)__builtin_return_address(0));
    if (t < 0) return real_calloc(n, size);
    void *p = arena_alloc((uint32_t)t, total);
    if (p) memset(p, 0, total);
    return p;
}

void *realloc(void *p, size_t size) {
    if (__builtin_expect(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2, 0)) ensure_init();
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    if (!p) {
        int64_t t = state == 2 ? implicit_tag(site) : -1;
        if (state != 2) return boot_alloc(size);
        return t < 0 ? real_realloc(0, size) : arena_alloc((uint32_t)t, size);
    }
    if (in_boot_buf(p)) {
        void *q = malloc(size);
        size_t left = (size_t)(boot_buf + sizeof boot_buf - (char *)p);
        if (q) memcpy(q, p, size < left ? size : left);
        return q;
    }
    if (ours(p)) {
        if (size == 0) {
            arena_free(p);
            return 0;
        }
        return realloc_in(header_of(p)->tag, p, size);
    }
    return real_realloc(p, size);
}

void *memalign(size_t align, size_t size) {
    if (__builtin_expect(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2, 0)) {
        ensure_init();
        if (state != 2) return 0;
    }
    if (align & (align - 1)) {
        errno = EINVAL;
        return 0;
    }
    int64_t t = implicit_tag((uintptr_t)__builtin_return_address(0));
    if (t < 0) return real_memalign(align, size);
    return arena_aligned((uint32_t)t, align, size);
}

int posix_memalign(void **out, size_t align, size_t size) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    if (__builtin_expect(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2, 0)) ensure_init();
    if (!real_memalign) return ENOMEM;
    int64_t t = implicit_tag((uintptr_t)__builtin_return_address(0));
    void *p = t < 0 ? real_memalign(align, size) : arena_aligned((uint32_t)t, align, size);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t size) {
    if (__builtin_expect(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2, 0)) ensure_init();
    if (align & (align - 1)) {
        errno = EINVAL;
        return 0;
    }
    int64_t t = implicit_tag((uintptr_t)__builtin_return_address(0));
    if (t < 0) return real_memalign(align, size);
    return arena_aligned((uint32_t)t, align, size);
}

void *valloc(size_t size) { return memalign((size_t)sysconf(_SC_PAGESIZE), size); }

void *pvalloc(size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return memalign(page, (size + page - 1) & ~(page - 1));
}

size_t malloc_usable_size(void *p) {
    if (!p) return 0;
    if (in_boot_buf(p)) return 0;
    if (ours(p)) return usable_of(p);
    return real_usable ? real_usable(p) : 0;
}

#endif /* TMC_NO_INTERPOSE */

/* ---- the explicit API -------------------------------------------------------------------- */

void *tmc_malloc(size_t size, const char *tag) {
    ensure_init();
    return arena_alloc(tag_by_name(tag), size);
}

void *tmc_calloc(size_t n, size_t size, const char *tag) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return 0;
    }
    void *p = tmc_malloc(total, tag);
    if (p) memset(p, 0, total);
    return p;
}

void *tmc_realloc(void *p, size_t size, const char *tag) {
    if (!p) return tmc_malloc(size, tag);
    if (!ours(p)) {
        /* Adopt a C-library block into the tag. */
        size_t have = real_usable ? real_usable(p) : 0;
        void *q = tmc_malloc(size, tag);
        if (q) {
            memcpy(q, p, have < size ? have : size);
            tmc_free(p);
        }
        return q;
    }
    return realloc_in(header_of(p)->tag, p, size);
}

void *tmc_aligned_alloc(size_t align, size_t size, const char *tag) {
    ensure_init();
    if (align & (align - 1)) {
        errno = EINVAL;
        return 0;
    }
    return arena_aligned(tag_by_name(tag), align, size);
}

void tmc_free(void *p) {
    if (!p || in_boot_buf(p)) return;
    if (ours(p)) arena_free(p);
    else real_free(p);
}

const char *tmc_tag_of(const void *p) {
    int64_t t = p ? table_find((uintptr_t)p) : -1;
    return t < 0 ? 0 : arenas[t].name;
}

void tmc_scope_begin(const char *tag) {
    ensure_init();
    uint32_t t = tag_by_name(tag);
    if (scope_depth < 16) scope_tags[scope_depth] = t;
    scope_depth++;
}

void tmc_scope_end(void) {
    if (scope_depth > 0) scope_depth--;
}
