/*
 * broker._spawn: start a command already tracked and confined, with no trampoline.
 *
 * vfork(), then in the child, using only system calls: write "0" to each given cgroup file (a v1
 * group's tasks, the v2 group's cgroup.procs: the child moves itself, before it can fork),
 * setsid(), stdin/stdout/stderr (and, for a terminal, TIOCSCTTY: it becomes the session's
 * controlling terminal), fchdir() to the working directory, mark every other fd close-on-exec,
 * enter the Landlock domain, execve(). The parent opened every file beforehand, so nothing in the
 * child resolves a path but execve. A failed step is reported through a close-on-exec pipe and
 * the child exits; the parent reaps it and raises.
 *
 * Given a cgroup v2 directory fd, the child is instead created inside that group with
 * clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP) on a stack of its own: the kernel places it
 * at fork, which spares the write to cgroup.procs (the threadgroup rwsem taken for writing, some
 * 200-250 us during which vfork keeps the broker's event loop suspended). Where the arch has no
 * trampoline below or the kernel refuses the flags, it falls back to vfork + write, once for all.
 * That child also shares the broker's descriptor table (CLONE_FILES) and unshares only the few
 * low descriptors it needs (the slots below), so a spawn costs the same however many descriptors
 * the broker holds.
 *
 * This replaces "sh -c 'echo 0 > cgroup.procs && exec ...'" (an extra exec per command) and the
 * short-lived thread that entered the Landlock domain before spawning. See broker/_process.py.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

#define MAX_CGROUPS 8

/* The child's own stack for clone3 (CLONE_VM shares the broker's memory, and the parent's stack
   frame is still live): room for the signal loop and glibc's wrappers, with a guard page below. */
#define CHILD_STACK_SIZE (64 * 1024)

#if defined(__x86_64__)
#define HAVE_CLONE3_TRAMPOLINE 1
#else
#define HAVE_CLONE3_TRAMPOLINE 0
#endif

/* clone3's argument, as of Linux 5.7 (CLONE_INTO_CGROUP); defined here so that older headers do. */
struct clone3_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};

/* clone3 support, learnt at the first call: untried, works, or refused (then vfork for good);
   the order matches the names of clone3_status(). */
enum { CLONE3_UNTRIED, CLONE3_WORKS, CLONE3_REFUSED, CLONE3_DISABLED };
static int clone3_state = HAVE_CLONE3_TRAMPOLINE ? CLONE3_UNTRIED : CLONE3_REFUSED;

enum step { STEP_SIGNALS = 1, STEP_CGROUP, STEP_SESSION, STEP_FDS, STEP_CWD, STEP_NNP,
            STEP_LANDLOCK, STEP_TTY, STEP_EXEC, STEP_UNSHARE };

static const char *const step_names[] = {
    "", "signals", "cgroup", "setsid", "fds", "cwd", "no_new_privs", "landlock", "tty", "exec",
    "fds",
};

/* The clone3 child shares the broker's descriptor table (CLONE_FILES) and unshares only its
   lowest descriptors: a copied table costs the kernel about 0.5 us per descriptor at the copy
   and again at execve, which closes them, so a broker with 256 commands running (1,300
   descriptors) spent twice as long per spawn. The descriptors the child needs are placed in
   SLOTS low descriptors held open on /dev/null, and close_range(slot_top + 1, ~0,
   CLOSE_RANGE_UNSHARE) copies only those below. One spawn uses the slots at a time (others, from
   other threads, copy the whole table as before); a kernel without CLOSE_RANGE_UNSHARE (before
   5.9) is learnt at the first child, which then runs again without. */
enum { SLOT_IN, SLOT_OUT, SLOT_ERR, SLOT_CWD, SLOT_RULESET, SLOT_REPORT, SLOTS };
#define MAX_SLOT_FD 64 /* slots any higher would spare little: not used then */
enum { UNSHARE_UNTRIED, UNSHARE_WORKS, UNSHARE_REFUSED };
static int unshare_state = UNSHARE_UNTRIED;
static int slot_fds[SLOTS + 1] = {-1, -1, -1, -1, -1, -1, -1}; /* + the /dev/null kept to refill */
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;

