"""Fetching a Java program's runtime jars with Maven, once, into ordo's cache (``~/.cache/ordo``).

A POM in the repository pins the program (``ordo/broker/kafka-pom.xml``,
``ordo/broker/s3proxy-pom.xml``); ``fetch_runtime`` has Maven copy its runtime
dependencies into ``<cache>/<name>-<version>/libs`` through a staging directory
renamed into place, so a fetch that fails or races another leaves nothing half
there (``.complete`` marks a finished one).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

POM_NAMESPACE = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_property(pom: Path, name: str) -> str | None:
    """The text of ``<properties><name>`` in ``pom``, or None."""
    element = ET.parse(pom).getroot().find(f"m:properties/m:{name}", POM_NAMESPACE)
    text = (element.text or "").strip() if element is not None else ""
    return text or None


def pinned_version(pom: Path, name: str, error: type[Exception]) -> str:
    """The release ``pom`` pins in ``<properties><name>``; ``error`` when it names none."""
    version = pom_property(pom, name)
    if version is None:
        raise error(f"{pom} has no <properties><{name}>")
    return version


def installed(home: Path) -> Path | None:
    """The ``libs`` directory of a complete fetch into ``home``, else None."""
    libs = home / "libs"
    return libs if (home / ".complete").is_file() and libs.is_dir() else None


def fetch_runtime(
    mvn: str,
    pom: Path,
    home: Path,
    main_jar: str,
    what: str,
    error: type[Exception],
    echo: Callable[[str], None] | None = None,
) -> Path:
    """The ``libs`` directory under ``home`` with ``pom``'s runtime jars, fetched by ``mvn`` unless already there.

    ``main_jar`` is the jar a good fetch must hold; ``error`` is raised (with Maven's last lines) when it does not.
    """
    libs = installed(home)
    if libs is not None:
        return libs
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}.", dir=home.parent))
    try:
        if echo:
            echo(f"fetching {what} with Maven into {home} (once) ...")
        command = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging / 'libs'}",
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (staging / "libs" / main_jar).is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            raise error(
                f"Maven could not fetch {what} (exit code {done.returncode}; command: {' '.join(command)}):\n"
                f"{tail or '(no output)'}"
            )
        jars = sorted(p.name for p in (staging / "libs").glob("*.jar"))
        (staging / ".complete").write_text("\n".join(jars) + "\n")
        try:
            staging.rename(home)
        except OSError:
            if installed(home) is None:  # not a concurrent fetch that won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    libs = installed(home)
    assert libs is not None
    return libs
