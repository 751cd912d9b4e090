// cueflow's kernel worker process (HK3). Built at run time by the host backend with the
// machine's C++ compiler and cached; see backend/host/isolate/mod.rs for the design.
//
// argv: worker <memfd> <arena base, hex> <arena size, hex> <control fd> <slots memfd> <channels>
//
// The main thread serves the control socket (arena mapping changes, W2); one thread per
// channel runs the launches written into its slot of the shared slots memfd (W3, ring.rs has
// the rules R1-R4). A crash of any kind replies on every busy slot before the process dies
// (W4). Little-endian structures, same machine as the parent.
#include <atomic>
#include <map>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>

struct cueflow_launch {
    uint32_t grid[3], block[3];
    uint32_t dyn_shared;
    uint32_t block_begin, block_end;
    char* fault_msg;
    uint32_t fault_msg_len;
};
typedef int (*entry_fn)(const cueflow_launch*, void**);

enum { ST_OK = 0, ST_FAULT = 1, ST_CRASH = 2, ST_ERROR = 3 };
enum { MAX_CHANNELS = 1024, FAULT_LEN = 4096 };
// ring.rs: slot states (R1) and layout.
enum { S_IDLE = 0, S_REQUEST = 1, S_WRITING = 2, S_REPLY = 3 };
static const size_t REQ_AT = 64, REQ_CAP = 64 << 10, REPLY_CAP = 8 << 10;
static const size_t SLOT = (REQ_AT + REQ_CAP + REPLY_CAP + 4095) & ~(size_t)4095;
struct SlotHead {
    std::atomic<uint32_t> state, worker_sleeps, parent_sleeps, req_len, reply_status, reply_len;
    // R5: the request holds `req_count` launch records, run in order; `progress` is the index
    // of the record running (or the one that failed), for the program to name it.
    std::atomic<uint32_t> req_count, progress;
};
static const long POLL_NS = 200000;  // 200 us, the host scheduler's SPIN

struct Request {
    uint32_t magic, path_len, sym_len, nparams;
    uint32_t grid[3], block[3];
    uint32_t dyn_shared, block_begin, block_end, param_bytes;
    uint32_t nro;  // read-only ranges after the parameters (W7)
};
struct Range {
    uint64_t addr, len;
};
struct ChangeMsg {
    uint64_t offset, len;
    uint32_t map, pad;
};

static int g_memfd;
static uintptr_t g_base;
static char* g_slots;
static int g_ctl = -1;
static int g_nchan;

static SlotHead* head(int i) { return (SlotHead*)(g_slots + (size_t)i * SLOT); }
static char* req_area(int i) { return g_slots + (size_t)i * SLOT + REQ_AT; }
static char* reply_area(int i) { return g_slots + (size_t)i * SLOT + REQ_AT + REQ_CAP; }

static void futex_wait(std::atomic<uint32_t>* w, uint32_t expected) {
    syscall(SYS_futex, (uint32_t*)w, FUTEX_WAIT, expected, 0, 0, 0);
}
static void futex_wake(std::atomic<uint32_t>* w) {
    syscall(SYS_futex, (uint32_t*)w, FUTEX_WAKE, 0x7fffffff, 0, 0, 0);
}

// Reply on slot `i` (R1): only whoever moves it from REQUEST to WRITING writes the reply, so a
// crash report and a finished launch never both write it. Async-signal-safe.
static int slot_reply(int i, uint32_t status, const char* msg, uint32_t len) {
    SlotHead* h = head(i);
    uint32_t want = S_REQUEST;
    if (!h->state.compare_exchange_strong(want, S_WRITING)) return -1;
    if (len > REPLY_CAP) len = REPLY_CAP;
    memcpy(reply_area(i), msg, len);
    h->reply_status.store(status, std::memory_order_relaxed);
    h->reply_len.store(len, std::memory_order_relaxed);
    h->state.store(S_REPLY);  // seq_cst (R2)
    if (h->parent_sleeps.load()) futex_wake(&h->state);
    return 0;
}
static volatile sig_atomic_t g_crashing;
static __thread int t_chan = -1;

