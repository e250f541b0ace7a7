"""Local multi-process clusters for the integration tests (Ray, Spark standalone): started on 127.0.0.1 with
ephemeral ports, each daemon in its own session so teardown stops exactly the processes the test started
(SIGTERM to the session, then SIGKILL to what is left), even when the test failed."""
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_port():
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_env(**extra):
    """The environment daemons and their workers inherit: encore importable from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT / "python"), env.get("PYTHONPATH", "")] if p)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Daemons:
    """Processes started with start(); stop() ends each one's whole session (process group)."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, log, env):
        f = open(log, "wb")
        p = subprocess.Popen([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        self.procs.append((p, f))
        return p

    def stop(self, grace=8):
        for p, _ in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p, f in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # whatever the daemon left in its session
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
            f.close()
        self.procs.clear()


def wait_for(predicate, timeout, what, logs=(), daemons=None):
    """Waits for predicate(); fails with the logs' tails after `timeout` s or as soon as a daemon has exited."""
    deadline = time.monotonic() + timeout
    died = None
    while time.monotonic() < deadline:
        if predicate():
            return
        died = next((p for p, _ in (daemons.procs if daemons else []) if p.poll() is not None), None)
        if died is not None:
            break
        time.sleep(0.25)
    why = f"{died.args[:3]} exited with {died.returncode}" if died is not None else f"not ready within {timeout} s"
    tails = "".join(f"\n--- {log}:\n" + pathlib.Path(log).read_text(errors="replace")[-3000:] for log in logs)
    raise AssertionError(f"{what}: {why}{tails}")
