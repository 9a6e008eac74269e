"""root's first password from ``WALGATE_ROOT_PASSWORD_FILE`` (a Docker secret): read once at start-up, one trailing
newline dropped; both variables, an unreadable file or an empty one stop the start with a ConfigError that names
the file and never the password. (The Docker image's entry command logging root in with a secret file:
tests/docker/test_docker.py.)"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from gateway_helpers import gateway_thread

from walgate.gateway.config import ConfigError
from walgate.gateway.root_user import ROOT_PASSWORD_ENV, ROOT_PASSWORD_FILE_ENV, root_password
from walgate.gateway.server import Gateway


@pytest.mark.parametrize(("content", "password"), [("s3cret\n", "s3cret"), ("s3cret\r\n", "s3cret"),
                                                   ("s3cret", "s3cret"), (" two words \n\n", " two words \n")])
def test_the_file_is_the_password_without_one_trailing_newline(tmp_path: Path, content: str, password: str):
    secret = tmp_path / "secret"
    secret.write_bytes(content.encode())
    assert root_password({ROOT_PASSWORD_FILE_ENV: str(secret)}) == password


def test_the_variable_alone_or_nothing():
    assert root_password({ROOT_PASSWORD_ENV: "pw"}) == "pw"
    assert root_password({ROOT_PASSWORD_ENV: "", ROOT_PASSWORD_FILE_ENV: ""}) is None  # a generated one


@pytest.mark.parametrize("case", ["both", "missing", "empty", "a directory", "not UTF-8"])
def test_a_broken_secret_is_a_config_error_without_the_password(tmp_path: Path, case: str):
    secret = tmp_path / "secret"
    env = {ROOT_PASSWORD_FILE_ENV: str(secret)}
    if case == "both":
        secret.write_text("from-the-file")
        env[ROOT_PASSWORD_ENV] = "from-the-variable"
    elif case == "empty":
        secret.write_text("\n")
    elif case == "a directory":
        secret.mkdir()
    elif case == "not UTF-8":
        secret.write_bytes(b"\xff\xfe-pw")
    with pytest.raises(ConfigError) as refused:
        root_password(env)
    message = str(refused.value)
    assert ROOT_PASSWORD_FILE_ENV in message and "from-the" not in message and "-pw" not in message
    assert (str(secret) in message) == (case != "both")


def login(gw: Gateway, password: str) -> int:
    host, port = gw.http_address
    request = urllib.request.Request(f"http://{host}:{port}/rest/sql", data=b"SHOW USERS")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"root:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(json.loads(response.read())["rows"])
    except urllib.error.HTTPError as e:
        return -e.code


def test_the_gateway_creates_root_with_the_files_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture,
                                                          capsys: pytest.CaptureFixture[str]):
    caplog.set_level(logging.INFO)
    secret = tmp_path / "secret"
    secret.write_text("from-a-docker-secret\n")
    monkeypatch.delenv(ROOT_PASSWORD_ENV, raising=False)
    monkeypatch.setenv(ROOT_PASSWORD_FILE_ENV, str(secret))
    with gateway_thread(tmp_path / "data", http_auth="basic") as gw:
        assert login(gw, "from-a-docker-secret") == 1 and login(gw, "from-a-docker-secret\n") == -401
    assert f"created user root with the password of {ROOT_PASSWORD_FILE_ENV}" in caplog.text
    assert "from-a-docker-secret" not in caplog.text + capsys.readouterr().err
    secret.write_text("")  # a broken secret stops the next start, although root exists
    with pytest.raises(ConfigError, match="is empty"), gateway_thread(tmp_path / "data", http_auth="basic"):
        pass