static int read_all(int fd, void* p, size_t n) {
    char* c = (char*)p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void* p, size_t n) {
    const char* c = (const char*)p;
    while (n) {
        ssize_t r = send(fd, c, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int reply(int fd, uint32_t status, const char* msg, uint32_t len) {
    uint32_t h[2] = {status, len};
    if (write_all(fd, h, sizeof h)) return -1;
    return len ? write_all(fd, msg, len) : 0;
}

// ---- W4: crashes ---------------------------------------------------------------------------

static char* put_str(char* o, const char* s) {
    while (*s) *o++ = *s++;
    return o;
}

static char* put_hex(char* o, uintptr_t v) {
    o = put_str(o, "0x");
    char tmp[2 * sizeof v];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    while (n) *o++ = tmp[--n];
    return o;
}

static void on_crash(int sig, siginfo_t* si, void*) {
    if (__sync_lock_test_and_set(&g_crashing, 1)) {
        for (;;) pause();  // another thread reports; the process dies with it
    }
    // Only async-signal-safe calls from here on.
    char buf[512];
    uint32_t* h = (uint32_t*)buf;
    char* o = buf + 20;  // after the header, the channel and the faulting address
    const char* name = sig == SIGSEGV ? "SIGSEGV (invalid memory access)"
                     : sig == SIGBUS  ? "SIGBUS (invalid memory access)"
                     : sig == SIGFPE  ? "SIGFPE (arithmetic fault)"
                     : sig == SIGILL  ? "SIGILL (illegal instruction or trap)"
                     : sig == SIGABRT ? "SIGABRT (abort or failed assertion)"
                     : sig == SIGTRAP ? "SIGTRAP (trap)"
                                      : "fatal signal";
    o = put_str(o, name);
    if (sig == SIGSEGV || sig == SIGBUS) {
        o = put_str(o, " at address ");
        o = put_hex(o, (uintptr_t)si->si_addr);
    }
    h[0] = ST_CRASH;
    h[1] = (uint32_t)(o - buf - 8);
    h[2] = (uint32_t)t_chan;  // -1: not a launch thread
    uint64_t at = (sig == SIGSEGV || sig == SIGBUS) ? (uint64_t)(uintptr_t)si->si_addr : 0;
    memcpy(buf + 12, &at, sizeof at);
    for (int i = 0; i < g_nchan; i++) slot_reply(i, ST_CRASH, buf + 8, (uint32_t)(o - buf - 8));
    if (g_ctl >= 0) send(g_ctl, buf, (size_t)(o - buf), MSG_NOSIGNAL);  // a mapping update waits there
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    pthread_sigmask(SIG_UNBLOCK, &s, 0);
    raise(sig);
    _exit(128 + sig);
}

static void alt_stack(void) {
    stack_t ss;
    ss.ss_size = 1 << 16;
    ss.ss_sp = malloc(ss.ss_size);
    ss.ss_flags = 0;
    if (ss.ss_sp) sigaltstack(&ss, 0);
}

static void install_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
    for (int s : sigs) sigaction(s, &sa, 0);
}

// ---- W7: read-only arguments ---------------------------------------------------------------
// How many running launches declared each page read-only, and whether it is mapped read-only:
// piecewise-constant over the address space (key: first address of a run, value: up to the
// next key). A run is read-only while its count is above 0. When its count returns to 0 it
// goes back to read-write at once if another launch is running, and otherwise stays read-only
// ("stale") until the next launch arrives: that launch releases every stale run it does not
// hold itself before it runs. So a launch never runs with pages read-only that no running
// launch holds, except those it holds itself — and a stream of launches reading one buffer
// pays no mprotect after the first.

struct Run {
    int count;
    bool ro;
    bool operator==(const Run& o) const { return count == o.count && ro == o.ro; }
};
static std::map<uintptr_t, Run> g_ro;
static pthread_mutex_t g_ro_lock = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<int> g_running;     // launches between ro_start and ro_end
static std::atomic<bool> g_any_stale;  // a run may be stale

// Make `x` the first address of a run.
static void ro_split(uintptr_t x) {
    auto it = g_ro.upper_bound(x);
    if (it == g_ro.begin()) {
        g_ro.emplace(x, Run{0, false});
        return;
    }
    --it;
    if (it->first != x) g_ro.emplace(x, it->second);
}

// Merge neighbouring equal runs from before `lo` to `hi`, and drop a leading empty run.
static void ro_merge(uintptr_t lo, uintptr_t hi) {
    auto it = g_ro.lower_bound(lo);
    if (it != g_ro.begin()) --it;
    while (it != g_ro.end()) {
        auto next = std::next(it);
        if (next == g_ro.end() || next->first > hi) break;
        if (next->second == it->second) g_ro.erase(next);
        else it = next;
    }
    if (!g_ro.empty() && g_ro.begin()->second == Run{0, false}) g_ro.erase(g_ro.begin());
}

static void protect(uintptr_t a, uintptr_t b, bool ro) {
    mprotect((void*)a, b - a, ro ? PROT_READ : PROT_READ | PROT_WRITE);
}

static bool held(const Range* r, uint32_t n, uintptr_t a, uintptr_t b) {
    for (uint32_t i = 0; i < n; i++)
        if (r[i].addr <= a && b <= r[i].addr + r[i].len) return true;
    return false;
}

// A launch with read-only ranges `r` arrives: release the stale runs it does not hold, then
// hold its ranges. `g_any_stale` goes false only once the runs are released (the launches
// that skip the lock on seeing it false must find no stale run left, even while another
// launch is releasing them).
static void ro_start(const Range* r, uint32_t n) {
    g_running.fetch_add(1);
    if (!n && !g_any_stale.load()) return;
    pthread_mutex_lock(&g_ro_lock);
    if (g_any_stale.load()) {
        bool still = false;
        for (auto it = g_ro.begin(); it != g_ro.end(); ++it) {
            auto next = std::next(it);
            if (next == g_ro.end()) break;
            if (it->second.count == 0 && it->second.ro) {
                if (held(r, n, it->first, next->first)) {
                    still = true;  // still stale, held from now on
                } else {
                    protect(it->first, next->first, false);
                    it->second.ro = false;
                }
            }
        }
        ro_merge(0, UINTPTR_MAX);
        g_any_stale.store(still);
    }
    for (uint32_t i = 0; i < n; i++) {
        uintptr_t lo = (uintptr_t)r[i].addr, hi = lo + (uintptr_t)r[i].len;
        if (lo >= hi) continue;
        ro_split(lo);
        ro_split(hi);
        for (auto it = g_ro.find(lo); it->first < hi; ++it) {
            if (it->second.count++ == 0 && !it->second.ro) {
                protect(it->first, std::next(it)->first, true);
                it->second.ro = true;
            }
        }
        ro_merge(lo, hi);
    }
    pthread_mutex_unlock(&g_ro_lock);
}

// The launch with read-only ranges `r` is over.
static void ro_end(const Range* r, uint32_t n) {
    int others = g_running.fetch_sub(1) - 1;
    if (!n) return;
    pthread_mutex_lock(&g_ro_lock);
    for (uint32_t i = 0; i < n; i++) {
        uintptr_t lo = (uintptr_t)r[i].addr, hi = lo + (uintptr_t)r[i].len;
        if (lo >= hi) continue;
        ro_split(lo);
        ro_split(hi);
        for (auto it = g_ro.find(lo); it->first < hi; ++it) {
            if (--it->second.count == 0) {
                if (others > 0) {
                    protect(it->first, std::next(it)->first, false);
                    it->second.ro = false;
                } else {
                    g_any_stale.store(true);
                }
            }
        }
        ro_merge(lo, hi);
    }
    pthread_mutex_unlock(&g_ro_lock);
}

// A mapping change mapped [lo, hi) anew, read-write from the memfd or PROT_NONE (A4): runs
// nobody holds there lose their protection record (a stale run must never be "released" to
// read-write over a freed block), and what running launches hold is protected again.
static void ro_remapped(uintptr_t lo, uintptr_t hi, bool mapped) {
    pthread_mutex_lock(&g_ro_lock);
    for (auto it = g_ro.begin(); it != g_ro.end(); ++it) {
        auto next = std::next(it);
        if (next == g_ro.end()) break;
        uintptr_t a = it->first > lo ? it->first : lo, b = next->first < hi ? next->first : hi;
        if (a >= b) continue;
        if (it->second.count > 0) {
            if (mapped) protect(a, b, true);
        } else if (it->second.ro) {
            // Split so that only [a, b) loses the record.
            ro_split(a);
            ro_split(b);
            g_ro[a].ro = false;
            it = g_ro.find(a);
        }
    }
    ro_merge(0, UINTPTR_MAX);
    pthread_mutex_unlock(&g_ro_lock);
}

// ---- W3: launches --------------------------------------------------------------------------

struct Entry {
    char* key;  // path NUL symbol NUL
    size_t key_len;
    entry_fn fn;
    Entry* next;
};
static Entry* g_entries;
static pthread_mutex_t g_entries_lock = PTHREAD_MUTEX_INITIALIZER;

static entry_fn lookup(const char* path, const char* sym, char* err, size_t err_len) {
    size_t pl = strlen(path), sl = strlen(sym), kl = pl + sl + 2;
    pthread_mutex_lock(&g_entries_lock);
    for (Entry* e = g_entries; e; e = e->next) {
        if (e->key_len == kl && !memcmp(e->key, path, pl + 1) && !memcmp(e->key + pl + 1, sym, sl + 1)) {
            entry_fn f = e->fn;
            pthread_mutex_unlock(&g_entries_lock);
            return f;
        }
    }
    entry_fn f = 0;
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, err_len, "dlopen %s: %s", path, dlerror());
    } else {
        f = (entry_fn)dlsym(h, sym);
        if (!f) {
            snprintf(err, err_len, "no entry `%s` in %s", sym, path);
        } else {
            Entry* e = (Entry*)malloc(sizeof *e);
            e->key = (char*)malloc(kl);
            memcpy(e->key, path, pl + 1);
            memcpy(e->key + pl + 1, sym, sl + 1);
            e->key_len = kl;
            e->fn = f;
            e->next = g_entries;
            g_entries = e;
        }
    }
    pthread_mutex_unlock(&g_entries_lock);
    return f;
}

