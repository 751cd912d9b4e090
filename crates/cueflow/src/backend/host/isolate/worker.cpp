// cueflow's kernel worker process (HK3). Built at run time by the host backend with the
// machine's C++ compiler and cached; see backend/host/isolate/mod.rs for the design.
//
// argv: worker <memfd> <arena base, hex> <arena size, hex> <control fd> <channel fds...>
//
// The main thread serves the control socket (arena mapping changes, W2); one thread per
// channel socket runs launches (W3). A crash of any kind reports itself on every channel
// before the process dies (W4). Little-endian structures, same machine as the parent.
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
#include <time.h>
#include <unistd.h>

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
static int g_chan[MAX_CHANNELS];
static int g_ctl = -1;
static int g_nchan;
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
    for (int i = 0; i < g_nchan; i++) send(g_chan[i], buf, (size_t)(o - buf), MSG_NOSIGNAL);
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
// How many running launches declared each page read-only: a piecewise-constant count over the
// address space (key: first address of a run, value: its count up to the next key). A run
// whose count leaves 0 is mapped read-only, one whose count returns to 0 read-write again.

static std::map<uintptr_t, int> g_ro;
static pthread_mutex_t g_ro_lock = PTHREAD_MUTEX_INITIALIZER;

// Make `x` the first address of a run.
static void ro_split(uintptr_t x) {
    auto it = g_ro.upper_bound(x);
    if (it == g_ro.begin()) {
        g_ro.emplace(x, 0);
        return;
    }
    --it;
    if (it->first != x) g_ro.emplace(x, it->second);
}

// Add `delta` to the count of [lo, hi), changing the pages' protection where it leaves or
// returns to 0, then merge neighbouring runs of equal counts.
static void ro_add(uintptr_t lo, uintptr_t hi, int delta) {
    if (lo >= hi) return;
    ro_split(lo);
    ro_split(hi);
    for (auto it = g_ro.find(lo); it->first < hi; ++it) {
        auto next = std::next(it);
        int before = it->second, after = before + delta;
        it->second = after;
        if ((before == 0) != (after == 0))
            mprotect((void*)it->first, next->first - it->first, after ? PROT_READ : PROT_READ | PROT_WRITE);
    }
    auto it = g_ro.find(lo);
    if (it != g_ro.begin()) --it;
    while (it != g_ro.end()) {
        auto next = std::next(it);
        if (next == g_ro.end() || next->first > hi) break;
        if (next->second == it->second) g_ro.erase(next);
        else it = next;
    }
    if (!g_ro.empty() && g_ro.begin()->second == 0) g_ro.erase(g_ro.begin());
}

static void ro_hold(const Range* r, uint32_t n, int delta) {
    if (!n) return;
    pthread_mutex_lock(&g_ro_lock);
    for (uint32_t i = 0; i < n; i++) ro_add((uintptr_t)r[i].addr, (uintptr_t)(r[i].addr + r[i].len), delta);
    pthread_mutex_unlock(&g_ro_lock);
}

// A mapping change remapped [lo, hi) read-write (a resynchronisation, A4): protect again what
// running launches hold read-only there.
static void ro_reapply(uintptr_t lo, uintptr_t hi) {
    pthread_mutex_lock(&g_ro_lock);
    for (auto it = g_ro.begin(); it != g_ro.end(); ++it) {
        auto next = std::next(it);
        if (next == g_ro.end()) break;
        uintptr_t a = it->first > lo ? it->first : lo, b = next->first < hi ? next->first : hi;
        if (it->second > 0 && a < b) mprotect((void*)a, b - a, PROT_READ);
    }
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
// while, yielding the core between checks, before blocking (as the host scheduler's engines do).
static void poll_briefly(int fd) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        char c;
        if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) return;  // data, or the end
        if (errno != EAGAIN && errno != EINTR) return;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > POLL_NS) return;
        sched_yield();
    }
}

