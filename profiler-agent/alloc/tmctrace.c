/* tmctrace: a Valgrind tool that streams a program's data accesses as binary records.
 *
 * The access stream is the one `--tool=lackey --trace-mem=yes` prints as text (the same events,
 * in the same order: a load and a store of the same address by one instruction are one
 * "modify"), but nothing is formatted and nothing is written per access:
 *  - instructions are counted with a few IR statements per superblock, not a call each;
 *  - every data access calls one helper that runs it through a private-cache model (LRU, the
 *    geometry and set hash of the simulator's L2 filter) and keeps only the misses;
 *  - records go out in 1 MiB blocks to `--out=PATH` (a FIFO the agent reads while the program
 *    runs, so the trace never lands on disk).
 *
 * Record (16 bytes, little-endian): uint64 address; uint32 instructions since the previous
 * record (saturating); uint8 kind (0 load, 1 store, 2 modify); uint8 size (saturating at 255);
 * uint16 zero. The stream ends with two trailer records, kind 255 (address = instructions
 * executed) then kind 254 (address = data accesses seen, before the cache filter); a stream
 * without them was cut short.
 *
 * Options: --out=PATH (required), --l2-sets=N (a power of two; 0 keeps every access),
 * --l2-ways=W (1..64).
 */
#include "pub_tool_basics.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_machine.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_options.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_vki.h"

#define KIND_LOAD 0
#define KIND_STORE 1
#define KIND_MODIFY 2
#define KIND_INSTRUCTIONS 255
#define KIND_ACCESSES 254
#define BUF_RECORDS 65536 /* 1 MiB */
#define MAX_WAYS 64
/* Linux's O_CLOEXEC (the tool interface has no fcntl): programs the client execs must not hold
 * the stream open, or the reader would wait for them. */
#define TMC_O_CLOEXEC 02000000

typedef struct {
    ULong addr;
    UInt gap;
    UChar kind;
    UChar size;
    UShort pad;
} Record;

static const HChar *clo_out = NULL;
static Long clo_l2_sets = 1024;
static Long clo_l2_ways = 16;

static Int out_fd = -1;
static Bool out_failed = False;
static Record buf[BUF_RECORDS];
static UInt buf_used = 0;

static ULong icount = 0;      /* instructions executed (updated by IR, see add_icount) */
static ULong last_icount = 0; /* at the previous record */
static ULong accesses = 0;

static Long *l2 = NULL; /* sets x ways line numbers, most recent first, -1 empty */
static ULong l2_mask = 0;

/* ---- output ------------------------------------------------------------------------------ */

static void flush_buf(void) {
    const HChar *p = (const HChar *)buf;
    Int left = (Int)(buf_used * sizeof(Record));
    buf_used = 0;
    while (left > 0 && !out_failed) {
        Int w = VG_(write)(out_fd, p, left);
        if (w <= 0) {
            out_failed = True; /* the reader went away: keep running, say so at exit */
            break;
        }
        p += w;
        left -= w;
    }
}

static void emit(ULong addr, UInt gap, UChar kind, UChar size) {
    Record *r = &buf[buf_used++];
    r->addr = addr;
    r->gap = gap;
    r->kind = kind;
    r->size = size;
    r->pad = 0;
    if (buf_used == BUF_RECORDS) flush_buf();
}

/* ---- the private cache: per-set LRU stacks (the simulator's lru_stack_pass, depth = ways) -- */

static Bool l2_hit(ULong line) {
    ULong h = line * 0x9E3779B97F4A7C15ULL;
    Long *set = l2 + ((h >> 40) & l2_mask) * (ULong)clo_l2_ways;
    Int ways = (Int)clo_l2_ways;
    Int d = ways;
    for (Int p = 0; p < ways; p++) {
        if (set[p] == (Long)line) {
            d = p;
            break;
        }
    }
    Int top = d < ways ? d : ways - 1;
    for (Int p = top; p > 0; p--) set[p] = set[p - 1];
    set[0] = (Long)line;
    return d < ways;
}

/* packed: kind | size << 8 | instructions-to-add << 16 */
static VG_REGPARM(2) void on_access(Addr addr, UWord packed) {
    icount += packed >> 16;
    accesses++;
    if (l2 != NULL && l2_hit((ULong)addr >> 6)) return;
    ULong gap = icount - last_icount;
    last_icount = icount;
    emit((ULong)addr, gap > 0xFFFFFFFFULL ? 0xFFFFFFFFU : (UInt)gap, (UChar)(packed & 0xFF),
         (UChar)((packed >> 8) & 0xFF));
}

/* ---- instrumentation ---------------------------------------------------------------------- */