// Back-to-back launches skip the sleep and wake-up: poll for the next request for a short
// while, yielding the core between checks, before sleeping on the slot (R2), as the host
// scheduler's engines do.
static void await_request(SlotHead* h) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (h->state.load(std::memory_order_acquire) == S_REQUEST) return;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > POLL_NS) break;
        sched_yield();
    }
    for (;;) {
        h->worker_sleeps.store(1);
        uint32_t seen = h->state.load();
        if (seen == S_REQUEST) break;
        futex_wait(&h->state, seen);
    }
    h->worker_sleeps.store(0, std::memory_order_relaxed);
}

// Run the launch record at `b` (its header, then path, symbol, parameter sizes, parameters and
// read-only ranges, `len` bytes at most). Returns the record's length rounded to 64 (where the
// next one starts), 0 for a broken record; `status` and `fault` say how the launch ended.
static size_t run_record(const char* b, size_t len, uint32_t* status, char* fault) {
    Request r;
    if (len < sizeof r) return 0;
    memcpy(&r, b, sizeof r);
    size_t path = 64, sym = path + (size_t)r.path_len + 1;
    size_t sizes_at = (sym + r.sym_len + 1 + 3) & ~(size_t)3;
    size_t data_at = (sizes_at + 4 * (size_t)r.nparams + 15) & ~(size_t)15;
    size_t ro_at = data_at + r.param_bytes, end = ro_at + sizeof(Range) * (size_t)r.nro;
    if (r.magic != 0x6b636663u || len > REQ_CAP || end > len || r.path_len > REQ_CAP ||
        r.sym_len > REQ_CAP || r.nparams > REQ_CAP || r.param_bytes > REQ_CAP || r.nro > REQ_CAP)
        return 0;
    const char* pathp = b + path;
    const char* symp = b + sym;
    const uint32_t* sizes = (const uint32_t*)(b + sizes_at);
    char* data = (char*)b + data_at;
    const Range* ro = (const Range*)(b + ro_at);
    void* params_stack[64];
    void** params = r.nparams <= 64 ? params_stack : (void**)malloc(sizeof(void*) * r.nparams);
    size_t at = 0;
    for (uint32_t i = 0; i < r.nparams; i++) {
        params[i] = data + at;
        at += (sizes[i] + 15) & ~(uint32_t)15;
    }
    fault[0] = 0;
    entry_fn f = lookup(pathp, symp, fault, FAULT_LEN);
    if (!f) {
        *status = ST_ERROR;
    } else {
        cueflow_launch l;
        memcpy(l.grid, r.grid, sizeof l.grid);
        memcpy(l.block, r.block, sizeof l.block);
        l.dyn_shared = r.dyn_shared;
        l.block_begin = r.block_begin;
        l.block_end = r.block_end;
        l.fault_msg = fault;
        l.fault_msg_len = FAULT_LEN;
        ro_start(ro, r.nro);
        int k = f(&l, params);
        ro_end(ro, r.nro);
        fflush(stdout);  // what the kernel printed shows before the launch completes
        fflush(stderr);
        fault[FAULT_LEN - 1] = 0;
        // On success the buffer holds what the kernel recorded for the host (conditions it
        // set), if anything.
        *status = k == 0 ? ST_OK : ST_FAULT;
        if (k != 0 && !fault[0]) snprintf(fault, FAULT_LEN, "the kernel returned fault code %d", k);
    }
    if (params != params_stack) free(params);
    return (end + 63) & ~(size_t)63;
}

