"""Start N local ranks of a function and stop them with their launcher (`paradyse-lab train --nproc N`).

Library module. `launch(fn, nprocs, args, preload)` starts `fn(rank, nprocs, *args)` in `nprocs` processes and
waits for them. The ranks are forked from a fork server (multiprocessing's forkserver start method) that has
imported the `preload` modules once (`train`: torch, torch._dynamo, the training runtime: ~4 CPU s a process),
so N ranks pay those imports once instead of N times; importing torch initialises no CUDA, so each rank still
starts CUDA (or not) on its own. A rank runs in the launcher's environment variables, working directory, stdout
and stderr, as a spawned one does, never the fork server's. The launcher stops the fork server it started once
its ranks ended.

- A rank that raises `UserInputError` or `RunStopped` reports the one-line message to the launcher, which
  stops the other ranks and raises it once (the CLI prints one line, exit 2 or 1); any other exception's
  traceback is printed once, from the launcher.
- A rank whose collective waited past the collective timeout for a peer (`PeerSilent`) reports it; the launcher
  then names the rank that never answered (alive with no report: stopped by SIGSTOP, or hung) in one line.
- A rank's `OSError` (a file it cannot read or write) is one line, as in one process (exit 2); a rank whose
  stdout or stderr reader has gone (`| head -1`) drops its further output and finishes its work.
- A rank ends with `os._exit` once its function returned (or its error was reported), after flushing its
  output: the exit code is the rank's result, never an abort in the teardown of C++ threads at exit.
- Ranks stop with their launcher: each asks Linux to send it SIGKILL when its parent dies
  (`prctl(PR_SET_PDEATHSIG)`, man 2 prctl), the fork server, which ends when the launcher does (each rank closes
  its copy of the fork server's "alive" pipe, which the server reads to learn that its clients are gone), so a
  launcher killed by SIGTERM or SIGKILL leaves no orphan training on, a stopped (SIGSTOP) rank included;
  elsewhere a watchdog thread waits for the launcher's end.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing import forkserver, reduction

from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.runtime.launch.heartbeat import STOPPED_STATES, stat_fields

PR_SET_PDEATHSIG = 1
"""linux/prctl.h."""


def stop_with_parent(parent_pid: int) -> None:
    """Make this process die when `parent_pid` (its parent) does (module docstring)."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


REPORT_GRACE_S = 3.0
"""How long the launcher waits, after the first failure, for the other ranks' reports (not for ranks that are
stopped: SIGSTOP, a debugger)."""
REPORT_ORDER = ("user", "stopped", "os", "silent", "crash")
"""Which report the launcher shows when several ranks failed: the root cause before its echoes (a rank's
`OSError` after a peer's refusal or stop: a connection the peer closed is one)."""


class PeerSilent(RunStopped):
    """A rank's collective waited past the collective timeout for a peer that did not answer."""