struct spawn_args {
    char *const *executables; /* candidate paths for argv[0], tried in order */
    char *const *argv;
    char *const *envp;
    int cwd_fd, stdin_fd, stdout_fd, stderr_fd;
    int cgroup_fds[MAX_CGROUPS + 1]; /* + the v2 group's cgroup.procs on the vfork path */
    int n_cgroups;
    int ruleset_fd, no_new_privs;
    int controlling_tty; /* stdin is a terminal slave: make it the new session's controlling tty */
    sigset_t mask; /* the caller's signal mask, restored just before execve */
    int errfd;     /* the error pipe's write end */
    unsigned unshare_from; /* > 0: the table is shared; unshare all below this first */
};

struct report {
    int step;
    int err;
};

static _Noreturn void fail(int errfd, int step, int err)
{
    struct report r = {step, err};
    ssize_t n;
    do {
        n = write(errfd, &r, sizeof r);
    } while (n < 0 && errno == EINTR);
    _exit(127);
}

/* Runs in the vfork child: system calls only, nothing that allocates or takes a lock. */
static _Noreturn void child(const struct spawn_args *a, int errfd)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction old;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &old) != 0)
            continue;
        /* Caught signals go back to the default (a handler of the broker must never run here);
           SIGPIPE and SIGXFSZ too, which Python ignores, as subprocess's restore_signals. */
        if (old.sa_handler != SIG_IGN || sig == SIGPIPE || sig == SIGXFSZ)
            if (old.sa_handler != SIG_DFL && sigaction(sig, &dfl, NULL) != 0)
                fail(errfd, STEP_SIGNALS, errno);
    }
    for (int i = 0; i < a->n_cgroups; i++)
        if (write(a->cgroup_fds[i], "0", 1) != 1)
            fail(errfd, STEP_CGROUP, errno);
    if (setsid() < 0)
        fail(errfd, STEP_SESSION, errno);
    /* Nothing above changed the (maybe shared) table; from here on it is the child's own. */
    if (a->unshare_from > 0 &&
        syscall(SYS_close_range, a->unshare_from, ~0U, CLOSE_RANGE_UNSHARE) != 0)
        fail(errfd, STEP_UNSHARE, errno);

    int in = a->stdin_fd, out = a->stdout_fd, err = a->stderr_fd;
    if (in < 3 && (in = fcntl(in, F_DUPFD_CLOEXEC, 3)) < 0)
        fail(errfd, STEP_FDS, errno);
    if (out < 3 && (out = fcntl(out, F_DUPFD_CLOEXEC, 3)) < 0)
        fail(errfd, STEP_FDS, errno);
    if (err < 3 && (err = fcntl(err, F_DUPFD_CLOEXEC, 3)) < 0)
        fail(errfd, STEP_FDS, errno);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail(errfd, STEP_FDS, errno);
    if (a->controlling_tty && ioctl(0, TIOCSCTTY, 0) != 0)
        fail(errfd, STEP_TTY, errno);
    if (a->cwd_fd >= 0 && fchdir(a->cwd_fd) < 0)
        fail(errfd, STEP_CWD, errno);
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        struct rlimit rl;
        int top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur
                                                                            : 65536;
        for (int fd = 3; fd < top; fd++)
            fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    if (a->ruleset_fd >= 0) {
        if (a->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
            fail(errfd, STEP_NNP, errno);
        if (syscall(SYS_landlock_restrict_self, a->ruleset_fd, 0U) != 0)
            fail(errfd, STEP_LANDLOCK, errno);
    }
    sigprocmask(SIG_SETMASK, &a->mask, NULL);

    int saved = 0;
    for (char *const *exe = a->executables; *exe != NULL; exe++) {
        execve(*exe, a->argv, a->envp);
        if (errno != ENOENT && errno != ENOTDIR && saved == 0)
            saved = errno;
    }
    fail(errfd, STEP_EXEC, saved ? saved : errno);
}

