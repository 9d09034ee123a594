"""
A Spark standalone cluster on the lab's hosts, started with pyspark's own
launcher (``$SPARK_HOME/bin/spark-class``, SPARK_HOME being the pyspark
package): a Master on one host and Workers on others, each bound to its
host's lab address (there is no DNS in the lab: IPs everywhere), its work
and scratch folders inside the round's folder.

The Spark nemesis is here too: :class:`SparkProcessKill` SIGKILLs a
Worker (with the executor and Python workers it started) or a driver
(with its JVM), and starts it again when it stops.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

from lab.errors import LabError
from lab.history import History
from lab.nemesis import Nemesis
from lab.net import Host
from lab.procs import LabProcess
from lab.world import World

__all__ = [
    "DRIVER_LOG4J",
    "JVM_FLAGS",
    "MASTER_PORT",
    "TASK_LOST_WITH_EXECUTOR",
    "SparkCluster",
    "SparkProcessKill",
    "host_env",
    "kill_group",
    "java_home",
    "spark_home",
]

MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT = 7077, 8080, 8081

#: JVM flags of the daemons and executors: the lab's rounds are short and
#: its machine has two cores, so the C1 compiler alone (cheaper to start)
#: and the serial collector (no GC threads) are the better trade.
JVM_FLAGS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_home() -> str:
    """
    The pyspark package's folder (pip's pyspark is a whole Spark:
    ``bin/spark-class``, ``jars/``).

    :raises LabError: pyspark is not installed (``pip install -e '.[spark]'``).
    """
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        if os.path.exists(os.path.join(location, "bin", "spark-class")):
            return location
    raise LabError("pyspark is not installed for %s (pip install -e '.[spark]')" % (sys.executable,))


def _java_major(java: str) -> int:
    out = subprocess.run([java, "-version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    # "1.8.0" is Java 8.
    return int(match.group(2) or 0) if major == 1 else major


def java_home() -> str:
    """
    The Java runtime Spark runs on, as ``.ci/ensure_java.sh`` finds it: the
    ``java`` on PATH (or under ``$JAVA_HOME``), of version 17 or newer;
    JAVA_HOME is the folder above its ``bin/``.

    :raises LabError: no such Java (``bash .ci/ensure_java.sh`` installs one).
    """
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    for java in candidates:
        if os.access(java, os.X_OK) and _java_major(java) >= 17:
            return os.path.dirname(os.path.dirname(os.path.realpath(java)))
    raise LabError("Spark needs Java 17 or newer and none was found (bash .ci/ensure_java.sh installs it)")


#: The driver's log4j2 configuration: warnings, and the task scheduler's
#: account of each task (a task lost with its executor is told at INFO).
DRIVER_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = info
"""

#: What the driver's log says of a task lost with its executor.
TASK_LOST_WITH_EXECUTOR = "its executor exited for a reason unrelated to the task"


