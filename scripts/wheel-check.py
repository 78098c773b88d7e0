#!/usr/bin/env python3
"""Checks built `turnstile` wheels as scripts/artifact-check.py checks the Lambda artifacts: the
extension module inside each wheel is an ELF for the wheel's architecture (x86_64 or aarch64, from
its platform tag) and needs no glibc symbol above 2.34 (the manylinux_2_34 ceiling, Lambda's
provided.al2023 too); the platform tag itself is manylinux with glibc <= 2.34 and the wheel abi3.

    scripts/wheel-check.py target/wheels/release/*.whl   # exit 1 naming each failure
"""

import importlib.util
import os
import re
import sys
import zipfile

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("artifact_check", os.path.join(here, "artifact-check.py"))
artifact_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(artifact_check)

ARCH_OF_TAG = {"x86_64": "x86_64", "aarch64": "arm64"}


def check(path):
    """(row, failures) of one wheel."""
    name = os.path.basename(path)
    failures = []
    m = re.search(r"-cp39-abi3-manylinux_(\d+)_(\d+)_(x86_64|aarch64)\.whl$", name)
    if not m:
        return (name, "?", "?", 0), [f"{name}: not a cp39-abi3 manylinux wheel for x86_64 or aarch64"]
    tag_glibc, tag_arch = (int(m.group(1)), int(m.group(2))), m.group(3)
    if tag_glibc > artifact_check.MAX_GLIBC:
        failures.append(f"{name}: tagged manylinux_{tag_glibc[0]}_{tag_glibc[1]}, above glibc 2.34")
    with zipfile.ZipFile(path) as z:
        modules = [n for n in z.namelist() if re.fullmatch(r"turnstile/_native\.abi3\.so", n)]
        if len(modules) != 1:
            return (name, "?", "?", 0), failures + [f"{name}: expected turnstile/_native.abi3.so, found {modules}"]
        data = z.read(modules[0])
    arch, glibc = artifact_check.elf_facts(data)
    want = ARCH_OF_TAG[tag_arch]
    if arch != want:
        failures.append(f"{name}: its extension module is an ELF for {arch}, the wheel is {want}")
    too_new = [v for v in glibc if artifact_check.version_tuple(v) > artifact_check.MAX_GLIBC]
    if too_new:
        failures.append(f"{name}: needs {', '.join(too_new)}, above glibc 2.34")
    return (name, arch, glibc[-1] if glibc else "none", os.path.getsize(path)), failures


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    failed = []
    for p in paths:
        (name, arch, top, size), failures = check(p)
        print(f"{name}: {arch}, highest {top}, {size / 1048576:.2f} MiB")
        failed += failures
    for f in failed:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