#if HAVE_CLONE3_TRAMPOLINE
/*
 * long clone3_run(struct clone3_args *args, size_t size, int (*fn)(void *), void *arg)
 *
 * clone3, and in the child (on the new stack the kernel switched to, with every other register
 * as the parent had it) call fn(arg) and exit with its result should it return. C code cannot
 * safely return from clone3 on another stack, hence these few instructions. The parent gets the
 * pid or -errno. fn and arg travel in r8/r9, which the syscall preserves in both processes.
 */
__attribute__((visibility("hidden"))) long clone3_run(struct clone3_args *args, size_t size,
                                                      int (*fn)(void *), void *arg);
__asm__(
    ".pushsection .text\n"
    ".p2align 4\n"
    ".hidden clone3_run\n"
    ".type clone3_run, @function\n"
    "clone3_run:\n"
    "    mov %rdx, %r8\n"
    "    mov %rcx, %r9\n"
    "    mov $435, %eax\n" /* SYS_clone3 */
    "    syscall\n"
    "    test %rax, %rax\n"
    "    jnz 1f\n"
    "    xor %ebp, %ebp\n" /* outermost frame */
    "    and $-16, %rsp\n"
    "    mov %r9, %rdi\n"
    "    call *%r8\n"
    "    mov %eax, %edi\n"
    "    mov $60, %eax\n" /* SYS_exit */
    "    syscall\n"
    "    hlt\n"
    "1:  ret\n"
    ".size clone3_run, .-clone3_run\n"
    ".popsection\n");

static int clone3_child(void *arg)
{
    const struct spawn_args *a = arg;
    child(a, a->errfd);
}

/* Errors of clone3 that mean "not this kernel" (or a seccomp filter that hides clone3): old
   kernels lack the syscall, the cgroup field or the flag. The vfork path is then used for good. */
static int clone3_unsupported(long err)
{
    return err == -ENOSYS || err == -E2BIG || err == -EINVAL || err == -EOPNOTSUPP;
}

/* One child stack kept for the life of the module and lent to one spawn at a time: unmapping
   a stack after each child means a TLB shootdown (an IPI to the CPU it ran on, costly in a VM). */
static char *cached_stack;
static int cached_stack_busy;