typedef struct {
    IRSB *sb;
    ULong pending_instr; /* IMarks since the last point that added to icount */
    IRExpr *load_addr;   /* an unguarded load not yet emitted (a store may turn it into a modify) */
    Int load_size;
} Builder;

static void add_icount(Builder *b) {
    if (b->pending_instr == 0) return;
    IRTemp t1 = newIRTemp(b->sb->tyenv, Ity_I64);
    IRTemp t2 = newIRTemp(b->sb->tyenv, Ity_I64);
    IRExpr *where = mkIRExpr_HWord((HWord)&icount);
    addStmtToIRSB(b->sb, IRStmt_WrTmp(t1, IRExpr_Load(Iend_LE, Ity_I64, where)));
    addStmtToIRSB(b->sb, IRStmt_WrTmp(t2, IRExpr_Binop(Iop_Add64, IRExpr_RdTmp(t1),
                                                       IRExpr_Const(IRConst_U64(b->pending_instr)))));
    addStmtToIRSB(b->sb, IRStmt_Store(Iend_LE, where, IRExpr_RdTmp(t2)));
    b->pending_instr = 0;
}

static void call(Builder *b, IRExpr *addr, Int size, UInt kind, IRExpr *guard) {
    if (size > 255) size = 255;
    UWord packed = (UWord)kind | (UWord)size << 8 | (UWord)b->pending_instr << 16;
    b->pending_instr = 0;
    IRExpr **args = mkIRExprVec_2(addr, mkIRExpr_HWord(packed));
    IRDirty *di = unsafeIRDirty_0_N(2, "tmctrace_on_access", VG_(fnptr_to_fnentry)(on_access), args);
    if (guard != NULL) di->guard = guard;
    addStmtToIRSB(b->sb, IRStmt_Dirty(di));
}

static void flush_load(Builder *b) {
    if (b->load_addr == NULL) return;
    call(b, b->load_addr, b->load_size, KIND_LOAD, NULL);
    b->load_addr = NULL;
}

static void on_load(Builder *b, IRExpr *addr, Int size) {
    flush_load(b);
    b->load_addr = addr;
    b->load_size = size;
}

static void on_store(Builder *b, IRExpr *addr, Int size) {
    if (b->load_addr != NULL && b->load_size == size && eqIRAtom(b->load_addr, addr)) {
        call(b, addr, size, KIND_MODIFY, NULL);
        b->load_addr = NULL;
        return;
    }
    flush_load(b);
    call(b, addr, size, KIND_STORE, NULL);
}

static void on_guarded(Builder *b, IRExpr *addr, Int size, UInt kind, IRExpr *guard) {
    flush_load(b);
    add_icount(b); /* the instructions count whether or not the access happens */
    call(b, addr, size, kind, guard);
}

static IRSB *tmc_instrument(VgCallbackClosure *closure, IRSB *sb_in, const VexGuestLayout *layout,
                            const VexGuestExtents *vge, const VexArchInfo *archinfo_host,
                            IRType gWordTy, IRType hWordTy) {
    if (gWordTy != hWordTy) VG_(tool_panic)("host/guest word size mismatch");
    Builder b = {deepCopyIRSBExceptStmts(sb_in), 0, NULL, 0};
    IRTypeEnv *tyenv = sb_in->tyenv;
    Int i = 0;
    /* The IR preamble before the first instruction is copied as is. */
    while (i < sb_in->stmts_used && sb_in->stmts[i]->tag != Ist_IMark)
        addStmtToIRSB(b.sb, sb_in->stmts[i++]);
    for (; i < sb_in->stmts_used; i++) {
        IRStmt *st = sb_in->stmts[i];
        if (!st || st->tag == Ist_NoOp) continue;
        switch (st->tag) {
            case Ist_IMark:
                flush_load(&b);
                b.pending_instr++;
                break;
            case Ist_WrTmp:
                if (st->Ist.WrTmp.data->tag == Iex_Load) {
                    IRExpr *ld = st->Ist.WrTmp.data;
                    on_load(&b, ld->Iex.Load.addr, sizeofIRType(ld->Iex.Load.ty));
                }
                break;
            case Ist_Store:
                on_store(&b, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(tyenv, st->Ist.Store.data)));
                break;
            case Ist_StoreG: {
                IRStoreG *sg = st->Ist.StoreG.details;
                on_guarded(&b, sg->addr, sizeofIRType(typeOfIRExpr(tyenv, sg->data)), KIND_STORE,
                           sg->guard);
                break;
            }
            case Ist_LoadG: {
                IRLoadG *lg = st->Ist.LoadG.details;
                IRType ty = Ity_INVALID, wide = Ity_INVALID;
                typeOfIRLoadGOp(lg->cvt, &wide, &ty);
                on_guarded(&b, lg->addr, sizeofIRType(ty), KIND_LOAD, lg->guard);
                break;
            }
            case Ist_Dirty: {
                IRDirty *d = st->Ist.Dirty.details;
                if (d->mFx != Ifx_None) {
                    if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify) on_load(&b, d->mAddr, d->mSize);
                    if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify) on_store(&b, d->mAddr, d->mSize);
                }
                break;
            }
            case Ist_CAS: {
                IRCAS *cas = st->Ist.CAS.details;
                Int size = sizeofIRType(typeOfIRExpr(tyenv, cas->dataLo));
                if (cas->dataHi != NULL) size *= 2;
                on_load(&b, cas->addr, size);
                on_store(&b, cas->addr, size);
                break;
            }
            case Ist_LLSC:
                if (st->Ist.LLSC.storedata == NULL)
                    on_load(&b, st->Ist.LLSC.addr, sizeofIRType(typeOfIRTemp(tyenv, st->Ist.LLSC.result)));
                else
                    on_store(&b, st->Ist.LLSC.addr,
                             sizeofIRType(typeOfIRExpr(tyenv, st->Ist.LLSC.storedata)));
                break;
            case Ist_Exit:
                flush_load(&b);
                add_icount(&b);
                break;
            default:
                break;
        }
        addStmtToIRSB(b.sb, st);
    }
    flush_load(&b);
    add_icount(&b);
    return b.sb;
}

