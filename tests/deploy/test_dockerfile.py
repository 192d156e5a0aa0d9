"""The Dockerfile and .dockerignore, read as an operator relies on them (no engine needed)."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.deploy.kit import ROOT, clean_env, is_setting, running_gateway


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, args = (pending + line).partition(" ")
        result.append((word.upper(), args.strip()))
        pending = ""
    return result


DOCKERFILE = instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))
# The image that runs: everything after the last FROM.
LAST_FROM = max(i for i, (word, _) in enumerate(DOCKERFILE) if word == "FROM")
FINAL = DOCKERFILE[LAST_FROM:]


def final(word: str) -> list[str]:
    return [args for w, args in FINAL if w == word]


def final_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in final("ENV"):
        for pair in shlex.split(args):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def test_image_runs_as_a_non_root_user() -> None:
    users = final("USER")
    assert users, "the final stage sets no USER: the gateway would run as root"
    assert users[-1] not in ("root", "0", "0:0")


def test_data_lives_in_the_volume() -> None:
    volumes = [v for args in final("VOLUME") for v in json.loads(args)]
    assert "/data" in volumes
    assert final_env()["GATEWAY_DATA_DIR"] == "/data"


def test_listens_beyond_loopback_on_the_exposed_port() -> None:
    env = final_env()
    assert env["GATEWAY_SERVER__HOST"] == "0.0.0.0"
    assert final("EXPOSE") == [env["GATEWAY_SERVER__PORT"]]


def test_env_names_are_settings() -> None:
    names = [k for k in final_env() if k.startswith("GATEWAY_")]
    assert names
    assert [n for n in names if not is_setting(n)] == []


def test_command_is_gateway_serve() -> None:
    assert [json.loads(args) for args in final("CMD")] == [["gateway", "serve"]]


def healthcheck_command() -> list[str]:
    (args,) = final("HEALTHCHECK")
    _, _, command = args.partition("CMD ")
    argv: list[str] = json.loads(command)
    return argv


def test_healthcheck_asks_readyz_without_curl() -> None:
    argv = healthcheck_command()
    assert argv[0] == "python"
    assert "/readyz" in argv[-1]


def test_healthcheck_passes_on_a_ready_gateway_and_fails_without_one(tmp_path: Path) -> None:
    argv = [sys.executable if a == "python" else a for a in healthcheck_command()]
    serve = [sys.executable, "-m", "gateway", "serve", "--port", "0"]
    env = clean_env(GATEWAY_DATA_DIR=str(tmp_path / "data"))
    with running_gateway(serve, cwd=tmp_path, env=env) as url:
        port = url.rsplit(":", 1)[1]
        healthy = subprocess.run(
            argv, env=env | {"GATEWAY_SERVER__PORT": port}, capture_output=True, timeout=30
        )
        assert healthy.returncode == 0, healthy.stderr
        with urllib.request.urlopen(url + "/readyz", timeout=10) as response:
            assert response.status == 200
    stopped = subprocess.run(
        argv, env=env | {"GATEWAY_SERVER__PORT": port}, capture_output=True, timeout=30
    )
    assert stopped.returncode != 0


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            result = not negate
    return result


def test_dockerignore_keeps_local_state_out_and_the_sources_in() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [p.strip() for p in lines if p.strip() and not p.lstrip().startswith("#")]
    for path in (".venv/bin/python", ".git/HEAD", "data/confirmations.db", "gateway.toml"):
        assert ignored(path, patterns), path
    for path in ("test-artifacts/shot.png", "tests/conftest.py", ".pytest_cache/README.md"):
        assert ignored(path, patterns), path
    # COPY from the build context (not --from another stage): sources, then the destination.
    copied = [a.split()[:-1] for w, a in DOCKERFILE if w == "COPY" and "--from=" not in a]
    sources = [s for srcs in copied for s in srcs]
    assert sources
    for source in sources:
        assert not ignored(source, patterns), source
        assert (ROOT / source).exists(), source
    # Every file the package ships gets into the build context.
    for package in ("gateway", "channels", "config"):
        for file in (ROOT / package).rglob("*"):
            rel = file.relative_to(ROOT).as_posix()
            if file.is_file() and "__pycache__" not in rel:
                assert not ignored(rel, patterns), rel


def test_dockerignore_patterns_have_no_typos() -> None:
    # Each re-included path exists, so a renamed directory cannot silently drop out.
    for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        if line.startswith("!"):
            assert os.path.exists(ROOT / line[1:].rstrip("/")), line
