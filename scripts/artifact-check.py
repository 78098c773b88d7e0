#!/usr/bin/env python3
"""What Lambda would refuse or fail on, checked on every `.aws-sam/build/<Function>/bootstrap`
before any is started (scripts/sam-check.sh):

- an ELF for another instruction set than the function's `Architecture` (an x86_64 binary in an
  arm64 function starts nowhere on Graviton);
- a glibc symbol version above the runtime's (provided.al2023 has glibc 2.34: a binary needing
  GLIBC_2.35 dies at its first start with "version `GLIBC_2.35' not found");
- a binary over 8 MiB or its zip (deflate, as `sam package` zips it) over 4 MiB (decision 0703).

Every failure names the function. Standard library only: it runs before any venv exists.

    scripts/artifact-check.py .aws-sam/build --arch arm64   # the step; exit 1 on any failure
    scripts/artifact-check.py --self-test                   # wrong artifacts must fail, named
"""

import argparse
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

MAX_BINARY = 8 * 1024 * 1024
MAX_ZIP = 4 * 1024 * 1024
# provided.al2023's glibc; the same ceiling for both architectures.
MAX_GLIBC = (2, 34)
# Every function of template.yaml: `sam build` packages each, whatever its Condition (the region
# rebalancer exists only with a ledger).
EXPECTED_FUNCTIONS = 10

EM_X86_64, EM_AARCH64 = 62, 183
MACHINES = {EM_X86_64: "x86_64", EM_AARCH64: "arm64"}
SHT_GNU_VERNEED = 0x6FFFFFFE


class NotElf(Exception):
    pass