static void* channel_thread(void* arg) {
    int idx = (int)(intptr_t)arg;
    int fd = g_chan[idx];
    t_chan = idx;
    alt_stack();
    char* fault = (char*)malloc(FAULT_LEN);
    char* buf = 0;
    size_t cap = 0;
    for (;;) {
        Request r;
        poll_briefly(fd);
        ssize_t got = recv(fd, &r, sizeof r, MSG_PEEK);
        if (got == 0) return 0;  // the device closed its end: nothing more to run
        if (read_all(fd, &r, sizeof r) || r.magic != 0x6b636663u) break;
        size_t n = (size_t)r.path_len + 1 + r.sym_len + 1 + 4 * (size_t)r.nparams + r.param_bytes +
                   sizeof(Range) * (size_t)r.nro + 32;  // + padding to 4 and 16
        if (n > cap) {
            free(buf);
            cap = n * 2;
            buf = (char*)aligned_alloc(16, (cap + 15) & ~(size_t)15);
        }
        char* path = buf;
        char* sym = path + r.path_len + 1;
        uint32_t* sizes = (uint32_t*)(((uintptr_t)(sym + r.sym_len + 1) + 3) & ~(uintptr_t)3);
        char* data = (char*)(((uintptr_t)(sizes + r.nparams) + 15) & ~(uintptr_t)15);
        Range* ro = (Range*)(data + r.param_bytes);  // param_bytes is a multiple of 16
        if (read_all(fd, path, r.path_len) || read_all(fd, sym, r.sym_len) ||
            read_all(fd, sizes, 4 * (size_t)r.nparams) || read_all(fd, data, r.param_bytes) ||
            read_all(fd, ro, sizeof(Range) * (size_t)r.nro))
            break;
        path[r.path_len] = 0;
        sym[r.sym_len] = 0;
        void* params_stack[64];
        void** params = r.nparams <= 64 ? params_stack : (void**)malloc(sizeof(void*) * r.nparams);
        size_t at = 0;
        for (uint32_t i = 0; i < r.nparams; i++) {
            params[i] = data + at;
            at += (sizes[i] + 15) & ~(uint32_t)15;
        }
        entry_fn f = lookup(path, sym, fault, FAULT_LEN);
        int rc;
        if (!f) {
            rc = reply(fd, ST_ERROR, fault, (uint32_t)strlen(fault));
        } else {
            cueflow_launch l;
            memcpy(l.grid, r.grid, sizeof l.grid);
            memcpy(l.block, r.block, sizeof l.block);
            l.dyn_shared = r.dyn_shared;
            l.block_begin = r.block_begin;
            l.block_end = r.block_end;
            fault[0] = 0;
            l.fault_msg = fault;
            l.fault_msg_len = FAULT_LEN;
            ro_hold(ro, r.nro, +1);
            int k = f(&l, params);
            ro_hold(ro, r.nro, -1);
            fflush(stdout);  // what the kernel printed shows before the launch completes
            fflush(stderr);
            if (k == 0) {
                // What the kernel recorded for the host (conditions it set), if anything.
                fault[FAULT_LEN - 1] = 0;
                rc = reply(fd, ST_OK, fault, (uint32_t)strlen(fault));
            } else {
                fault[FAULT_LEN - 1] = 0;
                if (!fault[0]) snprintf(fault, FAULT_LEN, "the kernel returned fault code %d", k);
                rc = reply(fd, ST_FAULT, fault, (uint32_t)strlen(fault));
            }
        }
        if (params != params_stack) free(params);
        if (rc) break;
    }
    _exit(4);  // a broken request: the parent sees the worker gone rather than waiting
}

// ---- W2: the arena -------------------------------------------------------------------------

static int apply(const ChangeMsg* c) {
    void* at = (void*)(g_base + c->offset);
    void* p = c->map ? mmap(at, c->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, g_memfd, (off_t)c->offset)
                     : mmap(at, c->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? -1 : 0;
}

int main(int argc, char** argv) {
    if (argc < 6) return 2;
    g_memfd = atoi(argv[1]);
    g_base = (uintptr_t)strtoull(argv[2], 0, 16);
    size_t size = (size_t)strtoull(argv[3], 0, 16);
    int ctl = atoi(argv[4]);
    g_ctl = ctl;
    g_nchan = argc - 5 < MAX_CHANNELS ? argc - 5 : MAX_CHANNELS;
    for (int i = 0; i < g_nchan; i++) g_chan[i] = atoi(argv[5 + i]);
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
            if (cs[i].map) ro_reapply(g_base + cs[i].offset, g_base + cs[i].offset + cs[i].len);
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