/* A child stack (lowest usable address) of CHILD_STACK_SIZE above a guard page, or NULL. */
static char *take_stack(void)
{
    if (!__atomic_exchange_n(&cached_stack_busy, 1, __ATOMIC_ACQUIRE)) {
        char *cached = __atomic_load_n(&cached_stack, __ATOMIC_RELAXED);
        if (cached != NULL)
            return cached;
        __atomic_store_n(&cached_stack_busy, 0, __ATOMIC_RELEASE);
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, CHILD_STACK_SIZE + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    if (mprotect(map, page, PROT_NONE) != 0) { /* the guard page: overflow faults, never writes */
        int saved = errno;
        munmap(map, CHILD_STACK_SIZE + page);
        errno = saved;
        return NULL;
    }
    return map + page;
}

/* Give back a stack from take_stack(): the first becomes the cached one, others are unmapped
   (only spawns running at once, from several threads, need more than one). */
static void give_stack(char *stack)
{
    if (stack == __atomic_load_n(&cached_stack, __ATOMIC_RELAXED)) { /* set once, never changed */
        __atomic_store_n(&cached_stack_busy, 0, __ATOMIC_RELEASE);
        return;
    }
    if (!__atomic_exchange_n(&cached_stack_busy, 1, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&cached_stack, __ATOMIC_RELAXED) == NULL) {
            __atomic_store_n(&cached_stack, stack, __ATOMIC_RELAXED);
            __atomic_store_n(&cached_stack_busy, 0, __ATOMIC_RELEASE);
            return;
        }
        __atomic_store_n(&cached_stack_busy, 0, __ATOMIC_RELEASE);
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    munmap(stack - page, CHILD_STACK_SIZE + page);
}

/* Open the slots (lowest free descriptors, on /dev/null), once, at import: few descriptors are
   open then, so the slots are low. Left unopened (-1) when they would not be. */
static void open_slots(void)
{
    for (int i = 0; i <= SLOTS; i++) {
        slot_fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (slot_fds[i] < 0 || slot_fds[i] > MAX_SLOT_FD) {
            for (int j = 0; j <= i; j++)
                if (slot_fds[j] >= 0)
                    close(slot_fds[j]);
            memset(slot_fds, -1, sizeof slot_fds);
            return;
        }
    }
}

/* Point the slots at the child's descriptors, and `b` (a copy of `a`) at the slots. Under
   slot_lock; undone by clear_slots(). */
static int fill_slots(const struct spawn_args *a, struct spawn_args *b)
{
    const int wanted[SLOTS] = {a->stdin_fd, a->stdout_fd, a->stderr_fd, a->cwd_fd, a->ruleset_fd,
                               a->errfd};
    int *placed[SLOTS] = {&b->stdin_fd, &b->stdout_fd, &b->stderr_fd, &b->cwd_fd, &b->ruleset_fd,
                          &b->errfd};
    int top = 0;
    *b = *a;
    for (int i = 0; i < SLOTS; i++) {
        if (wanted[i] < 0)
            continue;
        if (dup3(wanted[i], slot_fds[i], O_CLOEXEC) < 0)
            return -1;
        *placed[i] = slot_fds[i];
        if (slot_fds[i] > top)
            top = slot_fds[i];
    }
    b->unshare_from = (unsigned)top + 1;
    return 0;
}

/* Point every slot at /dev/null again (the child's pipes must not stay open here). */
static void clear_slots(void)
{
    for (int i = 0; i < SLOTS; i++)
        dup3(slot_fds[SLOTS], slot_fds[i], O_CLOEXEC);
}

/* Run child(a) in a process created in the cgroup `cgroup_dir_fd`; return its pid, or -errno.
   `*shared` is set when the child shared the descriptor table (see the slots above). */
static long spawn_clone3(struct spawn_args *a, int cgroup_dir_fd, int *shared)
{
    char *stack = take_stack();
    if (stack == NULL)
        return -errno;
    struct spawn_args b;
    const struct spawn_args *run = a;
    int locked = slot_fds[SLOTS] >= 0 && /* opened at import, or never */
                 __atomic_load_n(&unshare_state, __ATOMIC_RELAXED) != UNSHARE_REFUSED &&
                 pthread_mutex_trylock(&slot_lock) == 0;
    if (locked && fill_slots(a, &b) == 0)
        run = &b;
    else if (locked)
        clear_slots();
    *shared = run == &b;
    struct clone3_args ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP | (*shared ? CLONE_FILES : 0);
    ca.exit_signal = SIGCHLD;
    ca.stack = (uint64_t)(uintptr_t)stack;
    ca.stack_size = CHILD_STACK_SIZE;
    ca.cgroup = (uint64_t)cgroup_dir_fd;
    /* CLONE_VFORK: back here only once the child has exec'd or exited, done with the stack. */
    long pid = clone3_run(&ca, sizeof ca, clone3_child, (void *)run);
    give_stack(stack);
    if (locked) {
        if (*shared)
            clear_slots();
        pthread_mutex_unlock(&slot_lock);
    }
    return pid;
}
#endif


/* A NULL-terminated array of pointers into the bytes objects of `seq` (kept alive by `*keep`). */
static char **bytes_array(PyObject *seq, const char *what, PyObject **keep)
{
    *keep = PySequence_Fast(seq, what);
    if (*keep == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(*keep);
    char **out = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(*keep, i);
        char *s;
        Py_ssize_t len;
        if (!PyBytes_Check(item) || PyBytes_AsStringAndSize(item, &s, &len) < 0 ||
            (Py_ssize_t)strlen(s) != len) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s: items must be bytes without NUL", what);
            PyMem_Free(out);
            return NULL;
        }
        out[i] = s;
    }
    return out;
}

