"""Operating-system protection layers of a worker process, applied in a fixed order.

Order (each step needs the previous ones): the protocol moves to private descriptors and 0/1/2
point at ``/dev/null``; resource limits (address space, CPU seconds, no file writes, no core files,
open files, processes); root is dropped to ``nobody``; user and network namespaces are unshared
where the kernel allows; ``no_new_privs`` is set; a seccomp filter denies sockets, process
creation, ``exec``, writes other than to the protocol pipe, and file-system changes.

Each layer that cannot be applied on this machine is reported as inactive rather than failing the
worker; the host decides whether that is acceptable (``SandboxConfig.require_layers``).
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
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39
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
    """Move the protocol pipe to descriptors 3 and 4, point 0/1/2 at /dev/null, close the rest.

    Returns:
        ``(3, 4)``: the new read and write descriptors.
    """
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


def _load_seccomp(protocol_write_fd: int) -> bool:
    if _seccomp is None:
        return False
    eperm = _seccomp.ERRNO(errno.EPERM)
    flt = _seccomp.SyscallFilter(defaction=_seccomp.ALLOW)
    denied = (
        # network
        "socket socketpair connect bind listen accept accept4 sendto sendmsg sendmmsg recvfrom "
        # process creation and exec
        "fork vfork clone clone3 execve execveat "
        # file-system changes
        "creat unlink unlinkat rename renameat renameat2 mkdir mkdirat rmdir link linkat symlink "
        "symlinkat chmod fchmod fchmodat chown fchown lchown fchownat truncate ftruncate mknod mknodat "
        "utime utimes utimensat futimesat "
        # privilege and kernel surface
        "ptrace process_vm_readv process_vm_writev mount umount2 pivot_root chroot setns unshare bpf "
        "perf_event_open keyctl add_key request_key personality userfaultfd io_uring_setup "
        "init_module finit_module delete_module kexec_load reboot swapon swapoff sethostname "
        "setdomainname acct quotactl tkill openat2 memfd_create"
    ).split()
    for name in denied:
        try:
            flt.add_rule(eperm, name)
        except (ValueError, RuntimeError, OSError):
            pass  # syscall unknown on this architecture
    pid = os.getpid()
    flt.add_rule(eperm, "kill", _seccomp.Arg(0, _seccomp.NE, pid))
    flt.add_rule(eperm, "tgkill", _seccomp.Arg(0, _seccomp.NE, pid))
    for name in ("write", "pwrite64", "writev", "pwritev", "pwritev2"):
        try:
            flt.add_rule(eperm, name, _seccomp.Arg(0, _seccomp.NE, protocol_write_fd))
        except (ValueError, RuntimeError, OSError):
            pass
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    for flag in (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND):
        flt.add_rule(eperm, "open", _seccomp.Arg(1, _seccomp.MASKED_EQ, flag, flag))
        flt.add_rule(eperm, "openat", _seccomp.Arg(2, _seccomp.MASKED_EQ, flag, flag))
    del write_flags
    flt.load()
    return True


def lock_down(memory_bytes: int, cpu_seconds: int, protocol_write_fd: int) -> dict[str, bool | None]:
    """Apply every layer after :func:`move_protocol_fds`; never raises.

    Args:
        memory_bytes: address-space limit (``RLIMIT_AS``), bytes.
        cpu_seconds: CPU-time limit of the whole worker (``RLIMIT_CPU``), seconds; a backstop, the
            host's per-call wall deadline is the primary stop.
        protocol_write_fd: the one descriptor the worker may still write to.

    Returns:
        ``{layer: True | False | None}`` for every name in :data:`LAYERS`: active, could not be
        applied here, or not applicable (``drop_root`` when not running as root).
    """
    layers: dict[str, bool | None] = {"private_fds": True}
    try:
        _set_rlimits(memory_bytes, cpu_seconds)
        layers["rlimits"] = True
    except (ValueError, OSError):
        layers["rlimits"] = False
    try:
        layers["drop_root"] = _drop_root()
    except OSError:
        layers["drop_root"] = False
    # A change of credentials clears the parent-death signal: set it (again) after them.
    parent = os.getppid()
    set_parent_death_signal()
    if os.getppid() != parent:  # pragma: no cover - the zygote died in between
        os._exit(1)
    if _unshare(_CLONE_NEWUSER | _CLONE_NEWNET):
        layers["user_namespace"] = layers["network_namespace"] = True
    else:
        layers["user_namespace"] = False
        layers["network_namespace"] = _unshare(_CLONE_NEWNET)
    set_parent_death_signal()
    if os.getppid() != parent:  # pragma: no cover
        os._exit(1)
    layers["no_new_privs"] = _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    try:
        layers["seccomp"] = _load_seccomp(protocol_write_fd)
    except (OSError, RuntimeError, ValueError):
        layers["seccomp"] = False
    return layers