def elf_facts(data):
    """(architecture name, sorted GLIBC_x.y versions the binary needs) of a 64-bit little-endian
    ELF, read from its header and its `.gnu.version_r` section (what the dynamic loader checks)."""
    if data[:4] != b"\x7fELF":
        raise NotElf("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise NotElf("not a 64-bit little-endian ELF")
    (machine,) = struct.unpack_from("<H", data, 18)
    arch = MACHINES.get(machine, f"e_machine {machine}")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    versions = set()
    for _name, kind, _flags, _addr, offset, _size, link, count, _align, _entsize in sections:
        if kind != SHT_GNU_VERNEED:
            continue
        strtab = sections[link][4]

        def string(at):
            end = data.index(b"\0", strtab + at)
            return data[strtab + at : end].decode("ascii", "replace")

        need = offset
        for _ in range(count):
            _ver, aux_count, _file, aux, next_need = struct.unpack_from("<HHIII", data, need)
            entry = need + aux
            for _ in range(aux_count):
                _hash, _flags, _other, name, next_aux = struct.unpack_from("<IHHII", data, entry)
                versions.add(string(name))
                entry += next_aux
            need += next_need
    glibc = sorted(
        (tuple(int(p) for p in m.group(1).split(".")), v)
        for v in versions
        if (m := re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", v))
    )
    return arch, [v for _, v in glibc]


def version_tuple(glibc_name):
    return tuple(int(p) for p in glibc_name.split("_", 1)[1].split("."))


def zipped_size(path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(path, "bootstrap")
    return len(buf.getvalue())


def check(build_dir, arch, expected=EXPECTED_FUNCTIONS, max_glibc=MAX_GLIBC, max_binary=MAX_BINARY, max_zip=MAX_ZIP):
    """The table rows and the failures (each naming its function) of every artifact in build_dir."""
    rows, failures = [], []
    limit = ".".join(map(str, max_glibc))
    mib = lambda b: f"{b / 1048576:.2f} MiB"
    for fn in sorted(os.listdir(build_dir)):
        path = os.path.join(build_dir, fn, "bootstrap")
        if not os.path.isfile(path):
            continue
        size, zipped = os.path.getsize(path), zipped_size(path)
        with open(path, "rb") as f:
            data = f.read()
        try:
            elf_arch, glibc = elf_facts(data)
        except (NotElf, struct.error, IndexError, ValueError) as e:
            elf_arch, glibc = "?", []
            failures.append(f"{fn}: bootstrap is unreadable as an ELF ({e})")
        top = glibc[-1] if glibc else "none"
        rows.append((fn, elf_arch, top, size, zipped))
        if elf_arch not in ("?", arch):
            failures.append(f"{fn}: bootstrap is an ELF for {elf_arch}, the function is {arch}")
        too_new = [v for v in glibc if version_tuple(v) > max_glibc]
        if too_new:
            failures.append(f"{fn}: needs {', '.join(too_new)}, above the runtime's glibc {limit} (provided.al2023)")
        if size > max_binary:
            failures.append(f"{fn}: bootstrap is {size:,} bytes ({mib(size)}), over {mib(max_binary)}")
        if zipped > max_zip:
            failures.append(f"{fn}: its zip is {zipped:,} bytes ({mib(zipped)}), over {mib(max_zip)}")
    if len(rows) != expected:
        failures.append(f"expected {expected} artifacts in {build_dir}, found {len(rows)}")
    return rows, failures


def print_table(rows):
    mib = lambda b: f"{b / 1048576:.2f}"
    print(f"{'function':<22} {'arch':<7} {'glibc max':<11} {'bootstrap bytes':>15} {'MiB':>6} {'zip bytes':>10} {'MiB':>6}")
    for fn, arch, top, size, zipped in rows:
        print(f"{fn:<22} {arch:<7} {top:<11} {size:>15,} {mib(size):>6} {zipped:>10,} {mib(zipped):>6}")


# --- self-test -------------------------------------------------------------------------------------


def craft_elf(machine, glibc_versions, pad=b""):
    """A minimal ELF64 (header, .dynstr, .gnu.version_r, .shstrtab) needing the given GLIBC_x.y
    versions from libc.so.6, as a linker writes them; `pad` is appended to reach a size."""
    dynstr = b"\0libc.so.6\0" + b"".join(v.encode() + b"\0" for v in glibc_versions)
    name_at = {}
    at = len(b"\0libc.so.6\0")
    for v in glibc_versions:
        name_at[v] = at
        at += len(v) + 1
    aux = b""
    for i, v in enumerate(glibc_versions):
        next_aux = 16 if i + 1 < len(glibc_versions) else 0
        aux += struct.pack("<IHHII", 0, 0, i + 2, name_at[v], next_aux)
    verneed = struct.pack("<HHIII", 1, len(glibc_versions), 1, 16, 0) + aux
    shstrtab = b"\0.dynstr\0.gnu.version_r\0.shstrtab\0"
    body_at = 64
    dynstr_at = body_at
    verneed_at = dynstr_at + len(dynstr)
    shstrtab_at = verneed_at + len(verneed)
    shoff = (shstrtab_at + len(shstrtab) + 7) // 8 * 8
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 4, 3)
    sh = bytes(64)  # the null section
    sh += struct.pack("<IIQQQQIIQQ", 1, 3, 2, 0, dynstr_at, len(dynstr), 0, 0, 1, 0)
    sh += struct.pack("<IIQQQQIIQQ", 9, SHT_GNU_VERNEED, 2, 0, verneed_at, len(verneed), 1, 1, 8, 0)
    sh += struct.pack("<IIQQQQIIQQ", 24, 3, 0, 0, shstrtab_at, len(shstrtab), 0, 0, 1, 0)
    image = header + dynstr + verneed + shstrtab
    image += bytes(shoff - len(image)) + sh
    return image + pad


def self_test():
    """Builds a fake build directory holding one good and several wrong artifacts, runs the check as
    the step runs it, and requires each wrong one to fail with its function named."""
    ok = ["GLIBC_2.17", "GLIBC_2.28", "GLIBC_2.34"]
    cases = {
        # name: (bootstrap bytes, what the failure must say, or None when it must pass)
        "GoodFunction": (craft_elf(EM_AARCH64, ok), None),
        "X86InArmFunction": (craft_elf(EM_X86_64, ok), "is an ELF for x86_64, the function is arm64"),
        "NewGlibcFunction": (craft_elf(EM_AARCH64, ok + ["GLIBC_2.35"]), "needs GLIBC_2.35, above the runtime's glibc 2.34"),
        "BigFunction": (craft_elf(EM_AARCH64, ok, pad=bytes(MAX_BINARY)), "over 8.00 MiB"),
        "BigZipFunction": (craft_elf(EM_AARCH64, ok, pad=os.urandom(MAX_ZIP + 4096)), "its zip is"),
        "ScriptFunction": (b"#!/bin/sh\necho hello\n", "unreadable as an ELF (not an ELF file)"),
    }
    real = real_cross_compiled()
    host = real_host_x86_64()
    real.update(host)
    cases.update(real)
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for fn, (data, _) in cases.items():
            os.makedirs(os.path.join(tmp, fn))
            with open(os.path.join(tmp, fn, "bootstrap"), "wb") as f:
                f.write(data)
        # The step as sam-check.sh runs it: a failing exit status, each wrong function named.
        run = subprocess.run(
            [sys.executable, __file__, tmp, "--arch", "arm64", "--expect", str(len(cases))],
            capture_output=True,
            text=True,
        )
        if run.returncode != 1:
            failed.append(f"the check exited {run.returncode}, not 1, on wrong artifacts")
        lines = run.stderr.splitlines()
        for fn, (_, reason) in cases.items():
            named = [line for line in lines if line.startswith(f"  {fn}: ")]
            if reason is None and named:
                failed.append(f"{fn} should pass, failed: {named}")
            if reason is not None and not any(reason in line for line in named):
                failed.append(f"{fn} should fail with '{reason}', got: {named or 'nothing'}")
        # The same check with only the good ones left: passes.
        for fn, (_, reason) in cases.items():
            if reason is not None:
                shutil.rmtree(os.path.join(tmp, fn))
        good = subprocess.run(
            [sys.executable, __file__, tmp, "--arch", "arm64", "--expect", str(len(os.listdir(tmp)))],
            capture_output=True,
            text=True,
        )
        if good.returncode != 0:
            failed.append(f"good artifacts failed the check: {good.stderr.strip()}")
    if failed:
        print("artifact-check self-test FAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    gcc = len(real) - len(host)
    extra = f", {gcc} linked by aarch64-linux-gnu-gcc" if gcc else " (no aarch64-linux-gnu-gcc here)"
    extra += ", this host's x86_64 `true`" if host else ""
    wrong = sum(r is not None for _, r in cases.values())
    print(f"artifact-check self-test: {wrong} wrong artifacts refused, each named; the good ones pass{extra}")
    return 0


def real_host_x86_64():
    """This host's own `true` when it is an x86_64 ELF: a real binary of the wrong architecture."""
    path = shutil.which("true")
    if not path:
        return {}
    with open(os.path.realpath(path), "rb") as f:
        data = f.read()
    try:
        if elf_facts(data)[0] != "x86_64":
            return {}
    except (NotElf, struct.error, IndexError, ValueError):
        return {}
    return {"RealX86Function": (data, "is an ELF for x86_64, the function is arm64")}


def real_cross_compiled():
    """Two real aarch64 executables when Debian's cross gcc is here: one within glibc 2.34 and one
    calling epoll_pwait2 (new in glibc 2.35), so the reader is tested on a linker's own output."""
    gcc = shutil.which("aarch64-linux-gnu-gcc")
    if not gcc:
        return {}
    programs = {
        "RealGoodFunction": ("int main(void) { return 0; }\n", None),
        "RealGlibc235Function": (
            "#define _GNU_SOURCE\n#include <sys/epoll.h>\n"
            "int main(void) { return epoll_pwait2(-1, 0, 0, 0, 0); }\n",
            "needs GLIBC_2.35, above the runtime's glibc 2.34",
        ),
    }
    built = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fn, (source, reason) in programs.items():
            src, out = os.path.join(tmp, fn + ".c"), os.path.join(tmp, fn)
            with open(src, "w") as f:
                f.write(source)
            subprocess.run([gcc, "-O1", "-o", out, src], check=True)
            with open(out, "rb") as f:
                built[fn] = (f.read(), reason)
    return built


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build_dir", nargs="?")
    p.add_argument("--arch", choices=["arm64", "x86_64"])
    p.add_argument("--expect", type=int, default=EXPECTED_FUNCTIONS, help="how many functions (10)")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not a.build_dir or not a.arch:
        p.error("BUILD_DIR and --arch are required")
    rows, failures = check(a.build_dir, a.arch, a.expect)
    print_table(rows)
    if failures:
        print(f"{len(failures)} artifact check(s) failed:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    print(f"every artifact: {a.arch} ELF, glibc <= {'.'.join(map(str, MAX_GLIBC))}, binary <= 8 MiB, zip <= 4 MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