/* Start the child on the vfork path: the v2 group (if any) is joined by a write in the child. */
static pid_t spawn_vfork(struct spawn_args *a, int cgroup_dir_fd, int *step)
{
    int procs = -1;
    if (cgroup_dir_fd >= 0) {
        procs = openat(cgroup_dir_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (procs < 0) {
            *step = STEP_CGROUP;
            return -1;
        }
        memmove(&a->cgroup_fds[1], &a->cgroup_fds[0], (size_t)a->n_cgroups * sizeof(int));
        a->cgroup_fds[0] = procs;
        a->n_cgroups++;
    }
    pid_t pid = vfork();
    if (pid == 0)
        child(a, a->errfd);
    if (procs >= 0) {
        int saved = errno;
        close(procs);
        errno = saved;
    }
    return pid;
}

/* Create the child: into the v2 group by clone3 where possible, else by vfork. On failure return
   -1 with errno set, and *step set when a step (the cgroup) is to blame; *shared says whether the
   child shared the descriptor table. */
static pid_t start_child(struct spawn_args *a, int cgroup_dir_fd, int *step, int *shared)
{
    *shared = 0;
#if HAVE_CLONE3_TRAMPOLINE
    int state = __atomic_load_n(&clone3_state, __ATOMIC_RELAXED);
    if (cgroup_dir_fd >= 0 && (state == CLONE3_UNTRIED || state == CLONE3_WORKS)) {
        long pid = spawn_clone3(a, cgroup_dir_fd, shared);
        if (pid > 0) {
            if (state == CLONE3_UNTRIED)
                __atomic_store_n(&clone3_state, CLONE3_WORKS, __ATOMIC_RELAXED);
            return (pid_t)pid;
        }
        if (pid == -EAGAIN || pid == -ENOMEM) { /* out of processes or memory: no retry */
            errno = (int)-pid;
            return -1;
        }
        /* A kernel without clone3 or CLONE_INTO_CGROUP: vfork from now on. Any other refusal
           (this group, permissions) goes through the write below, which names the cgroup step. */
        if (clone3_unsupported(pid) && state == CLONE3_UNTRIED)
            __atomic_store_n(&clone3_state, CLONE3_REFUSED, __ATOMIC_RELAXED);
    }
#endif
    return spawn_vfork(a, cgroup_dir_fd, step);
}

PyDoc_STRVAR(spawn_doc,
"spawn(executables, argv, env, *, stdin_fd, stdout_fd, stderr_fd=-1, cwd_fd=-1, cgroup_fds=(),\n"
"      cgroup_dir_fd=-1, ruleset_fd=-1, no_new_privs=False, controlling_tty=False) -> int\n\n"
"Start argv[0] (trying each of `executables`) in a new session, in the given cgroups and Landlock\n"
"ruleset, and return its pid once it has exec'd; stderr goes with stdout unless given.\n"
"cgroup_dir_fd, a cgroup v2 directory (O_PATH is enough), is entered at creation by\n"
"clone3(CLONE_INTO_CGROUP) where the kernel allows, else by a write to its cgroup.procs;\n"
"cgroup_fds are cgroup files (tasks, cgroup.procs) the child writes \"0\" to, moving itself.\n"
"controlling_tty makes stdin (a terminal) the new session's controlling terminal. Raises\n"
"OSError whose filename names the step that failed: cgroup, setsid, fds, tty, cwd,\n"
"no_new_privs, landlock, exec (or signals); None if the process could not be created at all.");

static PyObject *spawn(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"executables", "argv",       "env",           "stdin_fd",
                             "stdout_fd",   "stderr_fd",  "cwd_fd",        "cgroup_fds",
                             "cgroup_dir_fd", "ruleset_fd", "no_new_privs", "controlling_tty",
                             NULL};
    PyObject *py_exes, *py_argv, *py_env, *py_cgroups = NULL;
    struct spawn_args a;
    int cgroup_dir_fd = -1;
    memset(&a, 0, sizeof a);
    a.ruleset_fd = a.cwd_fd = a.stdin_fd = a.stdout_fd = a.stderr_fd = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|$iiiiOiipp", kwlist, &py_exes, &py_argv,
                                     &py_env, &a.stdin_fd, &a.stdout_fd, &a.stderr_fd, &a.cwd_fd,
                                     &py_cgroups, &cgroup_dir_fd, &a.ruleset_fd,
                                     &a.no_new_privs, &a.controlling_tty))
        return NULL;
    if (a.stderr_fd < 0)
        a.stderr_fd = a.stdout_fd;

    PyObject *keep_exes = NULL, *keep_argv = NULL, *keep_env = NULL, *keep_cg = NULL;
    char **exes = NULL, **argv = NULL, **envp = NULL;
    PyObject *result = NULL;
    if ((exes = bytes_array(py_exes, "executables", &keep_exes)) == NULL ||
        (argv = bytes_array(py_argv, "argv", &keep_argv)) == NULL ||
        (envp = bytes_array(py_env, "env", &keep_env)) == NULL)
        goto done;
    if (exes[0] == NULL || argv[0] == NULL || a.stdin_fd < 0 || a.stdout_fd < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "spawn: executables, argv, stdin_fd and stdout_fd are required");
        goto done;
    }
    if (py_cgroups != NULL) {
        if ((keep_cg = PySequence_Fast(py_cgroups, "cgroup_fds")) == NULL)
            goto done;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(keep_cg);
        if (n > MAX_CGROUPS) {
            PyErr_SetString(PyExc_ValueError, "spawn: too many cgroup_fds");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(keep_cg, i));
            if (fd == -1 && PyErr_Occurred())
                goto done;
            if (fd < 0 || fd > INT_MAX) {
                PyErr_SetString(PyExc_ValueError, "spawn: cgroup_fds must be open fds");
                goto done;
            }
            a.cgroup_fds[a.n_cgroups++] = (int)fd;
        }
    }
    a.executables = exes;
    a.argv = argv;
    a.envp = envp;

