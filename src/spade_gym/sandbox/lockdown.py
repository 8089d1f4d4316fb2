"""Operating-system protection layers of a worker process, applied in a fixed order.

Order: private protocol descriptors (0/1/2 on ``/dev/null``); resource limits; a network namespace
while still root; root dropped to ``nobody``; a user (and network) namespace where the kernel
allows; non-dumpable; ``no_new_privs``; a default-deny seccomp filter (:data:`SECCOMP_ALLOWED`,
reads and writes on the protocol pipe only, signals to the worker itself only).

A layer that cannot be applied here is reported inactive; the host decides whether that is
acceptable (``SandboxConfig.require_layers``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
from typing import Any

__all__ = ["LAYERS", "lock_down", "move_protocol_fds"]

#: Every layer a worker reports, in the order applied.
LAYERS = (
    "private_fds",
    "rlimits",
    "drop_root",
    "user_namespace",
    "network_namespace",
    "no_new_privs",
    "seccomp",
)

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_NOBODY = 65534

try:
    _libc: Any = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - every Linux has a libc
    _libc = None

try:  # pyseccomp finds libseccomp with ctypes.util (slow); the zygote imports this once.
    import pyseccomp as _seccomp
except (ImportError, OSError, RuntimeError):  # pragma: no cover - depends on the machine
    _seccomp = None


def move_protocol_fds(read_fd: int, write_fd: int) -> tuple[int, int]:
    """Move the protocol pipe to descriptors 3 and 4 (returned), point 0/1/2 at /dev/null, close the rest."""
    high_r = _dup_high(read_fd)
    high_w = _dup_high(write_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.dup2(high_r, 3)
    os.dup2(high_w, 4)
    os.closerange(5, _max_fd())
    return 3, 4


def _dup_high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 100)


def _max_fd() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 65536


def _prctl(option: int, arg: int) -> bool:
    if _libc is None:
        return False
    return _libc.prctl(option, arg, 0, 0, 0) == 0


def set_parent_death_signal() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the zygote) dies."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _set_rlimits(memory_bytes: int, cpu_seconds: int) -> None:
    limits = {
        resource.RLIMIT_AS: memory_bytes,
        resource.RLIMIT_CPU: cpu_seconds,
        resource.RLIMIT_FSIZE: 0,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: 8,
        resource.RLIMIT_NPROC: 0,
    }
    for which, value in limits.items():
        hard = value + 5 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))


def _drop_root() -> bool | None:
    """Switch to ``nobody``; ``None`` when not running as root (nothing to drop)."""
    if os.geteuid() != 0:
        return None
    os.setgroups([])
    os.setresgid(_NOBODY, _NOBODY, _NOBODY)
    os.setresuid(_NOBODY, _NOBODY, _NOBODY)
    return os.geteuid() == _NOBODY and os.getuid() == _NOBODY


def _unshare(flags: int) -> bool:
    if _libc is None:
        return False
    return _libc.unshare(flags) == 0


#: System calls a locked-down worker may make (measured with strace over both test corpora); every
#: other one fails with EPERM, and ``read``/``write``/``kill`` are limited further (:func:`_load_seccomp`).
SECCOMP_ALLOWED = (
    "brk mmap munmap mremap madvise mprotect "
    "clock_gettime clock_getres gettimeofday time getrandom "
    "getpid gettid getppid getuid geteuid getgid getegid uname sysinfo getrusage times "
    "rt_sigaction rt_sigprocmask rt_sigreturn sigaltstack futex sched_yield sched_getaffinity "
    "close exit exit_group"
).split()


def _load_seccomp(protocol_read_fd: int, protocol_write_fd: int) -> bool:
    """Load a default-deny seccomp filter (denied calls fail with EPERM; foreign ABIs are killed)."""
    if _seccomp is None:
        return False
    flt = _seccomp.SyscallFilter(defaction=_seccomp.ERRNO(errno.EPERM))
    for name in SECCOMP_ALLOWED:
        try:
            flt.add_rule(_seccomp.ALLOW, name)
        except (ValueError, RuntimeError, OSError):
            pass  # unknown on this architecture
    pid = os.getpid()
    flt.add_rule(_seccomp.ALLOW, "read", _seccomp.Arg(0, _seccomp.EQ, protocol_read_fd))
    flt.add_rule(_seccomp.ALLOW, "write", _seccomp.Arg(0, _seccomp.EQ, protocol_write_fd))
    for name in ("kill", "tgkill", "tkill"):  # abort() signals itself; nothing else may be signalled
        flt.add_rule(_seccomp.ALLOW, name, _seccomp.Arg(0, _seccomp.EQ, pid))
    flt.load()
    return True


def lock_down(
    memory_bytes: int, cpu_seconds: int, protocol_read_fd: int, protocol_write_fd: int
) -> dict[str, bool | None]:
    """Apply every layer after :func:`move_protocol_fds` (``RLIMIT_AS`` and ``RLIMIT_CPU`` from the
    arguments; only the protocol descriptors stay readable and writable); never raises.

    Returns:
        ``{layer: True | False | None}`` for every name in :data:`LAYERS`: active, could not be
        applied, or not applicable (``drop_root`` when not root).
    """
    layers: dict[str, bool | None] = {"private_fds": True}
    try:
        _set_rlimits(memory_bytes, cpu_seconds)
        layers["rlimits"] = True
    except (ValueError, OSError):
        layers["rlimits"] = False
    # As root, a network namespace needs no user namespace: take it before dropping privileges.
    network = _unshare(_CLONE_NEWNET) if os.geteuid() == 0 else False
    try:
        layers["drop_root"] = _drop_root()
    except OSError:
        layers["drop_root"] = False
    if network:
        layers["user_namespace"] = _unshare(_CLONE_NEWUSER)
    else:
        network = layers["user_namespace"] = _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
    layers["network_namespace"] = network
    # A change of credentials clears the parent-death signal and the dumpable flag: set them after.
    parent = os.getppid()
    set_parent_death_signal()
    if os.getppid() != parent:  # pragma: no cover - the zygote died in between
        os._exit(1)
    _prctl(_PR_SET_DUMPABLE, 0)  # no ptrace or /proc/<pid>/mem access to this worker by peers
    layers["no_new_privs"] = _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    try:
        layers["seccomp"] = _load_seccomp(protocol_read_fd, protocol_write_fd)
    except (OSError, RuntimeError, ValueError):
        layers["seccomp"] = False
    return layers