def host_env(host: Host, scratch: str) -> Dict[str, str]:
    """
    The environment of a Spark process on ``host``: bound to its lab
    address (Spark would otherwise look up the machine's name, which
    resolves outside the lab's namespaces), its scratch files under
    ``scratch``, and Python workers on the lab's interpreter (which has
    txnsq and pyarrow).
    """
    return {
        "SPARK_HOME": spark_home(),
        "JAVA_HOME": java_home(),
        "SPARK_LOCAL_IP": host.address,
        "SPARK_LOCAL_HOSTNAME": host.address,
        "SPARK_LOCAL_DIRS": scratch,
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": JVM_FLAGS,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


class SparkCluster:
    """
    A Master on ``master`` and a Worker on each of ``workers`` (one core,
    ``memory`` each), its files under ``folder``.

    :ivar workers: the Worker processes by host name (the latest start).
    """

    def __init__(self, world: World, folder: str, master: str, workers: List[str], memory: str = "1g") -> None:
        self.world = world
        self.folder = folder
        self.master = world.host(master)
        self.worker_hosts = {name: world.host(name) for name in workers}
        self.memory = memory
        self.master_process: Optional[LabProcess] = None
        self.workers: Dict[str, LabProcess] = {}

    @property
    def url(self) -> str:
        """The master's URL (``spark://ADDRESS:7077``)."""
        return "spark://%s:%d" % (self.master.address, MASTER_PORT)

    def _class(self, host: Host, name: str, main: str, args: List[str]) -> LabProcess:
        scratch = os.path.join(self.folder, "local-" + host.name)
        os.makedirs(scratch, exist_ok=True)
        argv = [os.path.join(spark_home(), "bin", "spark-class"), main, *args]
        return self.world.launcher.start(host, name, argv, env=host_env(host, scratch), cwd=self.folder)

    def start(self, timeout: float = 90.0) -> None:
        """The master, then every worker; returns once each worker has registered."""
        self.master_process = self._class(
            self.master, "spark-master", "org.apache.spark.deploy.master.Master",
            ["--host", self.master.address, "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)],
        )
        # A worker that registers before the master is elected leader gets
        # no answer and retries only 5-15 s later: start them after it.
        self.master_process.wait_for(r"I have been elected leader", timeout)
        for name in self.worker_hosts:
            self.start_worker(name, wait=False)
        for name in self.worker_hosts:
            self.wait_worker(name, timeout)

    def start_worker(self, name: str, wait: bool = True, timeout: float = 90.0) -> LabProcess:
        """Start the Worker of host ``name`` (again); with ``wait``, until it has registered."""
        host = self.worker_hosts[name]
        work = os.path.join(self.folder, "work-" + name)
        os.makedirs(work, exist_ok=True)
        self.workers[name] = self._class(
            host, "spark-worker-" + name, "org.apache.spark.deploy.worker.Worker",
            [self.url, "--host", host.address, "--cores", "1", "--memory", self.memory,
             "--work-dir", work, "--webui-port", str(WORKER_UI_PORT)],
        )
        if wait:
            self.wait_worker(name, timeout)
        return self.workers[name]

    def wait_worker(self, name: str, timeout: float) -> None:
        """Until the latest start of worker ``name`` has registered with the master."""
        process = self.workers[name]
        start_at = process.log().rfind("=== ")
        pattern = re.compile(r"Successfully registered with master")
        deadline = time.monotonic() + timeout
        while not pattern.search(process.log()[start_at:]):
            if not process.alive():
                raise LabError("spark worker %s exited at start: %s" % (
                    name, process.log()[-800:].replace("\n", " | ")))
            if time.monotonic() > deadline:
                raise LabError("spark worker %s did not register in %.0f s" % (name, timeout))
            time.sleep(0.1)

    def wait_executor(self, name: str, timeout: float) -> None:
        """Until the latest start of worker ``name`` has been asked to launch an executor."""
        process = self.workers[name]
        start_at = process.log().rfind("=== ")
        deadline = time.monotonic() + timeout
        while "Asked to launch executor" not in process.log()[start_at:]:
            if not process.alive():
                raise LabError("spark worker %s exited: %s" % (name, process.log()[-800:].replace("\n", " | ")))
            if time.monotonic() > deadline:
                raise LabError("spark worker %s launched no executor in %.0f s" % (name, timeout))
            time.sleep(0.1)

    def executors_launched(self) -> int:
        """How many executors the workers have started so far (their logs say so)."""
        return sum(p.log().count("Asked to launch executor") for p in self.workers.values())


def kill_group(process: LabProcess) -> Optional[int]:
    """
    SIGKILL ``process`` and every process of its group (a Worker's
    executors and their Python workers, a driver's JVM and its Python
    workers: none starts a session of its own), as a crashed host would
    lose them; returns its exit status.
    """
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return process.wait(15)


class SparkProcessKill(Nemesis):
    """
    SIGKILL of a Spark process with its process group (:func:`kill_group`);
    :meth:`stop` starts it again with ``restart`` (a Worker registers anew,
    a driver resumes from its checkpoints).

    :param label: what the history calls it (``worker w1``, ``driver``).
    :param process: the process now (called at :meth:`start`).
    :param restart: starts it again.
    """

    name = "spark-kill"

    def __init__(
        self,
        world: World,
        history: History,
        label: str,
        process: Callable[[], Optional[LabProcess]],
        restart: Optional[Callable[[], object]],
    ) -> None:
        super().__init__(world, history)
        self.label = label
        self.process = process
        self.restart = restart
        self.exit_code: Optional[int] = None

    def describe(self) -> Dict[str, object]:
        return {"target": self.label}

    def _start(self) -> None:
        process = self.process()
        if process is not None:
            self.exit_code = kill_group(process)

    def _stop(self) -> None:
        if self.restart is not None:
            self.restart()