again:;
    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    a.errfd = errpipe[1];
    sigset_t all;
    sigfillset(&all);
    pid_t pid;
    int start_errno = 0, start_step = 0, shared = 0;
    Py_BEGIN_ALLOW_THREADS
    /* No signal handler may run in the child, which shares the broker's memory until execve. */
    pthread_sigmask(SIG_SETMASK, &all, &a.mask);
    pid = start_child(&a, cgroup_dir_fd, &start_step, &shared);
    start_errno = errno;
    pthread_sigmask(SIG_SETMASK, &a.mask, NULL);
    Py_END_ALLOW_THREADS
    close(errpipe[1]);
    if (pid < 0) {
        close(errpipe[0]);
        PyObject *exc_args =
            start_step ? Py_BuildValue("(iss)", start_errno, strerror(start_errno),
                                       step_names[start_step])
                       : Py_BuildValue("(is)", start_errno, strerror(start_errno));
        if (exc_args != NULL) {
            PyErr_SetObject(PyExc_OSError, exc_args);
            Py_DECREF(exc_args);
        }
        goto done;
    }
    struct report r;
    ssize_t n;
    do {
        n = read(errpipe[0], &r, sizeof r);
    } while (n < 0 && errno == EINTR);
    close(errpipe[0]);
    /* A kernel without CLOSE_RANGE_UNSHARE: the child ran nothing; it runs again, with a table
       of its own, as every child from now on. */
    int refused = n == (ssize_t)sizeof r && r.step == STEP_UNSHARE && r.err == EINVAL;
    if (shared)
        __atomic_store_n(&unshare_state, refused ? UNSHARE_REFUSED : UNSHARE_WORKS,
                         __ATOMIC_RELAXED);
    if (n == (ssize_t)sizeof r) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (refused && shared)
            goto again;
        int step = r.step > 0 && r.step <= STEP_UNSHARE ? r.step : STEP_EXEC;
        PyObject *exc_args = Py_BuildValue("(iss)", r.err, strerror(r.err), step_names[step]);
        if (exc_args != NULL) {
            PyErr_SetObject(PyExc_OSError, exc_args);
            Py_DECREF(exc_args);
        }
        goto done;
    }
    result = PyLong_FromLong((long)pid);

