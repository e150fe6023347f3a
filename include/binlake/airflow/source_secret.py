"""How the source's password reaches a Spark job that Airflow submits: never on spark-submit's
command line, in a pod spec, or in an environment variable another process can read.

Per master and deploy mode (the Spark connection's):

- **local, standalone, YARN or Kubernetes in client mode** (the driver runs beside the task): a
  file only the task's user can read (mode 0600, in a private folder), named by
  ``--source-file``; removed when spark-submit returns.
- **YARN (or standalone) in cluster mode**: that file shipped with the application (``--files``,
  YARN's private distributed cache), named by its base name in the driver's container.
- **Kubernetes in cluster mode**: a Kubernetes secret (``airflow.kubernetes_secret: name:key``),
  which Spark mounts into the driver pod as ``BINLAKE_SOURCE_PASSWORD``; without one the task is
  refused (a password in ``--conf`` would land in the pod spec).

Host, port and user are no secrets: they travel as environment variables as before.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from binlake.airflow.runtime import source_env
from binlake.errors import ConfigError


@dataclass
class Handoff:
    """What the operator adds to a spark-submit so the job gets the source's settings."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    conf: dict[str, str] = field(default_factory=dict)
    files: str | None = None
    path: Path | None = None
    """The private file to remove once spark-submit has returned."""

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path.parent.rmdir()


def handoff(
    overrides: dict[str, Any] | None, master: str, deploy_mode: str | None, kubernetes_secret: str | None
) -> Handoff:
    """How ``overrides`` (the Airflow connection's source settings) reach the job (module docstring).

    Raises:
        ConfigError: a Kubernetes cluster-mode master without ``airflow.kubernetes_secret``.
    """
    overrides = dict(overrides or {})
    password = overrides.pop("password", None)
    env = source_env(overrides)
    if not password:
        return Handoff(env=env)
    cluster = deploy_mode == "cluster"
    if master.startswith("k8s://") and cluster:
        if not kubernetes_secret or ":" not in kubernetes_secret:
            raise ConfigError(
                "the source password cannot reach a Kubernetes driver pod safely without a Kubernetes "
                "secret (in spark-submit's --conf it would be stored in the pod's spec). Fix: create a "
                "secret holding it (`kubectl create secret generic binlake-source "
                "--from-literal=password=…`) and set `airflow.kubernetes_secret: binlake-source:password`"
            )
        ref = "spark.kubernetes.driver.secretKeyRef.BINLAKE_SOURCE_PASSWORD"
        return Handoff(env=env, conf={ref: kubernetes_secret})
    path = _private_file({"password": password})
    if cluster:
        return Handoff(["--source-file", path.name], env, files=str(path), path=path)
    return Handoff(["--source-file", str(path)], env, path=path)


def _private_file(content: dict[str, str]) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="binlake-source-"))  # mode 0700
    path = folder / "binlake-source.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(content, file)
    return path