static void* channel_thread(void* arg) {
    int idx = (int)(intptr_t)arg;
    SlotHead* h = head(idx);
    t_chan = idx;
    alt_stack();
    char* fault = (char*)malloc(FAULT_LEN);
    char* records = (char*)malloc(REPLY_CAP);  // what the launches of a request recorded
    for (;;) {
        await_request(h);
        // The request area is only read here; the slot's owner wrote it before REQUEST (R1).
        const char* b = req_area(idx);
        size_t len = h->req_len.load(std::memory_order_relaxed), off = 0;
        uint32_t count = h->req_count.load(std::memory_order_relaxed), status = ST_OK;
        size_t kept = 0;
        if (!count) _exit(4);
        for (uint32_t i = 0; i < count && status == ST_OK; i++) {
            h->progress.store(i, std::memory_order_release);
            size_t used = off < len ? run_record(b + off, len - off, &status, fault) : 0;
            if (!used) _exit(4);  // a broken request: the parent sees the worker gone
            off += used;
            size_t n = strlen(fault);
            if (status == ST_OK && n && kept + n + 1 <= REPLY_CAP) {
                memcpy(records + kept, fault, n);
                kept += n;
                records[kept++] = '\n';
            }
        }
        if (status == ST_OK) slot_reply(idx, ST_OK, records, (uint32_t)kept);
        else slot_reply(idx, status, fault, (uint32_t)strlen(fault));
    }
}