done:
    PyMem_Free(exes);
    PyMem_Free(argv);
    PyMem_Free(envp);
    Py_XDECREF(keep_exes);
    Py_XDECREF(keep_argv);
    Py_XDECREF(keep_env);
    Py_XDECREF(keep_cg);
    return result;
}

PyDoc_STRVAR(clone3_status_doc,
"clone3_status() -> str\n\n"
"How spawn creates children given a cgroup_dir_fd: 'untried' (clone3 at the next one), 'works'\n"
"(clone3), 'refused' (vfork: the kernel refused clone3, or no trampoline for this arch) or\n"
"'disabled' (vfork, by set_clone3_enabled).");

static PyObject *clone3_status(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    static const char *const names[] = {"untried", "works", "refused", "disabled"};
    return PyUnicode_FromString(names[__atomic_load_n(&clone3_state, __ATOMIC_RELAXED)]);
}

PyDoc_STRVAR(set_clone3_enabled_doc,
"set_clone3_enabled(enabled) -> None\n\n"
"Use (or stop using) clone3 for children given a cgroup_dir_fd; enabling tries the kernel again.\n"
"Without the trampoline (an arch other than x86_64) it stays off. For tests and diagnosis.");

static PyObject *set_clone3_enabled(PyObject *Py_UNUSED(module), PyObject *arg)
{
    int enabled = PyObject_IsTrue(arg);
    if (enabled < 0)
        return NULL;
    if (HAVE_CLONE3_TRAMPOLINE)
        __atomic_store_n(&clone3_state, enabled ? CLONE3_UNTRIED : CLONE3_DISABLED,
                         __ATOMIC_RELAXED);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(shared_table_status_doc,
"shared_table_status() -> str\n\n"
"Whether clone3 children share the descriptor table and unshare only their own few: 'untried',\n"
"'works', 'refused' (the kernel lacks CLOSE_RANGE_UNSHARE: each child copies the whole table)\n"
"or 'unavailable' (the low descriptors it needs were taken at import).");

static PyObject *shared_table_status(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    static const char *const names[] = {"untried", "works", "refused"};
    if (slot_fds[SLOTS] < 0)
        return PyUnicode_FromString("unavailable");
    return PyUnicode_FromString(names[__atomic_load_n(&unshare_state, __ATOMIC_RELAXED)]);
}

static PyMethodDef methods[] = {
    {"spawn", (PyCFunction)(void (*)(void))spawn, METH_VARARGS | METH_KEYWORDS, spawn_doc},
    {"clone3_status", clone3_status, METH_NOARGS, clone3_status_doc},
    {"set_clone3_enabled", set_clone3_enabled, METH_O, set_clone3_enabled_doc},
    {"shared_table_status", shared_table_status, METH_NOARGS, shared_table_status_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "broker._spawn",
    "Start a command already in its cgroups, session and Landlock domain (Linux).", -1, methods,
};

PyMODINIT_FUNC PyInit__spawn(void)
{
    open_slots(); /* now, while the lowest descriptors are free; without them, only speed is lost */
    return PyModule_Create(&module);
}