def end_process(code: int) -> None:
    """End this rank with `code` once its work and its report are done (its process group left:
    `leave_process_group`): flush Python's output and exit the process without interpreter
    finalization, so that no teardown of C++ state (gloo's and OR-Tools' worker
    threads, thread pools destroyed by static destructors while still joinable: "terminate called without an
    active exception", exit -6) can turn a finished rank's exit code into an abort."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class ReaderGone:
    """A text stream whose writes and flushes, once its reader has gone (a closed pipe: `| head -1`), go to
    /dev/null instead of raising `BrokenPipeError` into the work that printed."""

    def __init__(self, inner):
        self._inner = inner

    def _drop(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._inner.fileno())
        finally:
            os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except BrokenPipeError:
            self._drop()

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _os_error_line(err: OSError) -> str:
    """An `OSError` as the one line the command line prints for it in one process."""
    where = f" {str(err.filename)!r}" if err.filename else ""
    return f"cannot use{where}: {err.strerror or err}"


def _stop_with_launcher() -> None:
    """Make this rank die when its launcher does (module docstring): SIGKILL when its parent (the fork server) ends,
    the fork server left to end with the launcher; ended at once when the launcher is already gone."""
    server = getattr(forkserver, "_forkserver", None)
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:  # a forked rank: the server's clients are the launcher alone, not its ranks
        try:
            os.close(alive_fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None
    launcher = multiprocessing.parent_process()
    stop_with_parent(os.getppid())
    if launcher is not None and launcher.sentinel is not None:
        if multiprocessing.connection.wait([launcher.sentinel], timeout=0):  # gone before the signal was armed
            os._exit(1)
        if not sys.platform.startswith("linux"):
            def watch() -> None:
                multiprocessing.connection.wait([launcher.sentinel])
                os._exit(1)

            threading.Thread(target=watch, name="launcher-watchdog", daemon=True).start()


class LauncherOutput:
    """The launcher's stdout and stderr (file descriptors 1 and 2) as they are when it starts a rank, handed to the
    rank through the start method (a fork server forks its ranks with its own, those of the moment it started);
    unpickled in the rank as the pair of its copies of them."""

    def __reduce__(self):
        return _received_fds, (reduction.DupFd(1), reduction.DupFd(2))


def _received_fds(*fds) -> tuple[int, ...]:
    return tuple(fd.detach() for fd in fds)


def _rank_main(fn, rank: int, nprocs: int, args: tuple, report, environ: dict[str, str],
               output: tuple[int, ...]) -> None:
    """One rank: `fn`, in the launcher's environment variables and output (not the fork server's), its error sent
    to the launcher through `report` (a pipe's end)."""
    _stop_with_launcher()
    gc.enable()  # the fork server's state is not the rank's (a server may pause the collector while it imports)
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    for target, fd in zip((1, 2), output):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    sys.stdout, sys.stderr = ReaderGone(sys.stdout), ReaderGone(sys.stderr)
    try:
        fn(rank, nprocs, *args)
    except UserInputError as err:
        report.send(("user", rank, str(err)))
        end_process(2)
    except OSError as err:  # a file this rank cannot use: the user's to fix, as in one process
        report.send(("os", rank, f"rank {rank}: {_os_error_line(err)}"))
        end_process(2)
    except PeerSilent as err:
        report.send(("silent", rank, str(err)))
        end_process(1)
    except RunStopped as err:
        report.send(("stopped", rank, str(err)))
        end_process(1)
    except BaseException:  # noqa: BLE001 (reported once by the launcher)
        report.send(("crash", rank, traceback.format_exc()))
        end_process(1)
    end_process(0)


def _stop(procs, grace_s: float = 5.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
            try:  # a stopped rank (SIGSTOP) takes SIGTERM only once it runs again
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _death(exitcode: int) -> str:
    """How a rank that sent no report ended: 'was killed by SIGKILL', 'ended with exit code 3'."""
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"ended with exit code {exitcode}"


def _is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP, SIGTSTP, a debugger): state T or t in /proc/PID/stat."""
    try:
        fields = stat_fields(pid)
    except (OSError, IndexError):
        return False
    return fields is not None and fields[0] in STOPPED_STATES


def _silent_rank_line(procs, reported: set[int], message: str) -> str:
    """One line naming the rank(s) that never answered, when a rank's collective timed out (`message`): the ranks
    still alive without a report, the stopped ones first (a rank that timed out itself has reported)."""
    quiet = [r for r, p in enumerate(procs) if p.exitcode is None and r not in reported]
    stopped = [r for r in quiet if _is_stopped(procs[r].pid)]
    named = stopped or quiet
    if not named:
        return message
    how = "is stopped (SIGSTOP)" if stopped else "did not answer (hung or too slow)"
    who = f"rank {named[0]}" if len(named) == 1 else "ranks " + ", ".join(map(str, named))
    return f"{who} {how}: {message}; every rank was stopped"


def _wait_for_first_failure(procs, reports) -> bool:
    """Wait until every rank ended well (True) or one failed or reported (False)."""
    while True:
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        said = [c for c in reports if c.poll()]
        if failed or said:
            return False
        if all(p.exitcode == 0 for p in procs):
            return True
        running = [p.sentinel for p in procs if p.exitcode is None]
        multiprocessing.connection.wait(running + reports, timeout=0.5)


def _can_manage_fork_server() -> bool:
    """Whether this Python forks processes from a fork server whose pid and stop this launcher can read (CPython's
    `multiprocessing.forkserver` keeps them in private attributes; where they are missing, ranks are spawned)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    server = getattr(forkserver, "_forkserver", None)
    return all(hasattr(server, name) for name in ("_forkserver_pid", "_stop", "_forkserver_alive_fd"))


def _start_rank_server(preload: tuple[str, ...]) -> bool:
    """Start this process's fork server with `preload` imported, unless one already runs (whatever it imported:
    what a rank needs and the server lacks, the rank imports). The server resolves modules on the launcher's
    sys.path (PYTHONPATH, and PYTHONSAFEPATH so that its working directory does not come first), so that it
    imports the same files the launcher and the ranks would. Whether this call started it."""
    if forkserver._forkserver._forkserver_pid is not None:
        forkserver.ensure_running()  # restarts a server that died, with the preload it had
        return False
    path = os.pathsep.join(os.path.abspath(p) if p else os.getcwd() for p in sys.path)
    multiprocessing.set_forkserver_preload(list(preload))
    with restored_environ(("PYTHONPATH", "PYTHONSAFEPATH")):
        os.environ.update(PYTHONPATH=path, PYTHONSAFEPATH="1")
        forkserver.ensure_running()
    return True


@contextlib.contextmanager
def restored_environ(names):
    """Put the environment variables `names` back as they were (set, or unset) once the block ends."""
    saved = {k: os.environ.get(k) for k in names}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _stop_rank_server() -> None:
    """Stop this process's fork server and wait for its end (its ranks have ended)."""
    forkserver._forkserver._stop()


def launch(fn, nprocs: int, args: tuple = (), preload: tuple[str, ...] = ()) -> None:
    """Run `fn(rank, nprocs, *args)` on `nprocs` ranks forked from a fork server that imported `preload` (module
    docstring); raises the first rank's `UserInputError` / `RunStopped`, or `RunStopped` when a rank crashes or
    is killed. A rank that died without a report (killed by a signal: SIGKILL, the OOM killer) is the root cause
    its peers' errors echo, so it is named in one line and their tracebacks of the broken connection are not
    shown. One launch at a time in a process: the launch that started the fork server stops it when its ranks
    end."""
    if not _can_manage_fork_server():  # Windows (no fork), or a Python whose fork server we cannot stop: spawned
        _launch(multiprocessing.get_context("spawn"), fn, nprocs, args)
        return
    ctx = multiprocessing.get_context("forkserver")
    started = _start_rank_server(preload)
    try:
        _launch(ctx, fn, nprocs, args)
    finally:
        if started:
            _stop_rank_server()


def _launch(ctx, fn, nprocs: int, args: tuple) -> None:
    """`launch` with its fork server running."""
    pipes = [ctx.Pipe(duplex=False) for _ in range(nprocs)]  # (launcher's end, rank's end)
    for stream in (sys.stdout, sys.stderr):  # what the launcher wrote comes before what its ranks write
        if stream is not None:  # None where the launcher started with its descriptor closed
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    # A forked rank takes the launcher's output through the start method; a spawned one inherits it (and
    # DupFd, which hands descriptors over, exists only where processes fork).
    output = LauncherOutput() if ctx.get_start_method() == "forkserver" else ()
    procs = [ctx.Process(target=_rank_main, args=(fn, r, nprocs, args, pipes[r][1], dict(os.environ), output),
                         name=f"rank-{r}") for r in range(nprocs)]
    for p in procs:
        p.start()
    reports = [read for read, _ in pipes]
    try:
        if _wait_for_first_failure(procs, reports):
            return
        # A rank's error closes its connections, so its peers fail in their collectives too and may report
        # first: give every rank a moment to report, then tell the root cause (a user error or a stop) first.
        deadline = time.monotonic() + REPORT_GRACE_S
        while time.monotonic() < deadline and any(p.exitcode is None for p in procs):
            running = [p for p in procs if p.exitcode is None]
            if all(_is_stopped(p.pid) for p in running):  # a stopped rank reports nothing: no need to wait for it
                break
            multiprocessing.connection.wait([p.sentinel for p in running],
                                            timeout=min(0.5, max(0.0, deadline - time.monotonic())))
        said = [c.recv() for c in reports if c.poll()]
        reported = {rank for _, rank, _ in said}
        silent_line = _silent_rank_line(procs, reported, min(m for k, _, m in said if k == "silent")) \
            if any(k == "silent" for k, _, _ in said) else ""
        # ranks that ended (before the launcher stops the rest) with no report: killed, or died in C++
        silent = [(r, p.exitcode) for r, p in enumerate(procs)
                  if p.exitcode not in (None, 0) and r not in {rank for _, rank, _ in said}]
    finally:
        _stop(procs)
    kind, rank, message = min(said, key=lambda r: (REPORT_ORDER.index(r[0]), r[1])) if said else ("crash", 0, "")
    if kind in ("user", "os"):
        raise UserInputError(message)
    if kind == "stopped":
        raise RunStopped(message)
    if kind == "silent":
        raise RunStopped(silent_line)
    if silent:
        dead, code = silent[0]
        raise RunStopped(f"rank {dead} {_death(code)} without reporting an error; the other ranks were stopped")
    print(message, file=sys.stderr, end="")
    raise RunStopped(f"rank {rank} failed with the error above")