// ---- W2: the arena -------------------------------------------------------------------------

static int apply(const ChangeMsg* c) {
    void* at = (void*)(g_base + c->offset);
    void* p = c->map ? mmap(at, c->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, g_memfd, (off_t)c->offset)
                     : mmap(at, c->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? -1 : 0;
}

int main(int argc, char** argv) {
    if (argc < 7) return 2;
    g_memfd = atoi(argv[1]);
    g_base = (uintptr_t)strtoull(argv[2], 0, 16);
    size_t size = (size_t)strtoull(argv[3], 0, 16);
    int ctl = atoi(argv[4]);
    g_ctl = ctl;
    int slots = atoi(argv[5]);
    g_nchan = atoi(argv[6]);
    if (g_nchan < 1 || g_nchan > MAX_CHANNELS) return 2;
    g_slots = (char*)mmap(0, SLOT * (size_t)g_nchan, PROT_READ | PROT_WRITE, MAP_SHARED, slots, 0);
    if (g_slots == (char*)MAP_FAILED) return 2;
    signal(SIGPIPE, SIG_IGN);
    void* p = mmap((void*)g_base, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != (void*)g_base) {
        char m[256];
        snprintf(m, sizeof m, "the worker could not map the arena at %p: %s", (void*)g_base,
                 p == MAP_FAILED ? strerror(errno) : "the address is taken");
        reply(ctl, ST_ERROR, m, (uint32_t)strlen(m));
        return 3;
    }
    alt_stack();
    install_handlers();
    for (int i = 0; i < g_nchan; i++) {
        pthread_t t;
        pthread_create(&t, 0, channel_thread, (void*)(intptr_t)i);
        pthread_detach(t);
    }
    reply(ctl, ST_OK, 0, 0);
    ChangeMsg* cs = 0;
    size_t cap = 0;
    for (;;) {
        uint32_t h[2];
        if (read_all(ctl, h, sizeof h)) break;  // the device is gone
        if (h[1] > cap) {
            free(cs);
            cap = h[1];
            cs = (ChangeMsg*)malloc(sizeof(ChangeMsg) * cap);
        }
        if (read_all(ctl, cs, sizeof(ChangeMsg) * h[1])) break;
        int bad = 0;
        for (uint32_t i = 0; i < h[1]; i++) {
            bad |= apply(&cs[i]);
            ro_remapped(g_base + cs[i].offset, g_base + cs[i].offset + cs[i].len, cs[i].map);
        }
        if (bad) {
            const char* m = "the worker could not apply an arena mapping";
            reply(ctl, ST_ERROR, m, (uint32_t)strlen(m));
        } else {
            reply(ctl, ST_OK, 0, 0);
        }
    }
    fflush(0);  // what kernels printed
    _exit(0);   // launch threads may still run: no destructors
}
