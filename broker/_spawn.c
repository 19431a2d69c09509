/*
 * broker._spawn: start a command already tracked and confined, with no trampoline.
 *
 * vfork(), then in the child, using only system calls: write "0" to each given cgroup.procs (the
 * child moves itself, before it can fork), setsid(), stdin/stdout/stderr, fchdir() to the working
 * directory, mark every other fd close-on-exec, enter the Landlock domain, execve(). The parent
 * opened every file beforehand, so nothing in the child resolves a path but execve. A failed step
 * is reported through a close-on-exec pipe and the child exits; the parent reaps it and raises.
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
#include <signal.h>
#include <string.h>
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
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define MAX_CGROUPS 8

enum step { STEP_SIGNALS = 1, STEP_CGROUP, STEP_SESSION, STEP_FDS, STEP_CWD, STEP_NNP,
            STEP_LANDLOCK, STEP_EXEC };

static const char *const step_names[] = {
    "", "signals", "cgroup", "setsid", "fds", "cwd", "no_new_privs", "landlock", "exec",
};

struct spawn_args {
    char *const *executables; /* candidate paths for argv[0], tried in order */
    char *const *argv;
    char *const *envp;
    int cwd_fd, stdin_fd, stdout_fd, stderr_fd;
    int cgroup_fds[MAX_CGROUPS];
    int n_cgroups;
    int ruleset_fd, no_new_privs;
    sigset_t mask; /* the caller's signal mask, restored just before execve */
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

    int in = a->stdin_fd, out = a->stdout_fd, err = a->stderr_fd;
    if (in < 3 && (in = fcntl(in, F_DUPFD_CLOEXEC, 3)) < 0)
        fail(errfd, STEP_FDS, errno);
    if (out < 3 && (out = fcntl(out, F_DUPFD_CLOEXEC, 3)) < 0)
        fail(errfd, STEP_FDS, errno);
    if (err < 3 && (err = fcntl(err, F_DUPFD_CLOEXEC, 3)) < 0)
        fail(errfd, STEP_FDS, errno);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail(errfd, STEP_FDS, errno);
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

PyDoc_STRVAR(spawn_doc,
"spawn(executables, argv, env, *, stdin_fd, stdout_fd, stderr_fd=-1, cwd_fd=-1, cgroup_fds=(),\n"
"      ruleset_fd=-1, no_new_privs=False) -> int\n\n"
"Start argv[0] (trying each of `executables`) in a new session, in the given cgroups and Landlock\n"
"ruleset, and return its pid once it has exec'd; stderr goes with stdout unless given. Raises\n"
"OSError whose filename names the step that failed: cgroup, setsid, fds, cwd, no_new_privs,\n"
"landlock, exec (or signals).");

static PyObject *spawn(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"executables", "argv",       "env",          "stdin_fd",
                             "stdout_fd",   "stderr_fd",  "cwd_fd",       "cgroup_fds",
                             "ruleset_fd",  "no_new_privs", NULL};
    PyObject *py_exes, *py_argv, *py_env, *py_cgroups = NULL;
    struct spawn_args a;
    memset(&a, 0, sizeof a);
    a.ruleset_fd = a.cwd_fd = a.stdin_fd = a.stdout_fd = a.stderr_fd = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|$iiiiOip", kwlist, &py_exes, &py_argv,
                                     &py_env, &a.stdin_fd, &a.stdout_fd, &a.stderr_fd, &a.cwd_fd,
                                     &py_cgroups, &a.ruleset_fd, &a.no_new_privs))
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

    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    sigset_t all;
    sigfillset(&all);
    pid_t pid;
    int vfork_errno = 0;
    Py_BEGIN_ALLOW_THREADS
    /* No signal handler may run in the child, which shares the broker's memory until execve. */
    pthread_sigmask(SIG_SETMASK, &all, &a.mask);
    pid = vfork();
    if (pid == 0)
        child(&a, errpipe[1]);
    vfork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &a.mask, NULL);
    Py_END_ALLOW_THREADS
    close(errpipe[1]);
    if (pid < 0) {
        close(errpipe[0]);
        errno = vfork_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    struct report r;
    ssize_t n;
    do {
        n = read(errpipe[0], &r, sizeof r);
    } while (n < 0 && errno == EINTR);
    close(errpipe[0]);
    if (n == (ssize_t)sizeof r) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        int step = r.step > 0 && r.step <= STEP_EXEC ? r.step : STEP_EXEC;
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

static PyMethodDef methods[] = {
    {"spawn", (PyCFunction)(void (*)(void))spawn, METH_VARARGS | METH_KEYWORDS, spawn_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "broker._spawn",
    "Start a command already in its cgroups, session and Landlock domain (Linux).", -1, methods,
};

PyMODINIT_FUNC PyInit__spawn(void) { return PyModule_Create(&module); }