/* ---- set-up and the end ------------------------------------------------------------------- */

static Bool process_cmd_line_option(const HChar *arg) {
    if VG_STR_CLO (arg, "--out", clo_out) {
    } else if VG_INT_CLO (arg, "--l2-sets", clo_l2_sets) {
    } else if VG_INT_CLO (arg, "--l2-ways", clo_l2_ways) {
    } else
        return False;
    return True;
}

static void print_usage(void) {
    VG_(printf)("    --out=PATH       where the records go (a FIFO or a file) [required]\n"
                "    --l2-sets=N      private cache sets, a power of two; 0 keeps all [1024]\n"
                "    --l2-ways=W      private cache ways, 1..64 [16]\n");
}

static void print_debug_usage(void) { VG_(printf)("    (none)\n"); }

static void in_child(ThreadId tid) {
    /* A forked child (without exec) still runs under the tool: it must not write into the
     * parent's stream. */
    out_fd = -1;
    out_failed = True;
    buf_used = 0;
}

static void post_clo_init(void) {
    if (clo_out == NULL) VG_(fmsg_bad_option)("--out", "tmctrace needs --out=PATH\n");
    if (clo_l2_sets < 0 || (clo_l2_sets & (clo_l2_sets - 1)) != 0 || clo_l2_sets > (1 << 24))
        VG_(fmsg_bad_option)("--l2-sets", "must be 0 or a power of two up to 2^24\n");
    if (clo_l2_ways < 1 || clo_l2_ways > MAX_WAYS)
        VG_(fmsg_bad_option)("--l2-ways", "must be 1..64\n");
    if (clo_l2_sets > 0) {
        SizeT n = (SizeT)clo_l2_sets * (SizeT)clo_l2_ways;
        l2 = VG_(malloc)("tmctrace.l2", n * sizeof(Long));
        for (SizeT k = 0; k < n; k++) l2[k] = -1;
        l2_mask = (ULong)clo_l2_sets - 1;
    }
    out_fd = VG_(fd_open)(clo_out, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_TRUNC | TMC_O_CLOEXEC, 0600);
    if (out_fd < 0) {
        VG_(fmsg)("tmctrace: cannot open %s\n", clo_out);
        VG_(exit)(1);
    }
    VG_(atfork)(NULL, NULL, in_child);
}

static void fini(Int exitcode) {
    if (out_fd < 0) return;
    emit(icount, 0, KIND_INSTRUCTIONS, 0);
    emit(accesses, 0, KIND_ACCESSES, 0);
    flush_buf();
    VG_(close)(out_fd);
    if (out_failed) VG_(umsg)("tmctrace: the reader closed the stream early\n");
}

static void pre_clo_init(void) {
    VG_(details_name)("tmctrace");
    VG_(details_version)("1");
    VG_(details_description)("tmc's streaming memory-access tracer");
    VG_(details_copyright_author)("tmc authors");
    VG_(details_bug_reports_to)("the tmc project");
    VG_(details_avg_translation_sizeB)(200);
    VG_(basic_tool_funcs)(post_clo_init, tmc_instrument, fini);
    VG_(needs_command_line_options)(process_cmd_line_option, print_usage, print_debug_usage);
}

VG_DETERMINE_INTERFACE_VERSION(pre_clo_init)
