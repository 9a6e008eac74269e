"""The Java client programs run from classes ``javac`` compiled once (``setup_clients.java_program``), not from
``java Foo.java``, which compiles the source in memory at every run: the classes are reused while the source, the jar
set and javac are the same, a changed source gets new ones, and a source that does not compile fails with javac's
message and leaves nothing behind."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import setup_clients
from compat_procs import program_name

JARS = "kafka-clients-4.3.0"
SOURCE = """
public class Version {
    public static void main(String[] args) {
        System.out.println(args[0] + " " + org.apache.kafka.common.utils.AppInfoParser.getVersion());
    }
}
"""


@pytest.fixture
def classes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``java_program``'s class cache moved to ``tmp_path`` (the jars stay in .cache)."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        pytest.skip("java / javac are not installed (.ci/run installs openjdk-17-jdk-headless)")
    failed = setup_clients.setup(JARS)
    if failed is not None:
        pytest.skip(failed)
    monkeypatch.setattr(setup_clients, "JAVA_CLASSES", tmp_path / "classes")
    return tmp_path / "classes"


def run(argv: list[str], *args: str) -> str:
    java = shutil.which("java")
    assert java is not None
    done = subprocess.run([java, *argv, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_program_is_compiled_once_and_runs_on_its_jar_set(tmp_path: Path, classes: Path) -> None:
    source = tmp_path / "Version.java"
    source.write_text(SOURCE)
    argv = setup_clients.java_program(JARS, source)
    assert argv[-1] == "Version" and program_name(["java", *argv, "x"]) == "Version"
    assert run(argv, "first") == "first 4.3.0"  # kafka-clients 4.3.0 is on the class path
    [compiled] = (classes / JARS).iterdir()
    built = (compiled / "Version.class").stat().st_mtime_ns
    assert setup_clients.java_program(JARS, source) == argv  # the same source: the same classes, not compiled again
    assert (compiled / "Version.class").stat().st_mtime_ns == built
    assert run(argv, "again") == "again 4.3.0"
    source.write_text(SOURCE.replace('" "', '" v"'))
    changed = setup_clients.java_program(JARS, source)
    assert changed != argv and run(changed, "new") == "new v4.3.0"  # an edited source gets its own classes
    assert len(list((classes / JARS).iterdir())) == 2


def test_a_source_that_does_not_compile_fails_with_javacs_message_and_leaves_nothing(tmp_path: Path,
                                                                                      classes: Path) -> None:
    source = tmp_path / "Broken.java"
    source.write_text("public class Broken { void f() { undefinedCall(); } }\n")
    with pytest.raises(RuntimeError, match=r"(?s)javac Broken\.java on kafka-clients-4\.3\.0 failed.*undefinedCall"):
        setup_clients.java_program(JARS, source)
    assert list((classes / JARS).iterdir()) == []  # no classes directory, not even a temporary one
