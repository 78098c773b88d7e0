#!/usr/bin/env python3
"""Packs the dev-profile `turnstile` wheel from the extension module of the test build's own
selection (`cargo build --workspace --all-targets`, whose JSON messages it reads on stdin: inside
`make test` that build only confirms what the lint build compiled), instead of a `maturin build`,
which compiles `python/` as a package of its own: cargo then unifies other features and compiles
`shared` and its async stack a second time (~150 s on 2 cores). `make test` and the benchmark smoke
use this; `make wheel` (the shipped wheels) still builds with maturin. cargo runs in the caller's
shell, not from here: a pyenv shim starting this script puts its own directories first on PATH,
which pyo3's build script watches, so a cargo started from here would rebuild pyo3.

The wheel holds what maturin's does (python/pyproject.toml's `python-source` package, the module
as `turnstile/_native.abi3.so`, METADATA from `[project]`, the version from Cargo.toml), tagged
cp39-abi3 manylinux_2_<highest glibc symbol the module needs> for this machine's architecture,
and is then checked by scripts/wheel-check.py as `make wheel`'s are.

    cargo build --locked --workspace --all-targets --message-format json-render-diagnostics \
      | scripts/dev-wheel.py target/wheels/dev   # prints the wheel's path
"""

import base64
import hashlib
import importlib.util
import json
import os
import platform
import sys
import tomllib
import zipfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("artifact_check", os.path.join(root, "scripts", "artifact-check.py"))
artifact_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(artifact_check)

# The oldest manylinux tag a Rust extension module can carry (maturin's floor too).
MIN_GLIBC = (2, 17)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def metadata(project, version):
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {version}"]
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "text" in project.get("license", {}):
        lines.append(f"License: {project['license']['text']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    return "\n".join(lines) + "\n"


def module_path(messages):
    """The extension module's path, from cargo's JSON report of what it built."""
    for line in messages:
        msg = json.loads(line) if line.startswith("{") else {}
        target = msg.get("target", {})
        # `--all-targets` also builds the library's test harness (profile.test): not the module.
        if (msg.get("reason") == "compiler-artifact" and target.get("name") == "_native"
                and "cdylib" in target.get("kind", []) and not msg["profile"]["test"]):
            return msg["filenames"][0]
    sys.exit("dev-wheel: cargo's report names no `_native` cdylib (python/Cargo.toml)")


def main(out):
    lib = module_path(sys.stdin)
    with open(os.path.join(root, "python", "pyproject.toml"), "rb") as f:
        pyproject = tomllib.load(f)
    with open(os.path.join(root, "Cargo.toml"), "rb") as f:
        version = tomllib.load(f)["workspace"]["package"]["version"]
    project, maturin = pyproject["project"], pyproject["tool"]["maturin"]
    package, module = maturin["module-name"].rsplit(".", 1)
    source = os.path.join(root, "python", maturin["python-source"], package)

    with open(lib, "rb") as f:
        native = f.read()
    arch, glibc = artifact_check.elf_facts(native)
    machine = {"x86_64": "x86_64", "arm64": "aarch64"}.get(arch)
    if machine is None or machine != platform.machine():
        sys.exit(f"dev-wheel: {lib} is an ELF for {arch}, not for this {platform.machine()} machine")
    need = max([MIN_GLIBC] + [artifact_check.version_tuple(v) for v in glibc])
    name = f"{project['name']}-{version}"
    wheel = os.path.join(out, f"{name}-cp39-abi3-manylinux_{need[0]}_{need[1]}_{machine}.whl")

    files = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            path = os.path.join(dirpath, fn)
            with open(path, "rb") as f:
                files.append((os.path.relpath(path, os.path.dirname(source)), f.read()))
    files.append((f"{package}/{module}.abi3.so", native))
    dist = f"{name}.dist-info"
    files.append((f"{dist}/METADATA", metadata(project, version).encode()))
    tag = os.path.basename(wheel)[len(name) + 1 : -len(".whl")]
    files.append((f"{dist}/WHEEL", f"Wheel-Version: 1.0\nGenerator: scripts/dev-wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()))
    record = "\n".join(record_line(n, d) for n, d in files) + f"\n{dist}/RECORD,,\n"
    files.append((f"{dist}/RECORD", record.encode()))

    os.makedirs(out, exist_ok=True)
    # Level 1: the debug module is ~38 MB and the wheel is installed once, next to it.
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for n, d in files:
            info = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if n.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d, compresslevel=1)
    print(wheel)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: cargo build ... --message-format json-render-diagnostics | scripts/dev-wheel.py OUT_DIR")
    main(sys.argv[1])
